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
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
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
# PI0 / PI0.5: a build or a ~10 GB load with its first chunk, on two loaded cores; the run.
PI_LOAD_S = 300.0
PI_RUN_S = 600.0


@pytest.fixture(scope='module')
def act_checkpoint(tmp_path_factory) -> Path:
    return build_tiny_act(tmp_path_factory.mktemp('ckpt') / 'act', chunk_size=CHUNK)


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


def _write_robot_yaml(tmp: Path, port: Path, calibration: Path, checkpoint: Path,
                      policy: dict | None = None, execution: dict | None = None) -> Path:
    robot = yaml.safe_load(paths.config_path('robot.example.yaml').read_text())
    robot['port'] = str(port)
    robot['calibration'] = {'path': str(calibration)}
    robot['policy'] = {'path': str(checkpoint), **(policy or {})}
    if execution:
        robot['execution'] = execution
    robot['cameras'] = {name: {'source': 'synthetic:square', 'width': 160, 'height': 120,
                               'fps': 15} for name in CAMERAS}
    out = tmp / 'robot.yaml'
    out.write_text(yaml.safe_dump(robot, sort_keys=False))
    return out


class RealBringup:
    """`lerobot-lang real` started as a user starts it, against an emulator process; the
    probe's subscriptions; teardown that never leaves a node or torque behind."""

    def __init__(self, tmp_path: Path, probe, checkpoint: Path, *options: str,
                 timeout_s: float = 120.0, env: dict[str, str] | None = None,
                 policy: dict | None = None, execution: dict | None = None) -> None:
        self.emu = EmulatorProcess(IDS, link=tmp_path / 'so101').start()
        cal = tmp_path / 'so101_follower.json'
        save_calibration({j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                                              4095 if j == 'wrist_roll' else 3000)
                          for i, j in enumerate(JOINT_NAMES)}, path=cal)
        robot_yaml = _write_robot_yaml(tmp_path, Path(self.emu.port), cal, checkpoint, policy,
                                       execution)
        self.probe = probe
        self.joints = probe.subscribe(JointState, '/joint_states', qos.SENSOR)
        self.images = {c: probe.subscribe(Image, f'/cameras/{c}/image_raw', qos.SENSOR)
                       for c in CAMERAS}
        self.status = probe.subscribe(RuntimeStatus, '/runtime_status', qos.STATUS)
        self.chunks = probe.subscribe(ActionChunk, '/action_chunk', qos.COMMAND)
        self.log = tmp_path / 'real.log'
        with self.log.open('w') as out:
            self.proc = subprocess.Popen(
                [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'real', str(robot_yaml),
                 '--no-viewer', '--timeout', str(timeout_s),
                 '--output-dir', str(tmp_path / 'session'), *options],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, **(env or {})})
        self.kids: list[int] = []
        self.torque: dict[int, int] = {}

    def alive(self) -> None:
        assert self.proc.poll() is None, self.log.read_text()[-4000:]

    def wait(self, predicate, what: str):
        return wait_until(lambda: (self.alive(), predicate())[1], WAIT_S, what)

    def resume_with_task(self, task: str = 'put the red cube in the bowl',
                         chunk_wait_s: float = POLICY_WAIT_S) -> ActionChunk:
        """Torque on, /resume, the task: the policy's first chunk."""
        self.wait(lambda: all(self.emu.register(i, 'Torque_Enable') == 1 for i in IDS),
                  'the active driver to hold with torque on')
        resume = self.probe.call(Trigger, '/resume', Trigger.Request(), timeout_s=WAIT_S)
        assert resume.success, resume.message
        self.status.messages.clear()
        self.status.wait_for(lambda s: s.mode == 'action', timeout_s=WAIT_S,
                             what='runtime_status in mode action after /resume')
        self.emu.goal_writes(clear=True)
        self.probe.publisher(String, '/task', qos.LATCHED).publish(String(data=task))
        chunk = self.chunks.wait_for(timeout_s=chunk_wait_s,
                                     what='a chunk from the lerobot policy')
        self.alive()
        assert chunk.backend == 'lerobot' and list(chunk.action_names) == list(JOINT_NAMES)
        assert chunk.horizon == CHUNK
        return chunk

    def check_dispatched(self, predicate, what: str) -> None:
        """The driver accepted and dispatched (``predicate`` on its status) without rejecting
        a chunk, and goals reached the servos, each inside the calibrated range and
        max_relative_target."""
        st = self.status.wait_for(predicate, timeout_s=WAIT_S, what=what)
        assert st.rejected_invalid == 0, st.last_reject_reason
        writes = self.wait(lambda: self.emu.goal_writes(), 'goal positions written to the servos')
        max_step = 0.35 / RAD_PER_STEP + 1  # robot.example.yaml's max_relative_target_rad
        for w in writes:
            lo, hi = (0, 4095) if w.servo_id == 5 else (1000, 3000)
            assert lo <= w.goal <= hi, w
            # Against the position the driver clamped to (its last read, or Present_Position
            # at the write): the horn moves on between the read and the write.
            assert w.step_from_present() <= max_step, w

    def stop(self) -> None:
        """Ctrl-C as a terminal sends it; the supervisor and its nodes must exit cleanly."""
        # driver, front_camera, wrist_camera, planner, policy (no viewer)
        self.kids = self.wait(lambda: [k for k in [child_pids(self.proc.pid)]
                                       if len(k) == 5], 'five node processes')[0]
        self.proc.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reaches only the supervisor
        assert self.proc.wait(timeout=WAIT_S) == 0, self.log.read_text()[-4000:]

    def close(self) -> None:
        stop_popen(self.proc, 30.0)  # only if a test failed first and left it running
        for pid in self.kids:  # never leave a node behind, even when an assertion failed
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)
        try:  # read before the emulator process stops; asserted after the bring-up checks
            self.torque = {i: self.emu.register(i, 'Torque_Enable') for i in IDS}
        finally:
            self.emu.stop()

    def check_clean_exit(self) -> None:
        wait_until(lambda: all(process_gone(k) for k in self.kids), 10.0,
                   'every node process gone')
        text = self.log.read_text()
        assert 'Traceback' not in text and 'killing pid' not in text, text[-4000:]
        assert text.rstrip().endswith('[lerobot-lang] stopped'), text[-2000:]
        assert not any(self.torque.values()), (
            f'torque still enabled after shutdown: {self.torque}')


def test_real_bringup_against_the_emulator(tmp_path, probe, checkpoint) -> None:
    run = RealBringup(tmp_path, probe, checkpoint)
    try:
        first = run.joints.wait_for(timeout_s=WAIT_S, what='joint_states from so101_driver')
        run.alive()
        assert list(first.name) == list(JOINT_NAMES)
        for c in CAMERAS:
            img = run.images[c].wait_for(timeout_s=WAIT_S, what=f'cameras/{c}/image_raw')
            assert (img.width, img.height, img.encoding) == (160, 120, 'rgb8')
        paused = run.status.wait_for(timeout_s=WAIT_S, what='runtime_status')
        assert run.status.messages[0].mode == 'paused', run.status.messages[0].mode
        assert paused.mode == 'paused' and not paused.dry_run
        # The control loop (and its status) starts at configure; torque comes on at activate.
        # The LeRobot checkpoint drives the driver: its chunks are accepted and dispatched, and
        # every goal written stays inside the calibrated range and max_relative_target.
        run.resume_with_task()
        run.check_dispatched(lambda s: s.last_accepted_sequence >= 2 and s.dispatched >= CHUNK,
                             'lerobot chunks accepted and dispatched')
        run.stop()
    finally:
        run.close()
    run.check_clean_exit()


def test_dry_run_plans_without_moving_the_arm(tmp_path, probe, act_checkpoint) -> None:
    """`lerobot-lang real --dry-run`: the policy runs on the live observations and its chunks
    are published and played, but no goal reaches a servo and no horn moves."""
    run = RealBringup(tmp_path, probe, act_checkpoint, '--dry-run')
    try:
        run.joints.wait_for(timeout_s=WAIT_S, what='joint_states from so101_driver')
        before = {i: run.emu.register(i, 'Present_Position') for i in IDS}
        run.resume_with_task()
        st = run.status.wait_for(lambda s: s.dry_run and s.last_accepted_sequence >= 2
                                 and s.planned >= 2 * CHUNK, timeout_s=POLICY_WAIT_S,
                                 what='two chunks played in the dry run')
        assert st.dispatched == 0 and st.rejected_invalid == 0, st
        assert len(st.planned_target) == len(JOINT_NAMES)
        chunk_targets = [c.values[i:i + 6] for c in run.chunks.snapshot()
                         for i in range(0, len(c.values), 6)]
        assert any(list(st.planned_target) == list(t) for t in chunk_targets)
        assert run.emu.goal_writes() == []
        assert {i: run.emu.register(i, 'Present_Position') for i in IDS} == before
        run.stop()
    finally:
        run.close()
    run.check_clean_exit()


@pytest.fixture(scope='module', params=['pi0', 'pi05'])
def pi_checkpoint(request, tmp_path_factory):
    """(checkpoint, environment) of a PI0 / PI0.5 checkpoint (stock LeRobot classes, full-size
    gemma with random weights: tiny_models/pi.py) and the offline HF_HOME holding the PaliGemma
    tokenizer its processor names by hub id, as a user caches it before going offline. Built in
    a child process (~10 GB), so its memory is gone before the policy node loads it."""
    require_ml('transformers', 'scipy')
    from lerobot_lang_nodes.tiny_models.pi import install_paligemma_tokenizer
    home = tmp_path_factory.mktemp('hf_home')
    install_paligemma_tokenizer(home)
    env = {'HF_HOME': str(home), 'HF_HUB_OFFLINE': '1'}
    path = tmp_path_factory.mktemp(request.param) / 'pretrained_model'
    script = ('import sys\n'
              'from lerobot_lang_nodes.tiny_models.pi import build_pi\n'
              'build_pi(sys.argv[1], sys.argv[2], chunk_size=50, n_action_steps=int(sys.argv[3]))')
    out = subprocess.run([sys.executable, '-c', script, str(path), request.param, str(CHUNK)],
                         capture_output=True, text=True, timeout=PI_LOAD_S,
                         env={**os.environ, **env, 'OMP_NUM_THREADS': '2'})
    assert out.returncode == 0, out.stderr[-4000:]
    yield path, env
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pi_checkpoints_drive_the_emulated_arm(tmp_path, probe, pi_checkpoint) -> None:
    """PI0 and PI0.5 on the real-arm graph, offline: `lerobot-lang real` with the checkpoint in
    robot.yaml; the first chunk (LeRobot's 50 executed 30 at a time) comes in radians with the
    joint names, the driver accepts and dispatches it, and every goal the servos receive stays
    inside the calibration and max_relative_target. A chunk takes seconds to tens of seconds
    on a CPU: the arm holds while it waits."""
    checkpoint, env = pi_checkpoint
    # Seconds to tens of seconds a chunk on a CPU, against 1 s of actions: the robot YAML
    # raises the inference timeout (5 s would drop every chunk) and plays each chunk from its
    # first action when it arrives, as LeRobot's synchronous rollout does (time-aligned, every
    # chunk would arrive wholly in the past), as the README tells users of a slow device.
    run = RealBringup(tmp_path, probe, checkpoint, timeout_s=PI_RUN_S, env=env,
                      policy={'inference_timeout_s': PI_LOAD_S},
                      execution={'time_align': False, 'max_chunk_age_s': 0})
    try:
        run.joints.wait_for(timeout_s=WAIT_S, what='joint_states from so101_driver')
        chunk = run.resume_with_task(chunk_wait_s=PI_LOAD_S)
        values = np.asarray(chunk.values).reshape(chunk.horizon, chunk.action_dim)
        assert np.isfinite(values).all() and np.abs(values).max() < np.pi, values
        run.check_dispatched(lambda s: s.dispatched >= CHUNK, 'the PI chunk dispatched')
        run.stop()
    finally:
        run.close()
    run.check_clean_exit()
