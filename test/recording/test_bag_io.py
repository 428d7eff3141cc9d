"""The recorder's bag writer and the exporter's reader, without DDS: nothing lost on a clean
stop, readable up to the last flush after SIGKILL, splits, counted drops, clear errors."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time

import pytest
import yaml
from rosbags.typesys import Stores, get_typestore

from lerobot_lang_nodes.recording.bag_reader import BagError, BagSet
from lerobot_lang_nodes.recording.bag_writer import (BagWriter, TopicSpec, WriterSettings,
                                                     qos_from_fields)
from lerobot_lang_nodes.testing import wait_until

STORE = get_typestore(Stores.ROS2_KILTED)
STRING = 'std_msgs/msg/String'
LATCHED = qos_from_fields('keep_last', 1, 'reliable', 'transient_local')


def _raw(text: str) -> bytes:
    return bytes(STORE.serialize_cdr(STORE.types[STRING](data=text), STRING))


def _texts(path, topic='/chatter') -> list[str]:
    with BagSet([path]) as bags:
        return [bags.decode(raw, t).data for _, _, t, raw in bags.messages([topic])]


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_a_clean_stop_loses_nothing_and_records_the_offered_qos(tmp_path, storage):
    writer = BagWriter(WriterSettings(tmp_path, storage=storage, flush_period_s=0.05))
    bag = writer.start('clean')
    writer.add_topic(TopicSpec('/chatter', STRING, (LATCHED,)))
    base = time.time_ns()

    def publish(k: int) -> None:  # several callback threads push at once
        for i in range(250):
            assert writer.push('/chatter', base + k * 1000 + i * 10_000, _raw(f'{k}-{i}'))

    threads = [threading.Thread(target=publish, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert writer.stop() == [str(bag)]
    got = _texts(bag)
    assert sorted(got) == sorted(f'{k}-{i}' for k in range(4) for i in range(250))
    meta = yaml.safe_load((bag / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    assert meta['version'] == 9 and meta['storage_identifier'] == storage
    (topic,) = meta['topics_with_message_count']
    assert topic['message_count'] == 1000
    offered = topic['topic_metadata']['offered_qos_profiles'][0]
    assert (offered['durability'], offered['reliability']) == ('transient_local', 'reliable')
    assert topic['topic_metadata']['type_description_hash'].startswith('RIHS01_')
    assert writer.stats.dropped_total == 0


KILLED_WRITER = r'''
import sys, time
from rosbags.typesys import Stores, get_typestore
from lerobot_lang_nodes.recording.bag_writer import BagWriter, TopicSpec, WriterSettings
from lerobot_lang_nodes.recording.bag_writer import qos_from_fields
store = get_typestore(Stores.ROS2_KILTED)
def raw(text):
    return bytes(store.serialize_cdr(store.types['std_msgs/msg/String'](data=text),
                                     'std_msgs/msg/String'))
w = BagWriter(WriterSettings(sys.argv[1], storage=sys.argv[2], flush_period_s=0.1))
w.start('killed')
w.add_topic(TopicSpec('/chatter', 'std_msgs/msg/String',
                      (qos_from_fields('keep_last', 10, 'reliable', 'volatile'),)))
for i in range(300):
    w.push('/chatter', time.time_ns(), raw(f'm{i}'))
deadline = time.monotonic() + 30.0
while w.stats.flushed < 300 and time.monotonic() < deadline:  # the flush itself
    time.sleep(0.01)
print('FLUSHED' if w.stats.flushed >= 300 else f'NOT FLUSHED: {w.stats}', flush=True)
i, said = 300, False
while True:  # still writing when the SIGKILL comes
    w.push('/chatter', time.time_ns(), raw(f'm{i}'))
    i += 1
    if not said and w.stats.written >= 400:  # written beyond the flushed 300
        print('WRITING', flush=True)
        said = True
    time.sleep(0.001)  # the pace of the messages
'''


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_a_killed_writer_leaves_a_bag_readable_up_to_its_last_flush(tmp_path, storage):
    proc = subprocess.Popen([sys.executable, '-c', KILLED_WRITER, str(tmp_path), storage],
                            stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                     daemon=True).start()
    try:
        line = lines.get(timeout=60.0)
        assert line.strip() == 'FLUSHED', line
        # Killed while writing past the flush: the bag holds at least the flushed prefix.
        line = lines.get(timeout=60.0)
        assert line.strip() == 'WRITING', line
    finally:
        proc.kill()
        proc.wait(timeout=10)
    (bag,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (bag / 'metadata.yaml').exists()
    with BagSet([bag]) as bags:
        got = [bags.decode(raw, t).data for _, _, t, raw in bags.messages(['/chatter'])]
        assert bags.warnings and 'was not closed' in bags.warnings[0]
    assert len(got) >= 300
    assert got == [f'm{i}' for i in range(len(got))]  # a prefix, in order, nothing garbled


def test_bags_split_by_size_read_back_as_one_stream(tmp_path):
    writer = BagWriter(WriterSettings(tmp_path, split_size_mb=0.002))
    writer.start('split')
    writer.add_topic(TopicSpec('/chatter', STRING, (LATCHED,)))
    base = time.time_ns()
    for i in range(200):
        writer.push('/chatter', base + i, _raw(f'message {i:04d}'))
    bags = writer.stop()
    assert len(bags) > 2
    assert _texts(tmp_path) == [f'message {i:04d}' for i in range(200)]


def test_images_beyond_the_queue_are_dropped_and_counted_never_blocking(tmp_path):
    drops: list[tuple[str, int]] = []
    writer = BagWriter(WriterSettings(tmp_path, image_queue_size=2),
                       on_drop=lambda topic, n: drops.append((topic, n)))
    bag = writer.start('drops')
    topic = '/cameras/front/image_raw'
    writer.add_topic(TopicSpec(topic, 'sensor_msgs/msg/Image', (LATCHED,)))
    image = STORE.types['sensor_msgs/msg/Image'](
        header=STORE.types['std_msgs/msg/Header'](
            stamp=STORE.types['builtin_interfaces/msg/Time'](sec=1, nanosec=0), frame_id=''),
        height=240, width=320, encoding='rgb8', is_bigendian=0, step=960,
        data=__import__('numpy').zeros(240 * 960, dtype='uint8'))
    raw = bytes(STORE.serialize_cdr(image, 'sensor_msgs/msg/Image'))
    start = time.monotonic()
    accepted = sum(writer.push(topic, time.time_ns(), raw, is_image=True) for _ in range(300))
    assert time.monotonic() - start < 1.0  # pushing never waited for the disk
    writer.stop()
    dropped = writer.stats.dropped[topic]
    assert dropped > 0 and accepted + dropped == 300
    assert drops[0] == (topic, 1) and drops[-1] == (topic, dropped)
    with BagSet([bag]) as bags:
        assert bags.topics()[topic].count == accepted


def test_a_truncated_or_foreign_bag_is_a_clear_error(tmp_path):
    writer = BagWriter(WriterSettings(tmp_path, flush_period_s=0.01))
    bag = writer.start('cut')
    writer.add_topic(TopicSpec('/chatter', STRING, (LATCHED,)))
    for i in range(2000):
        writer.push('/chatter', time.time_ns(), _raw(f'message {i}' * 20))
        if i % 100 == 99:  # several flushed chunks
            wait_until(lambda: writer.stats.flushed > i, 10.0, f'message {i} flushed')
    writer.stop()
    mcap = next(bag.glob('*.mcap'))
    data = mcap.read_bytes()
    mcap.write_bytes(data[:len(data) // 2])
    with pytest.raises(BagError, match='corrupt or truncated'):
        with BagSet([bag]):
            pass
    (bag / 'metadata.yaml').unlink()  # as if killed: now salvage what is complete
    with BagSet([bag]) as bags:
        assert 0 < bags.topics()['/chatter'].count < 2000
    mcap.write_bytes(b'not an mcap file at all')
    with pytest.raises(BagError, match='not an MCAP file'):
        with BagSet([bag]):
            pass
    (tmp_path / 'nothing').mkdir()
    with pytest.raises(BagError, match='not a rosbag2 bag'):
        BagSet([tmp_path / 'nothing'])


def test_recording_and_the_export_command_import_neither_ros_nor_torch():
    code = ("import sys\n"
            "sys.modules['rclpy'] = None\n"
            "import lerobot_lang_nodes.recording.dataset, lerobot_lang_nodes.cli.export\n"
            "import lerobot_lang_nodes.recording.bag_writer\n"
            "heavy = [m for m in ('torch', 'lerobot', 'rclpy') if sys.modules.get(m)]\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
