"""Nodes refuse bad configuration at start-up with a message that says what to fix."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.testing import node_command

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, **params) -> subprocess.CompletedProcess:
    return subprocess.run(node_command(module, params=params), capture_output=True, text=True,
                          timeout=60)


def test_unknown_parameter_is_an_error_naming_the_known_ones():
    out = _run('lerobot_lang_nodes.nodes.planner_node', chunks_per_regn=2)
    assert out.returncode == 2, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "unknown parameter(s) ['chunks_per_regn']" in text
    assert 'chunks_per_regen' in text  # the known parameters are listed


def test_the_policy_refuses_a_control_rate_and_says_who_owns_it():
    out = _run('lerobot_lang_nodes.nodes.policy_node', ctrl_hz=50.0)
    assert out.returncode == 2, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "unknown parameter(s) ['ctrl_hz']" in text and 'runtime_status' in text


@pytest.mark.parametrize('module, old, new', [
    ('lerobot_lang_nodes.nodes.policy_node', 'state_units', 'lerobot.state_units'),
    ('lerobot_lang_nodes.nodes.planner_node', 'image_size', 'transformers.image_size')])
def test_a_backend_parameter_by_its_old_flat_name_is_refused_with_its_group_name(
        module, old, new, tmp_path):
    out = _run(module, **{old: 'raw' if old == 'state_units' else 64})
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"unknown parameter(s) ['{old}']" in out.stdout + out.stderr
    assert new in out.stdout + out.stderr
    # The group's name is what the node takes, from a params file's nested mapping too.
    group, name = new.split('.')
    params = tmp_path / 'params.yaml'
    params.write_text(f"/**:\n  ros__parameters:\n    {group}:\n      {name}: 1234567\n")
    out = subprocess.run(node_command(module, '--params-file', str(params)),
                         capture_output=True, text=True, timeout=60)
    # 1234567 breaks the parameter's own rule: the node read the nested value under its name.
    assert out.returncode == 2 and new in out.stdout + out.stderr, out.stdout + out.stderr


def test_unknown_backend_lists_the_registered_ones():
    out = _run('lerobot_lang_nodes.nodes.policy_node', backend='smolvla_typo')
    assert out.returncode == 2
    from lerobot_lang_nodes.backends.registry import known
    assert f"unknown policy backend 'smolvla_typo'; known: {known('policy')}" in \
        out.stdout + out.stderr


def test_invalid_choice_is_rejected():
    out = _run('lerobot_lang_nodes.nodes.policy_node', condition_on='subtasks')
    assert out.returncode == 2
    assert "valid choices: ['context', 'task']" in out.stdout + out.stderr


def test_every_graph_node_has_a_console_script_and_a_main():
    tree = ast.parse((ROOT / 'setup.py').read_text())
    scripts = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and ' = ' in node.value:
            name, target = node.value.split(' = ', 1)
            scripts[name.strip()] = target.strip()
    for spec in graph.SIM:
        assert scripts.get(spec.name) == f'{spec.module}:main', spec.name
        assert (ROOT / (spec.module.replace('.', '/') + '.py')).is_file()


@pytest.mark.parametrize('launch_file', sorted((ROOT / 'launch').glob('*.launch.py')))
def test_launch_files_compile(launch_file):
    compile(launch_file.read_text(), str(launch_file), 'exec')


@pytest.mark.parametrize('module,name', [('lerobot_lang_nodes.nodes.planner_node', 'planner'),
                                         ('lerobot_lang_nodes.nodes.sim_bridge_node',
                                          'sim_bridge')])
def test_an_idle_node_stops_cleanly_on_ctrl_c(launch_node, probe, module, name):
    from rcl_interfaces.srv import ListParameters
    proc = launch_node(module, params={'cameras': ['front']} if name == 'sim_bridge' else {})
    probe.wait_for_node(name, timeout_s=60.0, processes=[proc])
    # A parameter service answers only once the node spins, i.e. start-up is over.
    probe.call(ListParameters, f'/{name}/list_parameters', ListParameters.Request(),
               timeout_s=60.0)
    # Alone in its domain nothing wakes the node's executor now: Ctrl-C must still stop it.
    assert proc.stop(timeout_s=10.0) == 0, proc.log_text(3000)
    assert 'Traceback' not in proc.log_text(), proc.log_text(3000)
