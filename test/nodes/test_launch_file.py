"""launch/sim.launch.py describes the same graph as `lerobot-lang sim`.

`launch` and `launch_ros` are not on PyPI (a ROS workspace has them), so the file is run
against stand-ins with the constructor signatures of the real classes: an unknown keyword or a
missing executable fails here as it would under `ros2 launch`.
"""

from __future__ import annotations

import ast
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


class LaunchConfiguration:
    def __init__(self, variable_name, *, default=None) -> None:
        self.variable_name = variable_name


class IfCondition:
    def __init__(self, predicate_expression) -> None:
        self.expression = predicate_expression

    def holds(self, values: dict[str, str]) -> bool:
        return values[self.expression.variable_name] == 'true'


class UnlessCondition(IfCondition):
    def holds(self, values: dict[str, str]) -> bool:
        return not super().holds(values)


class Node:
    # launch_ros.actions.Node's own keywords; the rest go to launch's ExecuteProcess (and
    # `condition` on to launch's Action).
    def __init__(self, *, executable, package=None, name=None, namespace=None, exec_name=None,
                 parameters=None, remappings=None, ros_arguments=None, arguments=None,
                 output='log', emulate_tty=False, respawn=False, respawn_delay=None,
                 additional_env=None, condition=None) -> None:
        self.kwargs = dict(executable=executable, package=package, name=name,
                           parameters=parameters or [], remappings=remappings or [])
        self.condition = condition

    def launched(self, values: dict[str, str]) -> bool:
        return self.condition is None or self.condition.holds(values)


@pytest.fixture
def launch_stand_ins(monkeypatch):
    mods = {
        'launch': {'LaunchDescription': LaunchDescription},
        'launch.actions': {'DeclareLaunchArgument': DeclareLaunchArgument},
        'launch.conditions': {'IfCondition': IfCondition, 'UnlessCondition': UnlessCondition},
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


@pytest.mark.parametrize('composed', ['false', 'true'])
def test_sim_launch_file_starts_the_sim_graph(launch_stand_ins, composed):
    module = runpy.run_path(str(ROOT / 'launch' / 'sim.launch.py'))
    description = module['generate_launch_description']()
    args = [e for e in description.entities if isinstance(e, DeclareLaunchArgument)]
    params = {a.name: a.default_value for a in args}
    assert params['composed'] == 'false'
    values = {**params, 'composed': composed}
    nodes = [e.kwargs for e in description.entities
             if isinstance(e, Node) and e.launched(values)]
    specs = graph.composed(graph.SIM) if composed == 'true' else graph.SIM
    assert Path(params['params_file']) == graph.default_params_file('sim')
    assert [n['executable'] for n in nodes] == [s.name for s in specs]
    scripts = console_scripts()
    shipped = yaml.safe_load(Path(params['params_file']).read_text())
    for spec, node in zip(specs, nodes):
        assert node['package'] == 'lerobot_lang_nodes' and node['executable'] in scripts
        assert node['executable'] == spec.name  # `ros2 run lerobot_lang_nodes <name>`
        # launch_ros makes `name` a global __node remap: a composed process must not get one.
        assert node['name'] == (None if spec.hosts else spec.name)
        files = [p for p in node['parameters'] if isinstance(p, LaunchConfiguration)]
        assert [f.variable_name for f in files] == ['params_file']
        overrides = {k: v for p in node['parameters'] if isinstance(p, dict)
                     for k, v in p.items()}
        assert overrides.get('use_sim_time', False) == spec.use_sim_time
        assert [tuple(r) for r in node['remappings']] == list(spec.remaps)
        for name in spec.hosts or (spec.name,):
            assert name in shipped, f'config/sim.yaml has no section for {name}'
