"""so101_driver in its own process against the byte-level servo emulator, over DDS.

The emulator runs in a child process of the test (EmulatorProcess: a ServoBusEmulator on a pty,
published at a --link path under tmp, answering the bus on its own GIL) and is driven through
its proxy, so tests can inject faults and read the servos' Goal_Position registers; the driver
cannot tell it from a real bus. One driver serves the module; each test starts paused and
leaves the arm healthy. An "obstacle" (a narrowed Max_Position_Limit in the servo) keeps the
servo from reaching its goal, so "goal := present" is observable.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.so101.protocol import ErrorBit
from lerobot_lang_nodes.so101.units import RAD_PER_STEP
from lerobot_lang_nodes.testing import (
    EmulatorProcess,
    NodeProcess,
    node_command,
    realtime_threads,
    RosProbe,
    wait_until,
    WaitTimeout,
)

CTRL_HZ = 30.0
MAX_REL = 0.2  # rad, ~130 steps
WATCHDOG_S = 0.6
WAIT_S = 15.0  # generous: two shared, loaded cores
PAN = 1  # servo id of shoulder_pan
REVISION = 5


def make_calibration() -> dict[str, MotorCalibration]:
    """Range 1000..3000 on every joint but the full-turn wrist_roll; zero at step 2000."""
    return {j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                                4095 if j == 'wrist_roll' else 3000)
            for i, j in enumerate(JOINT_NAMES)}


class Rig:
    """Emulator + driver process + probe with its subscriptions."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.emu = EmulatorProcess(range(1, 7), link=tmp / 'so101').start()
        cal = tmp / 'calibration.json'
        save_calibration(make_calibration(), path=cal)
        argv = node_command('lerobot_lang_nodes.nodes.so101_driver_node', params={
            'port': str(tmp / 'so101'), 'calibration_path': str(cal), 'ctrl_hz': CTRL_HZ,
            'max_relative_target_rad': MAX_REL, 'command_timeout_s': WATCHDOG_S,
            'timeout_margin_ms': 100.0, 'reconnect_period_s': 0.2, 'diagnostics_hz': 5.0,
            'status_hz': 10.0, 'dispatch_log_path': str(tmp / 'dispatch.jsonl')})
        self.proc = NodeProcess('so101_driver', argv, tmp / 'so101_driver.log')
        self.probe = RosProbe('driver_probe')
        self.joints = self.probe.subscribe(JointState, 'joint_states', qos.SENSOR)
        self.status = self.probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
        self.diag = self.probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
        self.chunks = self.probe.publisher(ActionChunk, 'action_chunk', qos.COMMAND)
        self.context = self.probe.publisher(LanguageContext, 'language_context', qos.LATCHED)
        self.sequence = 0
        wait_until(lambda: self.arm_values().get('active') == 'true', 30.0,
                   'the driver active (configured by auto_configure/auto_activate)', [self.proc])
        wait_until(lambda: self.chunks.get_subscription_count() > 0, WAIT_S,
                   'the driver subscribed to action_chunk', [self.proc])
        self.context.publish(LanguageContext(task='t', revision=REVISION))
        wait_until(lambda: self.status.last is not None
                   and self.status.last.context_revision == REVISION, WAIT_S,
                   'the driver on the test revision', [self.proc])

    def close(self) -> None:
        self.proc.stop()
        self.probe.close()
        self.emu.stop()

    # --- observation helpers ----------------------------------------------------------
    def arm(self) -> DiagnosticStatus | None:
        msg = self.diag.last
        if msg is None:
            return None
        return next((s for s in msg.status if s.name == 'so101_driver: arm'), None)

    def arm_values(self) -> dict[str, str]:
        arm = self.arm()
        return {kv.key: kv.value for kv in arm.values} if arm is not None else {}

    def joint_diag(self, joint: str) -> dict[str, str]:
        msg = self.diag.last
        for s in msg.status if msg else []:
            if s.name == f'so101_driver: {joint}':
                return {kv.key: kv.value for kv in s.values}
        return {}

    def goal(self, servo_id: int = PAN) -> int:
        return self.emu.register(servo_id, 'Goal_Position')

    def present(self, servo_id: int = PAN) -> int:
        return self.emu.present_position(servo_id)

    def positions(self) -> np.ndarray:
        self.joints.messages.clear()
        msg = self.joints.wait_for(timeout_s=WAIT_S, what='joint_states')
        return np.array(msg.position)

    def send(self, values: np.ndarray, revision: int = REVISION,
             period_s: float = 1.0 / CTRL_HZ, ahead_s: float = 0.0) -> None:
        values = np.atleast_2d(values)
        self.sequence += 1
        self.chunks.publish(convert.chunk_to_msg(
            values, tuple(JOINT_NAMES), revision=revision, sequence=self.sequence,
            stamp_s=time.time() + ahead_s, period_s=period_s, instruction='test',
            backend='test'))

    def hold_chunk(self, pan_offset_rad: float, horizon: int = 15) -> np.ndarray:
        # 15 actions = 0.5 s: long enough to outlive a scheduling stall of the loaded host, so
        # time alignment does not expire the whole chunk before the driver ticks.
        target = self.positions()
        target[0] = (self.present() - 2000) * RAD_PER_STEP + pan_offset_rad
        return np.tile(target, (horizon, 1))

    def call(self, service: str) -> Trigger.Response:
        return self.probe.call(Trigger, service, Trigger.Request(), timeout_s=WAIT_S)

    def wait_status(self, predicate, what: str) -> RuntimeStatus:
        return wait_until(lambda: self.status.last if self.status.last is not None
                          and predicate(self.status.last) else None, WAIT_S, what, [self.proc])

    def wait(self, predicate, what: str, timeout_s: float = WAIT_S):
        try:
            return wait_until(predicate, timeout_s, what, [self.proc])
        except WaitTimeout as exc:  # the executor's view says why a chunk did not move the arm
            raise WaitTimeout(f'{exc}\n--- last runtime_status ---\n{self.status.last}') from None

    def barrier(self) -> None:
        """Fresh diagnostics and status: every earlier control cycle has finished."""
        n, m = len(self.diag), len(self.status)
        self.wait(lambda: len(self.diag) >= n + 2 and len(self.status) >= m + 2,
                  'two more diagnostics and status messages')


def steps_of(rad_from_zero: float, zero: float = 2000.0) -> float:
    return zero + rad_from_zero / RAD_PER_STEP


@pytest.fixture(scope='module')
def rig(tmp_path_factory) -> Iterator[Rig]:
    r = Rig(tmp_path_factory.mktemp('so101_driver'))
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def arm(rig: Rig) -> Iterator[Rig]:
    """Each test starts paused, without obstacle or fault, and must leave the node alive."""
    rig.call('pause')
    rig.wait(lambda: abs(rig.goal() - rig.present()) <= 1, 'the arm settled after pause')
    yield rig
    rig.emu.clear_faults()
    rig.emu.set_register(PAN, 'Max_Position_Limit', 3000)
    assert rig.proc.alive, rig.proc.log_text(3000)


def test_starts_paused_and_moves_only_after_resume(arm: Rig) -> None:
    assert arm.status.messages[0].mode == 'paused'  # the very first status: start_paused
    start_goal = arm.goal()
    stale = arm.status.last.discarded_stale
    arm.send(arm.hold_chunk(0.1))
    arm.wait_status(lambda s: s.discarded_stale > stale, 'the paused driver discarding a chunk')
    arm.barrier()
    assert arm.goal() == start_goal, 'a chunk moved the arm while paused'
    assert arm.call('resume').success
    before = arm.present()
    arm.send(arm.hold_chunk(0.1))
    expected = before + 0.1 / RAD_PER_STEP
    arm.wait(lambda: abs(arm.present() - expected) <= 3, 'the virtual servo at the chunk target')
    got = arm.wait(lambda: [p for p in [arm.positions()]
                            if abs(p[0] - (arm.present() - 2000) * RAD_PER_STEP) < 0.01],
                   'joint_states reporting the moved servo')
    assert got[0].shape == (6,)


def test_timed_burst_acts_then_pauses_by_itself(arm: Rig) -> None:
    from std_msgs.msg import Float64
    burst = arm.probe.publisher(Float64, 'burst', qos.COMMAND)
    arm.wait(lambda: burst.get_subscription_count() > 0, 'the driver subscribed to burst')
    published = time.time()
    burst.publish(Float64(data=3.0))  # long enough for the move on a loaded host
    # A status stamped after the burst: one from before the fixture's pause still says
    # 'action', and a chunk sent on it could reach the driver before the burst does (another
    # topic, no order between them) and be discarded as 'paused'.
    arm.wait_status(lambda s: s.mode == 'action'
                    and convert.stamp_to_s(s.header.stamp) > published,
                    'the burst switching to action mode')
    before = arm.present()
    arm.send(arm.hold_chunk(0.1, horizon=20))
    expected = before + 0.1 / RAD_PER_STEP
    arm.wait(lambda: abs(arm.present() - expected) <= 3, 'the servo moved during the burst')
    arm.wait_status(lambda s: s.mode == 'paused', 'the burst ending in pause by itself')


def test_max_relative_target_clamps_against_present(arm: Rig) -> None:
    assert arm.call('resume').success
    before = arm.present()
    sent_at = time.monotonic()
    # One action 1 rad away (> MAX_REL), stamped half a second ahead: time alignment skips
    # only slots that have passed, so a stall of the loaded host cannot expire it.
    arm.send(arm.hold_chunk(1.0, horizon=1), ahead_s=0.5)
    clamped = before + MAX_REL / RAD_PER_STEP

    def pan_writes() -> list[int]:
        return [w.goal for w in arm.emu.goal_writes()
                if w.servo_id == PAN and w.stamp >= sent_at]

    arm.wait(lambda: any(abs(g - clamped) <= 2 for g in pan_writes()),
             'the goal clamped to present + MAX_REL written')
    arm.barrier()
    assert max(pan_writes()) <= clamped + 2, (pan_writes(), clamped)  # never further
    assert abs(max(pan_writes()) - (before + 1.0 / RAD_PER_STEP)) > 100


def test_dispatch_log_records_each_write_as_clamped(arm: Rig) -> None:
    from lerobot_lang_nodes.core.dispatch_file import read_dispatch_file
    log = arm.tmp / 'dispatch.jsonl'
    assert arm.call('resume').success
    before = arm.present()
    arm.send(arm.hold_chunk(1.0, horizon=1), ahead_s=0.5)  # beyond MAX_REL: clamped
    sequence = arm.sequence
    line = arm.wait(lambda: next((r for r in read_dispatch_file(log)
                                  if r['sequence'] == sequence), None),
                    'the written action in the dispatch log')
    assert line['revision'] == REVISION and line['step'] == 0
    # What was written, after the clamp, not what the chunk asked for.
    assert line['action'][0] == pytest.approx((before - 2000) * RAD_PER_STEP + MAX_REL,
                                              abs=3 * RAD_PER_STEP)
    written = arm.wait(lambda: [w.goal for w in arm.emu.goal_writes() if w.servo_id == PAN
                                and abs(w.goal - steps_of(line['action'][0])) <= 1],
                       'the same goal received by the servo')
    assert written
    walls = [r['wall'] for r in read_dispatch_file(log)]
    assert walls == sorted(walls) and all(r['t'] > 0 for r in read_dispatch_file(log))


def test_watchdog_holds_present_position(arm: Rig) -> None:
    before = arm.present()
    arm.emu.set_register(PAN, 'Max_Position_Limit', before + 30)  # an obstacle
    assert arm.call('resume').success
    arm.send(arm.hold_chunk(0.15))
    target = before + 0.15 / RAD_PER_STEP
    arm.wait(lambda: abs(arm.goal() - target) <= 2, 'the goal beyond the obstacle')
    # Counted from here: on a loaded machine the chunk can arrive after an earlier hold.
    holds = int(arm.arm_values()['watchdog_holds'])
    arm.wait(lambda: int(arm.arm_values()['watchdog_holds']) > holds, 'a watchdog hold',
             timeout_s=WATCHDOG_S + WAIT_S)
    # The diagnostics thread may report the hold a moment before the control thread's write
    # of goal := present reaches the bus: wait for the register, then check it stays.
    arm.wait(lambda: abs(arm.goal() - arm.present()) <= 2, 'the watchdog setting goal := present')
    arm.barrier()
    assert abs(arm.goal() - arm.present()) <= 2, 'watchdog did not keep goal := present'
    assert abs(arm.present() - (before + 30)) <= 2


def test_pause_clears_queue_and_holds(arm: Rig) -> None:
    before = arm.present()
    arm.emu.set_register(PAN, 'Max_Position_Limit', before + 5)
    assert arm.call('resume').success
    dispatched = arm.status.last.dispatched
    ramp = arm.hold_chunk(0.0, horizon=90)
    ramp[:, 0] += np.linspace(0.02, 0.18, 90)
    arm.send(ramp)
    arm.wait_status(lambda s: s.dispatched > dispatched + 10, 'the ramp dispatching')
    arm.wait(lambda: arm.goal() > arm.present() + 10, 'a goal past the obstacle')
    assert arm.call('pause').success
    status = arm.wait_status(lambda s: s.mode == 'paused' and s.queue_depth == 0,
                             'paused with an empty queue')
    arm.wait(lambda: abs(arm.goal() - arm.present()) <= 2, 'pause setting goal := present')
    arm.barrier()
    assert abs(arm.goal() - arm.present()) <= 2
    assert arm.status.last.dispatched == status.dispatched, 'actions dispatched after pause'


def test_stale_and_invalid_chunks_are_rejected_and_counted(arm: Rig) -> None:
    assert arm.call('resume').success
    arm.barrier()
    start = arm.status.last
    goal = arm.goal()
    arm.send(arm.hold_chunk(0.1), revision=REVISION - 2)  # conditioned on an old context
    arm.wait_status(lambda s: s.discarded_stale == start.discarded_stale + 1,
                    'the old-revision chunk counted stale')
    bad = convert.chunk_to_msg(arm.hold_chunk(0.1), tuple(JOINT_NAMES), revision=REVISION,
                               sequence=999, stamp_s=time.time(), period_s=1 / CTRL_HZ,
                               instruction='', backend='test')
    bad.horizon = 7  # values no longer horizon * action_dim: malformed
    arm.chunks.publish(bad)
    arm.wait_status(lambda s: s.rejected_invalid == start.rejected_invalid + 1,
                    'the malformed chunk counted invalid')
    far = arm.hold_chunk(0.0)
    far[:, 0] = math.radians(300)  # degrees sent as radians: far outside the range
    arm.send(far)
    last = arm.wait_status(lambda s: s.rejected_invalid == start.rejected_invalid + 2,
                           'the out-of-range chunk counted invalid')
    assert last.last_reject_reason
    arm.barrier()
    assert arm.goal() == goal, 'a rejected chunk moved the arm'


def test_overload_latches_fault_until_reset(arm: Rig, fault_report) -> None:
    row = fault_report.row('servo overload (latch, reset_fault)',
                           note='held, motion refused until reset; unsafe: a goal written '
                                'while the fault was latched')
    with row.injection():
        arm.emu.set_error_bits(PAN, int(ErrorBit.OVERLOAD))
        arm.wait(lambda: arm.arm_values().get('health') == 'fault',
                 'health fault in diagnostics')
        assert arm.arm().level == DiagnosticStatus.ERROR
        arm.wait(lambda: arm.joint_diag('shoulder_pan').get('error_bits') == str(0x20),
                 'the pan error bits in diagnostics')
        assert 'overload' in arm.arm().message.lower(), arm.arm().message
        resume = arm.call('resume')
        assert not resume.success and 'reset_fault' in resume.message
        goal = arm.goal()
        arm.send(arm.hold_chunk(0.1))
        arm.barrier()
        row.record(unsafe=int(arm.goal() != goal))
        assert arm.goal() == goal, 'motion accepted while a fault is latched'
        assert not arm.call('so101_driver/reset_fault').success  # still overloaded
        arm.emu.clear_faults()
        # A reset pings every servo; on a loaded machine a ping can time out, and the service
        # then says so (success false, the bus error) - an operator would simply call it again.
        arm.wait(lambda: arm.call('so101_driver/reset_fault').success,
                 'reset_fault to succeed once no servo reports the overload')
        assert arm.call('resume').success
        before = arm.present()
        arm.send(arm.hold_chunk(-0.1))
        arm.wait(lambda: abs(arm.present() - (before - 0.1 / RAD_PER_STEP)) <= 3,
                 'motion after reset and resume')
        assert 'FAULT LATCHED' in arm.proc.log_text()


def test_disconnect_reports_error_and_reconnects(arm: Rig) -> None:
    assert arm.call('resume').success
    reconnects = int(arm.arm_values()['reconnects'])
    arm.emu.disconnect()
    arm.wait(lambda: arm.arm_values().get('health') == 'disconnected',
             'health disconnected in diagnostics')
    assert arm.arm().level == DiagnosticStatus.ERROR
    assert arm.status.last.mode == 'paused' or arm.wait_status(
        lambda s: s.mode == 'paused', 'paused on disconnect')
    assert arm.proc.alive
    assert not arm.call('resume').success
    arm.emu.reconnect()
    arm.wait(lambda: arm.arm_values().get('health') == 'ok'
             and int(arm.arm_values()['reconnects']) == reconnects + 1, 'the reconnect')
    assert arm.proc.log_text().count('PORT DISCONNECTED') == 1, 'not a single clear report'
    assert arm.call('resume').success
    before = arm.present()
    arm.send(arm.hold_chunk(0.1))
    arm.wait(lambda: abs(arm.present() - (before + 0.1 / RAD_PER_STEP)) <= 3,
             'motion after the reconnect')


def test_a_different_servo_after_a_reconnect_is_refused_by_name(arm: Rig,
                                                                fault_report) -> None:
    row = fault_report.row('a different servo after an unplug (swapped motor)',
                           note='ERROR naming motor and field, torque off, motion refused')
    assert arm.call('resume').success
    arm.send(arm.hold_chunk(0.1))  # a chunk running when the cable goes
    arm.emu.disconnect()
    arm.wait(lambda: arm.arm_values().get('health') == 'disconnected', 'health disconnected')
    with row.injection():
        # Back with a swapped wrist_flex: its own homing offset, torque off after its power-up.
        arm.emu.set_register(4, 'Homing_Offset', 900)
        for servo in range(1, 7):
            arm.emu.set_register(servo, 'Torque_Enable', 0)
        try:
            arm.emu.reconnect()
            arm.wait(lambda: arm.arm_values().get('health') == 'fault', 'health fault')
            assert arm.arm().level == DiagnosticStatus.ERROR
            assert 'wrist_flex (id 4): Homing_Offset is 900, expected 0' in arm.arm().message
            assert arm.arm_values()['torque_enabled'] == 'false'
            assert [arm.emu.register(i, 'Torque_Enable') for i in range(1, 7)] == [0] * 6
            resume = arm.call('resume')
            assert not resume.success and 'Homing_Offset' in resume.message
            reset = arm.call('so101_driver/reset_fault')
            assert not reset.success and 'Homing_Offset' in reset.message
        finally:
            arm.emu.set_register(4, 'Homing_Offset', 0)  # the right motor is back
        arm.wait(lambda: arm.call('so101_driver/reset_fault').success,
                 'reset_fault to succeed')
        assert arm.emu.register(PAN, 'Torque_Enable') == 1  # holding again
        assert arm.call('resume').success


def test_unknown_parameter_exits_2(launch_node, tmp_path) -> None:
    proc = launch_node('lerobot_lang_nodes.nodes.so101_driver_node',
                       params={'port': str(tmp_path / 'none'), 'max_relativ_target': 0.1})
    wait_until(lambda: not proc.alive, 30.0, 'the driver to exit')
    assert proc.returncode == 2
    assert "unknown parameter(s) ['max_relativ_target']" in proc.log_text()


def test_missing_port_keeps_retrying_configure(launch_node, tmp_path, probe) -> None:
    cal = tmp_path / 'cal.json'
    save_calibration(make_calibration(), path=cal)
    diag = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    proc = launch_node('lerobot_lang_nodes.nodes.so101_driver_node', name='driver_absent',
                       params={'port': str(tmp_path / 'absent'), 'calibration_path': str(cal),
                               'reconnect_period_s': 0.2, 'timeout_margin_ms': 100.0})
    msg = diag.wait_for(lambda m: any('configure' in s.message or 'absent' in s.message
                                      for s in m.status), timeout_s=30.0,
                        what='diagnostics naming the missing port')
    assert msg.status[0].level != DiagnosticStatus.OK
    emu = EmulatorProcess(range(1, 7), link=tmp_path / 'absent').start()
    try:
        diag.messages.clear()
        diag.wait_for(lambda m: any(kv.key == 'active' and kv.value == 'true'
                                    for kv in m.status[0].values), timeout_s=30.0,
                      what='the driver configured and active once the port appears')
    finally:
        emu.stop()
    assert proc.alive


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))


def test_emulator_cli_process_driven_through_joint_states(launch_node, probe, tmp_path) -> None:
    """The user's dry run: emulator CLI and driver in separate processes, seen via ROS only."""
    link = tmp_path / 'dry_so101'
    cal = tmp_path / 'cal.json'
    save_calibration(make_calibration(), path=cal)
    emu = launch_node.command([sys.executable, '-m', 'lerobot_lang_nodes.so101.emulator',
                               '--link', str(link), '--ids', '1..6'], name='emulator')
    wait_until(link.exists, 30.0, 'the emulator pty link', [emu])
    joints = probe.subscribe(JointState, '/dry/joint_states', qos.SENSOR)
    chunks = probe.publisher(ActionChunk, '/dry/action_chunk', qos.COMMAND)
    drv = launch_node('lerobot_lang_nodes.nodes.so101_driver_node', '-r', '__ns:=/dry',
                      name='dry_driver', params={'port': str(link), 'calibration_path': str(cal),
                                                 'timeout_margin_ms': 100.0})
    first = joints.wait_for(timeout_s=30.0, what='joint_states from the dry-run driver')
    assert list(first.name) == list(JOINT_NAMES)
    assert probe.call(Trigger, '/dry/resume', Trigger.Request(), timeout_s=WAIT_S).success
    wait_until(lambda: chunks.get_subscription_count() > 0, WAIT_S, 'driver subscribed', [drv])
    target = np.array(joints.last.position)
    target[0] += 0.15
    chunks.publish(convert.chunk_to_msg(
        np.tile(target, (5, 1)), tuple(JOINT_NAMES), revision=0, sequence=1,
        stamp_s=time.time(), period_s=1 / CTRL_HZ, instruction='dry', backend='test'))
    joints.wait_for(lambda m: abs(m.position[0] - target[0]) < 0.01, timeout_s=WAIT_S,
                    what='the emulated servo at the target in joint_states')
    assert emu.alive and drv.alive


def test_watchdog_and_step_limits_tighten_at_run_time_and_loosen_only_paused(arm: Rig) -> None:
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    def set_double(name: str, value: float):
        req = SetParameters.Request(parameters=[Parameter(name=name, value=ParameterValue(
            type=ParameterType.PARAMETER_DOUBLE, double_value=value))])
        return arm.probe.call(SetParameters, '/so101_driver/set_parameters', req,
                              timeout_s=WAIT_S).results[0]

    assert arm.call('resume').success
    assert set_double('command_timeout_s', WATCHDOG_S / 2).successful  # shorter: at once
    refused = set_double('command_timeout_s', 0.0)  # watchdog off while acting
    assert not refused.successful and 'pause it first' in refused.reason
    assert not set_double('max_relative_target_rad', MAX_REL * 2).successful
    assert arm.call('pause').success
    try:
        assert set_double('command_timeout_s', WATCHDOG_S).successful
        assert set_double('max_relative_target_rad', MAX_REL * 2).successful
    finally:  # the limits the other tests of this rig expect
        assert set_double('max_relative_target_rad', MAX_REL).successful
        assert set_double('command_timeout_s', WATCHDOG_S).successful


@pytest.mark.skipif(not sys.platform.startswith('linux'),
                    reason='platform: needs Linux /proc and SCHED_FIFO')
def test_the_control_thread_runs_sched_fifo_or_reports_why_not(arm: Rig) -> None:
    import os
    refused = 'SCHED_FIFO priority 50 refused' in arm.proc.log_text()
    arm.barrier()
    # thread_priority (default 50, as ros2_control): the control thread alone, where allowed.
    assert arm.arm_values()['loop.scheduling'] == ('normal' if refused else 'SCHED_FIFO 50')
    assert realtime_threads(arm.proc.proc.pid) == ([] if refused else [(50, os.SCHED_FIFO)])
