"""Steps <-> radians <-> LeRobot units: exact both ways, and equal to LeRobot's formulas."""

from __future__ import annotations

import math

from hypothesis import given, strategies as st
import numpy as np
import pytest

from lerobot_lang_nodes.so101 import units
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration
from lerobot_lang_nodes.so101.units import (
    JointConverter,
    lerobot_to_radians,
    lerobot_to_raw,
    lerobot_to_steps_like_lerobot,
    NormMode,
    radians_to_lerobot,
    radians_to_raw,
    radians_to_steps,
    raw_to_lerobot,
    raw_to_radians,
)

CAL = MotorCalibration(id=1, drive_mode=0, homing_offset=-30, range_min=1000, range_max=3001)
INV = MotorCalibration(id=6, drive_mode=1, homing_offset=12, range_min=2000, range_max=3400)


@st.composite
def calibrations(draw) -> MotorCalibration:
    lo = draw(st.integers(0, 4094))
    hi = draw(st.integers(lo + 1, 4095))
    return MotorCalibration(1, draw(st.integers(0, 1)), draw(st.integers(-2047, 2047)), lo, hi)


def test_zero_is_middle_of_range_and_matches_lerobot_degrees() -> None:
    assert raw_to_radians(2000.5, CAL) == 0.0
    # LeRobot: (raw - (min+max)/2) * 360 / 4095
    assert raw_to_lerobot(3001, CAL, NormMode.DEGREES) == pytest.approx(
        (3001 - 2000.5) * 360 / 4095, abs=1e-12)
    assert raw_to_radians(3001, CAL) == pytest.approx(math.radians((3001 - 2000.5) * 360 / 4095),
                                                      abs=1e-12)


def test_hand_computed_values() -> None:
    # 4095 steps = 360 deg, so 4095/4 steps from the middle = 90 deg = pi/2
    assert raw_to_radians(2000.5 + 4095 / 4, CAL) == pytest.approx(math.pi / 2, abs=1e-12)
    assert raw_to_lerobot(1000, CAL, NormMode.RANGE_M100_100) == -100.0
    assert raw_to_lerobot(3001, CAL, NormMode.RANGE_M100_100) == 100.0
    assert raw_to_lerobot(2000.5, CAL, NormMode.RANGE_M100_100) == 0.0
    assert raw_to_lerobot(2000, INV, NormMode.RANGE_0_100) == 100.0  # drive_mode inverts
    assert raw_to_lerobot(3400, INV, NormMode.RANGE_0_100) == 0.0
    assert raw_to_lerobot(1000, INV, NormMode.RANGE_M100_100) == 100.0  # bounded, inverted
    # LeRobot truncates when unnormalising: 50 % of 0..100 on 2000..3400 -> 2700
    assert lerobot_to_steps_like_lerobot(50.0, INV, NormMode.RANGE_0_100) == 2700


@given(calibrations(), st.data())
def test_steps_radians_round_trip_is_exact(cal: MotorCalibration, data: st.DataObject) -> None:
    raw = data.draw(st.integers(0, 4095))
    rad = raw_to_radians(raw, cal)
    assert radians_to_steps(rad, cal) == raw
    assert radians_to_raw(rad, cal) == pytest.approx(raw, abs=1e-9)


@given(calibrations(), st.sampled_from(list(NormMode)), st.data())
def test_lerobot_round_trip_both_ways(cal: MotorCalibration, mode: NormMode,
                                      data: st.DataObject) -> None:
    raw = data.draw(st.integers(cal.range_min, cal.range_max))
    value = raw_to_lerobot(raw, cal, mode)
    assert round(lerobot_to_raw(value, cal, mode)) == raw
    assert lerobot_to_raw(value, cal, mode) == pytest.approx(raw, abs=1e-7)
    # and the other way, starting from LeRobot units inside the valid range
    lo, hi = {NormMode.DEGREES: (-170.0, 170.0), NormMode.RANGE_M100_100: (-100.0, 100.0),
              NormMode.RANGE_0_100: (0.0, 100.0)}[mode]
    v = data.draw(st.floats(lo, hi))
    if mode is not NormMode.DEGREES:
        assert raw_to_lerobot(lerobot_to_raw(v, cal, mode), cal, mode) == pytest.approx(
            v, abs=1e-9)
    rad = lerobot_to_radians(v, cal, mode)
    assert radians_to_lerobot(rad, cal, mode) == pytest.approx(v, abs=1e-9)


@given(calibrations(), st.floats(-3.0, 3.0))
def test_radians_degrees_are_exact(cal: MotorCalibration, rad: float) -> None:
    assert radians_to_lerobot(rad, cal, NormMode.DEGREES) == math.degrees(rad)
    assert lerobot_to_radians(math.degrees(rad), cal, NormMode.DEGREES) == pytest.approx(
        rad, abs=1e-15)
    # through steps it agrees with the degree formula
    raw = radians_to_raw(rad, cal)
    degrees = raw_to_lerobot(raw, cal, NormMode.DEGREES)
    assert degrees == pytest.approx(math.degrees(rad), abs=1e-9)


def test_degrees_mode_ignores_drive_mode_like_lerobot() -> None:
    flipped = MotorCalibration(1, 1, 0, CAL.range_min, CAL.range_max)
    assert raw_to_lerobot(2500, flipped, NormMode.DEGREES) == raw_to_lerobot(
        2500, CAL, NormMode.DEGREES)
    assert raw_to_lerobot(2500, flipped, NormMode.RANGE_M100_100) == -raw_to_lerobot(
        2500, CAL, NormMode.RANGE_M100_100)


def test_joint_converter_vectorised_and_lerobot_dicts() -> None:
    cal = {j: MotorCalibration(i + 1, 0, 0, 1000 + 10 * i, 3000 - 10 * i)
           for i, j in enumerate(JOINT_NAMES)}
    conv = JointConverter(cal, use_degrees=True)
    steps = np.array([1000, 1500, 2000, 2500, 2900, 2950])
    rad = conv.radians_from_steps(steps)
    assert np.array_equal(conv.steps_from_radians(rad), steps)
    lr = conv.to_lerobot(rad)
    assert set(lr) == {f'{j}.pos' for j in JOINT_NAMES}
    assert lr['gripper.pos'] == pytest.approx(100 * (2950 - 1050) / (2950 - 1050))
    assert lr['shoulder_pan.pos'] == pytest.approx((1000 - 2000) * 360 / 4095)
    assert np.allclose(conv.from_lerobot(lr), rad, atol=1e-12)
    assert np.allclose(conv.lower_rad, conv.radians_from_steps(conv.min_steps))
    with pytest.raises(KeyError, match='shoulder_lift'):
        conv.from_lerobot({'shoulder_pan.pos': 0.0})



def test_nominal_calibration_spans_the_given_joint_limits() -> None:
    lower = np.array([-1.9, -1.7, -1.6, -1.6, -2.74, -0.17])
    upper = np.array([1.9, 1.7, 1.6, 1.6, 2.84, 1.75])
    cal, zero = units.nominal_calibration(lower, upper)
    assert np.allclose(zero, (lower + upper) / 2)
    conv = JointConverter(cal, use_degrees=False)
    # Within a step of the limits once shifted by the range centres; -100..100 (arm) and
    # 0..100 (gripper) end at the limits.
    assert np.allclose(conv.lower_rad + zero, lower, atol=units.RAD_PER_STEP)
    assert np.allclose(conv.upper_rad + zero, upper, atol=units.RAD_PER_STEP)
    lo = conv.to_lerobot(lower - zero)
    hi = conv.to_lerobot(upper - zero)
    assert lo['shoulder_pan.pos'] == pytest.approx(-100, abs=0.1)
    assert hi['wrist_roll.pos'] == pytest.approx(100, abs=0.1)
    assert lo['gripper.pos'] == pytest.approx(0, abs=0.1)
    assert hi['gripper.pos'] == pytest.approx(100, abs=0.1)
    q = (lower + upper) / 2 + 0.1
    assert np.allclose(conv.from_lerobot(conv.to_lerobot(q - zero)) + zero, q, atol=1e-9)
    with pytest.raises(ValueError, match='lower < upper'):
        units.nominal_calibration(upper, lower)
