"""The shipped params files set only what differs from each node's own defaults.

A YAML value equal to the dataclass default hides a later change of that default (the file
silently keeps the old value); the defaults and their reasons live in the node's config
dataclass, listed in ARCHITECTURE.md and by `ros2 param describe`.
"""

from __future__ import annotations

import importlib

import pytest
import yaml

from lerobot_lang_nodes import paths
from lerobot_lang_nodes.core.param_names import dotted
from lerobot_lang_nodes.nodes.params import config_defaults

CONFIGS = {
    'sim_bridge': ('sim_bridge_node', 'SimBridgeConfig'),
    'robocasa_bridge': ('robocasa_bridge_node', 'RoboCasaBridgeConfig'),
    'so101_driver': ('so101_driver_node', 'So101DriverConfig'),
    'camera': ('camera_node', 'CameraConfig'),
    'planner': ('planner_node', 'PlannerConfig'),
    'policy': ('policy_node', 'PolicyConfig'),
    'viewer': ('viewer_node', 'ViewerConfig'),
    'recorder': ('recorder_node', 'RecorderConfig'),
}
FILES = ('sim.yaml', 'real.yaml', 'robocasa.yaml', 'recorder.yaml')


def _defaults(node: str) -> dict:
    module, name = CONFIGS[node]
    return config_defaults(getattr(importlib.import_module(f'lerobot_lang_nodes.nodes.{module}'),
                                   name))


def _same(default, value) -> bool:
    if isinstance(default, tuple):
        default = list(default)
    if isinstance(default, bool) or isinstance(value, bool):
        return type(default) is type(value) and default == value
    if isinstance(default, float) and isinstance(value, (int, float)):
        return float(value) == default
    return default == value


@pytest.mark.parametrize('name', FILES)
def test_params_files_restate_no_default(name):
    blocks = yaml.safe_load(paths.config_path(name).read_text(encoding='utf-8'))
    restated, unknown = [], []
    for node, block in blocks.items():
        assert node in CONFIGS, f'{name}: block {node!r} names no node of this package'
        defaults = _defaults(node)
        # A parameter group (`lerobot: {state_units: raw}`) is checked by its dotted names.
        for key, value in dotted(block.get('ros__parameters') or {}).items():
            if key == 'use_sim_time':  # ROS's own parameter: `ros2 run --params-file` needs it
                continue
            if key not in defaults:
                unknown.append(f'{node}.{key}')
            elif _same(defaults[key], value):
                restated.append(f'{node}.{key}: {value!r}')
    assert not unknown, f'{name}: parameters the nodes do not declare: {unknown}'
    assert not restated, f'{name} restates defaults (remove them): {restated}'
