"""The ROS-free SO-101 control host against the emulator on a real pty: no DDS anywhere.

Health, watchdog, fault latch, reconnect (with the servos checked against the calibration as
at start-up), the loop's error policy and diagnostics as data. The host's clocks are the test's:
watchdog and reconnect timing are stepped, not slept.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
from so101_helpers import make_calibration, MARGIN_MS, wait_for

from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, ExecutorConfig
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES
from lerobot_lang_nodes.so101.control_host import HostConfig, So101ControlHost
from lerobot_lang_nodes.so101.robot import So101Config, So101Robot
from lerobot_lang_nodes.so101.protocol import ErrorBit
from lerobot_lang_nodes.so101.units import RAD_PER_STEP

HZ = 30.0
WRIST_FLEX = 4


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class HostRig:
    def __init__(self, emulator, port: str | None = None, **host_kw) -> None:
        self.emu = emulator
        self.clock = Clock()
        cal = make_calibration()
        self.executor = ChunkExecutor(ExecutorConfig(
            action_names=tuple(JOINT_NAMES), ctrl_hz=HZ, time_align=False, start_paused=True))
        self.logs: list[tuple[int, str]] = []
        self.host = So101ControlHost(
            lambda: So101Robot(So101Config(port=port or emulator.port, calibration=cal,
                                           timeout_margin_ms=MARGIN_MS,
                                           max_relative_target_rad=0.5)),
            self.executor, HostConfig(**{'command_timeout_s': 0.5,
                                         'reconnect_period_s': 0.2, **host_kw}),
            now=self.clock, monotonic=self.clock,
            emit=lambda level, text: self.logs.append((level, text)),
            joint_ids={j: cal[j].id for j in JOINT_NAMES})
        self.sequence = 0

    def up(self) -> HostRig:
        assert self.host.configure() == ''
        assert self.host.activate() == ''
        return self

    def step(self, dt: float = 1.0 / HZ):
        self.clock.t += dt
        return self.host.cycle()

    def send_pan(self, offset_rad: float, horizon: int = 30) -> None:
        present = self.host.robot.read_state().position_rad
        target = present.copy()
        target[0] += offset_rad
        self.sequence += 1
        self.executor.submit(Chunk(np.tile(target, (horizon, 1)), tuple(JOINT_NAMES),
                                   revision=0, sequence=self.sequence, stamp_s=self.clock.t,
                                   period_s=1.0 / HZ), self.clock())

    def goal(self, servo_id: int = 1) -> int:
        return self.emu.register(servo_id, 'Goal_Position')

    def arm_status(self):
        return self.host.diagnostics()[0]

    def close(self) -> None:
        self.host.release()


@pytest.fixture
def rig(emulator):
    r = HostRig(emulator)
    yield r
    r.close()


def test_unconfigured_when_the_port_is_missing(emulator, tmp_path) -> None:
    r = HostRig(emulator, port=str(tmp_path / 'nothing'))
    problem = r.host.configure()
    assert problem and 'nothing' in problem
    assert r.host.health == 'unconfigured'
    assert r.host.refusal().startswith('not active')
    assert r.arm_status().level == 'warn' and problem in r.arm_status().message


def test_moves_only_after_resume_and_clamps_the_step(rig: HostRig) -> None:
    rig.up()
    start = rig.goal()
    rig.send_pan(0.2)  # paused: counted stale, never queued
    rig.step()
    assert rig.goal() == start
    assert rig.host.resume() == ''
    rig.send_pan(2.0)  # beyond max_relative_target 0.5 rad: clamped against the present
    assert rig.step().wrote_goal
    wait_for(lambda: rig.goal() != start, what='the goal written (SYNC_WRITE has no reply)')
    assert 0 < rig.goal() - start <= round(0.5 / RAD_PER_STEP) + 1


def _bus_traffic(robot) -> list[str]:
    """Record the order of the robot's reads and goal writes (the real bus still runs)."""
    seen: list[str] = []
    bus = robot.bus
    read, write = bus.sync_read_bytes, bus.sync_write

    def spy_read(*a, **kw):
        seen.append('read')
        return read(*a, **kw)

    def spy_write(register, values):
        seen.append(f'write {register}')
        return write(register, values)
    bus.sync_read_bytes, bus.sync_write = spy_read, spy_write
    return seen


def test_the_goal_goes_out_before_the_read_clamped_to_the_last_read(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.step()  # a read: the present position the next goal is clamped against
    start = rig.host.robot.last_state.position_steps[0]
    rig.send_pan(2.0)
    seen = _bus_traffic(rig.host.robot)
    result = rig.step()
    # The write leaves at the slot's instant: it never waits for the servos' replies.
    assert seen == ['write Goal_Position', 'read']
    assert result.wrote_goal and result.written_at is not None
    assert result.state is not None  # joint states still come every cycle
    assert result.state.stamp >= result.written_at
    wait_for(lambda: rig.goal() != start, what='the goal written (SYNC_WRITE has no reply)')
    assert 0 < rig.goal() - start <= round(0.5 / RAD_PER_STEP) + 1


def test_a_read_too_old_to_clamp_against_is_refreshed_before_the_write(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.step()
    robot = rig.host.robot
    robot.config = dataclasses.replace(robot.config, present_max_age_s=0.0)  # after a stall
    rig.send_pan(2.0)
    seen = _bus_traffic(rig.host.robot)
    assert rig.step().wrote_goal
    assert seen == ['read', 'write Goal_Position', 'read']
    wait_for(lambda: rig.goal() != rig.emu.present_position(1), what='the goal written')
    assert 0 < rig.goal() - rig.emu.present_position(1) <= round(0.5 / RAD_PER_STEP) + 1


def test_a_fault_latched_by_a_read_stops_the_next_write(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.send_pan(0.3)
    rig.emu.set_error_bits(WRIST_FLEX, ErrorBit.OVERLOAD)
    seen = _bus_traffic(rig.host.robot)
    rig.step()  # its goal left before the read that latched the fault; the read held the arm
    assert rig.host.health == 'fault'
    del seen[:]
    assert not rig.step().wrote_goal
    assert 'write Goal_Position' not in seen


def test_watchdog_holds_the_present_position_once(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.send_pan(0.3, horizon=2)
    rig.step()
    rig.step()
    assert rig.host.watchdog_holds == 0
    rig.step(0.6)  # no valid action for longer than command_timeout_s
    assert rig.host.watchdog_holds == 1
    wait_for(lambda: abs(rig.goal() - rig.emu.present_position(1)) <= 1,
             what='the goal held at the present position')
    rig.step(0.6)
    assert rig.host.watchdog_holds == 1  # one hold per silence, not one per cycle


def test_overload_latches_refuses_and_resets(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.emu.set_error_bits(1, int(ErrorBit.OVERLOAD))
    rig.step()
    assert rig.host.health == 'fault' and 'shoulder_pan' in rig.host.detail
    assert rig.executor.mode == 'paused'
    assert 'reset_fault' in rig.host.resume()
    assert rig.host.burst(1.0)  # refused as resume is
    ok, why = rig.host.reset_fault()
    assert not ok and 'OVERLOAD' in why.upper()
    rig.emu.clear_faults()
    rig.emu.set_error_bits(1, 0)
    assert rig.host.reset_fault()[0]
    assert rig.host.health == 'ok' and rig.host.resume() == ''
    status = rig.host.diagnostics()
    assert status[0].level == 'ok'
    assert [s.name for s in status[1:]] == list(JOINT_NAMES)


def reconnect(rig: HostRig) -> None:
    for _ in range(100):
        rig.step(0.25)  # past reconnect_period_s: one attempt per step
        if rig.host.health != 'disconnected':
            return
    pytest.fail(f'no reconnect: {rig.host.health} {rig.host.detail}')


def test_disconnect_pauses_and_reconnect_holds_paused(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.emu.disconnect()
    rig.step()
    assert rig.host.health == 'disconnected' and rig.executor.mode == 'paused'
    assert 'disconnected' in rig.host.resume()
    assert rig.arm_status().level == 'error'
    rig.emu.reconnect()
    reconnect(rig)
    assert rig.host.health == 'ok' and rig.host.reconnects == 1
    assert rig.executor.mode == 'paused'  # a reconnect never resumes by itself
    assert rig.host.robot.torque_enabled
    assert rig.host.resume() == ''


def test_a_different_servo_after_a_reconnect_is_refused_by_name(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.emu.disconnect()
    rig.step()
    # A swapped wrist_flex motor: its own homing offset, torque off after its power-up.
    rig.emu.set_register(WRIST_FLEX, 'Homing_Offset', 900)
    for i in range(1, 7):
        rig.emu.set_register(i, 'Torque_Enable', 0)
    rig.emu.reconnect()
    reconnect(rig)
    assert rig.host.health == 'fault'
    assert 'wrist_flex (id 4): Homing_Offset is 900, expected 0' in rig.host.detail
    assert rig.arm_status().level == 'error'
    assert 'wrist_flex' in rig.arm_status().values['mismatch']
    assert not rig.host.robot.torque_enabled
    assert [rig.emu.register(i, 'Torque_Enable') for i in range(1, 7)] == [0] * 6
    assert 'fault latched' in rig.host.resume()
    ok, why = rig.host.reset_fault()
    assert not ok and 'Homing_Offset' in why
    rig.emu.set_register(WRIST_FLEX, 'Homing_Offset', 0)  # the right motor is back
    assert rig.host.reset_fault() == (True, 'fault cleared; still paused: call resume to move')


def test_a_power_cycled_arm_gets_its_settings_written_again(rig: HostRig) -> None:
    rig.up()
    rig.emu.disconnect()
    rig.step()
    for i in range(1, 7):  # the servos lost power: torque off, factory RAM settings
        rig.emu.set_register(i, 'Torque_Enable', 0)
        rig.emu.set_register(i, 'Acceleration', 0)
    rig.emu.reconnect()
    reconnect(rig)
    assert rig.host.health == 'ok', rig.host.detail
    assert [rig.emu.register(i, 'Acceleration') for i in range(1, 7)] == [254] * 6
    assert rig.host.robot.torque_enabled  # active before the loss: torque back on, holding


def test_loop_error_pauses_holds_and_resume_clears_it(rig: HostRig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.send_pan(0.3)
    rig.step()
    try:
        raise KeyError('injected')
    except KeyError as exc:
        assert rig.host.loop_error(exc) is True
    assert rig.host.health == 'error' and 'KeyError' in rig.host.detail
    assert rig.executor.mode == 'paused' and rig.executor.status().queue_depth == 0
    wait_for(lambda: abs(rig.goal() - rig.emu.present_position(1)) <= 1,
             what='the goal held at the present position')
    assert rig.arm_status().level == 'error'
    assert rig.arm_status().values['loop_errors'] == '1'
    assert any(level == logging.ERROR and 'Traceback' in text for level, text in rig.logs)
    rig.host.loop_ok()
    assert rig.host.resume() == '' and rig.host.health == 'ok'


def test_loop_gives_up_after_errors_in_a_row_or_when_it_cannot_hold(emulator) -> None:
    r = HostRig(emulator, max_loop_errors_in_row=3).up()
    try:
        verdicts = [r.host.loop_error(RuntimeError('again')) for _ in range(3)]
        assert verdicts == [True, True, False]
        r.host.loop_ok()
        assert r.host.loop_error(RuntimeError('once more')) is True
        emulator.disconnect()  # holding needs the bus: the arm cannot be held any more
        assert r.host.loop_error(RuntimeError('and the bus is gone')) is False
        assert 'holding failed' in r.host.detail
    finally:
        emulator.reconnect()
        r.close()


def test_loop_errors_are_logged_throttled(rig: HostRig) -> None:
    rig.up()
    for _ in range(20):
        rig.host.loop_error(RuntimeError('boom'))
        rig.host.loop_ok()
    lines = [t for level, t in rig.logs if 'control loop error' in t]
    assert len(lines) == 1  # same clock instant: one line, the rest counted
    rig.clock.t += 5.0
    rig.host.loop_error(RuntimeError('boom'))
    lines = [t for level, t in rig.logs if 'control loop error' in t]
    assert len(lines) == 2 and '19 similar suppressed' in lines[-1]


def test_teleop_tracks_the_leader_clamped_and_a_silent_leader_meets_the_watchdog(rig) -> None:
    rig.up()
    present = rig.host.robot.read_state().position_rad
    assert rig.host.teleop(None) == ''  # no handover slide (core/teleop's own test)
    assert rig.executor.mode == 'teleop'
    leader = present.copy()
    leader[0] += 2.0  # a jump far beyond max_relative_target (0.5 rad)
    rig.executor.set_leader(JOINT_NAMES, leader, rig.clock())
    start = rig.goal()
    assert rig.step().wrote_goal
    wait_for(lambda: rig.goal() != start, what='the leader pose written as the goal')
    assert 0 < rig.goal() - start <= round(0.5 / RAD_PER_STEP) + 1  # clamped as a chunk is
    rig.step(0.6)  # the leader silent for longer than command_timeout_s: hold, once
    assert rig.host.watchdog_holds == 1
    assert rig.executor.control_source == 'none'
    assert rig.host.handback() == '' and rig.executor.mode == 'action'


def test_takeover_and_handback_are_refused_while_faulted(rig) -> None:
    rig.up()
    assert rig.host.resume() == ''
    rig.emu.set_error_bits(1, int(ErrorBit.OVERLOAD))
    rig.step()
    assert rig.host.health == 'fault'
    assert 'reset_fault' in rig.host.teleop(None)
    assert 'reset_fault' in rig.host.handback()
    assert rig.executor.mode == 'paused'
