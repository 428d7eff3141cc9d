"""A simulated session recorded over DDS and exported to a LeRobot dataset, end to end.

sim_bridge, planner and policy (scripted backends) and the recorder run in their own
processes as `ros2 launch ... sim.launch.py record:=true` starts them (testing.SimGraph).
The test sends a task, an interjection, and logs a VQA exchange on `vqa_log` as the
planner does for each /vqa call; the bag is exported and checked against LeRobot's schema
and loaded with LeRobot's own LeRobotDataset.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from std_msgs.msg import String

from lerobot_lang_msgs.msg import LanguageContext
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import RosProbe, SimGraph, require_ml, wait_until

require_ml('lerobot')

from lerobot_lang_nodes.recording.bag_reader import BagSet  # noqa: E402
from lerobot_lang_nodes.recording.dataset import ExportOptions, export  # noqa: E402

pytestmark = pytest.mark.slow
FPS = 10
NODES = ('sim_bridge', 'planner', 'policy')


@pytest.fixture
def recorded(tmp_path):
    """Run the session; return the bag folder and the probe's view of it."""
    out = tmp_path / 'bags'
    # The sim graph as `ros2 launch ... sim.launch.py record:=true` starts it.
    sim = SimGraph(tmp_path, {'recorder': {'flush_period_s': 0.5}}, viewer=False, probe=False,
                   launch={'record': 'true', 'record_dir': str(out)})
    procs = list(sim.procs.values())
    recorder = sim.procs['recorder']
    probe = RosProbe('record_export_probe')
    try:
        context = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
        speech = probe.subscribe(String, 'speech', qos.COMMAND)
        for name in (*NODES, 'recorder'):
            probe.wait_for_node(name, timeout_s=60.0, processes=procs)
        task = probe.publisher(String, 'task', qos.LATCHED)
        # The recorder subscribes to a topic once it has a publisher: wait for it on /task
        # and on the planner's topics before anything happens.
        wait_until(lambda: task.get_subscription_count() >= 3, 30.0,
                   'planner, sim_bridge and recorder on /task', procs)
        task.publish(String(data='put the red cube in the bowl'))
        context.wait_for(lambda m: m.subtask == 'grasp the red cube', timeout_s=120.0,
                         what='the arm to reach the red cube')
        interjection = probe.publisher(String, 'interjection', qos.COMMAND, wait_subscribers=2)
        interjection.publish(String(data='use the blue cube instead'))
        speech.wait_for(timeout_s=30.0, what='a spoken reply to the interjection')
        context.wait_for(lambda m: 'blue' in m.plan and 'blue' in m.subtask, timeout_s=30.0,
                         what='a plan and subtask for the blue cube')
        vqa = probe.publisher(String, 'vqa_log', qos.COMMAND, wait_subscribers=1)
        vqa.publish(String(data=json.dumps({'question': 'what is in the gripper?',
                                            'answer': 'nothing', 'camera': 'wrist',
                                            'success': True})))
        since = len(context)
        # Keep recording while the arm works on the blue cube (a few more seconds).
        context.wait_for(lambda m: m.subtask != context.messages[since - 1].subtask,
                         timeout_s=60.0, since=since, what='one more subtask')
        assert recorder.stop() == 0, recorder.log_text(3000)
        yield out, tmp_path
    finally:
        for proc in reversed(procs):
            proc.stop()
        probe.close()


def _stamp_s(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def test_recorded_session_exports_to_a_lerobot_dataset(recorded):
    from lerobot.datasets.language import SAY_TOOL_SCHEMA, language_feature_info
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    bags, tmp = recorded
    (bag,) = [p for p in bags.iterdir() if p.is_dir()]
    assert (bag / 'metadata.yaml').is_file()
    with BagSet([bag]) as reader:
        topics = reader.topics()
        assert {'/joint_states', '/action_chunk', '/language_context', '/interjection',
                '/speech', '/vqa_log', '/cameras/front/image_raw',
                '/cameras/wrist/image_raw'} <= {t for t, v in topics.items() if v.count}
        log = {topic: t_ns / 1e9 for t_ns, topic, _type, _raw in
               reader.messages(['/interjection', '/vqa_log'])}
        # The exporter places stamped messages at their header stamp (sim time here, which
        # runs ahead of or behind the receive clock when the sim catches up after a stall).
        joint_t = [_stamp_s(reader.decode(raw, msgtype).header.stamp)
                   for _t_ns, _topic, msgtype, raw in reader.messages(['/joint_states'])]
        # The episode starts at the first frame with every stream (state and both cameras).
        start = max(next(iter(reader.messages([topic])))[0] / 1e9 for topic in (
            '/joint_states', '/cameras/front/image_raw', '/cameras/wrist/image_raw'))
        first_subtask_t = next(t_ns / 1e9 for t_ns, _topic, msgtype, raw
                               in reader.messages(['/language_context'])
                               if reader.decode(raw, msgtype).subtask)

    result = export([bag], tmp / 'dataset',
                    ExportOptions(fps=FPS, repo_id='test/sim_session', episodes_by='whole'))
    root = result.root
    info = json.loads((root / 'meta/info.json').read_text())
    # Schema as LeRobot declares it.
    assert info['codebase_version'] == 'v3.0' and info['fps'] == FPS
    assert info['features']['observation.state']['names'] == [
        'shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper']
    assert info['features']['action']['names'] == info['features']['observation.state']['names']
    for cam in ('front', 'wrist'):
        ft = info['features'][f'observation.images.{cam}']
        assert ft['dtype'] == 'video' and ft['shape'] == [240, 320, 3]
    for key, ft in language_feature_info().items():
        assert info['features'][key] == {**ft, 'shape': list(ft['shape'])}
    assert SAY_TOOL_SCHEMA in info['tools']

    rows = pq.read_table(root / 'data/chunk-000/file-000.parquet').to_pylist()
    assert len(rows) == result.frames == info['total_frames']
    # Frame count versus the recorded duration: one frame per 1/fps of the session, less
    # what precedes the first image of each camera.
    duration = joint_t[-1] - joint_t[0]
    assert duration - 2.0 <= result.frames / FPS <= duration + 0.2
    for ep in range(result.episodes):
        ts = np.array([r['timestamp'] for r in rows if r['episode_index'] == ep])
        assert np.all(np.diff(ts) > 0) and np.allclose(ts, np.arange(len(ts)) / FPS, atol=1e-5)

    import av
    for cam in ('front', 'wrist'):
        with av.open(str(root / f'videos/observation.images.{cam}/chunk-000/file-000.mp4')) as c:
            assert sum(1 for _ in c.decode(video=0)) == result.frames

    # Language rows: the interjection with its speech and new plan on one frame, the VQA
    # exchange on the wrist camera, both at their times in the session.
    events = [(r['timestamp'], e) for r in rows for e in r['language_events']]
    (inter,) = [(t, e) for t, e in events if e['style'] == 'interjection']
    assert inter[1] == {'role': 'user', 'content': 'use the blue cube instead',
                        'style': 'interjection', 'camera': None, 'tool_calls': None}
    t_inter = inter[0]
    say = [e for t, e in events if e['style'] is None and t == t_inter]
    assert say and say[0]['tool_calls'][0]['function']['name'] == 'say'
    persistent = rows[0]['language_persistent']
    assert all(r['language_persistent'] == persistent for r in rows)
    assert any(p['style'] == 'plan' and p['timestamp'] == t_inter and 'blue' in p['content']
               for p in persistent)
    # (A subtask shorter than a frame is superseded on that frame: one row per style and time.)
    subtasks = [(p['timestamp'], p['content']) for p in persistent if p['style'] == 'subtask']
    # The first subtask from the frame its context was recorded at (the first frame when the
    # context came before every stream had started), give or take a frame.
    assert subtasks[0][1] == 'reach the red cube'
    assert subtasks[0][0] == pytest.approx(max(0.0, first_subtask_t - start), abs=1.5 / FPS)
    assert any(t >= t_inter and 'blue' in c for t, c in subtasks)
    vqa = [(t, e) for t, e in events if e['style'] == 'vqa']
    assert sorted((e['role'], e['camera']) for _, e in vqa) == [
        ('assistant', 'observation.images.wrist'), ('user', 'observation.images.wrist')]
    assert vqa[0][0] - t_inter == pytest.approx(log['/vqa_log'] - log['/interjection'],
                                                abs=2.0 / FPS)
    assert all(e['camera'] is None for _, e in events if e['style'] != 'vqa')

    ds = LeRobotDataset('test/sim_session', root=Path(root), video_backend='pyav')
    assert len(ds) == result.frames
    item = ds[len(ds) // 2]
    assert tuple(item['observation.images.wrist'].shape) == (3, 240, 320)
    assert item['task'] == 'put the red cube in the bowl'
