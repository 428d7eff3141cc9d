"""How `lerobot-lang sim --simulator X` and sim.launch.py simulator:=X wire the kitchens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes.viewer_node import ViewerConfig


@pytest.mark.parametrize('simulator', ['robocasa', 'robosuite', 'standin'])
def test_launch_plan_runs_the_kitchen_bridge_in_its_environment(simulator, tmp_path,
                                                                 monkeypatch):
    venv = tmp_path / 'venv'
    (venv / 'bin').mkdir(parents=True)
    (venv / 'bin' / 'python').symlink_to(sys.executable)
    monkeypatch.setenv(graph.ROBOCASA_VENV_ENV, str(venv))
    plan = graph.launch_plan('sim', {'simulator': simulator, 'policy_path': str(tmp_path)})
    assert [s.name for s in plan.specs] == ['robocasa_bridge', 'planner', 'policy', 'viewer']
    bridge = plan.specs[0]
    assert graph.interpreter(bridge) == str(venv.resolve() / 'bin' / 'python')
    assert graph.interpreter(plan.specs[1]) == sys.executable
    params = plan.params
    assert params['robocasa_bridge']['ros__parameters']['simulator'] == simulator
    assert params['robocasa_bridge']['ros__parameters']['use_sim_time'] is False
    policy = params['policy']['ros__parameters']
    assert policy['backend'] == 'lerobot' and policy['state_topic'] == 'robot_state'
    assert policy['use_sim_time'] is True
    viewer = ViewerConfig(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in params['viewer']['ros__parameters'].items()
                             if k in ViewerConfig.__dataclass_fields__})
    assert viewer.labels() == {'robot0_agentview_left': 'left', 'robot0_eye_in_hand': 'wrist',
                               'robot0_agentview_right': 'right'}
    written = yaml.safe_load(plan.params_file.read_text())
    assert '/**/robocasa_bridge' in written


def test_the_tabletop_stays_the_default():
    plan = graph.launch_plan('sim', {})
    assert plan.specs[0].name == 'sim_bridge' and not plan.specs[0].environment


def test_a_missing_bridge_environment_is_reported_with_the_command_to_build_it(tmp_path):
    env = {**os.environ, graph.ROBOCASA_VENV_ENV: str(tmp_path / 'absent')}
    proc = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim',
                           '--simulator', 'standin', '--output-dir', str(tmp_path / 'out')],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert 'scripts/setup.sh --robocasa' in proc.stderr
    assert not Path(tmp_path / 'out').exists()


def test_camera_labels_must_fit_the_cameras():
    assert ViewerConfig(cameras=('a', 'b')).labels() == {'a': 'a', 'b': 'b'}
    assert ViewerConfig(cameras=('a', 'b'), camera_labels=('x', '')).labels() == {
        'a': 'x', 'b': 'b'}
    with pytest.raises(ValueError, match='one label per camera'):
        ViewerConfig(cameras=('a', 'b'), camera_labels=('x',))


@pytest.mark.parametrize('simulator, views', [
    ('mujoco', ['front', 'wrist']),
    ('standin', ['robot0_agentview_left', 'robot0_eye_in_hand', 'robot0_agentview_right'])])
def test_the_camera_list_is_the_simulator_s_for_every_node_of_either_starter(
        simulator, views, tmp_path):
    """Set once on the simulator, fanned out by one function to both starters' parameters:
    a simulator rendering one view must not leave the policy waiting for another."""
    plan = graph.launch_plan('sim', {'simulator': simulator})
    for node in ('planner', 'policy', 'viewer'):
        assert plan.params[node]['ros__parameters']['cameras'] == views, node
    bridge = plan.specs[0].name
    one = graph.launch_plan('sim', {'simulator': simulator},
                            overrides={bridge: {'cameras': views[:1]}})
    for node in ('planner', 'policy', 'viewer'):
        assert one.params[node]['ros__parameters']['cameras'] == views[:1], node
    # A node's own list wins over the simulator's.
    own = graph.launch_plan('sim', {'simulator': simulator},
                            overrides={bridge: {'cameras': views[:1]},
                                       'viewer': {'cameras': views}})
    assert own.params['viewer']['ros__parameters']['cameras'] == views
    for p in (plan, one, own):
        p.params_file.unlink()
    # `lerobot-lang sim` writes the same into its session's params.yaml.
    from lerobot_lang_nodes.cli import bringup
    from lerobot_lang_nodes.cli.main import build_parser
    args = build_parser().parse_args(['sim', '--simulator', simulator, '--record'])
    params = bringup.plan('sim', args).params
    for node in ('planner', 'policy', 'viewer', 'recorder'):
        assert params[node]['ros__parameters']['cameras'] == views, node
    if simulator == 'mujoco':
        return
    # Each kitchen episode brings its own task; a task given on the command line wins.
    planner = params['planner']['ros__parameters']
    assert planner['scene_task_topic'] == 'sim/task_description' and 'task' not in planner
    args = build_parser().parse_args(['sim', '--simulator', simulator, '--task', 'open it'])
    assert bringup.plan('sim', args).params['planner']['ros__parameters']['task'] == 'open it'
