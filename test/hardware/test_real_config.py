"""Robot YAML -> REAL graph parameters, the REAL graph's camera nodes, and `calibrate`."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from lerobot_lang_nodes import graph, paths
from lerobot_lang_nodes import real_config
from lerobot_lang_nodes.nodes.so101_driver_node import So101DriverConfig
from lerobot_lang_nodes.so101.calibration import load_calibration
from lerobot_lang_nodes.testing import EmulatorProcess, wait_until

SAMPLE_CALIBRATION = Path(__file__).resolve().parents[1] / 'data' / 'front_camera.yaml'
ROBOT = {'port': '/tmp/so101', 'calibration': {'id': 'arm1'},
         'cameras': {'front': {'source': 0, 'width': 320, 'height': 240, 'fps': 15,
                               'fourcc': 'MJPG'},
                     'wrist': {'source': '/dev/video2'}},
         'safety': {'max_relative_target_rad': {'shoulder_pan': 0.2}, 'command_timeout_s': 0.3}}


def write(tmp_path, data) -> object:
    p = tmp_path / 'robot.yaml'
    p.write_text(yaml.safe_dump(data))
    return p


def checkpoint_dir(tmp_path) -> Path:
    """Only what the bring-up checks up front; the policy node loads the rest."""
    ckpt = tmp_path / 'pretrained_model'
    ckpt.mkdir(exist_ok=True)
    (ckpt / 'config.json').write_text('{"type": "act"}')
    return ckpt


def test_params_file_merges_robot_into_real_defaults(tmp_path) -> None:
    checkpoint_dir(tmp_path)
    robot = {**ROBOT, 'policy': {'path': 'pretrained_model', 'device': 'cpu',
                                 'camera_map': {'front': 'observation.images.top'},
                                 'inference_timeout_s': 60},
             'execution': {'time_align': False, 'max_chunk_age_s': 0}}
    out = real_config.params_file_from_robot_yaml(write(tmp_path, robot),
                                                  graph.default_params_file('real'))
    text = out.read_text()
    out.unlink()
    assert '&' not in text and '*' not in text, 'rcl rejects YAML anchors and aliases'
    params = yaml.safe_load(text)
    drv = params['so101_driver']['ros__parameters']
    assert drv['port'] == '/tmp/so101' and drv['calibration_id'] == 'arm1'
    assert drv['max_relative_target_per_joint_rad'] == [0.2, 0, 0, 0, 0, 0]
    assert drv['command_timeout_s'] == 0.3
    assert drv['time_align'] is False and drv['max_chunk_age_s'] == 0.0  # LeRobot's sync play
    # The real arm starts paused: the driver's default, not restated in real.yaml.
    assert drv.get('start_paused', So101DriverConfig.start_paused) is True
    front = params['front_camera']['ros__parameters']
    assert front == {'width': 320, 'height': 240, 'fps': 15.0, 'source': '0', 'fourcc': 'MJPG'}
    assert params['wrist_camera']['ros__parameters']['source'] == '/dev/video2'
    assert 'camera' not in params
    assert params['planner']['ros__parameters']['cameras'] == ['front', 'wrist']
    policy = params['policy']['ros__parameters']
    assert policy['backend'] == 'lerobot' and policy['ground_truth_topic'] == ''
    assert policy['model_path'] == str(tmp_path / 'pretrained_model')  # next to the robot YAML
    assert policy['device'] == 'cpu'
    assert policy['lerobot.camera_map'] == ['front:observation.images.top']
    assert policy['inference_timeout_s'] == 60.0  # a VLA on a CPU: seconds per chunk
    # The policy converts joint states with the driver's calibration.
    assert policy['lerobot.calibration_id'] == 'arm1' and policy['lerobot.calibration_path'] == ''


def test_real_graph_needs_a_policy_checkpoint_and_refuses_the_scripted_expert(tmp_path) -> None:
    defaults = graph.default_params_file('real')
    with pytest.raises(real_config.RobotConfigError, match='no policy checkpoint is set'):
        real_config.params_file_from_robot_yaml(write(tmp_path, ROBOT), defaults)
    robot = {**ROBOT, 'policy': {'path': str(tmp_path / 'nowhere')}}
    with pytest.raises(real_config.RobotConfigError, match='nowhere is not a LeRobot checkpoint'):
        real_config.params_file_from_robot_yaml(write(tmp_path, robot), defaults)
    scripted = yaml.safe_load(defaults.read_text())
    scripted['policy']['ros__parameters']['backend'] = 'scripted'
    params = tmp_path / 'scripted.yaml'
    params.write_text(yaml.safe_dump(scripted))
    robot = {**ROBOT, 'policy': {'path': str(checkpoint_dir(tmp_path))}}
    with pytest.raises(real_config.RobotConfigError,
                       match='policy backend is scripted, a simulator expert'):
        real_config.params_file_from_robot_yaml(write(tmp_path, robot), params)


def test_camera_info_url_is_checked_and_resolved_next_to_the_robot_yaml(tmp_path) -> None:
    (tmp_path / 'front.yaml').write_text(SAMPLE_CALIBRATION.read_text())
    robot = {**ROBOT, 'cameras': {'front': {'source': 0, 'camera_info_url': 'front.yaml'}}}
    loaded = real_config.load_robot_yaml(write(tmp_path, robot))
    assert loaded['cameras']['front']['camera_info_url'] == str(tmp_path / 'front.yaml')
    robot['cameras']['front']['camera_info_url'] = 'missing.yaml'
    with pytest.raises(real_config.RobotConfigError,
                       match=r"'cameras.front.camera_info_url' is unusable .*missing.yaml"):
        real_config.load_robot_yaml(write(tmp_path, robot))


def test_example_robot_yaml_is_valid() -> None:
    robot = real_config.load_robot_yaml(paths.config_path('robot.example.yaml'))
    assert list(robot['cameras']) == ['front', 'wrist']


@pytest.mark.parametrize('change, field', [
    ({'port': ''}, "'port'"),
    ({'calibration': {}}, "'calibration'"),
    ({'cameras': {'front': {'width': 320}}}, "'cameras.front.source'"),
    ({'cameras': {'Front-1': {'source': 0}}}, "'cameras.Front-1'"),
    ({'cameras': {'front': {'source': 0, 'fourcc': 'MJ'}}}, "'cameras.front.fourcc'"),
    ({'safety': {'max_relative_target_rad': -1}}, "'safety.max_relative_target_rad'"),
    ({'safety': {'max_relative_target_rad': {'elbow': 0.1}}},
     "'safety.max_relative_target_rad.elbow'"),
    ({'safety': {'timeout': 1}}, "'safety.timeout'"),
    ({'prot': 'x'}, "'prot'"),
    ({'policy': {'pth': 'x'}}, "'policy.pth'"),
    ({'policy': {'path': ''}}, "'policy.path'"),
    ({'policy': {'path': 'x', 'camera_map': 3}}, "'policy.camera_map'"),
    ({'policy': {'path': 'x', 'inference_timeout_s': 'slow'}}, "'policy.inference_timeout_s'"),
    ({'policy': {'path': 'x', 'inference_timeout_s': -1}}, "'policy.inference_timeout_s'"),
    ({'execution': {'time_align': 'no'}}, "'execution.time_align'"),
    ({'execution': {'max_chunk_age_s': -1}}, "'execution.max_chunk_age_s'"),
    ({'execution': {'sync': True}}, "'execution.sync'"),
])
def test_validation_errors_name_the_field(tmp_path, change, field) -> None:
    with pytest.raises(real_config.RobotConfigError, match=field):
        real_config.load_robot_yaml(write(tmp_path, {**ROBOT, **change}))


def test_real_specs_add_one_camera_node_per_camera() -> None:
    specs = graph.real_specs(('front', 'wrist'))
    names = [s.name for s in specs]
    assert names == ['so101_driver', 'front_camera', 'wrist_camera', 'planner', 'policy',
                     'viewer']
    args = graph.ros_args(specs[1], None)
    assert 'image_raw:=cameras/front/image_raw' in args
    assert 'image_raw/compressed:=cameras/front/image_raw/compressed' in args


def test_calibrate_cli_writes_lerobot_json(tmp_path) -> None:
    out = tmp_path / 'arm.json'
    # In its own process: the calibrate CLI's bus replies must not wait on this test process.
    with EmulatorProcess(range(1, 7), link=tmp_path / 'so101') as emu:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'calibrate', '--port',
             str(tmp_path / 'so101'), '--robot-id', 'arm', '--path', str(out)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        buf: list[str] = []
        seen = threading.Event()

        def pump() -> None:
            while ch := proc.stdout.read(1):
                buf.append(ch)
                if ch == ';' and 'entire range' in ''.join(buf):
                    seen.set()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        proc.stdin.write('\n')  # middle pose confirmed at the emulator's 2048
        proc.stdin.flush()
        assert seen.wait(30.0), 'no range-recording prompt'
        # The operator moves every joint to both extremes; the live line shows each sample.
        for pose in (1500, 2600):
            for servo_id in range(1, 7):
                emu.set_present_position(servo_id, pose)
            mark = f'shoulder_pan={pose}'
            wait_until(lambda: mark in ''.join(buf), 20.0, f'a recorded sample at {pose}')
        proc.stdin.write('\n')
        proc.stdin.flush()
        assert proc.wait(30.0) == 0, ''.join(buf)
        t.join(5.0)
    cal = load_calibration(path=out)
    assert cal['shoulder_pan'].range_min <= 1500 and cal['shoulder_pan'].range_max >= 2600
    assert (cal['wrist_roll'].range_min, cal['wrist_roll'].range_max) == (0, 4095)
