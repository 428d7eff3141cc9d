"""Exact conversions between STS3215 steps, ROS radians and LeRobot's normalised units."""

# Joint zero = middle of the calibrated range, as LeRobot's degrees mode and the MuJoCo SO-101
# model (so101_new_calib.xml, whose joint ranges are centred on 0) both define it:
#   degrees = (raw - (range_min + range_max) / 2) * 360 / 4095
#   radians = degrees * pi / 180
# LeRobot's degrees mode ignores drive_mode; only the -100..100 and 0..100 modes invert.
# Everything here is unrounded float maths; rounding to integer steps happens once, on write.

from __future__ import annotations

from collections.abc import Mapping, Sequence
import enum
import math

import numpy as np

from lerobot_lang_nodes.so101.calibration import GRIPPER, JOINT_NAMES, MotorCalibration
from lerobot_lang_nodes.so101.registers import MAX_STEP

RAD_PER_STEP = 2.0 * math.pi / MAX_STEP  # LeRobot divides by 4095, not 4096
DEG_PER_STEP = 360.0 / MAX_STEP
# Stall torque of the 12 V STS3215 (30 kg.cm); the 7.4 V version is ~1.9 N.m.
STALL_TORQUE_NM = 2.94
LOAD_FULL_SCALE = 1000  # Present_Load counts at 100 % of stall torque
VOLTAGE_V_PER_COUNT = 0.1
CURRENT_A_PER_COUNT = 0.0065


class NormMode(str, enum.Enum):
    """LeRobot MotorNormMode values."""

    DEGREES = 'degrees'
    RANGE_M100_100 = 'range_m100_100'
    RANGE_0_100 = 'range_0_100'


def raw_to_radians(raw: float, cal: MotorCalibration) -> float:
    """Present/goal position steps -> joint angle in radians."""
    return (raw - cal.mid) * RAD_PER_STEP


def radians_to_raw(radians: float, cal: MotorCalibration) -> float:
    """Joint angle in radians -> unrounded position steps."""
    return radians / RAD_PER_STEP + cal.mid


def radians_to_steps(radians: float, cal: MotorCalibration) -> int:
    """Joint angle -> nearest integer step (no clamping; the driver clamps to the range)."""
    return int(round(radians_to_raw(radians, cal)))


def load_to_newton_metres(load: int, stall_torque_nm: float = STALL_TORQUE_NM) -> float:
    """Present_Load (0.1 % of stall torque, signed) -> N.m."""
    return load / LOAD_FULL_SCALE * stall_torque_nm


def raw_to_lerobot(raw: float, cal: MotorCalibration, mode: NormMode) -> float:
    """Steps -> LeRobot units, bounding to the range as LeRobot's _normalize does."""
    span = cal.range_max - cal.range_min
    if mode is NormMode.DEGREES:
        return (raw - cal.mid) * DEG_PER_STEP
    bounded = min(cal.range_max, max(cal.range_min, raw))
    if mode is NormMode.RANGE_M100_100:
        norm = (bounded - cal.range_min) / span * 200.0 - 100.0
        return -norm if cal.drive_mode else norm
    if mode is NormMode.RANGE_0_100:
        norm = (bounded - cal.range_min) / span * 100.0
        return 100.0 - norm if cal.drive_mode else norm
    raise ValueError(f'unknown norm mode {mode!r}; expected one of {[m.value for m in NormMode]}')


def lerobot_to_raw(value: float, cal: MotorCalibration, mode: NormMode) -> float:
    """LeRobot units -> unrounded steps, bounding as LeRobot's _unnormalize does."""
    span = cal.range_max - cal.range_min
    if mode is NormMode.DEGREES:
        return value / DEG_PER_STEP + cal.mid
    if mode is NormMode.RANGE_M100_100:
        value = -value if cal.drive_mode else value
        return (min(100.0, max(-100.0, value)) + 100.0) / 200.0 * span + cal.range_min
    if mode is NormMode.RANGE_0_100:
        value = 100.0 - value if cal.drive_mode else value
        return min(100.0, max(0.0, value)) / 100.0 * span + cal.range_min
    raise ValueError(f'unknown norm mode {mode!r}; expected one of {[m.value for m in NormMode]}')


def lerobot_to_steps_like_lerobot(value: float, cal: MotorCalibration, mode: NormMode) -> int:
    """The integer LeRobot itself would write (it truncates with int())."""
    return int(lerobot_to_raw(value, cal, mode))


def radians_to_lerobot(radians: float, cal: MotorCalibration, mode: NormMode) -> float:
    """Joint angle -> LeRobot units."""
    if mode is NormMode.DEGREES:
        return math.degrees(radians)  # exact: no detour through steps
    return raw_to_lerobot(radians_to_raw(radians, cal), cal, mode)


def lerobot_to_radians(value: float, cal: MotorCalibration, mode: NormMode) -> float:
    """LeRobot units -> joint angle."""
    if mode is NormMode.DEGREES:
        return math.radians(value)
    return raw_to_radians(lerobot_to_raw(value, cal, mode), cal)


def norm_modes(use_degrees: bool = True) -> dict[str, NormMode]:
    """Per-joint mode as LeRobot's so_follower sets it (gripper always 0..100)."""
    body = NormMode.DEGREES if use_degrees else NormMode.RANGE_M100_100
    return {j: NormMode.RANGE_0_100 if j == GRIPPER else body for j in JOINT_NAMES}


class JointConverter:
    """Vectorised conversions for the six SO-101 joints in JOINT_NAMES order."""

    def __init__(self, calibration: Mapping[str, MotorCalibration],
                 use_degrees: bool = True) -> None:
        self.calibration = {j: calibration[j] for j in JOINT_NAMES}
        self.modes = norm_modes(use_degrees)
        self._mid = np.array([c.mid for c in self.calibration.values()])
        self.min_steps = np.array([c.range_min for c in self.calibration.values()])
        self.max_steps = np.array([c.range_max for c in self.calibration.values()])

    @property
    def lower_rad(self) -> np.ndarray:
        """Joint limits (radians) from the calibrated ranges."""
        return (self.min_steps - self._mid) * RAD_PER_STEP

    @property
    def upper_rad(self) -> np.ndarray:
        """Joint limits (radians) from the calibrated ranges."""
        return (self.max_steps - self._mid) * RAD_PER_STEP

    def radians_from_steps(self, steps: Sequence[float]) -> np.ndarray:
        """Steps (JOINT_NAMES order) -> radians."""
        return (np.asarray(steps, dtype=float) - self._mid) * RAD_PER_STEP

    def steps_from_radians(self, radians: Sequence[float]) -> np.ndarray:
        """Radians -> nearest integer steps (unclamped)."""
        raw = np.asarray(radians, dtype=float) / RAD_PER_STEP + self._mid
        return np.rint(raw).astype(np.int64)

    def to_lerobot(self, radians: Sequence[float]) -> dict[str, float]:
        """Radians -> LeRobot action/observation dict {'shoulder_pan.pos': ...}."""
        return {f'{j}.pos': radians_to_lerobot(float(r), self.calibration[j], self.modes[j])
                for j, r in zip(JOINT_NAMES, radians)}

    def from_lerobot(self, values: Mapping[str, float]) -> np.ndarray:
        """LeRobot dict (keys with or without '.pos') -> radians."""
        out = np.empty(len(JOINT_NAMES))
        for k, j in enumerate(JOINT_NAMES):
            key = f'{j}.pos' if f'{j}.pos' in values else j
            if key not in values:
                raise KeyError(f'LeRobot values lack {j!r} (or {j}.pos); got keys '
                               f'{sorted(values)}')
            out[k] = lerobot_to_radians(float(values[key]), self.calibration[j], self.modes[j])
        return out



def nominal_calibration(lower_rad: Sequence[float], upper_rad: Sequence[float],
                        centre_step: float = MAX_STEP / 2
                        ) -> tuple[dict[str, MotorCalibration], np.ndarray]:
    """A calibration whose ranges span the given joint limits (JOINT_NAMES order), for a model
    of the arm without a calibration file (the simulator).

    Returns ``(calibration, zero_rad)``. The calibration's joint zero is the middle of each
    range, as on a calibrated arm; a model whose limits are not centred on its own zero (the
    MJCF gripper: -10..100 degrees) is brought to that convention by subtracting ``zero_rad``
    (the range centres) from its radians before converting, and adding it back after. LeRobot's
    -100..100 and 0..100 units then span exactly the model's limits.
    """
    lower = np.asarray(lower_rad, dtype=float)
    upper = np.asarray(upper_rad, dtype=float)
    if lower.shape != (len(JOINT_NAMES),) or upper.shape != lower.shape or not np.all(
            lower < upper):
        raise ValueError(f'nominal_calibration needs {len(JOINT_NAMES)} lower < upper limits '
                         f'(radians, {list(JOINT_NAMES)}); got {lower_rad!r}, {upper_rad!r}')
    half_steps = np.minimum((upper - lower) / 2 / RAD_PER_STEP, centre_step)
    out = {}
    for i, joint in enumerate(JOINT_NAMES):
        out[joint] = MotorCalibration(id=i + 1, drive_mode=0, homing_offset=0,
                                      range_min=int(round(centre_step - half_steps[i])),
                                      range_max=int(round(centre_step + half_steps[i])))
    return out, (lower + upper) / 2
