"""The graph split over two computers, as the one graph plan builds it (issue 31): the robot
side without the policy, the policy computer's `policy` graph, compressed images where the
graph is split (a one-computer graph stays raw), and the DDS profiles of each side."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from lerobot_lang_nodes import dds, graph
from lerobot_lang_nodes.cli import bringup
from lerobot_lang_nodes.cli.main import build_parser

NS = '{http://www.eprosima.com}'


def _block(plan: graph.LaunchPlan, node: str) -> dict:
    return plan.params.get(node, {}).get('ros__parameters', {})


@pytest.fixture
def plans():
    made: list[graph.LaunchPlan] = []

    def plan(graph_name: str, **values: str) -> graph.LaunchPlan:
        made.append(graph.launch_plan(graph_name, values))
        return made[-1]
    yield plan
    for p in made:
        p.params_file.unlink(missing_ok=True)


def test_robot_side_without_the_policy_publishes_jpeg(plans):
    robot = plans('sim', without='policy', viewer='false')
    assert [s.name for s in robot.specs] == ['sim_bridge', 'planner']
    assert _block(robot, 'sim_bridge')['publish_compressed'] is True
    both = plans('sim', without='policy,planner', jpeg_quality='60')
    assert [s.name for s in both.specs] == ['sim_bridge', 'viewer']
    assert _block(both, 'sim_bridge')['jpeg_quality'] == 60
    raw = plans('sim', without='policy', compressed_images='false')
    assert 'publish_compressed' not in _block(raw, 'sim_bridge')


def test_one_computer_stays_raw(plans):
    local = plans('sim')
    assert 'policy' in [s.name for s in local.specs]
    assert 'publish_compressed' not in _block(local, 'sim_bridge')
    assert 'image_transport' not in _block(local, 'policy')
    # Asked for: the cameras publish JPEG too (a remote viewer), the local policy reads raw.
    asked = plans('sim', compressed_images='true')
    assert _block(asked, 'sim_bridge')['publish_compressed'] is True
    assert 'image_transport' not in _block(asked, 'policy')


def test_policy_computer_runs_the_policy_on_compressed_images(plans):
    policy = plans('policy', policy_backend='scripted')
    assert [s.name for s in policy.specs] == ['policy']
    block = _block(policy, 'policy')
    assert block['image_transport'] == 'compressed' and block['use_sim_time'] is True
    assert block['backend'] == 'scripted'
    with_planner = plans('policy', planner='true', task='stack the cubes')
    assert [s.name for s in with_planner.specs] == ['planner', 'policy']
    assert _block(with_planner, 'planner')['task'] == 'stack the cubes'
    real = plans('policy', robot='real', calibration='my_follower', compressed_images='false')
    block = _block(real, 'policy')
    assert block['use_sim_time'] is False and block['lerobot.calibration_id'] == 'my_follower'
    assert block['backend'] == 'lerobot' and 'image_transport' not in block


@pytest.mark.parametrize('graph_name, values, match', [
    ('sim', {'without': 'sim_bridge'}, 'cannot run on another computer'),
    ('sim', {'without': 'policy', 'composed': 'true'}, 'share one process'),
    # A first task given where the planner is not would be lost: say where it goes.
    ('sim', {'without': 'policy,planner', 'task': 'stack'}, 'planner runs on the other'),
    ('policy', {'task': 'stack'}, 'planner is not on this computer'),
])
def test_refused_splits_say_why(graph_name, values, match):
    with pytest.raises(ValueError, match=match):
        graph.plan(graph_name, values)


def test_cli_policy_command_builds_the_same_plan():
    args = build_parser().parse_args(['policy', '--policy-backend', 'scripted', '--planner'])
    specs, params, _source = bringup.policy_plan(args)
    assert [s.name for s in specs] == ['planner', 'policy']
    assert params['policy']['ros__parameters']['image_transport'] == 'compressed'
    args = build_parser().parse_args(['sim', '--without', 'policy', '--jpeg-quality', '70'])
    made = bringup.plan('sim', args)
    assert 'policy' not in [s.name for s in made.specs]
    bridge = made.params['sim_bridge']['ros__parameters']
    assert bridge['publish_compressed'] is True and bridge['jpeg_quality'] == 70


def test_each_side_gets_its_dds_profile_and_discovery_stays_local():
    base = {'PATH': '/usr/bin'}
    robot = dds.ros_environment(base, side='robot')
    policy = dds.ros_environment(base, side='policy')
    assert robot['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'LOCALHOST'  # SUBNET only when asked
    assert policy['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'LOCALHOST'

    def transports(env) -> set[str]:
        root = ET.parse(env['FASTDDS_DEFAULT_PROFILES_FILE']).getroot()
        return {t.text for t in root.iter(f'{NS}type')}
    assert transports(robot) == {'SHM', 'UDPv4'}  # shared memory among its own nodes
    assert transports(policy) == {'UDPv4'}  # nothing can share memory across computers
    assert transports(dds.ros_environment(base)) == {'SHM'}  # one computer: unchanged
    mine = dds.ros_environment({**base, 'FASTDDS_DEFAULT_PROFILES_FILE': 'x.xml'}, side='robot')
    assert mine['FASTDDS_DEFAULT_PROFILES_FILE'] == 'x.xml'


def _robot_yaml(tmp_path, checkpoint: bool) -> str:
    (tmp_path / 'ckpt').mkdir()
    if checkpoint:  # the policy computer has the checkpoint; the robot's computer need not
        (tmp_path / 'ckpt' / 'config.json').write_text('{}')
    path = tmp_path / 'robot.yaml'
    path.write_text('port: /dev/ttyACM0\ncalibration: {id: my_follower}\n'
                    'cameras:\n  front: {source: 0}\n  wrist: {source: /dev/video2}\n'
                    'policy: {path: ckpt}\n')
    return str(path)


def test_real_robot_side_needs_no_checkpoint_the_policy_computer_reads_the_same_yaml(
        tmp_path, plans):
    from lerobot_lang_nodes.real_config import RobotConfigError
    robot_yaml = _robot_yaml(tmp_path, checkpoint=False)
    robot = plans('real', robot_yaml=robot_yaml, without='policy')
    assert 'policy' not in [s.name for s in robot.specs]
    for camera in ('front', 'wrist'):
        assert _block(robot, f'{camera}_camera')['publish_compressed'] is True
    with pytest.raises(RobotConfigError, match='not a LeRobot'):  # one computer: checked
        graph.launch_plan('real', {'robot_yaml': robot_yaml})
    (tmp_path / 'ckpt' / 'config.json').write_text('{}')
    policy = _block(plans('policy', robot='real', robot_yaml=robot_yaml), 'policy')
    assert policy['model_path'] == str(tmp_path / 'ckpt')
    assert policy['cameras'] == ['front', 'wrist']
    assert policy['lerobot.calibration_id'] == 'my_follower'
    assert policy['image_transport'] == 'compressed' and policy['use_sim_time'] is False
