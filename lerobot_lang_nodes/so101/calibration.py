"""LeRobot-compatible SO-101 calibration (follower and leader): the files (locate, validate,
load, save) and the procedure that makes one on a live bus (`lerobot-lang calibrate`)."""

# File format (one object per motor, keyed by joint name), as LeRobot's Robot._save_calibration:
#   {"shoulder_pan": {"id": 1, "drive_mode": 0, "homing_offset": -12,
#                     "range_min": 750, "range_max": 3300}, ...}

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
import json
import logging
import os
from pathlib import Path
import tempfile
import time
from typing import TYPE_CHECKING, Any

from lerobot_lang_nodes.so101.errors import CalibrationError
from lerobot_lang_nodes.so101.registers import MAX_STEP, MODE_POSITION

if TYPE_CHECKING:  # the bus is passed in; this module stays a file format plus the procedure
    from lerobot_lang_nodes.so101.bus import FeetechBus

logger = logging.getLogger(__name__)

JOINT_NAMES: tuple[str, ...] = (
    'shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper')
MOTOR_IDS: dict[str, int] = {name: i + 1 for i, name in enumerate(JOINT_NAMES)}
GRIPPER = 'gripper'
FULL_TURN_JOINT = 'wrist_roll'  # LeRobot records no range for it: 0..4095
# LeRobot >= 0.5 stores SO-100/101 followers under `so_follower`; 0.4.x used `so101_follower`.
ROBOT_TYPE = 'so_follower'
LEGACY_ROBOT_TYPES: tuple[str, ...] = ('so101_follower',)
# The leader arm is a LeRobot teleoperator: <root>/teleoperators/so_leader/<id>.json (0.4.x:
# so101_leader). Same fields, same motor names and ids as the follower's file.
LEADER_TYPE = 'so_leader'
LEGACY_LEADER_TYPES: tuple[str, ...] = ('so101_leader',)
# Calibration sub-folder and legacy folders of each type (LeRobot's ROBOTS / TELEOPERATORS).
_FOLDERS: dict[str, tuple[str, tuple[str, ...]]] = {
    ROBOT_TYPE: ('robots', LEGACY_ROBOT_TYPES),
    LEADER_TYPE: ('teleoperators', LEGACY_LEADER_TYPES),
}
_CALIBRATE_HINT = {
    ROBOT_TYPE: '`lerobot-calibrate --robot.type=so101_follower` or the calibrate command',
    LEADER_TYPE: '`lerobot-calibrate --teleop.type=so101_leader`',
}
HOMING_OFFSET_LIMIT = 2047  # Homing_Offset is sign-magnitude with the sign at bit 11
FIELDS: tuple[str, ...] = ('id', 'drive_mode', 'homing_offset', 'range_min', 'range_max')


@dataclass(frozen=True)
class MotorCalibration:
    """Calibration of one motor, field for field as LeRobot's MotorCalibration."""

    id: int
    drive_mode: int
    homing_offset: int
    range_min: int
    range_max: int

    @property
    def mid(self) -> float:
        """Encoder step of the joint zero: the middle of the calibrated range."""
        return (self.range_min + self.range_max) / 2


Calibration = dict[str, MotorCalibration]


def calibration_root() -> Path:
    """LeRobot's calibration root: $HF_LEROBOT_CALIBRATION, else $HF_LEROBOT_HOME/calibration."""
    if os.environ.get('HF_LEROBOT_CALIBRATION'):
        return Path(os.environ['HF_LEROBOT_CALIBRATION']).expanduser()
    if os.environ.get('HF_LEROBOT_HOME'):
        return Path(os.environ['HF_LEROBOT_HOME']).expanduser() / 'calibration'
    hf_home = os.environ.get('HF_HOME') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or '~/.cache', 'huggingface')
    return Path(hf_home).expanduser() / 'lerobot' / 'calibration'


def calibration_path(robot_id: str | None = None, path: str | os.PathLike[str] | None = None,
                     robot_type: str = ROBOT_TYPE) -> Path:
    """Where the calibration of `robot_id` is read from.

    An explicit `path` wins. Otherwise <root>/robots/<robot_type>/<robot_id>.json, falling back
    to the legacy `so101_follower` folder when only that file exists; for the leader
    (``robot_type=LEADER_TYPE``) <root>/teleoperators/so_leader/<id>.json, falling back to
    `so101_leader`.
    """
    if path is not None:
        return Path(path).expanduser()
    if not robot_id:
        what = ('the leader id (LeRobot `--teleop.id`)' if robot_type == LEADER_TYPE
                else 'the robot id (LeRobot `--robot.id`)')
        raise CalibrationError(f'no calibration given: set {what} or an explicit calibration '
                               'file path')
    folder, legacies = _FOLDERS.get(robot_type, ('robots', ()))
    robots = calibration_root() / folder
    primary = robots / robot_type / f'{robot_id}.json'
    if not primary.is_file():
        for legacy in legacies:
            candidate = robots / legacy / f'{robot_id}.json'
            if candidate.is_file():
                logger.info('using legacy LeRobot calibration %s', candidate)
                return candidate
    return primary


def _int_field(motor: str, entry: Mapping[str, Any], name: str, source: str) -> int:
    if name not in entry:
        raise CalibrationError(f'{source}: motor {motor!r} lacks field {name!r}; expected the '
                               f'fields {list(FIELDS)}; re-run the calibration')
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise CalibrationError(f'{source}: motor {motor!r} field {name!r} is {value!r}; expected '
                               'an integer; fix the file or re-run the calibration')
    return value


def parse_calibration(data: Any, source: str = '<calibration>') -> Calibration:
    """Validate decoded JSON; errors name the motor and the field that is wrong."""
    if not isinstance(data, dict):
        raise CalibrationError(f'{source}: top level is {type(data).__name__}; expected an '
                               f'object keyed by motor name {list(JOINT_NAMES)}')
    missing = [m for m in JOINT_NAMES if m not in data]
    extra = sorted(set(data) - set(JOINT_NAMES))
    if missing or extra:
        raise CalibrationError(f'{source}: motors missing {missing}, unexpected {extra}; expected '
                               f'exactly {list(JOINT_NAMES)} (an SO-101 follower or leader file)')
    out: Calibration = {}
    for motor in JOINT_NAMES:
        entry = data[motor]
        if not isinstance(entry, dict):
            raise CalibrationError(f'{source}: motor {motor!r} is {entry!r}; expected an object '
                                   f'with fields {list(FIELDS)}')
        values = {name: _int_field(motor, entry, name, source) for name in FIELDS}
        if values['id'] != MOTOR_IDS[motor]:
            raise CalibrationError(f"{source}: motor {motor!r} field 'id' is {values['id']}; "
                                   f'expected {MOTOR_IDS[motor]} (SO-101 wiring); fix the file or '
                                   'the servo ids')
        if values['drive_mode'] not in (0, 1):
            raise CalibrationError(f"{source}: motor {motor!r} field 'drive_mode' is "
                                   f"{values['drive_mode']}; expected 0 or 1")
        if abs(values['homing_offset']) > HOMING_OFFSET_LIMIT:
            raise CalibrationError(f"{source}: motor {motor!r} field 'homing_offset' is "
                                   f"{values['homing_offset']}; expected -{HOMING_OFFSET_LIMIT}.."
                                   f'{HOMING_OFFSET_LIMIT}; re-run the calibration')
        for name in ('range_min', 'range_max'):
            if not 0 <= values[name] <= MAX_STEP:
                raise CalibrationError(f'{source}: motor {motor!r} field {name!r} is '
                                       f'{values[name]}; expected 0..{MAX_STEP}')
        if values['range_min'] >= values['range_max']:
            raise CalibrationError(f"{source}: motor {motor!r} field 'range_min' "
                                   f"({values['range_min']}) is not below 'range_max' "
                                   f"({values['range_max']}); re-run the range recording and "
                                   'move the joint through its whole range')
        out[motor] = MotorCalibration(**values)
    return out


def load_calibration(robot_id: str | None = None,
                     path: str | os.PathLike[str] | None = None,
                     robot_type: str = ROBOT_TYPE) -> Calibration:
    """Read and validate the calibration of `robot_id` (or the file at `path`); the leader's
    with ``robot_type=LEADER_TYPE``."""
    file = calibration_path(robot_id, path, robot_type)
    try:
        text = file.read_text(encoding='utf-8')
    except FileNotFoundError:
        hint = _CALIBRATE_HINT.get(robot_type, _CALIBRATE_HINT[ROBOT_TYPE])
        raise CalibrationError(f'calibration file {file} does not exist; run {hint}, or pass '
                               'the file path') from None
    except OSError as exc:
        raise CalibrationError(f'cannot read calibration file {file}: {exc}') from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CalibrationError(f'{file}: not valid JSON ({exc.msg} at line {exc.lineno} column '
                               f'{exc.colno}); fix the file or re-run the calibration') from exc
    return parse_calibration(data, str(file))


def calibration_to_json(calibration: Mapping[str, MotorCalibration]) -> str:
    """Serialise as LeRobot does (indent 4, motor order of the arm)."""
    return json.dumps({m: asdict(calibration[m]) for m in JOINT_NAMES}, indent=4)


def save_calibration(calibration: Mapping[str, MotorCalibration], robot_id: str | None = None,
                     path: str | os.PathLike[str] | None = None) -> Path:
    """Write the calibration atomically; returns the file written."""
    parse_calibration({m: asdict(c) for m, c in calibration.items()}, '<calibration to save>')
    if path is None and not robot_id:
        raise CalibrationError('cannot save a calibration without a robot id or a file path')
    file = Path(path).expanduser() if path is not None else (
        calibration_root() / 'robots' / ROBOT_TYPE / f'{robot_id}.json')
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f'.{file.name}.', suffix='.tmp')
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as out:
            out.write(calibration_to_json(calibration))
        os.replace(tmp, file)  # a reader never sees a half-written file
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    logger.info('saved calibration to %s', file)
    return file


# --- the calibration procedure (lerobot-calibrate's steps) on a live bus --------------------
def write_calibration_to_motors(bus: FeetechBus, calibration: Mapping[str, MotorCalibration]
                                ) -> None:
    """Homing_Offset and position limits into EEPROM (torque must be off, Lock 0)."""
    for cal in calibration.values():
        bus.write(cal.id, 'Homing_Offset', cal.homing_offset, check_errors=False)
        bus.write(cal.id, 'Min_Position_Limit', cal.range_min, check_errors=False)
        bus.write(cal.id, 'Max_Position_Limit', cal.range_max, check_errors=False)


def run_calibration(bus: FeetechBus, wait_for_user: Callable[[str], None],
                    recording_done: Callable[[Mapping[str, int]], bool], *,
                    robot_id: str | None = None, path: str | None = None,
                    sample_period_s: float = 0.02,
                    motor_ids: Mapping[str, int] = MOTOR_IDS) -> Calibration:
    """LeRobot's SO-101 calibration: torque off, middle pose -> homing offsets, ranges.

    `wait_for_user(message)` blocks until the operator has done what the message asks;
    `recording_done(positions)` is polled with each sample of the range recording and returns
    True to stop. With `robot_id` or `path` the result is saved as LeRobot JSON.
    """
    ids = dict(motor_ids)
    for servo_id in ids.values():
        bus.write(servo_id, 'Torque_Enable', 0, check_errors=False)
        bus.write(servo_id, 'Lock', 0, check_errors=False)
        bus.write(servo_id, 'Operating_Mode', MODE_POSITION, check_errors=False)
    wait_for_user('Move the arm to the middle of its range of motion, then confirm.')
    for servo_id in ids.values():  # offsets are computed on the raw encoder angle
        bus.write(servo_id, 'Homing_Offset', 0, check_errors=False)
        bus.write(servo_id, 'Min_Position_Limit', 0, check_errors=False)
        bus.write(servo_id, 'Max_Position_Limit', MAX_STEP, check_errors=False)
    raw = bus.sync_read(ids.values(), 'Present_Position', check_errors=False)
    offsets = {m: raw[i] - MAX_STEP // 2 for m, i in ids.items()}
    bad = {m: o for m, o in offsets.items() if abs(o) > HOMING_OFFSET_LIMIT}
    if bad:
        raise CalibrationError(f'homing offsets {bad} exceed +-{HOMING_OFFSET_LIMIT}; move those '
                               'joints closer to the middle of their range and calibrate again')
    for m, i in ids.items():
        bus.write(i, 'Homing_Offset', offsets[m], check_errors=False)
    wait_for_user(f"Move every joint except '{FULL_TURN_JOINT}' through its entire range of "
                  'motion; recording until you confirm.')
    recorded = [m for m in ids if m != FULL_TURN_JOINT]
    first = bus.sync_read([ids[m] for m in recorded], 'Present_Position', check_errors=False)
    mins = {m: first[ids[m]] for m in recorded}
    maxes = dict(mins)
    while True:
        now = bus.sync_read([ids[m] for m in recorded], 'Present_Position', check_errors=False)
        positions = {m: now[ids[m]] for m in recorded}
        for m, p in positions.items():
            mins[m] = min(mins[m], p)
            maxes[m] = max(maxes[m], p)
        if recording_done(positions):
            break
        time.sleep(sample_period_s)  # sampling period of a human moving joints
    same = [m for m in recorded if mins[m] == maxes[m]]
    if same:
        raise CalibrationError(f'joints {same} did not move during range recording (min == max);'
                               ' move each of them through its whole range and calibrate again')
    if FULL_TURN_JOINT in ids:
        mins[FULL_TURN_JOINT], maxes[FULL_TURN_JOINT] = 0, MAX_STEP
    calibration = {m: MotorCalibration(id=i, drive_mode=0, homing_offset=offsets[m],
                                       range_min=mins[m], range_max=maxes[m])
                   for m, i in ids.items()}
    write_calibration_to_motors(bus, calibration)
    if robot_id is not None or path is not None:
        save_calibration(calibration, robot_id=robot_id, path=path)
    return calibration
