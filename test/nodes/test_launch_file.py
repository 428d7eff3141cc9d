"""launch/sim.launch.py and real.launch.py describe the same graphs as `lerobot-lang sim|real`.

`launch` and `launch_ros` are not on PyPI (a ROS workspace has them), so the files are run
against stand-ins with the constructor signatures of the real classes: an unknown keyword or a
missing executable fails here as it would under `ros2 launch`. Where a node's exit matters,
the node itself is started as launch_ros starts it and its exit handed to the launch file's
handler.
"""

from __future__ import annotations

import ast
import json
import logging
import runpy
import tempfile
import sys
import types
from pathlib import Path

import pytest
import yaml

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.testing import NodeProcess

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
    """What `ros2 launch` hands an OpaqueFunction or an event handler: the launch
    configurations by name, and whether the launch is shutting down (Ctrl-C)."""

    def __init__(self, values: dict[str, str], is_shutdown: bool = False) -> None:
        self.launch_configurations = dict(values)
        self.is_shutdown = is_shutdown


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
                 additional_env=None, condition=None, on_exit=None) -> None:
        self.kwargs = dict(executable=executable, package=package, name=name,
                           namespace=namespace, parameters=parameters or [],
                           remappings=remappings or [], arguments=arguments or [],
                           additional_env=additional_env or {}, on_exit=on_exit)


class ProcessExited:
    """launch.events.process.ProcessExited: what an `on_exit` callable is given."""

    def __init__(self, *, action, name, cmd, cwd, env, pid, returncode) -> None:
        self.action, self.process_name, self.cmd = action, name, cmd
        self.cwd, self.env, self.pid, self.returncode = cwd, env, pid, returncode


@pytest.fixture
def launch_stand_ins(monkeypatch, tmp_path):
    """The stand-in modules; returns launch.logging.launch_config (its log_dir: the launch's
    own log folder, one per `ros2 launch`)."""
    log_dir = tmp_path / 'ros_log' / 'launch-1'
    log_dir.mkdir(parents=True)
    launch_config = types.SimpleNamespace(log_dir=str(log_dir))
    mods = {
        'launch': {'LaunchDescription': LaunchDescription},
        'launch.actions': {'DeclareLaunchArgument': DeclareLaunchArgument,
                           'OpaqueFunction': OpaqueFunction},
        'launch.logging': {'launch_config': launch_config, 'get_logger': logging.getLogger},
        'launch.substitutions': {'LaunchConfiguration': LaunchConfiguration},
        'launch_ros': {},
        'launch_ros.actions': {'Node': Node},
    }
    for name, attrs in mods.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    return launch_config


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
    assert (planner['backend'], planner['model_path'], planner['transformers.gguf_file']) == (
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


def test_a_real_launch_error_names_the_users_robot_yaml(launch_stand_ins, tmp_path):
    """The refusal names the file the user wrote, not a temporary copy of it."""
    robot = tmp_path / 'robot.yaml'
    robot.write_text(yaml.safe_dump({'port': '/dev/ttyUSB3', 'calibration': 'my_follower'}))
    with pytest.raises(ValueError) as refused:
        launch('real', robot_yaml=str(robot))
    assert str(refused.value).startswith(f'{robot} + '), refused.value
    assert 'no policy checkpoint is set' in str(refused.value)
    robot.write_text(yaml.safe_dump({'port': '/dev/ttyUSB3', 'calibration': 'my_follower',
                                     'safety': {'command_timeout_s': -1}}))
    with pytest.raises(ValueError) as refused:
        launch('real', robot_yaml=str(robot))
    assert str(refused.value).startswith(f"{robot}: field 'safety.command_timeout_s'")
    # Without robot_yaml:=, the launch arguments are what the user wrote.
    with pytest.raises(ValueError, match=r'^the launch arguments .*no policy checkpoint'):
        launch('real', robot_port='/dev/ttyUSB3', calibration='my_follower')


def _checkpoint(folder: Path) -> Path:
    ckpt = folder / 'ckpt'
    ckpt.mkdir()
    (ckpt / 'config.json').write_text(json.dumps({'type': 'act'}))
    return ckpt


@pytest.mark.parametrize('graph_name', ['sim', 'real'])
def test_a_launch_leaves_no_generated_file_in_the_temp_folder(launch_stand_ins, tmp_path,
                                                              monkeypatch, graph_name):
    """The generated params file goes into the launch's log folder (as `ros2 launch` keeps
    its logs), so launches do not pile files up in the temp folder."""
    tmp = tmp_path / 'tmp'
    tmp.mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp))
    robot_dir = tmp_path / 'robot'
    robot_dir.mkdir()
    values = {}
    if graph_name == 'real':
        robot = robot_dir / 'robot.yaml'
        robot.write_text(yaml.safe_dump({
            'port': '/dev/ttyUSB3', 'calibration': 'my_follower',
            'policy': {'path': str(_checkpoint(tmp_path))},
            'cameras': {'front': {'source': 'synthetic:square'}}}))
        values['robot_yaml'] = str(robot)
    _args, nodes, params = launch(graph_name, **values)
    assert sorted(tmp.iterdir()) == []
    assert sorted(p.name for p in robot_dir.iterdir()) == (
        ['robot.yaml'] if graph_name == 'real' else [])
    files = {p for n in nodes for p in n['parameters']}
    assert [Path(f).parent for f in files] == [Path(launch_stand_ins.log_dir)]
    if graph_name == 'real':
        assert node_params(params, 'front_camera')['source'] == 'synthetic:square'


def _start_as_launch_ros(node: dict, log: Path) -> NodeProcess:
    """The process launch_ros starts for a Node: <prefix>/lib/<package>/<executable>, then
    --ros-args with the node name and the params file."""
    exe = Path(sys.prefix) / 'lib' / node['package'] / node['executable']
    argv = [str(exe), *node['arguments'], '--ros-args', '-r', f"__node:={node['name']}"]
    for params_file in node['parameters']:
        argv += ['--params-file', params_file]
    return NodeProcess(node['name'], argv, log)


@pytest.mark.parametrize('graph_name', ['real', 'sim'])
def test_a_required_node_that_exits_ends_the_launch_with_an_error(launch_stand_ins, tmp_path,
                                                                  graph_name):
    """A driver without its calibration (a sim bridge with a bad parameter) exits 2: its exit
    handler ends the launch with an error, which `ros2 launch` turns into exit code 1 (a
    launch file cannot give one any other way). Ctrl-C's exits end nothing twice."""
    if graph_name == 'real':
        values = dict(robot_port=str(tmp_path / 'ttyUSB0'),
                      calibration=str(tmp_path / 'missing.json'),
                      policy_path=str(_checkpoint(tmp_path)), viewer='true', record='true')
        why = 'calibration'
    else:
        own = yaml.safe_load(graph.default_params_file('sim').read_text())
        own['sim_bridge']['ros__parameters']['no_such_parameter'] = 1.0
        (tmp_path / 'my_sim.yaml').write_text(yaml.safe_dump(own))
        values = dict(params_file=str(tmp_path / 'my_sim.yaml'), record='true')
        why = 'no_such_parameter'
    _args, nodes, _params = launch(graph_name, **values)
    specs = {s.name: s for s in (graph.real_specs(()) if graph_name == 'real'
                                 else graph.SIM)} | {graph.RECORDER.name: graph.RECORDER}
    for node in nodes:  # the viewer and the recorder may go; every other node is required
        assert callable(node['on_exit']) == specs[node['name']].required, node['name']
    executor = nodes[0]
    assert executor['name'] == graph.EXECUTORS[graph_name]
    proc = _start_as_launch_ros(executor, tmp_path / f"{executor['name']}.log")
    try:
        code = proc.proc.wait(timeout=120)
    finally:
        proc.stop()
    assert code == 2 and why in proc.log_text(), proc.log_text()
    exited = ProcessExited(action=executor, name=f"{executor['name']}-1", cmd=proc.argv,
                           cwd=None, env=None, pid=proc.pid, returncode=code)
    with pytest.raises(Exception, match=rf"required node {executor['name']} exited with code "
                                        r'2; stopping the launch') as stopped:
        executor['on_exit'](exited, LaunchContext({}))
    assert isinstance(stopped.value, RuntimeError)
    # Ctrl-C: `ros2 launch` is shutting down and stops every node itself.
    assert executor['on_exit'](exited, LaunchContext({}, is_shutdown=True)) is None


def test_a_params_file_with_namespaced_keys_is_honoured(launch_stand_ins, tmp_path):
    shipped = yaml.safe_load(graph.default_params_file('sim').read_text())
    own = {f'/**/{name}': block for name, block in shipped.items()}
    own['/**/planner']['ros__parameters']['high_level_hz'] = 2.5
    own['/**/sim_bridge']['ros__parameters']['ctrl_hz'] = 50.0
    path = tmp_path / 'my_sim.yaml'
    path.write_text(yaml.safe_dump(own))
    _args, _nodes, params = launch('sim', params_file=str(path))
    assert node_params(params, 'planner')['high_level_hz'] == 2.5
    assert node_params(params, 'sim_bridge')['ctrl_hz'] == 50.0


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
