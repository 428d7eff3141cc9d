"""So101Robot against the emulator: configuration, safety rules, fault latch, reconnect."""

from __future__ import annotations

import math

import numpy as np
import pytest
from so101_helpers import make_calibration, MARGIN_MS, wait_for

from lerobot_lang_nodes.so101.bus import FeetechBus
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, load_calibration
from lerobot_lang_nodes.so101.calibration import run_calibration
from lerobot_lang_nodes.so101.robot import So101Config, So101Robot
from lerobot_lang_nodes.so101.emulator import ServoBusEmulator
from lerobot_lang_nodes.so101.errors import (
    BusTimeout,
    CalibrationError,
    FaultLatched,
    ModelMismatch,
    MotionRefused,
    PortDisconnected,
)
from lerobot_lang_nodes.so101.protocol import ErrorBit, Instruction
from lerobot_lang_nodes.so101.units import RAD_PER_STEP

IDS = list(range(1, 7))


def goals(emulator: ServoBusEmulator, robot: So101Robot) -> list[int]:
    barrier(robot)
    return [emulator.register(i, 'Goal_Position') for i in IDS]


def barrier(robot: So101Robot) -> None:
    """SYNC_WRITE has no reply; a ping round trip proves the emulator has handled it."""
    robot.bus.ping(1)


def test_connect_applies_lerobot_configuration(emulator, robot_factory) -> None:
    robot = robot_factory()
    for i in IDS:
        assert emulator.register(i, 'Return_Delay_Time') == 0
        assert emulator.register(i, 'Acceleration') == 254
        assert emulator.register(i, 'Maximum_Acceleration') == 254
        pid = ('P_Coefficient', 'I_Coefficient', 'D_Coefficient')
        assert [emulator.register(i, r) for r in pid] == [16, 0, 32]
        assert emulator.register(i, 'Torque_Enable') == 0
    assert emulator.register(6, 'Max_Torque_Limit') == 500
    assert emulator.register(6, 'Protection_Current') == 250
    assert emulator.register(6, 'Overload_Torque') == 25
    assert emulator.register(1, 'Max_Torque_Limit') == 1000  # only the gripper is limited
    assert (emulator.register(1, 'Min_Position_Limit'),
            emulator.register(1, 'Max_Position_Limit')) == (1000, 3000)
    assert robot.calibration_mismatches() == []
    assert robot.bus.return_delay_us == 0


def test_connect_names_missing_servo(tmp_path) -> None:
    with ServoBusEmulator(range(1, 6), link=tmp_path / 'five') as emu:
        robot = So101Robot(So101Config(port=emu.port, calibration=make_calibration(),
                                       timeout_margin_ms=MARGIN_MS))
        with pytest.raises(BusTimeout, match=r"\[6\] \(\['gripper'\]\) did not answer"):
            robot.connect()
        robot.close()


def test_connect_rejects_wrong_model(emulator) -> None:
    emulator.set_register(3, 'Model_Number', 2825)
    robot = So101Robot(So101Config(port=emulator.port, calibration=make_calibration()))
    with pytest.raises(ModelMismatch, match='id 3 .*2825; expected 777'):
        robot.connect()
    robot.close()


def test_enable_torque_sets_goal_to_present_first(emulator, robot_factory) -> None:
    robot = robot_factory()
    emulator.set_register(2, 'Goal_Position', 3000)  # stale goal left in RAM
    emulator.set_present_position(2, 1700)
    robot.enable_torque()
    barrier(robot)
    assert emulator.register(2, 'Goal_Position') == 1700
    assert emulator.register(2, 'Torque_Enable') == 1


def test_read_state_radians_and_aux_rate(emulator, robot_factory) -> None:
    robot = robot_factory(aux_every_n=3)
    emulator.set_present_position(1, 2500)
    s0 = robot.read_state()
    assert s0.position_rad[0] == pytest.approx((2500 - 2000) * 2 * math.pi / 4095)
    assert s0.temperature_c is not None and s0.voltage_v[0] == pytest.approx(12.0)
    assert robot.read_state().velocity_rad_s is None  # positions only between aux reads
    assert robot.read_state().effort_nm is None
    assert robot.read_state().velocity_rad_s is not None


def test_write_goal_moves_the_virtual_arm(emulator, robot_factory) -> None:
    robot = robot_factory()
    robot.enable_torque()
    target = np.array([0.3, -0.2, 0.1, 0.0, 0.5, 0.2])
    sent = robot.write_goal(target)
    assert np.allclose(sent, target, atol=RAD_PER_STEP)
    wait_for(lambda: np.allclose(robot.read_state().position_rad, target, atol=2 * RAD_PER_STEP),
             what='arm at target')


def test_joint_limits_clamp_to_calibrated_range(emulator, robot_factory) -> None:
    robot = robot_factory()
    sent = robot.write_goal([3.0, -3.0, 0.0, 0.0, 3.0, 3.0])
    g = goals(emulator, robot)
    assert g[0] == 3000 and g[1] == 1000 and g[5] == 3000  # calibrated range 1000..3000
    assert g[4] == round(2047.5 + 3.0 / RAD_PER_STEP)  # wrist_roll has the full turn
    assert sent[0] == pytest.approx(1000 * RAD_PER_STEP)
    assert robot.counters['limit_clamps'] == 1


def test_max_relative_target_clamps_against_present(emulator, robot_factory) -> None:
    robot = robot_factory(max_relative_target_rad=0.1, present_max_age_s=0.0)
    present = robot.read_state().position_rad
    robot.write_goal(present + np.array([1.0, -1.0, 0.05, 0.0, 0.0, 0.0]))
    expected = robot.units.steps_from_radians(present + np.array([0.1, -0.1, 0.05, 0, 0, 0]))
    assert goals(emulator, robot) == list(expected)
    assert robot.counters['relative_clamps'] == 1


def test_max_relative_target_uses_a_fresh_present_position(emulator, robot_factory) -> None:
    robot = robot_factory(max_relative_target_rad=0.1, present_max_age_s=0.0)
    robot.read_state()  # 2048 everywhere; now the arm is moved by hand
    emulator.set_present_position(1, 2600)
    moved = robot.units.radians_from_steps([2600] * 6)[0]
    robot.write_goal([moved + 0.5] + [0.0] * 5)
    barrier(robot)
    assert emulator.register(1, 'Goal_Position') == round(2600 + 0.1 / RAD_PER_STEP)


def test_per_joint_max_relative_target(emulator, robot_factory) -> None:
    robot = robot_factory(max_relative_target_rad={'gripper': 0.05}, present_max_age_s=0.0)
    present = robot.read_state().position_rad
    robot.write_goal(present + 0.5)
    g = goals(emulator, robot)
    assert g[5] == robot.units.steps_from_radians(present + 0.05)[5]
    assert g[0] == robot.units.steps_from_radians(present + 0.5)[0]


def test_invalid_goal_is_refused_and_nothing_written(emulator, robot_factory) -> None:
    robot = robot_factory()
    writes = emulator.instructions.get(Instruction.SYNC_WRITE, 0)
    with pytest.raises(MotionRefused, match='6 finite radians'):
        robot.write_goal([0.0] * 5)
    with pytest.raises(MotionRefused):
        robot.write_goal([0.0, math.nan, 0.0, 0.0, 0.0, 0.0])
    assert emulator.instructions.get(Instruction.SYNC_WRITE, 0) == writes
    assert robot.counters['refused'] == 2


def test_overload_latches_holds_and_refuses_until_reset(emulator, robot_factory) -> None:
    robot = robot_factory()
    robot.enable_torque()
    robot.write_goal([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    wait_for(lambda: emulator.present_position(1) > 2100, what='shoulder_pan moving')
    emulator.set_error_bits(3, ErrorBit.OVERLOAD)
    state = robot.read_state()
    assert robot.fault is not None and robot.fault.joint == 'elbow_flex'
    assert state.error_bits[3] == ErrorBit.OVERLOAD
    barrier(robot)
    held = emulator.register(1, 'Goal_Position')
    assert held == state.position_steps[0] < robot.units.steps_from_radians([1.0] * 6)[0]
    with pytest.raises(FaultLatched, match='elbow_flex .*OVERLOAD'):
        robot.write_goal([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    barrier(robot)
    assert emulator.register(1, 'Goal_Position') == held
    with pytest.raises(FaultLatched, match='still report'):
        robot.reset()
    emulator.set_error_bits(3, 0)
    robot.reset()
    assert robot.fault is None
    robot.write_goal([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    barrier(robot)
    assert emulator.register(1, 'Goal_Position') > held


def test_overheat_latches_but_voltage_is_only_reported(emulator, robot_factory) -> None:
    robot = robot_factory()
    emulator.set_error_bits(2, ErrorBit.VOLTAGE)
    state = robot.read_state(full=True)
    assert robot.fault is None and state.error_bits[2] == ErrorBit.VOLTAGE
    assert state.voltage_v[1] < 4.0
    assert robot.diagnostics()['error_bits']['shoulder_lift'] == ErrorBit.VOLTAGE
    robot.write_goal([0.0] * 6)  # still allowed
    emulator.set_error_bits(6, ErrorBit.OVERHEAT)
    robot.read_state()
    assert robot.fault is not None and robot.fault.joint == 'gripper'
    with pytest.raises(FaultLatched):
        robot.write_goal([0.0] * 6)


def test_close_disables_torque(emulator, robot_factory) -> None:
    robot = robot_factory()
    robot.enable_torque()
    robot.close()
    assert [emulator.register(i, 'Torque_Enable') for i in IDS] == [0] * 6


def test_disconnect_then_reconnect_holds_position(emulator, robot_factory) -> None:
    robot = robot_factory()
    robot.enable_torque()
    emulator.disconnect()
    with pytest.raises(PortDisconnected):
        robot.read_state()
    with pytest.raises(PortDisconnected):
        robot.write_goal([0.0] * 6)
    assert robot.try_reconnect() is False
    emulator.set_register(4, 'Goal_Position', 3000)  # whatever was pending before the loss
    emulator.reconnect()
    robot.reconnect(timeout_s=5.0)
    assert robot.torque_enabled
    barrier(robot)
    # The stale goal acts until the reconnect writes goal := present; the arm then stops there.
    held = emulator.register(4, 'Goal_Position')
    assert held < 2400
    wait_for(lambda: emulator.present_position(4) == held, what='wrist_flex settled at hold')
    assert robot.read_state().position_steps[0] == 2048
    assert robot.bus.stats.disconnects == 1


def test_calibration_procedure_writes_lerobot_json(emulator, tmp_path) -> None:
    bus = FeetechBus.open(emulator.port, timeout_margin_ms=MARGIN_MS)
    middle = {1: 2100, 2: 1990, 3: 2047, 4: 2300, 5: 1500, 6: 1800}
    prompts: list[str] = []

    def wait_for_user(message: str) -> None:
        prompts.append(message)
        if len(prompts) == 1:  # the operator puts the arm in its middle pose
            for i, p in middle.items():
                emulator.set_present_position(i, p)

    script = [{i: 2047 - 600 for i in range(1, 7)}, {i: 2047 + 700 for i in range(1, 7)},
              {i: 2047 for i in range(1, 7)}]

    def recording_done(positions) -> bool:
        if not script:
            return True
        for i, p in script.pop(0).items():
            emulator.set_present_position(i, p)
        return False

    path = tmp_path / 'cal.json'
    cal = run_calibration(bus, wait_for_user, recording_done, path=str(path),
                          sample_period_s=0.0)
    bus.close()
    assert 'middle' in prompts[0] and 'wrist_roll' in prompts[1]
    for j, i in zip(JOINT_NAMES, range(1, 7)):
        assert cal[j].homing_offset == middle[i] - 2047
        assert emulator.register(i, 'Homing_Offset') == middle[i] - 2047
    assert (cal['elbow_flex'].range_min, cal['elbow_flex'].range_max) == (1447, 2747)
    assert (cal['wrist_roll'].range_min, cal['wrist_roll'].range_max) == (0, 4095)
    assert load_calibration(path=path) == cal
    robot = So101Robot(So101Config(port=emulator.port, calibration=cal))
    robot.connect()
    assert robot.calibration_mismatches() == []
    robot.close()


def test_calibration_names_joints_that_did_not_move(emulator) -> None:
    bus = FeetechBus.open(emulator.port, timeout_margin_ms=MARGIN_MS)
    calls: list[int] = []

    def recording_done(positions) -> bool:
        calls.append(1)
        if len(calls) == 1:  # everything but wrist_flex (id 4) moves; wrist_roll is not recorded
            for i in (1, 2, 3, 6):
                emulator.set_present_position(i, 2500)
        return len(calls) > 1

    with pytest.raises(CalibrationError, match=r"\['wrist_flex'\] did not move"):
        run_calibration(bus, lambda message: None, recording_done, sample_period_s=0.0)
    bus.close()
