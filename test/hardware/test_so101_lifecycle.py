"""so101_driver walked through the standard lifecycle services, and torque on process exit.

The driver runs in its own process with auto_configure/auto_activate false and is driven only
through lifecycle_msgs/srv/ChangeState and GetState, as lifecycle tooling would. The emulator
runs in a child process of the test (EmulatorProcess), whose proxy makes the servos' registers
(Torque_Enable, Goal_Position) and the instructions the bus saw observable; whether the driver
holds the port open is read from /proc/<pid>/fd.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.so101.protocol import Instruction
from lerobot_lang_nodes.so101.units import RAD_PER_STEP
from lerobot_lang_nodes.testing import EmulatorProcess, NodeProcess, RosProbe, wait_until

MODULE = 'lerobot_lang_nodes.nodes.so101_driver_node'
IDS = range(1, 7)
WAIT_S = 15.0  # generous: two shared, loaded cores
CTRL_HZ = 30.0


def calibration_file(tmp: Path) -> Path:
    cal = {j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                               4095 if j == 'wrist_roll' else 3000)
           for i, j in enumerate(JOINT_NAMES)}
    path = tmp / 'calibration.json'
    save_calibration(cal, path=path)
    return path


def driver_params(port: Path, cal: Path, **extra) -> dict:
    return {'port': str(port), 'calibration_path': str(cal), 'ctrl_hz': CTRL_HZ,
            'timeout_margin_ms': 100.0, 'reconnect_period_s': 0.2, 'status_hz': 10.0,
            **extra}


def holds_port(proc: NodeProcess, emu: EmulatorProcess) -> bool:
    """True when the driver process has the emulator's pty slave open."""
    slave = os.path.realpath(emu.port)
    fd_dir = Path(f'/proc/{proc.pid}/fd')
    for fd in fd_dir.iterdir() if fd_dir.exists() else ():
        try:
            if os.readlink(fd) == slave:
                return True
        except OSError:  # closed between listing and reading
            continue
    return False


def torque(emu: EmulatorProcess) -> list[int]:
    return [emu.register(i, 'Torque_Enable') for i in IDS]


class Lifecycle:
    """ChangeState / GetState clients of one lifecycle node, through the probe."""

    def __init__(self, probe: RosProbe, node: str) -> None:
        self.probe, self.node = probe, node

    def state(self) -> State:
        return self.probe.call(GetState, f'/{self.node}/get_state', GetState.Request(),
                               timeout_s=WAIT_S).current_state

    def change(self, transition_id: int) -> bool:
        req = ChangeState.Request(transition=Transition(id=transition_id))
        return self.probe.call(ChangeState, f'/{self.node}/change_state', req,
                               timeout_s=WAIT_S).success


def emulator_progress(emu: EmulatorProcess, n: int, proc: NodeProcess) -> None:
    """Wait until the bus served ``n`` more requests: that many control-loop transactions."""
    start = emu.requests
    wait_until(lambda: emu.requests >= start + n, WAIT_S, f'{n} more bus requests', [proc])


def test_lifecycle_services_walk(launch_node, probe, tmp_path) -> None:
    emu = EmulatorProcess(IDS, link=tmp_path / 'so101').start()
    try:
        cal = calibration_file(tmp_path)
        status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
        chunks = probe.publisher(ActionChunk, 'action_chunk', qos.COMMAND)
        proc = launch_node(MODULE, params=driver_params(
            tmp_path / 'so101', cal, auto_configure=False, auto_activate=False,
            start_paused=False))
        lc = Lifecycle(probe, 'so101_driver')

        # unconfigured: nothing has touched the bus
        assert lc.state().id == State.PRIMARY_STATE_UNCONFIGURED
        assert emu.instructions.get(Instruction.PING, 0) == 0
        assert not holds_port(proc, emu)

        # configure: port opened, every servo pinged, torque still off
        assert lc.change(Transition.TRANSITION_CONFIGURE)
        assert lc.state().id == State.PRIMARY_STATE_INACTIVE
        assert emu.instructions.get(Instruction.PING, 0) >= len(IDS)
        assert holds_port(proc, emu)
        assert torque(emu) == [0] * 6

        # activate: goal := present before torque on, so a stale goal register never jerks
        before = [emu.present_position(i) for i in IDS]
        for i in IDS:  # a goal left far away by an earlier session (torque off: no motion)
            emu.set_register(i, 'Goal_Position', before[i - 1] + 300)
        assert lc.change(Transition.TRANSITION_ACTIVATE)
        assert lc.state().id == State.PRIMARY_STATE_ACTIVE
        assert torque(emu) == [1] * 6
        assert all(abs(emu.register(i, 'Goal_Position') - before[i - 1]) <= 1 for i in IDS), \
            [emu.register(i, 'Goal_Position') for i in IDS]
        emulator_progress(emu, 40, proc)  # a few control cycles with torque on
        after = [emu.present_position(i) for i in IDS]
        assert max(abs(a - b) for a, b in zip(after, before)) <= 2, (before, after)

        # deactivate: torque off everywhere, and chunks move nothing while inactive
        assert lc.change(Transition.TRANSITION_DEACTIVATE)
        assert lc.state().id == State.PRIMARY_STATE_INACTIVE
        assert torque(emu) == [0] * 6
        refused = probe.call(Trigger, '/resume', Trigger.Request(), timeout_s=WAIT_S)
        assert not refused.success and 'not active' in refused.message
        wait_until(lambda: chunks.get_subscription_count() > 0, WAIT_S,
                   'the driver subscribed to action_chunk', [proc])
        goals = [emu.register(i, 'Goal_Position') for i in IDS]
        target = (np.array(after, float) - 2000.0) * RAD_PER_STEP
        target[0] += 0.15
        stale = status.wait_for(timeout_s=WAIT_S, what='runtime_status').discarded_stale
        chunks.publish(convert.chunk_to_msg(
            np.tile(target, (10, 1)), tuple(JOINT_NAMES), revision=0, sequence=1,
            stamp_s=time.time(), period_s=1.0 / CTRL_HZ, instruction='t', backend='test'))
        status.wait_for(lambda s: s.discarded_stale > stale, timeout_s=WAIT_S,
                        what='the inactive driver discarding the chunk')
        emulator_progress(emu, 40, proc)
        assert [emu.register(i, 'Goal_Position') for i in IDS] == goals, 'moved while inactive'
        assert torque(emu) == [0] * 6

        # cleanup: the port is closed; shutdown: finalized, and the process exits cleanly
        assert lc.change(Transition.TRANSITION_CLEANUP)
        assert lc.state().id == State.PRIMARY_STATE_UNCONFIGURED
        wait_until(lambda: not holds_port(proc, emu), WAIT_S, 'the port closed', [proc])
        assert torque(emu) == [0] * 6
        assert lc.change(Transition.TRANSITION_UNCONFIGURED_SHUTDOWN)
        assert lc.state().id == State.PRIMARY_STATE_FINALIZED
        assert proc.alive
        assert proc.stop() == 0, proc.log_text(3000)
    finally:
        emu.stop()


def test_configure_fails_on_missing_port_then_succeeds(launch_node, probe, tmp_path) -> None:
    link = tmp_path / 'late_so101'
    proc = launch_node(MODULE, name='late_driver', params=driver_params(
        link, calibration_file(tmp_path), auto_configure=False, auto_activate=False))
    lc = Lifecycle(probe, 'so101_driver')
    assert not lc.change(Transition.TRANSITION_CONFIGURE)
    assert lc.state().id == State.PRIMARY_STATE_UNCONFIGURED
    assert 'configure failed' in proc.log_text()
    emu = EmulatorProcess(IDS, link=link).start()
    try:
        assert lc.change(Transition.TRANSITION_CONFIGURE)
        assert lc.state().id == State.PRIMARY_STATE_INACTIVE
        assert holds_port(proc, emu)
        assert proc.alive
    finally:
        assert proc.stop() == 0, proc.log_text(3000)
        emu.stop()


@pytest.mark.parametrize('disable', [True, False], ids=['disable_torque', 'keep_torque'])
def test_sigint_torque_follows_disable_torque_on_shutdown(launch_node, tmp_path,
                                                          disable: bool) -> None:
    emu = EmulatorProcess(IDS, link=tmp_path / 'so101').start()
    try:
        params = driver_params(tmp_path / 'so101', calibration_file(tmp_path))
        if not disable:  # the default is true: leave it unset in that case
            params['disable_torque_on_shutdown'] = False
        proc = launch_node(MODULE, params=params)  # auto_configure + auto_activate
        wait_until(lambda: torque(emu) == [1] * 6, 30.0, 'torque on (auto-activated)', [proc])
        emulator_progress(emu, 10, proc)  # the control loop running
        assert proc.stop() == 0, proc.log_text(3000)  # SIGINT, clean exit
        assert torque(emu) == ([0] * 6 if disable else [1] * 6), proc.log_text(3000)
    finally:
        emu.stop()


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))
