"""sim_bridge publishes the scene's ground truth at truth_hz, apart from the status rate.

The scripted planner decides from the ground truth and only on an observation newer than the
last: at the status rate (5 Hz) each subtask change waited up to 0.2 s for it, where a learned
planner sees camera frames at 10 Hz.
"""

from __future__ import annotations

import json
import os
import statistics

import pytest
from std_msgs.msg import String

from lerobot_lang_msgs.msg import RuntimeStatus
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import realtime_threads, wait_until

pytestmark = pytest.mark.slow


def _median_step(times: list[float]) -> float:
    return statistics.median(b - a for a, b in zip(times, times[1:]))


@pytest.mark.parametrize('truth_hz', [10.0, 15.0])
def test_ground_truth_comes_at_truth_hz_and_status_at_status_hz(launch_node, probe, truth_hz):
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:], '-p', 'status_hz:=5.0',
                      '-p', f'truth_hz:={truth_hz}')
    truth = probe.subscribe(String, 'sim/ground_truth', qos.LATCHED)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    probe.wait_for_node('sim_bridge', timeout_s=60.0, processes=[sim])
    since_truth, since_status = len(truth), len(status)
    # No task: no refill edges, so every status is a periodic one.
    wait_until(lambda: len(status) >= since_status + 12, 30.0, 'a dozen statuses', [sim])
    truth_t = [json.loads(m.data)['sim_time'] for m in truth.snapshot()[since_truth:]]
    status_t = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
                for m in status.snapshot()[since_status:]]
    assert len(truth_t) > 3 and len(status_t) > 3, (len(truth_t), len(status_t))
    period = 1.0 / 30.0
    # Rates are whole control ticks (round(30 / hz)): 10 Hz = 3 ticks, 15 Hz = 2, 5 Hz = 6.
    assert _median_step(truth_t) == pytest.approx(round(30.0 / truth_hz) * period, abs=1e-3)
    assert _median_step(status_t) == pytest.approx(6 * period, abs=1e-3)
    assert sim.alive


@pytest.mark.parametrize('real_time_factor', [1.0, 0.0], ids=['paced', 'unpaced'])
def test_thread_priority_puts_the_simulation_thread_alone_under_sched_fifo(
        launch_node, probe, real_time_factor):
    import sys

    from diagnostic_msgs.msg import DiagnosticArray
    if not sys.platform.startswith('linux'):
        pytest.skip('platform: needs Linux /proc and SCHED_FIFO')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      params={'cameras': ['front'], 'thread_priority': 20,
                              'real_time_factor': real_time_factor})
    diag = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)

    def scheduling():
        for msg in diag.snapshot()[::-1]:
            for st in msg.status:
                values = {kv.key: kv.value for kv in st.values}
                if 'loop.scheduling' in values:
                    return values['loop.scheduling']
        return None
    label = wait_until(scheduling, 60.0, 'the simulation loop on /diagnostics', [sim])
    # Unpaced, the loop runs back to back: under SCHED_FIFO it would hold a core.
    refused = 'SCHED_FIFO priority 20 refused' in sim.log_text() or not real_time_factor
    assert label == ('normal' if refused else 'SCHED_FIFO 20')
    # Not the renderer's worker threads, started by the first render before the switch.
    assert realtime_threads(sim.proc.pid) == ([] if refused else [(20, os.SCHED_FIFO)])
    assert sim.alive


def test_frames_come_from_the_render_thread_stamped_on_the_control_grid(launch_node, probe):
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import CameraInfo, Image, JointState
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      params={'cameras': ['front', 'wrist'], 'camera_hz': 10.0,
                              'render_nice': 5})
    front = probe.subscribe(Image, 'cameras/front/image_raw', qos.SENSOR)
    wrist = probe.subscribe(Image, 'cameras/wrist/image_raw', qos.SENSOR)
    front_info = probe.subscribe(CameraInfo, 'cameras/front/camera_info', qos.SENSOR)
    joints = probe.subscribe(JointState, 'joint_states', qos.SENSOR)
    diag = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    wait_until(lambda: len(front) >= 8 and len(wrist) >= 8, 60.0, 'camera frames', [sim])

    def stamp(msg) -> int:
        return msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
    images = [stamp(m) for m in front.snapshot()]
    # A frame shows the state of one control tick and carries its sim time: every image stamp
    # is on the grid of joint_states stamps (a best-effort message may be missing, so the grid,
    # not set equality), 3 ticks (0.1 s at 30 Hz) apart; both cameras drew the same ticks.
    ref, period = stamp(joints.snapshot()[0]), 1e9 / 30.0
    offsets = [(s - ref) / period for s in images]
    assert all(abs(o - round(o)) < 1e-3 for o in offsets), offsets
    steps = [b - a for a, b in zip(images, images[1:])]
    assert statistics.median(steps) == pytest.approx(0.1e9, abs=1e6)
    assert set(images[-5:]) <= {stamp(m) for m in wrist.snapshot()}
    # Each frame comes with its camera's intrinsics: a centred pinhole at the image size.
    info = front_info.wait_for(lambda m: stamp(m) in images, timeout_s=10.0,
                               what='camera_info of a frame')
    assert (info.width, info.height, info.header.frame_id) == (320, 240,
                                                               'front_camera_optical_frame')
    assert info.k[0] == pytest.approx(info.k[4]) and (info.k[2], info.k[5]) == (160.0, 120.0)
    assert info.distortion_model == 'plumb_bob' and list(info.d) == [0.0] * 5

    def camera_values():
        for msg in diag.snapshot()[::-1]:
            for st in msg.status:
                values = {kv.key: kv.value for kv in st.values}
                if 'camera.frames' in values:
                    return values
        return None
    values = wait_until(camera_values, 30.0, 'camera counters on /diagnostics', [sim])
    assert int(values['camera.frames']) > 0 and values['camera.render_errors'] == '0'
    # Started by this process, the node inherits its nice; the render thread adds 5.
    values = wait_until(lambda: (v := camera_values()) and v['camera.render_nice'] and v,
                        30.0, 'the render thread running', [sim])
    assert int(values['camera.render_nice']) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
    assert sim.alive
