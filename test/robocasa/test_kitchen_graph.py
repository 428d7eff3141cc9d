"""The kitchen graph end to end: `lerobot-lang sim --simulator standin` with a LeRobot checkpoint.

The robocasa_bridge runs from its own environment (.venv-robocasa), the planner, the policy
(a RoboCasa-layout ACT checkpoint through LeRobot), the viewer and the recorder from this one;
the scene's own language becomes the task, the policy's 12-D chunks are executed, the viewer
labels the three views, the recorder keeps the 16-D state and the session exports to a LeRobot
dataset in RoboCasa's layout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.testing import require_ml, require_robocasa_env, stop_popen, wait_until

require_robocasa_env()
require_ml()


def test_kitchen_graph_runs_a_robocasa_checkpoint_from_the_command_line(tmp_path, probe):
    from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.robocasa import layout
    from lerobot_lang_nodes.robocasa.standin import StandInKitchen
    from lerobot_lang_nodes.tiny_models import policies

    act = policies.build_tiny_robocasa_act(tmp_path / 'act', chunk_size=20)
    scene = StandInKitchen(seed=5, camera_names=())
    scene.reset()
    language = scene.get_ep_meta()['lang']
    contexts = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    params = yaml.safe_load(graph.default_params_file('robocasa').read_text())
    params['robocasa_bridge']['ros__parameters'].update(seed=5, image_size=64)
    params_file = tmp_path / 'params.yaml'
    params_file.write_text(yaml.safe_dump(params))
    session = tmp_path / 'session'
    log = tmp_path / 'sim.log'
    with log.open('w') as out:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim', '--simulator',
             'standin', '--policy-path', str(act), '--device', 'cpu', '--record',
             '--viewer-port', '0', '--timeout', '240', '--output-dir', str(session),
             '--params-file', str(params_file)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, 'HF_HUB_OFFLINE': '1'})
    try:
        def running() -> None:
            assert proc.poll() is None, log.read_text()[-4000:]

        ctx = contexts.wait_for(lambda c: c.task == language, timeout_s=120.0,
                                what=f'the scene language {language!r} as the task')
        assert ctx.task == language
        chunk = chunks.wait_for(lambda c: c.backend == 'lerobot', timeout_s=120.0,
                                what='a chunk from the lerobot policy')
        assert tuple(chunk.action_names) == layout.action_names('robocasa')
        # Three seconds of the policy's chunks (refilled as they run): enough for an episode.
        st = status.wait_for(lambda s: s.dispatched >= 60, timeout_s=180.0,
                             what='the chunks executed by robocasa_bridge')
        assert len(chunks) >= 3, f'{len(chunks)} chunks for 60 actions of 20-action chunks'
        assert st.rejected_invalid == 0, st.last_reject_reason
        wait_until(lambda: (session / 'latest.png').is_file(), 60.0, 'the live view PNG')
        # A reset re-rolls the kitchen (seed + 1000) and its language becomes the task.
        from std_srvs.srv import Trigger
        next_scene = StandInKitchen(seed=1005, camera_names=())
        next_scene.reset()
        reply = probe.call(Trigger, 'sim/reset', Trigger.Request(), timeout_s=60.0)
        assert reply.success and 'seed 1005' in reply.message, reply.message
        contexts.wait_for(lambda c: c.task == next_scene.get_ep_meta()['lang'],
                          timeout_s=30.0, what='the next kitchen\'s language as the task')
        running()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
        text = log.read_text()
        assert 'Traceback' not in text, text[-4000:]
        assert 'robocasa_bridge ready: standin' in text, text[-4000:]
        bridge_python = (session / 'logs' / 'robocasa_bridge.log').read_text()
        assert 'robocasa_bridge ready' in bridge_python
        bags = list((session / 'bags').rglob('*.mcap'))
        assert bags, 'the recorder wrote no bag'
        from rosbags.rosbag2 import Reader
        with Reader(bags[0].parent) as reader:
            topics = {c.topic: c.msgcount for c in reader.connections}
        assert topics.get('/robot_state', 0) > 0, topics
        # The kitchen session becomes a LeRobot dataset in RoboCasa's layout.
        out = tmp_path / 'dataset'
        export = subprocess.run(
            [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'export', str(session / 'bags'),
             str(out), '--state-topic', 'robot_state', '--robot-type', 'panda_omron',
             '--fps', '20', '--episodes-by', 'whole', '--no-progress'],
            capture_output=True, text=True, timeout=300)
        assert export.returncode == 0, export.stdout[-2000:] + export.stderr[-2000:]
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        ds = LeRobotDataset('local/kitchen', root=out, video_backend='pyav')
        assert ds.meta.robot_type == 'panda_omron'
        assert ds.features['observation.state']['names'] == list(layout.STATE_NAMES)
        assert ds.features['action']['names'] == list(layout.action_names('robocasa'))
        assert {f'observation.images.{c}' for c in layout.DEFAULT_CAMERAS} <= set(ds.features)
        frame = ds[0]
        assert tuple(frame['observation.state'].shape) == (16,)
        assert tuple(frame['action'].shape) == (12,)
    finally:
        stop_popen(proc, 30.0)
