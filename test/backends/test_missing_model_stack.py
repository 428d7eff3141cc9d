"""Without the model stack (requirements/ml.txt) a learned backend, the export and the
trainers say which file to install and how, in one line: no bare `No module named 'torch'` on
/diagnostics, no traceback.

Each check runs a process in which torch, LeRobot or transformers cannot be imported: a
sitecustomize on its PYTHONPATH replaces the path finder with one that does not find them, as
an environment without them behaves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from lerobot_lang_nodes import dependencies, graph
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import wait_until

HIDE = '''
import importlib.machinery, os, sys
HIDDEN = set(os.environ['LEROBOT_LANG_TEST_HIDE'].split(','))
class _Hide(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition('.')[0] in HIDDEN:
            return None
        return super().find_spec(name, path, target)
sys.meta_path = [_Hide if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
'''


@pytest.fixture
def without(tmp_path):
    """``without('torch', ...)``: the environment of a process that cannot import them."""
    site = tmp_path / 'hide'
    site.mkdir()
    (site / 'sitecustomize.py').write_text(HIDE)

    def env(*modules: str) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(site), os.environ.get('PYTHONPATH')) if p)
        return {**os.environ, 'PYTHONPATH': path, 'LEROBOT_LANG_TEST_HIDE': ','.join(modules)}
    return env


def assert_names_the_model_stack(text: str, package: str) -> None:
    assert f"needs the package {package!r}, which is not installed" in text, text
    assert dependencies.INSTALL_ML in text, text
    assert 'pip install -c requirements/constraints.txt -r requirements/ml.txt' in text
    assert 'scripts/setup.sh --ml' in text
    assert 'Traceback' not in text and 'ModuleNotFoundError' not in text, text


def test_the_hider_hides(without):
    out = subprocess.run([sys.executable, '-c', 'import torch'], env=without('torch'),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "No module named 'torch'" in out.stderr


def test_export_without_lerobot_says_what_to_install(without, tmp_path):
    bag = tmp_path / 'bag'
    bag.mkdir()
    out = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'export',
                          str(bag), str(tmp_path / 'dataset')], env=without('lerobot'),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert_names_the_model_stack(out.stderr, 'lerobot')
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert 'lerobot-lang export needs' in out.stderr
    assert not (tmp_path / 'dataset').exists()


@pytest.mark.parametrize('kind, name, hidden, package', [
    ('policy', 'lerobot', ('torch',), 'torch'),
    ('policy', 'lerobot', ('lerobot',), 'lerobot'),
    ('planner', 'transformers', ('torch',), 'torch'),
    ('planner', 'transformers', ('transformers',), 'transformers'),
    ('planner', 'hierarchical', ('torch',), 'torch'),
    ('policy', 'hierarchical', ('torch',), 'torch'),
])
def test_a_learned_backend_without_the_model_stack_says_what_to_install(
        without, tmp_path, kind, name, hidden, package):
    ckpt = tmp_path / 'ckpt'
    ckpt.mkdir()
    for f in ('config.json', 'model.safetensors', 'policy_preprocessor.json',
              'policy_postprocessor.json', 'tokenizer.json'):
        (ckpt / f).write_text('{"type": "act", "model_type": "llama"}')
    # What the nodes do: resolve the backend class, then build it from the parameters.
    script = textwrap.dedent(f'''
        from lerobot_lang_nodes import testing
        from lerobot_lang_nodes.backends import registry
        cfg = getattr(testing, {kind!r} + '_config')(model_path={str(ckpt)!r},
                                                     cameras=('front',))
        try:
            registry.load_backend({kind!r}, {name!r})(cfg)
        except Exception as exc:
            print('LOAD ERROR:', type(exc).__name__, exc)
        ''')
    out = subprocess.run([sys.executable, '-c', script], env=without(*hidden),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith('LOAD ERROR:')), '')
    assert line.startswith('LOAD ERROR: MissingDependency'), out.stdout + out.stderr[-2000:]
    assert_names_the_model_stack(line, package)


def test_the_policy_node_without_torch_says_on_diagnostics_what_to_install(
        without, launch_node, probe, tmp_path):
    """`policy_path:=` in an environment without torch: the node stays up and its
    /diagnostics names the requirement file and the command."""
    ckpt = tmp_path / 'pretrained_model'
    ckpt.mkdir()
    for f in ('config.json', 'model.safetensors', 'policy_preprocessor.json',
              'policy_postprocessor.json'):
        (ckpt / f).write_text('{}')
    diag = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    node = launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__node:=policy',
                       params_file=graph.default_params_file('sim'),
                       params={'backend': 'lerobot', 'model_path': str(ckpt),
                               'diagnostics_period_s': 0.25},
                       env={k: v for k, v in without('torch').items()
                            if k in ('PYTHONPATH', 'LEROBOT_LANG_TEST_HIDE')})

    def policy_status() -> DiagnosticStatus | None:
        for arr in reversed(diag.snapshot()):
            for st in arr.status:
                if st.name == 'policy: policy':
                    return st
        return None

    status = wait_until(lambda: (s := policy_status()) is not None
                        and s.level == DiagnosticStatus.ERROR and s, 60.0,
                        'the policy reporting its failed load on /diagnostics', [node])
    values = {kv.key: kv.value for kv in status.values}
    assert values['load_state'] == 'failed'
    assert_names_the_model_stack(values['load_error'], 'torch')
    assert node.alive  # the node stays up (and the executor holds the arm)
    assert "No module named 'torch'" not in node.log_text()
