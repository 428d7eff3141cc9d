"""`lerobot-lang real robot.yaml` end to end against the byte-level servo emulator.

The emulator runs in a child process of the test (EmulatorProcess: a ServoBusEmulator published
at a --link path), whose proxy reads the servos' Torque_Enable registers after the bring-up
stops; the bring-up runs as the user starts it (own session, output to a file) with the
shipped robot.example.yaml edited to the emulator's port, a calibration JSON written by the
so101 calibration helpers, two synthetic:square cameras and a tiny LeRobot ACT checkpoint as the
policy. Everything is observed over DDS with the probe.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml
import pytest
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes import paths
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.so101.units import RAD_PER_STEP
from lerobot_lang_nodes.testing import (
    child_pids,
    EmulatorProcess,
    process_gone,
    require_ml,
    stop_popen,
    wait_until,
)

require_ml('torch', 'lerobot')

from lerobot_lang_nodes.tiny_models.policies import build_tiny_act  # noqa: E402

CAMERAS = ('front', 'wrist')
IDS = range(1, 7)
WAIT_S = 30.0  # five node processes starting on two loaded cores
POLICY_WAIT_S = 120.0  # the policy process imports torch and LeRobot and loads the checkpoint
CHUNK = 30  # 1 s: outlasts torch inference on two loaded cores


@pytest.fixture(scope='module', params=['act', 'smolvla'])
def checkpoint(request, tmp_path_factory) -> Path:
    """ACT, and SmolVLA (a VLA from stock LeRobot classes; its 50-action chunk executed
    CHUNK actions at a time, as lerobot-rollout does)."""
    out = tmp_path_factory.mktemp('ckpt') / request.param
    if request.param == 'act':
        return build_tiny_act(out, chunk_size=CHUNK)
    require_ml('num2words')
    from lerobot_lang_nodes.tiny_models.vla import build_smolvla
    return build_smolvla(out, chunk_size=50, n_action_steps=CHUNK)


def _write_robot_yaml(tmp: Path, port: Path, calibration: Path, checkpoint: Path) -> Path:
    robot = yaml.safe_load(paths.config_path('robot.example.yaml').read_text())
    robot['port'] = str(port)
    robot['calibration'] = {'path': str(calibration)}
    robot['policy'] = {'path': str(checkpoint)}
    robot['cameras'] = {name: {'source': 'synthetic:square', 'width': 160, 'height': 120,
                               'fps': 15} for name in CAMERAS}
    out = tmp / 'robot.yaml'
    out.write_text(yaml.safe_dump(robot, sort_keys=False))
    return out


def test_real_bringup_against_the_emulator(tmp_path, probe, checkpoint) -> None:
    emu = EmulatorProcess(IDS, link=tmp_path / 'so101').start()
    cal = tmp_path / 'so101_follower.json'
    save_calibration({j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                                          4095 if j == 'wrist_roll' else 3000)
                      for i, j in enumerate(JOINT_NAMES)}, path=cal)
    robot_yaml = _write_robot_yaml(tmp_path, Path(emu.port), cal, checkpoint)
    joints = probe.subscribe(JointState, '/joint_states', qos.SENSOR)
    images = {c: probe.subscribe(Image, f'/cameras/{c}/image_raw', qos.SENSOR) for c in CAMERAS}
    status = probe.subscribe(RuntimeStatus, '/runtime_status', qos.STATUS)
    chunks = probe.subscribe(ActionChunk, '/action_chunk', qos.COMMAND)
    log = tmp_path / 'real.log'
    with log.open('w') as out:
        proc = subprocess.Popen([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'real',
                                 str(robot_yaml), '--no-viewer', '--timeout', '120',
                                 '--output-dir', str(tmp_path / 'session')],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=dict(os.environ))
    kids: list[int] = []
    try:
        def alive() -> None:
            assert proc.poll() is None, log.read_text()[-4000:]

        def wait(predicate, what: str):
            return wait_until(lambda: (alive(), predicate())[1], WAIT_S, what)

        first = joints.wait_for(timeout_s=WAIT_S, what='joint_states from so101_driver')
        alive()
        assert list(first.name) == list(JOINT_NAMES)
        for c in CAMERAS:
            img = images[c].wait_for(timeout_s=WAIT_S, what=f'cameras/{c}/image_raw')
            assert (img.width, img.height, img.encoding) == (160, 120, 'rgb8')
        paused = status.wait_for(timeout_s=WAIT_S, what='runtime_status')
        assert status.messages[0].mode == 'paused', status.messages[0].mode  # starts paused
        assert paused.mode == 'paused'
        # The control loop (and its status) starts at configure; torque comes on at activate.
        wait(lambda: all(emu.register(i, 'Torque_Enable') == 1 for i in IDS),
             'the active driver to hold with torque on')
        resume = probe.call(Trigger, '/resume', Trigger.Request(), timeout_s=WAIT_S)
        assert resume.success, resume.message
        status.messages.clear()
        status.wait_for(lambda s: s.mode == 'action', timeout_s=WAIT_S,
                        what='runtime_status in mode action after /resume')
        # The LeRobot checkpoint drives the driver: its chunks are accepted and dispatched, and
        # every goal written stays inside the calibrated range and max_relative_target.
        emu.goal_writes(clear=True)
        probe.publisher(String, '/task', qos.LATCHED).publish(
            String(data='put the red cube in the bowl'))
        chunk = chunks.wait_for(timeout_s=POLICY_WAIT_S, what='a chunk from the lerobot policy')
        alive()
        assert chunk.backend == 'lerobot' and list(chunk.action_names) == list(JOINT_NAMES)
        assert chunk.horizon == CHUNK
        st = status.wait_for(lambda s: s.last_accepted_sequence >= 2 and s.dispatched >= CHUNK,
                             timeout_s=WAIT_S, what='lerobot chunks accepted and dispatched')
        assert st.rejected_invalid == 0, st.last_reject_reason
        writes = wait(lambda: emu.goal_writes(), 'goal positions written to the servos')
        max_step = 0.35 / RAD_PER_STEP + 1  # robot.example.yaml's max_relative_target_rad
        for w in writes:
            lo, hi = (0, 4095) if w.servo_id == 5 else (1000, 3000)
            assert lo <= w.goal <= hi, w
            # Against the position the driver clamped to (its last read, or Present_Position
            # at the write): the horn moves on between the read and the write.
            assert w.step_from_present() <= max_step, w
        # driver, front_camera, wrist_camera, planner, policy (no viewer)
        kids = wait(lambda: [k for k in [child_pids(proc.pid)] if len(k) == 5],
                    'five node processes')[0]
        proc.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reaches only the supervisor
        assert proc.wait(timeout=WAIT_S) == 0, log.read_text()[-4000:]
    finally:
        stop_popen(proc, 30.0)  # only if a test failed first and left it running
        for pid in kids:  # never leave a node behind, even when an assertion failed
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)
        try:  # read before the emulator process stops; asserted after the bring-up checks
            torque = {i: emu.register(i, 'Torque_Enable') for i in IDS}
        finally:
            emu.stop()
    wait_until(lambda: all(process_gone(k) for k in kids), 10.0, 'every node process gone')
    text = log.read_text()
    assert 'Traceback' not in text and 'killing pid' not in text, text[-4000:]
    assert text.rstrip().endswith('[lerobot-lang] stopped'), text[-2000:]
    assert not any(torque.values()), f'torque still enabled after shutdown: {torque}'
