"""LeRobot calibration files: path resolution, validation messages, round trip."""

from __future__ import annotations

import json

import pytest
from so101_helpers import make_calibration

from lerobot_lang_nodes.so101.calibration import (
    calibration_path,
    calibration_root,
    calibration_to_json,
    JOINT_NAMES,
    LEADER_TYPE,
    load_calibration,
    parse_calibration,
    save_calibration,
)
from lerobot_lang_nodes.so101.errors import CalibrationError

# A file as LeRobot's lerobot-calibrate writes it for so101_follower.
LEROBOT_FILE = {
    'shoulder_pan': {'id': 1, 'drive_mode': 0, 'homing_offset': -1003, 'range_min': 758,
                     'range_max': 3292},
    'shoulder_lift': {'id': 2, 'drive_mode': 0, 'homing_offset': 1346, 'range_min': 812,
                      'range_max': 3208},
    'elbow_flex': {'id': 3, 'drive_mode': 0, 'homing_offset': -1466, 'range_min': 883,
                   'range_max': 3047},
    'wrist_flex': {'id': 4, 'drive_mode': 0, 'homing_offset': 1176, 'range_min': 874,
                   'range_max': 3172},
    'wrist_roll': {'id': 5, 'drive_mode': 0, 'homing_offset': -1240, 'range_min': 0,
                   'range_max': 4095},
    'gripper': {'id': 6, 'drive_mode': 0, 'homing_offset': 1388, 'range_min': 2017,
                'range_max': 3379},
}


@pytest.fixture
def calib_env(tmp_path, monkeypatch):
    monkeypatch.setenv('HF_LEROBOT_CALIBRATION', str(tmp_path / 'calib'))
    return tmp_path / 'calib'


def test_root_resolution_like_lerobot(monkeypatch, tmp_path) -> None:
    for var in ('HF_LEROBOT_CALIBRATION', 'HF_LEROBOT_HOME', 'HF_HOME', 'XDG_CACHE_HOME'):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv('HOME', str(tmp_path))
    assert calibration_root() == tmp_path / '.cache/huggingface/lerobot/calibration'
    monkeypatch.setenv('HF_HOME', str(tmp_path / 'hf'))
    assert calibration_root() == tmp_path / 'hf/lerobot/calibration'
    monkeypatch.setenv('HF_LEROBOT_HOME', str(tmp_path / 'lr'))
    assert calibration_root() == tmp_path / 'lr/calibration'
    monkeypatch.setenv('HF_LEROBOT_CALIBRATION', str(tmp_path / 'c'))
    assert calibration_root() == tmp_path / 'c'


def test_loads_lerobot_file_by_id_and_by_path(calib_env) -> None:
    file = calib_env / 'robots' / 'so_follower' / 'arm1.json'
    file.parent.mkdir(parents=True)
    file.write_text(json.dumps(LEROBOT_FILE, indent=4))
    assert calibration_path('arm1') == file
    cal = load_calibration('arm1')
    assert cal['gripper'].range_min == 2017 and cal['shoulder_pan'].homing_offset == -1003
    assert load_calibration(path=file) == cal


def test_legacy_so101_follower_folder_is_found(calib_env) -> None:
    legacy = calib_env / 'robots' / 'so101_follower' / 'old.json'
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps(LEROBOT_FILE))
    assert calibration_path('old') == legacy
    assert load_calibration('old')['elbow_flex'].range_max == 3047


def test_leader_files_are_lerobots_teleoperator_files(calib_env) -> None:
    leader = calib_env / 'teleoperators' / 'so_leader' / 'lead.json'
    leader.parent.mkdir(parents=True)
    leader.write_text(json.dumps(LEROBOT_FILE, indent=4))
    assert calibration_path('lead', robot_type=LEADER_TYPE) == leader
    assert load_calibration('lead', robot_type=LEADER_TYPE)['gripper'].range_max == 3379
    with pytest.raises(CalibrationError, match='robots/so_follower/lead.json does not exist'):
        load_calibration('lead')  # a follower of that name: not the leader's file
    legacy = calib_env / 'teleoperators' / 'so101_leader' / 'old.json'  # LeRobot 0.4
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps(LEROBOT_FILE))
    assert calibration_path('old', robot_type=LEADER_TYPE) == legacy
    with pytest.raises(CalibrationError, match=r'so_leader/nope\.json does not exist; run '
                       r'`lerobot-calibrate --teleop\.type=so101_leader`'):
        load_calibration('nope', robot_type=LEADER_TYPE)
    with pytest.raises(CalibrationError, match=r'leader id \(LeRobot `--teleop\.id`\)'):
        load_calibration(robot_type=LEADER_TYPE)


def test_missing_file_names_the_path_and_the_fix(calib_env) -> None:
    with pytest.raises(CalibrationError, match=r'nope\.json does not exist; run'):
        load_calibration('nope')
    with pytest.raises(CalibrationError, match='robot id'):
        load_calibration()


def test_invalid_json_names_line(tmp_path) -> None:
    f = tmp_path / 'c.json'
    f.write_text('{\n "shoulder_pan": {\n')
    with pytest.raises(CalibrationError, match='not valid JSON .* line'):
        load_calibration(path=f)


def _broken(motor: str, field: str, value) -> dict:
    data = json.loads(json.dumps(LEROBOT_FILE))
    if value is KeyError:
        del data[motor][field]
    else:
        data[motor][field] = value
    return data


@pytest.mark.parametrize('motor, field, value, message', [
    ('elbow_flex', 'range_min', KeyError, "motor 'elbow_flex' lacks field 'range_min'"),
    ('gripper', 'homing_offset', '12', "motor 'gripper' field 'homing_offset' is '12'"),
    ('wrist_flex', 'drive_mode', True, "motor 'wrist_flex' field 'drive_mode' is True"),
    ('wrist_flex', 'drive_mode', 2, "motor 'wrist_flex' field 'drive_mode' is 2"),
    ('shoulder_lift', 'id', 7, "motor 'shoulder_lift' field 'id' is 7; expected 2"),
    ('shoulder_pan', 'range_max', 5000, "motor 'shoulder_pan' field 'range_max' is 5000"),
    ('gripper', 'range_min', 3379, "motor 'gripper' field 'range_min' .* not below"),
    ('wrist_roll', 'homing_offset', -3000, "motor 'wrist_roll' field 'homing_offset'"),
])
def test_malformed_field_names_motor_and_field(tmp_path, motor, field, value, message) -> None:
    f = tmp_path / 'c.json'
    f.write_text(json.dumps(_broken(motor, field, value)))
    with pytest.raises(CalibrationError, match=message):
        load_calibration(path=f)


def test_missing_or_extra_motor_is_named() -> None:
    data = dict(LEROBOT_FILE)
    del data['gripper']
    data['elbow'] = data['elbow_flex']
    with pytest.raises(CalibrationError, match=r"missing \['gripper'\], unexpected \['elbow'\]"):
        parse_calibration(data)
    with pytest.raises(CalibrationError, match='top level is list'):
        parse_calibration([])


def test_save_round_trip_is_lerobot_json(calib_env) -> None:
    cal = make_calibration()
    path = save_calibration(cal, robot_id='arm2')
    assert path == calib_env / 'robots' / 'so_follower' / 'arm2.json'
    data = json.loads(path.read_text())
    assert list(data) == list(JOINT_NAMES)
    assert data['gripper'] == {'id': 6, 'drive_mode': 0, 'homing_offset': 0,
                               'range_min': 1000, 'range_max': 3000}
    assert load_calibration('arm2') == cal
    assert path.read_text() == calibration_to_json(cal)
    assert [p.name for p in path.parent.iterdir()] == ['arm2.json']  # no temp file left
