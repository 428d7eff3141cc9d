"""robocasa_bridge over DDS, in its own process, driving the stand-in of RoboCasa's environment.

What a user relies on: one kitchen persists across tasks, resets follow RoboCasa's seeds and
republish the episode's language, chunks are executed in the policy's declared action order and
every malformed chunk is refused with a reason, and a missing RoboCasa says how to install it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus, TaskOutcome
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.robocasa import layout
from lerobot_lang_nodes.robocasa.standin import EEF_STEP_M, StandInKitchen
from lerobot_lang_nodes.testing import wait_until

MODULE = 'lerobot_lang_nodes.nodes.robocasa_bridge_node'
# The test's chunks are commands, not a policy's timed output: no time alignment and no
# observation-age bound (the probe's newest state may lag on a loaded machine).
BASE = {'simulator': 'standin', 'image_size': 48, 'ctrl_hz': 20.0, 'camera_hz': 10.0,
        'time_align': False, 'max_chunk_age_s': 0.0, 'status_hz': 10.0}


class Bridge:
    def __init__(self, launch_node, probe, **params):
        self.order = params.get('action_order', 'robocasa')
        self.proc = launch_node(MODULE, params={**BASE, **params})
        self.probe = probe
        self.state = probe.subscribe(JointState, 'robot_state', qos.SENSOR)
        self.status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
        self.outcome = probe.subscribe(TaskOutcome, 'task_outcome', qos.LATCHED)
        self.desc = probe.subscribe(String, 'sim/task_description', qos.LATCHED)
        self.chunks = probe.publisher(ActionChunk, 'action_chunk', qos.COMMAND)
        self.sequence = 0
        self.revision = (0, 0)  # (context_revision, flush_revision) chunks are sent for
        self.state.wait_for(timeout_s=60.0, what='robot_state from the bridge')
        wait_until(lambda: self.chunks.get_subscription_count() > 0, 15.0,
                   'the bridge on action_chunk', [self.proc])

    def send(self, values, names=None, **kw):
        self.sequence += 1
        values = np.asarray(values, dtype=np.float64)
        revision, flush = self.revision
        # Stamped with the newest state, as a policy stamps a chunk with its observation: the
        # bridge discards chunks observed longer ago than max_chunk_age_s.
        stamp_s = convert.stamp_to_s(self.state.last.header.stamp)
        msg = convert.chunk_to_msg(values, tuple(names or layout.action_names(self.order)),
                                   revision=revision, flush_revision=flush,
                                   sequence=self.sequence, stamp_s=stamp_s, period_s=0.0,
                                   instruction='test', backend='test', **kw)
        self.chunks.publish(msg)
        return self.sequence

    def command(self, steps, **named):
        names = layout.action_names(self.order)
        row = np.zeros(12)
        for name, value in named.items():
            row[names.index(name.replace('__', '.'))] = value
        return self.send(np.tile(row, (steps, 1)))

    def reach_and_grasp(self, scene: StandInKitchen) -> None:
        """Drive the gripper to the scene's object (its place is known from the seed) and
        close it."""
        base = np.asarray(self.state.last.position[7:10])  # base_pos; the base is not turned
        target = scene._object - base  # noqa: SLF001 - the seed's layout, relative to the base
        target[2] = scene._object[2]  # noqa: SLF001 - heights are not base-relative
        for axis in range(3):
            delta = target[axis] - self.eef()[axis]
            steps = int(np.ceil(abs(delta) / EEF_STEP_M))
            if steps:
                name = layout.EEF_POS[axis].replace('.', '__')
                fraction = abs(delta) / (steps * EEF_STEP_M)
                self.wait_idle(self.command(steps, **{name: np.sign(delta) * fraction}))
        assert np.linalg.norm(self.eef() - target) < 0.01
        self.wait_idle(self.command(6, gripper=1.0))

    def eef(self) -> np.ndarray:
        return np.asarray(self.state.last.position[:3])

    def wait_idle(self, sequence, timeout_s=20.0):
        """Wait until the chunk was accepted and fully dispatched (queue empty)."""
        self.status.wait_for(lambda m: m.last_accepted_sequence >= sequence
                             and m.queue_depth == 0, timeout_s,
                             f'chunk {sequence} executed', since=0)


def test_one_kitchen_persists_across_two_tasks_with_the_environment_success(launch_node, probe):
    bridge = Bridge(launch_node, probe, seed=3)
    scene = StandInKitchen(seed=3, camera_names=())
    scene.reset()
    language = scene.get_ep_meta()['lang']
    assert bridge.desc.wait_for(timeout_s=10.0).data == language
    task = probe.publisher(String, 'task', qos.LATCHED)
    task.publish(String(data=language))
    bridge.outcome.wait_for(lambda m: m.goal == language and m.known_goal
                            and not m.success, 10.0, 'the scene task, not yet done')
    bridge.reach_and_grasp(scene)
    done = bridge.outcome.wait_for(lambda m: m.success, 10.0, 'success of the scene task')
    assert done.goal == language
    holding_at = bridge.eef().copy()
    # A second task in the same kitchen: nothing is reset, the object is still held.
    task.publish(String(data='put it back down'))
    second = bridge.outcome.wait_for(lambda m: m.goal == 'put it back down', 10.0,
                                     'the second task')
    assert not second.known_goal and 'judges only' in second.detail
    np.testing.assert_allclose(bridge.eef(), holding_at, atol=1e-9)
    bridge.wait_idle(bridge.command(4, eef_pos__z=-1.0, gripper=1.0))
    assert bridge.eef()[2] == pytest.approx(holding_at[2] - 4 * EEF_STEP_M)
    assert bridge.proc.alive


def test_reset_rerolls_with_robocasa_seeds_and_republishes_the_language(launch_node, probe):
    bridge = Bridge(launch_node, probe, seed=11)
    expected = []
    for k in (1, 2):
        scene = StandInKitchen(seed=11 + 1000 * k, camera_names=())
        scene.reset()
        expected.append(scene.get_ep_meta()['lang'])
    initial = StandInKitchen(seed=11, camera_names=())
    initial.reset()
    bridge.desc.wait_for(lambda m: m.data == initial.get_ep_meta()['lang'], 10.0,
                         'the first scene\'s language')
    for k, language in zip((1, 2), expected):
        seen = len(bridge.desc)
        reply = probe.call(Trigger, 'sim/reset', Trigger.Request(), timeout_s=30.0)
        assert reply.success and f'seed {11 + 1000 * k}' in reply.message
        assert bridge.desc.wait_for(since=seen, timeout_s=10.0).data == language


def test_chunks_run_in_the_declared_order_and_bad_ones_are_refused(launch_node, probe):
    bridge = Bridge(launch_node, probe, action_order='lerobot')
    images = probe.subscribe(Image, 'cameras/robot0_agentview_left/image_raw', qos.SENSOR)
    info = probe.subscribe(CameraInfo, 'cameras/robot0_agentview_left/camera_info', qos.SENSOR)
    first = images.wait_for(timeout_s=10.0)
    assert (first.height, first.width, first.encoding) == (48, 48, 'rgb8')
    assert info.wait_for(timeout_s=10.0).k[0] > 0
    rgb = convert.image_to_rgb(first)
    assert (rgb[0] == 255).all(), 'the view is upright (the stand-in marks its top edge)'
    state = bridge.state.wait_for(timeout_s=5.0)
    assert tuple(state.name) == layout.STATE_NAMES
    x0 = bridge.eef()[0]
    bridge.wait_idle(bridge.command(3, eef_pos__x=1.0))  # lerobot order: column 5
    assert bridge.eef()[0] == pytest.approx(x0 + 3 * EEF_STEP_M)
    # Each malformed chunk is refused with a reason; nothing moves.
    robocasa_names = layout.action_names('robocasa')
    bad = [
        (np.zeros((2, 12)), robocasa_names, 'name'),              # another order
        (np.zeros((2, 11)), robocasa_names[:11], 'name'),         # 11 columns
        (np.full((2, 12), 5.0), None, 'limit'),                   # beyond the bounds
        (np.full((2, 12), np.nan), None, 'finite'),               # not a number
    ]
    for values, names, word in bad:
        seq = bridge.send(values, names)
        rejected = bridge.status.wait_for(lambda m: m.last_chunk_sequence >= seq
                                          or m.rejected_invalid >= 1 and word in
                                          m.last_reject_reason.lower(), 10.0,
                                          f'chunk {seq} refused', since=len(bridge.status))
        assert word in rejected.last_reject_reason.lower(), rejected.last_reject_reason
    bad_size = ActionChunk(action_names=list(layout.action_names('lerobot')), horizon=2,
                           action_dim=12, values=[0.0] * 5, sequence=99)
    bridge.chunks.publish(bad_size)
    bridge.status.wait_for(lambda m: m.rejected_invalid >= len(bad) + 1, 10.0,
                           'the short chunk refused')
    assert bridge.eef()[0] == pytest.approx(x0 + 3 * EEF_STEP_M)
    assert bridge.proc.alive


def test_missing_robocasa_fails_once_with_how_to_install(launch_node, probe, tmp_path):
    absent = launch_node(MODULE, name='no_robocasa', params={'simulator': 'robocasa'})
    wait_until(lambda: not absent.alive, 60.0, 'the bridge to exit without RoboCasa')
    assert absent.returncode == 2
    log = absent.log_text()
    assert 'RoboCasa is not installed' in log and 'download_kitchen_assets' in log
    # RoboCasa importable but its kitchen assets not downloaded (empty folders).
    fake = tmp_path / 'site' / 'robocasa'
    for folder in ('models/assets/objects/objaverse', 'models/assets/fixtures/counters',
                   'models/assets/textures'):
        (fake / folder).mkdir(parents=True)
    (fake / 'models/assets/fixtures/counters/model.xml').write_text('<mujoco/>')  # from git
    (fake / '__init__.py').write_text('')
    path = os.pathsep.join(p for p in (str(fake.parent), os.environ.get('PYTHONPATH')) if p)
    no_assets = launch_node(MODULE, name='no_assets', params={'simulator': 'robocasa'},
                            env={'PYTHONPATH': path})
    wait_until(lambda: not no_assets.alive, 60.0, 'the bridge to exit without assets')
    assert no_assets.returncode == 2
    log = no_assets.log_text()
    assert 'kitchen assets are missing' in log and str(Path('models') / 'assets') in log
    assert log.count('cannot start') == 1


def test_run_task_ends_with_the_kitchen_s_own_success(launch_node, probe):
    """RunTask through the planner: success is the environment's check of the scene's task."""
    import threading

    from lerobot_lang_msgs.msg import LanguageContext
    from lerobot_lang_nodes.testing import run_task

    bridge = Bridge(launch_node, probe, seed=21)
    view = layout.DEFAULT_CAMERAS[0]
    planner = launch_node('lerobot_lang_nodes.nodes.planner_node', params={
        'backend': 'scripted', 'ground_truth_topic': '', 'cameras': [view],
        'default_camera': view, 'transformers.image_cameras': [view], 'use_sim_time': True})
    probe.wait_for_node('planner', timeout_s=60.0, processes=[planner])
    contexts = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
    scene = StandInKitchen(seed=21, camera_names=())
    scene.reset()
    language = scene.get_ep_meta()['lang']
    box = {}
    thread = threading.Thread(target=lambda: box.update(
        out=run_task(probe, language, time_limit_s=120.0, timeout_s=150.0)), daemon=True)
    thread.start()
    ctx = contexts.wait_for(lambda c: c.task == language, 30.0, 'the task in the context')
    bridge.revision = (int(ctx.revision), int(ctx.flush_revision) or int(ctx.revision))
    bridge.reach_and_grasp(scene)
    thread.join(timeout=60.0)
    result, _feedback = box['out']
    assert result is not None and result.success, result
    assert 'done' in result.message
