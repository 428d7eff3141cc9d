"""ROS-free SO-101 follower driver: connect, configure, read state, safe goal writes, faults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
import logging
import math
import time
from typing import Any

import numpy as np

from lerobot_lang_nodes.core.safety import SafetyLimits

from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.bus import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_MARGIN_MS,
    FeetechBus,
)
from lerobot_lang_nodes.so101.calibration import (
    Calibration,
    GRIPPER,
    JOINT_NAMES,
    MotorCalibration,
    write_calibration_to_motors,
)
from lerobot_lang_nodes.so101.errors import (
    BusError,
    BusTimeout,
    CalibrationError,
    ConfigurationMismatch,
    FaultLatched,
    ModelMismatch,
    MotionRefused,
    NotConnected,
    PortDisconnected,
)
from lerobot_lang_nodes.so101.protocol import ErrorBit
from lerobot_lang_nodes.so101.registers import (
    CONTROL_TABLE,
    DEFAULT_BAUDRATE,
    MODE_POSITION,
    PHASE_ANGLE_FEEDBACK_BIT,
    RETURN_DELAY_UNIT_US,
    STS3215_MODEL_NUMBER,
)
from lerobot_lang_nodes.so101.units import (
    JointConverter,
    load_to_newton_metres,
    RAD_PER_STEP,
    STALL_TORQUE_NM,
    VOLTAGE_V_PER_COUNT,
)

logger = logging.getLogger(__name__)

# Present_Position .. Present_Temperature are contiguous (56..63), so the low-rate state costs
# the same single SYNC_READ as the position-only one, 6 more bytes per servo.
_POS = CONTROL_TABLE['Present_Position']
_STATE_BLOCK_BYTES = CONTROL_TABLE['Present_Temperature'].address + 1 - _POS.address
_VEL = CONTROL_TABLE['Present_Velocity']
_LOAD = CONTROL_TABLE['Present_Load']
_VOLT = CONTROL_TABLE['Present_Voltage']
_TEMP = CONTROL_TABLE['Present_Temperature']
LATCHING_ERRORS = ErrorBit.OVERLOAD | ErrorBit.OVERHEAT
RECONNECT_PERIOD_S = 0.2


@dataclass(frozen=True)
class So101Config:
    """Driver settings; defaults follow LeRobot's so101_follower."""

    port: str
    calibration: Mapping[str, MotorCalibration]
    baudrate: int = DEFAULT_BAUDRATE
    # Largest step (rad) a goal may lie from the freshly read present position; a float for all
    # joints, a {joint: rad} mapping, or None to disable (LeRobot's max_relative_target).
    max_relative_target_rad: float | Mapping[str, float] | None = None
    # A present position younger than this is "fresh" for max_relative_target; older ones are
    # re-read, which costs one more bus round trip (~1 ms at 1 Mbaud) per write_goal.
    present_max_age_s: float = 0.05
    aux_every_n: int = 10  # read velocity/load/voltage/temperature every n-th read_state
    disable_torque_on_disconnect: bool = True
    write_calibration_to_motors: bool = True  # when the servos' EEPROM differs from the file
    return_delay: int = 0  # 2 us units; the factory 250 (500 us) halves the control rate
    acceleration: int = 254
    maximum_acceleration: int = 254
    p_coefficient: int = 16  # LeRobot lowers P from 32 to avoid shakiness
    i_coefficient: int = 0
    d_coefficient: int = 32
    gripper_max_torque: int = 500  # 50 % of max torque to avoid burnout
    gripper_protection_current: int = 250  # 50 % of max current to avoid burnout
    gripper_overload_torque: int = 25  # % torque when overloaded
    latching_errors: int = int(LATCHING_ERRORS)
    retries: int = DEFAULT_RETRIES
    timeout_margin_ms: float = DEFAULT_TIMEOUT_MARGIN_MS
    stall_torque_nm: float = STALL_TORQUE_NM

    def __post_init__(self) -> None:
        missing = [j for j in JOINT_NAMES if j not in self.calibration]
        if missing:
            raise CalibrationError(f'calibration lacks motors {missing}; expected '
                                   f'{list(JOINT_NAMES)}')
        if self.aux_every_n < 1:
            raise ValueError(f'aux_every_n={self.aux_every_n}; expected >= 1 (1 = every read)')
        mrt = self.max_relative_target_rad
        values = (list(mrt.values()) if isinstance(mrt, Mapping)
                  else [] if mrt is None else [mrt])
        if any(not (v > 0 and math.isfinite(v)) for v in values):
            raise ValueError(f'max_relative_target_rad={mrt!r}; expected positive finite '
                             'radians, or None to disable')
        if isinstance(mrt, Mapping):
            unknown = sorted(set(mrt) - set(JOINT_NAMES))
            if unknown:
                raise ValueError(f'max_relative_target_rad names unknown joints {unknown}; '
                                 f'expected some of {list(JOINT_NAMES)}')


@dataclass(frozen=True)
class RobotState:
    """One read of the arm; arrays are in JOINT_NAMES order, aux fields None when not read."""

    stamp: float  # time.monotonic() after the read
    position_rad: np.ndarray
    position_steps: np.ndarray
    velocity_rad_s: np.ndarray | None = None
    effort_nm: np.ndarray | None = None
    voltage_v: np.ndarray | None = None
    temperature_c: np.ndarray | None = None
    error_bits: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Fault:
    """A latched servo fault."""

    servo_id: int
    joint: str
    error_bits: int
    stamp: float

    def describe(self) -> str:
        """Human-readable summary."""
        return (f'{self.joint} (id {self.servo_id}) reported '
                f'{protocol.describe_error_bits(self.error_bits)}')


class So101Robot:
    """The SO-101 follower arm over a FeetechBus, with the safety rules of the driver node."""

    def __init__(self, config: So101Config, bus: FeetechBus | None = None) -> None:
        self.config = config
        self.calibration: Calibration = {j: config.calibration[j] for j in JOINT_NAMES}
        self.units = JointConverter(self.calibration)
        self.ids = [self.calibration[j].id for j in JOINT_NAMES]
        self.joint_of = {self.calibration[j].id: j for j in JOINT_NAMES}
        self.bus = bus or FeetechBus(config.port, config.baudrate, retries=config.retries,
                                     timeout_margin_ms=config.timeout_margin_ms)
        self.connected = False
        self.torque_enabled = False
        self.fault: Fault | None = None
        # Registers found different from the calibration/settings after a reconnect.
        self.mismatch: list[str] = []
        self.last_state: RobotState | None = None
        self.counters = {'limit_clamps': 0, 'relative_clamps': 0, 'refused': 0, 'holds': 0}
        self._cycle = 0
        self.set_max_relative_target(config.max_relative_target_rad)

    def set_max_relative_target(self, lim: float | Mapping[str, float] | None) -> None:
        """Set the step bound (rad, per joint or for all; None disables) for the next goal."""
        max_step = (None if lim is None else np.array(
            [lim.get(j, np.inf) if isinstance(lim, Mapping) else lim for j in JOINT_NAMES],
            dtype=float))
        # The same rule as the simulator's: calibrated range, then the step bound around the
        # present position (which wins, so a joint outside its range is walked back). One
        # object, swapped whole: a control cycle uses the old rule or the new one.
        self.safety = SafetyLimits(lower=self.units.lower_rad, upper=self.units.upper_rad,
                                   max_relative=max_step)

    # ---- connection ----------------------------------------------------------------------

    def connect(self) -> None:
        """Open the port, ping every servo, check models, apply the configuration (torque off)."""
        if not self.bus.is_open:
            self.bus.connect()
        self._handshake()
        self.configure()
        self.connected = True
        self.torque_enabled = False
        logger.info('SO-101 connected on %s (ids %s)', self.config.port, self.ids)

    def _handshake(self) -> None:
        missing = []
        for servo_id in self.ids:
            try:
                self.bus.ping(servo_id, check_errors=False)
            except BusTimeout:
                missing.append(servo_id)
        if missing:
            names = [self.joint_of[i] for i in missing]
            raise BusTimeout(
                f'servo ids {missing} ({names}) did not answer a ping on {self.config.port}; '
                'check the 3-pin cables and the arm power, and set the ids with LeRobot\'s '
                '`lerobot-setup-motors`')
        for servo_id in self.ids:
            model = self.bus.read(servo_id, 'Model_Number', check_errors=False)
            if model != STS3215_MODEL_NUMBER:
                raise ModelMismatch(
                    f'servo id {servo_id} ({self.joint_of[servo_id]}) reports model number '
                    f'{model}; expected {STS3215_MODEL_NUMBER} (STS3215); check the wiring or '
                    'replace the servo')

    def configure(self) -> None:
        """Write LeRobot's so101_follower settings (EEPROM writes need torque off and Lock 0)."""
        self._write_settings()
        mismatched = self.calibration_mismatches()
        if mismatched:
            if not self.config.write_calibration_to_motors:
                raise CalibrationError(
                    f'servo EEPROM calibration differs from the file for {mismatched}; '
                    'enable write_calibration_to_motors or re-run the calibration')
            logger.warning('writing calibration to motors %s (EEPROM differs from file)',
                           mismatched)
            write_calibration_to_motors(self.bus, self.calibration)

    def _expected_settings(self, joint: str) -> dict[str, int]:
        cfg = self.config
        out = {'Return_Delay_Time': cfg.return_delay,
               'Maximum_Acceleration': cfg.maximum_acceleration,
               'Acceleration': cfg.acceleration, 'Operating_Mode': MODE_POSITION,
               'P_Coefficient': cfg.p_coefficient, 'I_Coefficient': cfg.i_coefficient,
               'D_Coefficient': cfg.d_coefficient}
        if joint == GRIPPER:
            out.update(Max_Torque_Limit=cfg.gripper_max_torque,
                       Protection_Current=cfg.gripper_protection_current,
                       Overload_Torque=cfg.gripper_overload_torque)
        return out

    def _write_settings(self) -> None:
        cfg = self.config
        self.disable_torque()
        for joint in JOINT_NAMES:
            i = self.calibration[joint].id
            self.bus.write(i, 'Return_Delay_Time', cfg.return_delay, check_errors=False)
            self.bus.write(i, 'Maximum_Acceleration', cfg.maximum_acceleration,
                           check_errors=False)
            self.bus.write(i, 'Acceleration', cfg.acceleration, check_errors=False)
            phase = self.bus.read(i, 'Phase', check_errors=False)
            if phase & PHASE_ANGLE_FEEDBACK_BIT:  # keeps positions within 0..4095
                self.bus.write(i, 'Phase', phase & ~PHASE_ANGLE_FEEDBACK_BIT, check_errors=False)
            self.bus.write(i, 'Operating_Mode', MODE_POSITION, check_errors=False)
            self.bus.write(i, 'P_Coefficient', cfg.p_coefficient, check_errors=False)
            self.bus.write(i, 'I_Coefficient', cfg.i_coefficient, check_errors=False)
            self.bus.write(i, 'D_Coefficient', cfg.d_coefficient, check_errors=False)
            if joint == GRIPPER:
                self.bus.write(i, 'Max_Torque_Limit', cfg.gripper_max_torque, check_errors=False)
                self.bus.write(i, 'Protection_Current', cfg.gripper_protection_current,
                               check_errors=False)
                self.bus.write(i, 'Overload_Torque', cfg.gripper_overload_torque,
                               check_errors=False)
        self.bus.return_delay_us = cfg.return_delay * RETURN_DELAY_UNIT_US

    def calibration_mismatches(self) -> list[str]:
        """Joints whose Homing_Offset / position limits in EEPROM differ from the calibration."""
        out = []
        for joint, cal in self.calibration.items():
            got = (self.bus.read(cal.id, 'Homing_Offset', check_errors=False),
                   self.bus.read(cal.id, 'Min_Position_Limit', check_errors=False),
                   self.bus.read(cal.id, 'Max_Position_Limit', check_errors=False))
            if got != (cal.homing_offset, cal.range_min, cal.range_max):
                out.append(joint)
        return out

    def configuration_differences(self) -> list[str]:
        """Every register that differs from the calibration file or the start-up settings.

        One line per field, naming the motor: ``'wrist_flex (id 4): Homing_Offset is 512,
        expected 0'``. Empty when the servos are the ones configured at start-up.
        """
        out = []
        for joint in JOINT_NAMES:
            cal = self.calibration[joint]
            expected = {'Homing_Offset': cal.homing_offset, 'Min_Position_Limit': cal.range_min,
                        'Max_Position_Limit': cal.range_max, **self._expected_settings(joint)}
            for name, want in expected.items():
                got = self.bus.read(cal.id, name, check_errors=False)
                if got != want:
                    out.append(f'{joint} (id {cal.id}): {name} is {got}, expected {want}')
        return out

    def close(self) -> None:
        """Disable torque (when configured) and close the port; never raises on a lost port."""
        if self.connected and self.config.disable_torque_on_disconnect and self.bus.is_open:
            try:
                self.disable_torque()
            except BusError as exc:  # teardown: the port may already be gone
                logger.debug('disable torque on close: %s', exc)
        self.bus.close()
        self.connected = False

    def __enter__(self) -> So101Robot:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def try_reconnect(self) -> bool:
        """One reconnection attempt after PortDisconnected; True when the arm is back.

        On success the goal is set to the present position (torque state is read back from
        the servos), so a reconnect never moves the arm; a latched fault stays latched. The
        servos are then checked exactly as at start-up: servos that lost power (all torque
        off) get the start-up settings written again, and any register that still differs
        from the calibration or the settings (a swapped motor, a reset control table) is kept
        in ``mismatch``, which refuses motion and torque until ``reset()`` finds them right.
        """
        try:
            self.bus.reopen()
            self._handshake()
            self.bus.return_delay_us = self.config.return_delay * RETURN_DELAY_UNIT_US
            torque = [self.bus.read(i, 'Torque_Enable', check_errors=False) for i in self.ids]
            self.connected = True  # hold_present_position() needs it, even after close()
            if not any(torque):
                # Powered down and up: the RAM settings (acceleration, ...) are the factory's.
                # Calibration registers are never written here: on a swapped motor the file's
                # offsets would be wrong, so a difference is refused, not overwritten.
                self._write_settings()
            self.torque_enabled = all(torque)
            self.mismatch = self.configuration_differences()
            if self.mismatch:
                logger.error('servos differ from the start-up configuration after the '
                             'reconnect: %s', '; '.join(self.mismatch))
            self.hold_present_position()
        except BusError as exc:
            logger.debug('reconnect attempt failed: %s', exc)
            self.bus.close()
            self.connected = False
            return False
        self.connected = True
        logger.info('SO-101 reconnected on %s', self.config.port)
        return True

    def reconnect(self, timeout_s: float) -> None:
        """Retry try_reconnect() until `timeout_s`; raise PortDisconnected when it never works."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.try_reconnect():
                return
            if time.monotonic() >= deadline:
                raise PortDisconnected(f'{self.config.port} did not come back within {timeout_s} '
                                       's; check the USB cable and arm power')
            time.sleep(RECONNECT_PERIOD_S)  # polling a device node; nothing to wait on

    # ---- torque --------------------------------------------------------------------------

    def enable_torque(self) -> None:
        """Goal := present position, then torque on, so enabling never jerks the arm."""
        self._require_connected()
        self._refuse_on_mismatch()
        self.hold_present_position()
        for servo_id in self.ids:
            self.bus.write(servo_id, 'Torque_Enable', 1, check_errors=False)
            self.bus.write(servo_id, 'Lock', 1, check_errors=False)
        self.torque_enabled = True

    def disable_torque(self) -> None:
        """Torque off and EEPROM unlocked (LeRobot's disable_torque)."""
        for servo_id in self.ids:
            self.bus.write(servo_id, 'Torque_Enable', 0, check_errors=False)
            self.bus.write(servo_id, 'Lock', 0, check_errors=False)
        self.torque_enabled = False

    # ---- state ---------------------------------------------------------------------------

    def read_state(self, full: bool | None = None) -> RobotState:
        """Read positions (and every aux_every_n-th call velocity/load/voltage/temperature).

        A servo reporting a latching error (overload/overheat) latches a fault and the arm is
        held at its present position; write_goal() then refuses until reset().
        """
        self._require_connected()
        aux = full if full is not None else self._cycle % self.config.aux_every_n == 0
        self._cycle += 1
        size = _STATE_BLOCK_BYTES if aux else _POS.size
        blocks = self.bus.sync_read_bytes(self.ids, _POS.address, size, check_errors=False)
        steps = np.array([protocol.decode_register(_POS, blocks[i][:2]) for i in self.ids])
        errors = {i: self.bus.last_errors.get(i, 0) for i in self.ids}
        kw: dict[str, Any] = {}
        if aux:
            def field_of(reg: Any, i: int) -> int:
                off = reg.address - _POS.address
                return protocol.decode_register(reg, blocks[i][off:off + reg.size])

            kw['velocity_rad_s'] = np.array([field_of(_VEL, i) for i in self.ids]) * RAD_PER_STEP
            kw['effort_nm'] = np.array([load_to_newton_metres(field_of(_LOAD, i),
                                                              self.config.stall_torque_nm)
                                        for i in self.ids])
            kw['voltage_v'] = np.array([field_of(_VOLT, i) for i in self.ids]) * \
                VOLTAGE_V_PER_COUNT
            kw['temperature_c'] = np.array([field_of(_TEMP, i) for i in self.ids], dtype=float)
        state = RobotState(time.monotonic(), self.units.radians_from_steps(steps), steps,
                           error_bits=errors, **kw)
        self.last_state = state
        self._latch(errors, steps)
        return state

    def _latch(self, errors: Mapping[int, int], steps: np.ndarray) -> None:
        if self.fault is not None:
            return
        for servo_id, bits in errors.items():
            if bits & self.config.latching_errors:
                self.fault = Fault(servo_id, self.joint_of[servo_id], bits, time.monotonic())
                logger.error('fault latched: %s; holding position and refusing motion until '
                             'reset()', self.fault.describe())
                self._write_steps(steps)
                self.counters['holds'] += 1
                return

    # ---- motion --------------------------------------------------------------------------

    def _require_connected(self) -> None:
        if not self.connected:
            raise NotConnected('SO-101 is not connected; call connect() (or wait for the '
                               'reconnect) first')

    def _fresh_present_steps(self) -> np.ndarray:
        last = self.last_state
        if last is not None and time.monotonic() - last.stamp <= self.config.present_max_age_s:
            return last.position_steps
        return self.read_state(full=False).position_steps

    def _write_steps(self, steps: np.ndarray) -> None:
        self.bus.sync_write('Goal_Position', {i: int(s) for i, s in zip(self.ids, steps)})

    def write_goal(self, positions_rad: Sequence[float]) -> np.ndarray:
        """Command joint positions (rad, JOINT_NAMES order); returns what was actually sent.

        Goals are clamped to the calibrated joint ranges and, with max_relative_target_rad, to
        within that step of the present position read at most present_max_age_s ago.
        Raises FaultLatched while a fault is latched, MotionRefused on malformed input.
        """
        self._require_connected()
        if self.fault is not None:
            self.counters['refused'] += 1
            raise FaultLatched(f'motion refused: {self.fault.describe()}; remove the load / let '
                               'it cool, then call reset()')
        self._refuse_on_mismatch()
        goal = np.asarray(positions_rad, dtype=float)
        if goal.shape != (len(JOINT_NAMES),) or not np.all(np.isfinite(goal)):
            self.counters['refused'] += 1
            raise MotionRefused(f'goal {positions_rad!r} rejected; expected {len(JOINT_NAMES)} '
                                f'finite radians in the order {list(JOINT_NAMES)}')
        within = np.clip(goal, self.units.lower_rad, self.units.upper_rad)
        if not np.array_equal(within, goal):
            self.counters['limit_clamps'] += 1
            logger.debug('joint limits clamped goal %s -> %s', goal, within)
        safe = within
        safety = self.safety  # read once: set_max_relative_target may swap it meanwhile
        if safety.max_relative is not None:
            present = self.units.radians_from_steps(self._fresh_present_steps())
            if self.fault is not None:  # the fresh read may itself have latched a fault
                self.counters['refused'] += 1
                raise FaultLatched(f'motion refused: {self.fault.describe()}; call reset()')
            safe = safety.apply(goal, present)
            if not np.array_equal(safe, within):
                self.counters['relative_clamps'] += 1
                logger.debug('max_relative_target clamped goal %s -> %s', within, safe)
        # Rounding to steps can land half a step past the range: clip the integers too.
        clamped = np.clip(self.units.steps_from_radians(safe), self.units.min_steps,
                          self.units.max_steps)
        self._write_steps(clamped)
        return self.units.radians_from_steps(clamped)

    def _refuse_on_mismatch(self) -> None:
        if self.mismatch:
            self.counters['refused'] += 1
            raise ConfigurationMismatch(
                'motion refused: the servos differ from the calibration/start-up settings '
                f"after a reconnect ({'; '.join(self.mismatch)}); reconnect the right motor "
                'or re-run the calibration, then reset the fault')

    def hold_present_position(self) -> np.ndarray:
        """Goal := freshly read present position (allowed even while a fault is latched)."""
        steps = self.read_state(full=False).position_steps
        self._write_steps(steps)
        self.counters['holds'] += 1
        return self.units.radians_from_steps(steps)

    def reset(self) -> None:
        """Clear a latched fault once no servo reports a latching error any more."""
        self._require_connected()
        if self.mismatch:
            self.mismatch = self.configuration_differences()
            self._refuse_on_mismatch()
        bits = {i: self.bus.ping(i, check_errors=False) for i in self.ids}
        still = {i: b for i, b in bits.items() if b & self.config.latching_errors}
        if still:
            text = ', '.join(f'{self.joint_of[i]}: {protocol.describe_error_bits(b)}'
                             for i, b in still.items())
            raise FaultLatched(f'cannot reset: servos still report {text}; remove the load or '
                               'let the servo cool, then reset again')
        if self.fault is not None:
            logger.info('fault cleared: %s', self.fault.describe())
        self.fault = None
        self.hold_present_position()

    def diagnostics(self) -> dict[str, Any]:
        """Bus counters, safety counters, error bits and the latched fault, for /diagnostics."""
        return {
            'bus': self.bus.stats.as_dict(),
            'safety': dict(self.counters),
            'error_bits': {self.joint_of[i]: self.bus.last_errors.get(i, 0) for i in self.ids},
            'fault': self.fault.describe() if self.fault else '',
            'mismatch': '; '.join(self.mismatch),
            'connected': self.connected,
            'torque_enabled': self.torque_enabled,
        }


# ---- calibration procedure ------------------------------------------------------------------
