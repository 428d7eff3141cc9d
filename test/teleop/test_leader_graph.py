"""The leader arm in the graphs: `leader_port` starts so101_leader next to the sim or the real
arm, through the one graph plan (launch files) and the command line alike."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.cli import bringup


def leader_block(params: dict) -> dict:
    return params['so101_leader']['ros__parameters']


@pytest.mark.parametrize('calibration, key', [('my_leader', 'calibration_id'),
                                              ('/cal/leader.json', 'calibration_path')])
def test_launch_plan_starts_the_leader_on_its_port(calibration, key):
    plan = graph.launch_plan('sim', {'leader_port': '/dev/ttyACM1',
                                     'leader_calibration': calibration, 'viewer': 'false'})
    try:
        names = [s.name for s in plan.specs]
        assert 'so101_leader' in names and 'sim_bridge' in names
        leader = next(s for s in plan.specs if s.name == 'so101_leader')
        assert not leader.required  # a leader that dies leaves the graph (the arm holds)
        block = leader_block(plan.params)
        assert block['port'] == '/dev/ttyACM1' and block[key] == calibration
        # Relative topics: under a namespace the executor tracks its own leader.
        assert block['joint_states_topic'] == 'leader/joint_states'
        assert block['use_sim_time'] is False  # the leader reads on the wall clock
    finally:
        plan.params_file.unlink()


def test_no_leader_port_no_leader():
    plan = graph.launch_plan('sim', {'viewer': 'false'})
    try:
        assert 'so101_leader' not in [s.name for s in plan.specs]
    finally:
        plan.params_file.unlink()


def test_the_command_line_starts_the_leader(tmp_path):
    (tmp_path / 'ckpt').mkdir()
    (tmp_path / 'ckpt' / 'config.json').write_text(json.dumps({'type': 'act'}))
    robot = tmp_path / 'robot.yaml'
    robot.write_text(yaml.safe_dump({'port': '/dev/null', 'calibration': {'id': 'x'},
                                     'cameras': {'front': {'source': 'synthetic:square'}},
                                     'policy': {'path': str(tmp_path / 'ckpt')}}))
    for command in ('sim', 'real'):
        parser = argparse.ArgumentParser()
        bringup.add_arguments(command, parser)
        argv = ([str(robot)] if command == 'real' else []) + [
            '--leader-port', '/dev/ttyACM1', '--leader-calibration', 'my_leader', '--no-viewer']
        made = bringup.plan(command, parser.parse_args(argv))
        assert 'so101_leader' in [s.name for s in made.specs]
        leader = made.params['so101_leader']['ros__parameters']
        assert leader['port'] == '/dev/ttyACM1' and leader['calibration_id'] == 'my_leader'
    args = parser.parse_args([str(robot), '--no-viewer'])
    assert 'so101_leader' not in [s.name for s in bringup.plan('real', args).specs]
