"""The ROS-free leader host against the emulator acting as a leader arm: no DDS anywhere.

The emulator's six STS3215 servos play the leader (its horns moved by the test, as a hand
would); the host reads them through the project's bus over a real pty. Health, reconnect, the
handover hold and diagnostics are checked on the servos' registers and on the bytes the host
sends. The host's clock is the test's: the reconnect period, the hold's ramp and the read rate
are stepped, not slept.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from so101_helpers import make_calibration, MARGIN_MS, wait_for

from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES
from lerobot_lang_nodes.so101.robot import So101Config
from lerobot_lang_nodes.so101.leader_host import (LeaderHost, LeaderHostConfig,
                                                  pose_from_joint_state, So101Leader)
from lerobot_lang_nodes.so101.protocol import ErrorBit, Instruction
from lerobot_lang_nodes.so101.registers import CONTROL_TABLE
from lerobot_lang_nodes.so101.units import RAD_PER_STEP

HZ = 60.0
SPEED = 0.5  # rad/s
MAX_REL = 0.15
IDS = range(1, 7)
WRIST_FLEX = 4
# The leader's own calibration: ranges centred on 2100, so radians differ from raw/2048.
LEADER_CAL = make_calibration(1100, 3100)
MID = 2100.0


class Clock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


class LeaderRig:
    def __init__(self, emulator, port: str | None = None, max_rel: float = MAX_REL,
                 **host_kw) -> None:
        self.emu = emulator
        self.clock = Clock()
        self.logs: list[tuple[int, str]] = []
        self.host = LeaderHost(
            lambda: So101Leader(So101Config(port=port or emulator.port, calibration=LEADER_CAL,
                                            timeout_margin_ms=MARGIN_MS,
                                            max_relative_target_rad=max_rel)),
            LeaderHostConfig(**{'reconnect_period_s': 0.2, 'hold_speed_rad_s': SPEED,
                                'hold_tolerance_rad': 0.05, **host_kw}),
            monotonic=self.clock, emit=lambda level, text: self.logs.append((level, text)))

    def up(self) -> LeaderRig:
        assert self.host.configure() == ''
        return self

    def step(self, dt: float = 1.0 / HZ):
        self.clock.t += dt
        return self.host.cycle()

    def torque(self) -> list[int]:
        return [self.emu.register(i, 'Torque_Enable') for i in IDS]

    def arm(self):
        return self.host.diagnostics()[0]

    def sent(self) -> list[bytes]:
        """Every request the host's bus puts on the wire from now on, byte for byte."""
        bus = self.host.leader.bus
        seen: list[bytes] = []
        write = bus._write_bytes

        def spy(data: bytes) -> None:
            seen.append(bytes(data))
            write(data)
        bus._write_bytes = spy
        return seen

    def close(self) -> None:
        self.host.close()


@pytest.fixture
def rig(emulator):
    r = LeaderRig(emulator)
    yield r
    r.close()


def steps_to_rad(steps: float) -> float:
    return (steps - MID) * RAD_PER_STEP


def reconnect(rig: LeaderRig) -> None:
    for _ in range(100):
        rig.step(0.25)  # past reconnect_period_s: one attempt per step
        if rig.host.health != 'disconnected':
            return
    pytest.fail(f'no reconnect: {rig.host.health} {rig.host.detail}')


def test_configure_writes_lerobots_leader_settings_only_and_torque_stays_off(rig) -> None:
    for i in IDS:  # left on by an earlier program: configure must turn it off
        rig.emu.set_register(i, 'Torque_Enable', 1)
    rig.up()
    assert rig.torque() == [0] * 6
    for name, want in (('Return_Delay_Time', 0), ('Acceleration', 254),
                       ('Maximum_Acceleration', 254), ('Operating_Mode', 0)):
        assert [rig.emu.register(i, name) for i in IDS] == [want] * 6, name
    # The leader's calibration file, in the servos' EEPROM (wrist_roll: the full turn).
    assert [rig.emu.register(i, 'Min_Position_Limit') for i in IDS] == [1100] * 4 + [0, 1100]
    assert [rig.emu.register(i, 'Max_Position_Limit') for i in IDS] == [3100] * 4 + [4095, 3100]
    # What LeRobot's leader leaves alone (the follower's driver writes P 16 and halves the
    # gripper's torque): the factory values.
    assert [rig.emu.register(i, 'P_Coefficient') for i in IDS] == [32] * 6
    assert rig.emu.register(6, 'Max_Torque_Limit') == 1000
    assert rig.host.health == 'ok' and rig.arm().level == 'ok'


def test_positions_moved_by_hand_come_out_in_radians_from_one_sync_read(rig) -> None:
    rig.up()
    moved = [1300, 2900, 2100, 1750, 4000, 2600]
    for servo, steps in zip(IDS, moved):
        rig.emu.set_present_position(servo, steps)
    sent = rig.sent()
    before = dict(rig.emu.instructions)
    states = [rig.step().state for _ in range(20)]
    expected = np.array([steps_to_rad(s) for s in moved])
    expected[4] = (4000 - 2047.5) * RAD_PER_STEP  # wrist_roll: full turn, 0..4095
    for state in states:
        np.testing.assert_allclose(state.position_rad, expected, rtol=0, atol=1e-12)
        assert state.position_steps.tolist() == moved
    # Byte for byte: one SYNC_READ per cycle (positions; every 10th cycle Present_Position ..
    # Present_Temperature), nothing written, torque never touched.
    pos = CONTROL_TABLE['Present_Position']
    short = protocol.sync_read_packet(list(IDS), pos.address, 2)
    full = protocol.sync_read_packet(list(IDS), pos.address, 8)
    assert sent == [full if k % 10 == 0 else short for k in range(20)], sent[:3]
    after = rig.emu.instructions
    assert after.get(Instruction.SYNC_READ, 0) - before.get(Instruction.SYNC_READ, 0) == 20
    for code in (Instruction.WRITE, Instruction.SYNC_WRITE, Instruction.REG_WRITE):
        assert after.get(code, 0) == before.get(code, 0), code
    assert rig.torque() == [0] * 6
    rig.emu.set_present_position(1, 1500)  # the hand goes on moving
    assert rig.step().state.position_rad[0] == pytest.approx(steps_to_rad(1500), abs=1e-12)


def test_unconfigured_while_the_port_is_missing(emulator, tmp_path) -> None:
    r = LeaderRig(emulator, port=str(tmp_path / 'absent'))
    problem = r.host.configure()
    assert problem and 'absent' in problem
    assert r.host.health == 'unconfigured' and r.host.cycle().state is None
    assert r.arm().level == 'warn' and problem in r.arm().message
    ok, why = r.host.hold_pose(np.zeros(6))
    assert not ok and 'not configured' in why


def test_unplug_reports_disconnected_and_replug_recovers_on_the_hosts_clock(rig) -> None:
    rig.up()
    rig.emu.disconnect()
    assert rig.step().state is None
    assert rig.host.health == 'disconnected' and rig.arm().level == 'error'
    assert 'disconnected' in rig.arm().message
    assert any('PORT DISCONNECTED' in text for _, text in rig.logs)
    rig.emu.reconnect()
    attempts = rig.host.leader.bus.stats.reconnects
    rig.step(0.1)  # before reconnect_period_s: no attempt yet
    assert rig.host.health == 'disconnected'
    reconnect(rig)
    assert rig.host.health == 'ok' and rig.host.reconnects == 1
    assert rig.host.leader.bus.stats.reconnects == attempts + 1
    assert rig.arm().values['reconnects'] == '1' and rig.arm().level == 'ok'
    rig.emu.set_present_position(2, 2700)
    assert rig.step().state.position_rad[1] == pytest.approx(steps_to_rad(2700), abs=1e-12)
    assert rig.torque() == [0] * 6


def test_hold_pose_ramps_at_its_speed_then_holds_and_release_turns_torque_off(emulator) -> None:
    rig = LeaderRig(emulator, max_rel=3.0).up()  # no step clamp: the ramp itself is checked
    try:
        rig.emu.set_present_position(1, 1600)  # shoulder_pan by hand, 500 steps below zero
        start = rig.step().state.position_rad
        pose = np.array([0.2, 0.1, -0.1, 0.0, 0.3, 0.05])
        ok, text = rig.host.hold_pose(pose)
        assert ok and 'driving to the pose' in text, text
        assert rig.torque() == [1] * 6 and rig.host.handover == 'moving'
        duration = float(np.max(np.abs(pose - start))) / SPEED
        for k in range(1, 31):  # half the ramp, one cycle at a time on the test's clock
            goal = rig.step().goal
            frac = min(1.0, k / HZ / duration)
            np.testing.assert_allclose(goal, start + frac * (pose - start),
                                       atol=RAD_PER_STEP / 2 + 1e-12)
        assert rig.host.handover == 'moving'
        rig.step(duration)  # past the end of the ramp: the goal is the pose
        wanted = np.rint(pose / RAD_PER_STEP + np.array([MID] * 4 + [2047.5, MID])).tolist()
        wait_for(lambda: [rig.emu.register(i, 'Goal_Position') for i in IDS] == wanted,
                 what='the pose in the servos\' Goal_Position (SYNC_WRITE has no reply)')
        wait_for(lambda: rig.step(0.0) is not None and rig.host.handover == 'holding',
                 what='the leader at the pose (holding)')
        assert np.max(np.abs(rig.host.leader.last_state.position_rad - pose)) <= 0.05
        assert rig.arm().values['handover'] == 'holding'
        assert 'torque on' in rig.arm().message
        assert rig.host.release() == (True, 'released: torque off (was holding)')
        assert rig.torque() == [0] * 6 and rig.host.handover == 'idle'
        # Counted after the release's WRITEs were answered: every earlier SYNC_WRITE (no
        # reply) came before them on the line, so the emulator has applied them all.
        writes = rig.emu.instructions.get(Instruction.SYNC_WRITE, 0)
        for _ in range(5):
            assert rig.step().goal is None
        assert rig.emu.instructions.get(Instruction.SYNC_WRITE, 0) == writes
    finally:
        rig.close()


def test_a_hand_in_the_way_meets_goals_within_max_relative_target(rig) -> None:
    rig.up()
    present = rig.emu.present_position(1)
    rig.emu.set_register(1, 'Max_Position_Limit', present + 20)  # the hand: an obstacle
    assert rig.host.hold_pose(np.array([1.0, 0, 0, 0, 0, 0]))[0]
    for _ in range(10):
        rig.step(0.5)  # the ramp's setpoint is at the pose at once
    wait_for(lambda: abs(rig.emu.present_position(1) - (present + 20)) <= 1,
             what='the horn stopped by the obstacle')
    goals = [rig.step().goal[0] for _ in range(5)]
    blocked = steps_to_rad(present + 20)
    assert max(goals) <= blocked + MAX_REL + RAD_PER_STEP, goals  # a bounded push
    assert rig.host.handover == 'moving'  # never reached: still not 'holding'
    assert int(rig.arm().values['safety.relative_clamps']) > 0


def test_holds_are_refused_with_the_reason(rig) -> None:
    rig.up()
    assert rig.host.hold_pose([0.0] * 5) == (False, rig.host.last_refusal)
    assert 'expected 6 finite radians' in rig.host.last_refusal
    assert not rig.host.hold_pose([0.0, float('nan'), 0, 0, 0, 0])[0]
    ok, text = rig.host.hold_pose([9.0, 0, 0, 0, 0, 0])  # beyond the leader's range
    assert ok and "clipped to the leader's range: ['shoulder_pan']" in text
    assert rig.host.hold_target[0] == pytest.approx(rig.host.leader.units.upper_rad[0])
    rig.host.release()
    rig.emu.disconnect()
    rig.step()
    ok, text = rig.host.hold_pose(np.zeros(6))
    assert not ok and 'disconnected' in text
    assert rig.arm().values['holds_refused'] == '3'
    rig.emu.reconnect()


def test_overload_during_a_hold_releases_at_once_and_latches_until_reset(rig) -> None:
    rig.up()
    assert rig.host.hold_pose(np.full(6, 0.1))[0]
    rig.step()
    rig.emu.set_error_bits(WRIST_FLEX, int(ErrorBit.OVERLOAD))
    state = rig.step().state
    assert state is not None  # the positions are still good: still published
    assert rig.host.health == 'fault' and 'wrist_flex' in rig.host.detail
    assert rig.host.handover == 'idle' and rig.torque() == [0] * 6
    assert rig.arm().level == 'error'
    assert rig.host.diagnostics()[4].level == 'error'  # wrist_flex's own status
    ok, why = rig.host.hold_pose(np.zeros(6))
    assert not ok and 'reset_fault' in why
    ok, why = rig.host.reset_fault()
    assert not ok and 'OVERLOAD' in why.upper()
    rig.emu.set_error_bits(WRIST_FLEX, 0)
    assert rig.host.reset_fault() == (True, 'fault cleared; torque off')
    assert rig.host.health == 'ok' and rig.torque() == [0] * 6
    assert rig.host.reset_fault()[1].startswith('no fault latched')


def test_an_unplug_during_a_hold_cancels_it_and_the_replug_turns_torque_off(rig) -> None:
    rig.up()
    assert rig.host.hold_pose(np.full(6, 0.1))[0]
    rig.step()
    rig.emu.disconnect()  # the USB cable: the powered servos keep torque and their goal
    rig.step()
    assert rig.host.handover == 'idle' and rig.host.health == 'disconnected'
    assert rig.torque() == [1] * 6
    ok, why = rig.host.release()
    assert not ok and 'torque goes off at the reconnect' in why
    rig.emu.reconnect()
    reconnect(rig)
    assert rig.host.health == 'ok' and rig.torque() == [0] * 6


def test_a_swapped_motor_after_a_replug_publishes_no_positions(rig) -> None:
    rig.up()
    rig.emu.disconnect()
    rig.step()
    rig.emu.set_register(WRIST_FLEX, 'Homing_Offset', 900)  # another motor, its own offset
    rig.emu.reconnect()
    reconnect(rig)
    assert rig.host.health == 'fault'
    assert 'wrist_flex (id 4): Homing_Offset is 900, expected 0' in rig.host.detail
    assert rig.step().state is None and rig.step().state is None
    assert not rig.host.hold_pose(np.zeros(6))[0]
    ok, why = rig.host.reset_fault()
    assert not ok and 'Homing_Offset' in why
    rig.emu.set_register(WRIST_FLEX, 'Homing_Offset', 0)  # the right motor is back
    assert rig.host.reset_fault()[0]
    assert rig.step().state is not None and rig.host.health == 'ok'


def test_a_power_cycled_leader_gets_its_settings_written_again(rig) -> None:
    rig.up()
    rig.emu.disconnect()
    rig.step()
    for i in IDS:  # the servos lost power: factory RAM settings
        rig.emu.set_register(i, 'Acceleration', 0)
    rig.emu.reconnect()
    reconnect(rig)
    assert rig.host.health == 'ok', rig.host.detail
    assert [rig.emu.register(i, 'Acceleration') for i in IDS] == [254] * 6


def test_a_loop_error_releases_a_hold_and_the_next_good_cycle_clears_it(rig) -> None:
    rig.up()
    assert rig.host.hold_pose(np.full(6, 0.1))[0]
    try:
        raise KeyError('injected')
    except KeyError as exc:
        assert rig.host.loop_error(exc) is True
    assert rig.host.health == 'error' and 'KeyError' in rig.host.detail
    assert rig.host.handover == 'idle' and rig.torque() == [0] * 6
    assert any(level == logging.ERROR and 'Traceback' in text for level, text in rig.logs)
    rig.host.loop_ok()
    assert rig.step().state is not None and rig.host.health == 'ok'
    assert rig.arm().values['loop_errors'] == '1'


def test_the_read_rate_in_diagnostics_is_measured_on_the_hosts_clock(rig) -> None:
    rig.up()
    assert rig.arm().values['read_rate_hz'] == '0.0'  # nothing to measure against yet
    for _ in range(30):
        rig.step(1.0 / 60)
    assert rig.arm().values['read_rate_hz'] == '60.0'
    for _ in range(10):
        rig.step(0.1)
    assert rig.arm().values['read_rate_hz'] == '10.0'
    assert rig.arm().values['reads'] == '40'
    assert [s.name for s in rig.host.diagnostics()[1:]] == list(JOINT_NAMES)


def test_a_joint_state_becomes_a_pose_by_name() -> None:
    names = list(reversed(JOINT_NAMES))
    pose, problem = pose_from_joint_state(names, [6, 5, 4, 3, 2, 1])
    assert problem == '' and pose.tolist() == [1, 2, 3, 4, 5, 6]
    assert pose_from_joint_state(JOINT_NAMES[:5], [0] * 5)[1].startswith(
        "joints ['gripper'] missing")
    assert 'repeat' in pose_from_joint_state(list(JOINT_NAMES) + ['gripper'], [0] * 7)[1]
    assert 'positions' in pose_from_joint_state(JOINT_NAMES, [0] * 5)[1]
