"""launch/sim.launch.py and real.launch.py describe the same graphs as `lerobot-lang sim|real`.

`launch` and `launch_ros` are not on PyPI (a ROS workspace has them), so the files are run
against stand-ins with the constructor signatures of the real classes: an unknown keyword or a
missing executable fails here as it would under `ros2 launch`.
"""

from __future__ import annotations

import ast
import json
import runpy
import sys
import types
from pathlib import Path

import pytest
import yaml

from lerobot_lang_nodes import graph

ROOT = Path(__file__).resolve().parents[2]


class LaunchDescription:
    def __init__(self, initial_entities=None, *, deprecated_reason=None) -> None:
        self.entities = list(initial_entities or [])


class DeclareLaunchArgument:
    def __init__(self, name, *, default_value=None, description=None, choices=None,
                 **kwargs) -> None:
        self.name, self.default_value = name, default_value
        self.description, self.choices = description, choices


class LaunchContext:
    """What `ros2 launch` hands an OpaqueFunction: the launch configurations by name."""

    def __init__(self, values: dict[str, str]) -> None:
        self.launch_configurations = dict(values)


class LaunchConfiguration:
    def __init__(self, variable_name, *, default=None) -> None:
        self.variable_name = variable_name

    def perform(self, context: LaunchContext) -> str:
        return context.launch_configurations[self.variable_name]


class OpaqueFunction:
    def __init__(self, *, function, args=None, kwargs=None, **rest) -> None:
        self.function, self.args, self.kwargs = function, args or [], kwargs or {}

    def execute(self, context: LaunchContext) -> list:
        return self.function(context, *self.args, **self.kwargs) or []


class Node:
    # launch_ros.actions.Node's own keywords; the rest go to launch's ExecuteProcess (and
    # `condition` on to launch's Action).
    def __init__(self, *, executable, package=None, name=None, namespace=None, exec_name=None,
                 parameters=None, remappings=None, ros_arguments=None, arguments=None,
                 output='log', emulate_tty=False, respawn=False, respawn_delay=None,
                 additional_env=None, condition=None) -> None:
        self.kwargs = dict(executable=executable, package=package, name=name,
                           namespace=namespace, parameters=parameters or [],
                           remappings=remappings or [], arguments=arguments or [],
                           additional_env=additional_env or {})


@pytest.fixture
def launch_stand_ins(monkeypatch):
    mods = {
        'launch': {'LaunchDescription': LaunchDescription},
        'launch.actions': {'DeclareLaunchArgument': DeclareLaunchArgument,
                           'OpaqueFunction': OpaqueFunction},
        'launch.substitutions': {'LaunchConfiguration': LaunchConfiguration},
        'launch_ros': {},
        'launch_ros.actions': {'Node': Node},
    }
    for name, attrs in mods.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)


def console_scripts() -> set[str]:
    tree = ast.parse((ROOT / 'setup.py').read_text())
    return {n.value.split(' = ')[0].strip() for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and ' = ' in n.value}


def launch(graph_name: str, **values: str) -> tuple[dict, list[dict], dict]:
    """Run a launch file as `ros2 launch` would: (arguments, started nodes, their params)."""
    module = runpy.run_path(str(ROOT / 'launch' / f'{graph_name}.launch.py'))
    description = module['generate_launch_description']()
    args = {e.name: e for e in description.entities if isinstance(e, DeclareLaunchArgument)}
    unknown = set(values) - set(args)
    assert not unknown, f'no launch arguments {unknown}'
    context = LaunchContext({**{n: a.default_value for n, a in args.items()}, **values})
    nodes = [n.kwargs for e in description.entities if isinstance(e, OpaqueFunction)
             for n in e.execute(context)]
    files = {p for n in nodes for p in n['parameters']}
    assert len(files) == 1, 'every node reads the one generated params file'
    params = yaml.safe_load(Path(files.pop()).read_text())
    return args, nodes, params


def node_params(params: dict, name: str) -> dict:
    # The keys match under any namespace: rcl would ignore a bare `planner:` under /robot1.
    assert name not in params, f'bare key {name!r} would not match a namespaced node'
    return params[f'/**/{name}']['ros__parameters']


@pytest.mark.parametrize('graph_name', ['sim', 'real'])
def test_every_launch_argument_is_described(launch_stand_ins, graph_name):
    module = runpy.run_path(str(ROOT / 'launch' / f'{graph_name}.launch.py'))
    args = [e for e in module['generate_launch_description']().entities
            if isinstance(e, DeclareLaunchArgument)]
    names = [a.name for a in args]
    assert len(names) == len(set(names))
    for needed in ('task', 'planner_backend', 'planner_model', 'policy_backend', 'policy_path',
                   'record', 'record_dir', 'use_sim_time', 'namespace', 'params_file',
                   'composed', 'viewer_port'):
        assert needed in names
    if graph_name == 'real':
        for needed in ('robot_port', 'calibration', 'cameras', 'max_relative_target_rad',
                       'command_timeout_s', 'robot_yaml'):
            assert needed in names
    for a in args:  # what `ros2 launch ... --show-args` prints
        assert a.description and len(a.description) > 20, a.name
    assert {a.name: a.default_value for a in args}['use_sim_time'] == (
        'true' if graph_name == 'sim' else 'false')


@pytest.mark.parametrize('composed', ['false', 'true'])
def test_sim_launch_file_starts_the_sim_graph(launch_stand_ins, composed):
    _args, nodes, params = launch('sim', composed=composed)
    specs = graph.composed(graph.SIM) if composed == 'true' else graph.SIM
    assert [n['executable'] for n in nodes] == [s.name for s in specs]
    scripts = console_scripts()
    shipped = yaml.safe_load(graph.default_params_file('sim').read_text())
    for spec, node in zip(specs, nodes):
        assert node['package'] == 'lerobot_lang_nodes' and node['executable'] in scripts
        # launch_ros makes `name` a global __node remap: a composed process must not get one.
        assert node['name'] == (None if spec.hosts else spec.name)
        assert node['namespace'] is None
        assert [tuple(r) for r in node['remappings']] == list(spec.remaps)
        for name in spec.hosts or (spec.name,):
            got = node_params(params, name)
            assert got['use_sim_time'] is spec.use_sim_time
            for key, value in shipped[name]['ros__parameters'].items():
                if key != 'use_sim_time':
                    assert got[key] == value, (name, key)
    assert 'task' not in node_params(params, 'planner')  # no task: the planner says so


def test_sim_launch_arguments_become_parameters(launch_stand_ins, tmp_path):
    ckpt = tmp_path / 'ckpt'
    _args, nodes, params = launch(
        'sim', task='put the blue cube in the bowl', namespace='robot1', viewer_port='8123',
        policy_path=str(ckpt), planner_model=str(tmp_path / 'smol.gguf'), device='cpu',
        record='true', record_dir=str(tmp_path / 'bags'), use_sim_time='false')
    assert {n['namespace'] for n in nodes} == {'/robot1'}
    assert [n['executable'] for n in nodes][-1] == 'recorder'
    planner = node_params(params, 'planner')
    assert planner['task'] == 'put the blue cube in the bowl'
    assert (planner['backend'], planner['model_path'], planner['gguf_file']) == (
        'transformers', str(tmp_path), 'smol.gguf')
    policy = node_params(params, 'policy')
    assert (policy['backend'], policy['model_path'], policy['device']) == (
        'lerobot', str(ckpt), 'cpu')
    assert node_params(params, 'viewer')['port'] == 8123
    assert node_params(params, 'recorder')['output_dir'] == str(tmp_path / 'bags')
    assert not any(node_params(params, n)['use_sim_time'] for n in ('planner', 'policy'))
    _args, nodes, _params = launch('sim', viewer='false')
    assert 'viewer' not in [n['executable'] for n in nodes]


def test_real_launch_file_starts_the_real_graph(launch_stand_ins, tmp_path):
    ckpt = tmp_path / 'ckpt'
    ckpt.mkdir()
    (ckpt / 'config.json').write_text(json.dumps({'type': 'act'}))
    cameras = tmp_path / 'cameras.yaml'
    cameras.write_text('front: {source: 0, width: 640, height: 480}\n'
                       'top: {source: /dev/video2}\n')
    _args, nodes, params = launch(
        'real', robot_port='/dev/ttyUSB3', calibration='my_follower', cameras=str(cameras),
        policy_path=str(ckpt), max_relative_target_rad='0.2', command_timeout_s='0.4',
        task='pick up the cube')
    specs = graph.real_specs(('front', 'top'))
    assert [n['name'] for n in nodes] == [s.name for s in specs]
    assert [n['executable'] for n in nodes] == [s.script for s in specs]
    assert set(n['executable'] for n in nodes) <= console_scripts()
    driver = node_params(params, 'so101_driver')
    assert (driver['port'], driver['calibration_id'], driver['max_relative_target_rad'],
            driver['command_timeout_s']) == ('/dev/ttyUSB3', 'my_follower', 0.2, 0.4)
    assert node_params(params, 'top_camera')['source'] == '/dev/video2'
    assert node_params(params, 'policy')['model_path'] == str(ckpt)
    assert node_params(params, 'planner')['task'] == 'pick up the cube'
    assert node_params(params, 'planner')['cameras'] == ['front', 'top']
    assert not any(node_params(params, s.name)['use_sim_time'] for s in specs)
    for spec, node in zip(specs, nodes):
        assert [tuple(r) for r in node['remappings']] == list(spec.remaps)
    assert 'dry_run' not in driver  # the arm moves unless a dry run is asked for


@pytest.mark.parametrize('graph_name, executor', [('sim', 'sim_bridge'),
                                                  ('real', 'so101_driver')])
def test_dry_run_argument_reaches_the_executor_only(launch_stand_ins, tmp_path, graph_name,
                                                    executor):
    extra = {}
    if graph_name == 'real':
        ckpt = tmp_path / 'ckpt'
        ckpt.mkdir()
        (ckpt / 'config.json').write_text(json.dumps({'type': 'smolvla'}))
        extra = dict(robot_port='/dev/ttyUSB3', calibration='my_follower',
                     policy_path=str(ckpt))
    _args, nodes, params = launch(graph_name, dry_run='true', **extra)
    assert node_params(params, executor)['dry_run'] is True
    assert 'dry_run' not in node_params(params, 'policy')  # the policy runs as ever


def test_real_launch_refuses_a_graph_without_a_policy_checkpoint(launch_stand_ins):
    with pytest.raises(ValueError, match='policy checkpoint'):
        launch('real', robot_port='/dev/ttyUSB3', calibration='my_follower')


def test_a_params_file_with_namespaced_keys_is_honoured(launch_stand_ins, tmp_path):
    shipped = yaml.safe_load(graph.default_params_file('sim').read_text())
    own = {f'/**/{name}': block for name, block in shipped.items()}
    own['/**/planner']['ros__parameters']['high_level_hz'] = 2.5
    path = tmp_path / 'my_sim.yaml'
    path.write_text(yaml.safe_dump(own))
    _args, _nodes, params = launch('sim', params_file=str(path))
    assert node_params(params, 'planner')['high_level_hz'] == 2.5
    assert node_params(params, 'sim_bridge')['ctrl_hz'] == 30.0


def test_sim_launch_file_starts_the_kitchen_bridge_from_its_environment(launch_stand_ins,
                                                                       tmp_path, monkeypatch):
    venv = tmp_path / 'venv-robocasa'
    (venv / 'bin').mkdir(parents=True)
    (venv / 'bin' / 'python').symlink_to(sys.executable)
    monkeypatch.setenv(graph.ROBOCASA_VENV_ENV, str(venv))
    _args, nodes, params = launch('sim', simulator='standin')
    bridge = nodes[0]
    # Not a console script of this environment: that environment's Python runs the module.
    assert bridge['package'] is None and bridge['name'] == 'robocasa_bridge'
    assert bridge['executable'] == str(venv.resolve() / 'bin' / 'python')
    assert bridge['arguments'] == ['-m', graph.ROBOCASA_BRIDGE.module]
    assert bridge['additional_env'] == {'AMENT_PREFIX_PATH': str(venv.resolve())}
    assert [n['executable'] for n in nodes[1:]] == ['planner', 'policy', 'viewer']
    assert node_params(params, 'robocasa_bridge')['simulator'] == 'standin'
    assert node_params(params, 'viewer')['camera_labels'] == ['left', 'wrist', 'right']
