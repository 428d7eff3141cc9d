"""The backend registry: every entry resolves, errors name the fix, imports stay lazy."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from lerobot_lang_nodes.backends import registry


@pytest.mark.parametrize('kind,name', [(k, n) for k, v in registry.BACKENDS.items() for n in v])
def test_every_entry_names_an_existing_module_and_class(kind, name):
    module, _, attr = registry.BACKENDS[kind][name].partition(':')
    assert importlib.util.find_spec(module) is not None, module
    assert registry.load_backend(kind, name).__name__ == attr


def test_unknown_name_lists_known():
    listed = re.escape(f"known: {registry.known('planner')}")
    assert 'scripted' in registry.known('planner')
    with pytest.raises(registry.BackendNotFound, match=listed):
        registry.load_backend('planner', 'pi052')


def test_missing_optional_dependency_is_reported_as_unavailable(monkeypatch):
    monkeypatch.setitem(registry.BACKENDS['policy'], 'needs_extra',
                        'lerobot_lang_nodes.backends.policies.scripted:ScriptedSimExpert')
    monkeypatch.setitem(sys.modules, 'lerobot_lang_nodes.backends.policies.scripted', None)
    # A module set to None in sys.modules raises ModuleNotFoundError naming that module.
    with pytest.raises(registry.BackendNotFound):
        registry.load_backend('policy', 'needs_extra')


def test_importing_nodes_loads_neither_torch_nor_mujoco():
    code = ('import sys; import lerobot_lang_nodes.nodes.planner_node, '
            'lerobot_lang_nodes.nodes.policy_node, lerobot_lang_nodes.nodes.sim_bridge_node, '
            'lerobot_lang_nodes.nodes.viewer_node, lerobot_lang_nodes.cli.main; '
            "print(sorted(m for m in ('torch', 'mujoco', 'transformers', 'cv2') "
            'if m in sys.modules))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '[]'
