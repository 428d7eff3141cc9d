"""robocasa_bridge in its own environment (.venv-robocasa) on a real robosuite scene, over DDS.

No RoboCasa assets here: the bridge runs robosuite's stock Lift with a PandaOmron and
RoboCasa's three views. What must hold: the views, joint states and the 16-D state are
published, a chunk is executed and visible in the next observation, and the real-time factor
is reported. Rendering three views costs ~0.2 s a step on a 2-core CPU, so the test is short.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import Image, JointState

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.robocasa import layout
from lerobot_lang_nodes.testing import node_command, require_robocasa_env, wait_until

PREFIX = require_robocasa_env()
MODULE = 'lerobot_lang_nodes.nodes.robocasa_bridge_node'


def test_robosuite_scene_publishes_views_and_state_and_executes_a_chunk(launch_node, probe):
    argv = node_command(MODULE, params={'simulator': 'robosuite', 'image_size': 64,
                                        'camera_hz': 20.0, 'status_hz': 20.0,
                                        'time_align': False})
    argv[0] = str(PREFIX / 'bin' / 'python')
    bridge = launch_node.command(argv, 'robocasa_bridge', env={'AMENT_PREFIX_PATH': str(PREFIX)})
    views = {c: probe.subscribe(Image, f'cameras/{c}/image_raw', qos.SENSOR)
             for c in layout.DEFAULT_CAMERAS}
    state = probe.subscribe(JointState, 'robot_state', qos.SENSOR)
    joints = probe.subscribe(JointState, 'joint_states', qos.SENSOR)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    diagnostics = probe.subscribe(DiagnosticArray, '/diagnostics', qos.STATUS)
    chunks = probe.publisher(ActionChunk, 'action_chunk', qos.COMMAND)
    first = state.wait_for(timeout_s=120.0, what='robot_state from the robosuite bridge')
    assert tuple(first.name) == layout.STATE_NAMES and len(first.position) == 16
    assert len(joints.wait_for(timeout_s=10.0).position) == 7
    for cam, sub in views.items():
        img = sub.wait_for(timeout_s=30.0, what=f'{cam} view')
        assert (img.height, img.width, img.encoding) == (64, 64, 'rgb8')
    # Holding still, the scene renders (nearly) the same frame twice: real renders, not noise
    # from a GL context used on the wrong thread.
    left = views['robot0_agentview_left']
    frame_a = convert.image_to_rgb(left.wait_for(since=len(left), timeout_s=20.0))
    frame_b = convert.image_to_rgb(left.wait_for(since=len(left), timeout_s=20.0))
    still = np.abs(frame_a.astype(int) - frame_b.astype(int)).mean()
    assert still < 5.0, f'two frames of a still scene differ by {still:.1f} per value'
    assert frame_a.std() > 5.0, 'a blank view'
    wrist_before = convert.image_to_rgb(views['robot0_eye_in_hand'].last)
    wait_until(lambda: chunks.get_subscription_count() > 0, 15.0, 'the bridge on action_chunk',
               [bridge])
    x0 = np.asarray(state.last.position)[0]
    names = layout.action_names('robocasa')
    values = np.zeros((8, 12))
    values[:, names.index('eef_pos.x')] = 1.0  # 8 steps of up to 0.05 m (OSC delta input)
    chunks.publish(convert.chunk_to_msg(values, names, revision=0, sequence=1, stamp_s=0.0,
                                        period_s=0.0, instruction='forward', backend='test'))
    done = status.wait_for(lambda m: m.last_accepted_sequence >= 1 and m.queue_depth == 0,
                           timeout_s=60.0, what='the chunk executed')
    assert done.rejected_invalid == 0, done.last_reject_reason
    moved = state.wait_for(lambda m: m.position[0] - x0 > 0.05, timeout_s=20.0,
                           what='the end effector 5 cm further forward',
                           since=len(state) - 1)
    assert moved.position[0] - x0 < 0.5
    seen = len(views['robot0_eye_in_hand'])
    after = views['robot0_eye_in_hand'].wait_for(since=seen, timeout_s=20.0)
    assert not np.array_equal(convert.image_to_rgb(after), wrist_before)
    report = diagnostics.wait_for(
        lambda m: any(s.name.endswith('robocasa simulation loop') for s in m.status),
        timeout_s=20.0, what='the bridge diagnostics')
    values = {kv.key: kv.value for s in report.status for kv in s.values}
    rtf = float(values['real_time_factor'])
    assert 0.0 < rtf < 100.0 and values['simulator'] == 'robosuite'
    print(f'robosuite bridge: real-time factor {rtf:.2f}, step {values["step_ms_p50"]} ms')
    assert bridge.alive


def test_named_commands_drive_the_same_parts_whatever_order_env_step_takes():
    """Stock robosuite's env.step order and RoboCasa's (its kitchens reorder the controller):
    the host reads which one from the controller, and a named command moves the named part."""
    script = Path(__file__).with_name('robosuite_orders.py')
    proc = subprocess.run([str(PREFIX / 'bin' / 'python'), str(script)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, 'MUJOCO_GL': 'egl'})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key, moved in result.items():
        assert moved['env_order'] == ('env' if key.startswith('stock') else 'robocasa'), key
        assert moved['eef_dx'] > 0.05, (key, moved)          # the arm went forward
        assert moved['finger_closed_by'] > 0.01, (key, moved)  # the gripper closed
        assert moved['base_dx'] > 0.02, (key, moved)         # the base drove in base mode
