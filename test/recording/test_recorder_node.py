"""The `recorder` node over DDS, in its own process: latched and volatile topics, images,
start / stop services, health on /diagnostics, a clean stop and a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import Image
from std_msgs.msg import String
from std_srvs.srv import Trigger

from lerobot_lang_nodes import paths
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.recording.bag_reader import BagError, BagSet
from lerobot_lang_nodes.testing import wait_until

MODULE = 'lerobot_lang_nodes.nodes.recorder_node'


def _params(out, **extra) -> dict:
    return {'output_dir': str(out), 'topics': ['task', 'interjection'], 'cameras': ['front'],
            'flush_period_s': 0.2, **extra}


def _bags(out) -> list:
    return sorted(p for p in out.iterdir() if p.is_dir())


def _read(bag, topic) -> list:
    with BagSet([bag]) as bags:
        return [bags.decode(raw, t) for _, _, t, raw in bags.messages([topic])]


def _diag_values(probe_msgs) -> dict:
    for arr in reversed(probe_msgs):
        for status in arr.status:
            if status.name == 'recorder: recording':
                return {kv.key: kv.value for kv in status.values} | {'_level': status.level}
    return {}


def test_records_latched_and_volatile_topics_and_restarts_on_request(launch_node, probe, tmp_path):
    out = tmp_path / 'bags'
    task = probe.publisher(String, 'task', qos.LATCHED)
    task.publish(String(data='put the red cube in the bowl'))  # before the recorder exists
    diagnostics = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    proc = launch_node(MODULE, params=_params(out),
                       params_file=paths.config_path('recorder.yaml'))
    inter = probe.publisher(String, 'interjection', qos.COMMAND)
    image_pub = probe.publisher(Image, 'cameras/front/image_raw', qos.SENSOR)
    wait_until(lambda: inter.get_subscription_count() and image_pub.get_subscription_count()
               and task.get_subscription_count(), 30.0, 'the recorder subscribed', [proc])
    for i in range(50):
        inter.publish(String(data=f'interjection {i}'))
    image = Image(height=48, width=64, encoding='rgb8', step=192,
                  data=np.full(48 * 192, 7, dtype=np.uint8).tobytes())
    for _ in range(5):
        image_pub.publish(image)
    wait_until(lambda: int(_diag_values(diagnostics.snapshot()).get('written', 0)) >= 51, 20.0,
               'the recorder to write what was sent (diagnostics)', [proc])
    # `lerobot-lang record stop`, as the console's `/record stop` does.
    stop = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.record', 'stop'],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert stop.returncode == 0, stop.stdout + stop.stderr
    (first,) = _bags(out)
    assert stop.stdout.strip() == f'recorded {first}'
    # A clean stop loses nothing: every interjection, in order, and the latched task.
    got = [m.data for m in _read(first, '/interjection')]
    assert got == [f'interjection {i}' for i in range(50)]
    assert [m.data for m in _read(first, '/task')] == ['put the red cube in the bowl']
    assert 1 <= len(_read(first, '/cameras/front/image_raw')) <= 5  # best effort
    meta = yaml.safe_load((first / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    offered = {t['topic_metadata']['name']: t['topic_metadata']['offered_qos_profiles'][0]
               for t in meta['topics_with_message_count']}
    assert offered['/task']['durability'] == 'transient_local'
    assert offered['/interjection']['durability'] == 'volatile'
    assert offered['/cameras/front/image_raw']['reliability'] == 'best_effort'
    assert not probe.call(Trigger, 'recorder/stop', Trigger.Request()).success

    reply = probe.call(Trigger, 'recorder/start', Trigger.Request())
    assert reply.success, reply.message
    wait_until(lambda: len(_bags(out)) == 2 and inter.get_subscription_count(), 20.0,
               'a second bag and subscriptions', [proc])
    inter.publish(String(data='after restart'))
    second = _bags(out)[1]

    def second_bag_has_both() -> bool:  # read while being written: up to its last flush
        try:
            return (len(_read(second, '/task')) == 1
                    and len(_read(second, '/interjection')) == 1)
        except BagError:  # not even its header flushed yet
            return False

    wait_until(second_bag_has_both, 20.0, 'the task and the interjection in the second bag',
               [proc])
    values = _diag_values(diagnostics.snapshot())
    assert values['dropped'] == '0' and values['_level'] == DiagnosticStatus.OK
    assert proc.stop() == 0  # Ctrl-C closes the second bag
    assert (second / 'metadata.yaml').is_file()
    assert [m.data for m in _read(second, '/task')] == ['put the red cube in the bowl']
    assert [m.data for m in _read(second, '/interjection')] == ['after restart']


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_a_killed_recorder_leaves_a_bag_readable_up_to_its_last_flush(launch_node, probe,
                                                                      tmp_path, storage,
                                                                      fault_report):
    row = fault_report.row('recorder SIGKILL mid-session',
                           note='the bag reads back up to the last flush (MCAP and sqlite3); '
                                'lost: flushed messages missing from it')
    out = tmp_path / 'bags'
    diagnostics = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    proc = launch_node(MODULE, params=_params(out, storage=storage))
    inter = probe.publisher(String, 'interjection', qos.COMMAND, wait_subscribers=1,
                            timeout_s=30.0)
    sent = [f'm{i}' for i in range(100)]
    for text in sent:
        inter.publish(String(data=text))
    # The recorder says on /diagnostics how many messages its last flush made durable.
    wait_until(lambda: int(_diag_values(diagnostics.snapshot()).get('flushed', 0)) >= 100,
               20.0, 'the recorder to flush 100 messages', [proc])
    with row.injection():
        proc.kill()
        (bag,) = _bags(out)
        got = [m.data for m in _read(bag, '/interjection')]
        row.record(lost=len(set(sent) - set(got)))
        assert not (bag / 'metadata.yaml').exists()
        assert got == sent


def test_every_image_survives_a_recorder_that_is_not_scheduled(launch_node, probe, tmp_path):
    """A loaded machine deschedules the recorder for a few frame periods; best-effort images
    that arrive meanwhile wait in its DDS history (image_history_depth) instead of being lost.
    The stall is made exact with SIGSTOP; the publisher is a camera's: sensor-data QoS."""
    out = tmp_path / 'bags'
    diagnostics = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    proc = launch_node(MODULE, params=_params(out))
    image_pub = probe.publisher(Image, 'cameras/front/image_raw', qos.SENSOR,
                                wait_subscribers=1, timeout_s=30.0)
    image = Image(height=48, width=64, encoding='rgb8', step=192,
                  data=np.full(48 * 192, 7, dtype=np.uint8).tobytes())
    sent = 24  # 0.8 s of a 30 Hz camera
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        for i in range(sent):
            image.header.stamp.sec = 1000 + i
            image_pub.publish(image)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_until(lambda: int(_diag_values(diagnostics.snapshot()).get('written', 0)) >= sent,
               20.0, f'the recorder to write {sent} images', [proc])
    assert proc.stop() == 0
    (bag,) = _bags(out)
    stamps = [m.header.stamp.sec for m in _read(bag, '/cameras/front/image_raw')]
    assert stamps == [1000 + i for i in range(sent)]
