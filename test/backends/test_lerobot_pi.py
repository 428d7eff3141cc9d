"""The `lerobot` policy backend on PI0 and PI0.5 checkpoints of stock LeRobot 0.6.1 (full-size
gemma_2b models with random weights, see lerobot_lang_nodes/tiny_models/pi.py), offline: the
PaliGemma tokenizer the processors name by hub id comes from a test HF_HOME's cache.

A checkpoint takes ~10 GB to load: it is built in one child process and loaded and run in
another (one at a time), which prints its results as JSON for the tests to check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml('torch', 'lerobot', 'transformers', 'scipy')

from lerobot_lang_nodes.tiny_models.pi import install_paligemma_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow
CHUNK_SIZE = 10
N_ACTION_STEPS = 8  # fewer than the chunk: the backend publishes what lerobot-rollout executes
TASK = 'put the red cube in the bowl'
OTHER = 'pick up the blue cube'
LIMIT_RAD = 1.5  # inside the simulated SO-101's joint limits (about +-1.5 rad for most joints)
BUILD_S = 300.0
RUN_S = 600.0

INFER = '''
import json, resource, sys, time
import numpy as np
import torch
from lerobot_lang_nodes.testing import policy_config
from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotPolicy
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

path, task, other = sys.argv[1:4]
t0 = time.monotonic()
backend = LeRobotPolicy(policy_config(
    model_path=path, cameras=('front', 'wrist'), device='cpu', dtype='auto'))
load_s = time.monotonic() - t0
rng = np.random.default_rng(0)
images = {c: rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) for c in ('front', 'wrist')}

def infer(instruction):
    torch.manual_seed(7)  # the flow-matching noise: the same draw for every instruction
    t = time.monotonic()
    chunk = backend.infer({'instruction': instruction, 'joint_names': list(JOINT_NAMES),
                           'joint_positions': np.array([0.1, -0.4, 0.5, 0.7, -0.2, 0.3]),
                           'images': images})
    return chunk.tolist(), time.monotonic() - t

first, first_s = infer(task)
again, again_s = infer(task)
changed, changed_s = infer(other)
status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)
print(json.dumps({
    'policy_type': backend.policy_type, 'chunk_length': backend.chunk_length,
    'required_cameras': list(backend.required_cameras),
    'first': first, 'again': again, 'changed': changed,
    'load_s': load_s, 'infer_s': [first_s, again_s, changed_s],
    'peak_rss_gb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    'rss_anon_gb': int(status['RssAnon'].split()[0]) / 1e6}))
'''


def child_env(hf_home: Path) -> dict[str, str]:
    """The children find the tokenizer offline in the test HF_HOME; two torch threads."""
    return {**os.environ, 'HF_HOME': str(hf_home), 'HF_HUB_OFFLINE': '1',
            'OMP_NUM_THREADS': '2', 'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}


def run_child(script: str, args: list[str], env: dict[str, str], timeout: float,
              what: str) -> str:
    out = subprocess.run([sys.executable, '-c', textwrap.dedent(script), *args],
                         capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, f'{what} failed ({out.returncode}):\n{out.stderr[-4000:]}'
    return out.stdout


@pytest.fixture(scope='module')
def hf_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp('hf_home')
    install_paligemma_tokenizer(home)
    return home


@pytest.fixture(scope='module', params=['pi0', 'pi05'])
def checkpoint(request, hf_home, tmp_path_factory):
    """(kind, path) of a checkpoint built in a child process; removed after its tests (4 GB)."""
    kind = request.param
    path = tmp_path_factory.mktemp(kind) / 'pretrained_model'
    run_child('''
        import sys
        import torch
        torch.set_num_threads(2)
        from lerobot_lang_nodes.tiny_models.pi import build_pi
        build_pi(sys.argv[1], sys.argv[2], chunk_size=int(sys.argv[3]),
                 n_action_steps=int(sys.argv[4]))
        ''', [str(path), kind, str(CHUNK_SIZE), str(N_ACTION_STEPS)], child_env(hf_home),
              BUILD_S, f'building the {kind} checkpoint')
    yield kind, path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope='module')
def results(checkpoint, hf_home) -> dict:
    """Load through the backend and infer three chunks, in one child process."""
    kind, path = checkpoint
    stdout = run_child('import torch\ntorch.set_num_threads(2)\n' + INFER,
                       [str(path), TASK, OTHER], child_env(hf_home), RUN_S,
                       f'loading and running the {kind} checkpoint')
    res = json.loads(stdout.strip().splitlines()[-1])
    print(f"{kind}: load {res['load_s']:.1f} s, chunks "
          f"{', '.join(f'{s:.1f}' for s in res['infer_s'])} s, peak RSS "
          f"{res['peak_rss_gb']:.1f} GB (anon {res['rss_anon_gb']:.1f} GB)")
    return {'kind': kind, **res}


def test_the_checkpoint_loads_as_its_policy_type_with_n_action_steps(results) -> None:
    assert results['policy_type'] == results['kind']
    assert results['chunk_length'] == N_ACTION_STEPS  # not the model's chunk_size
    assert results['required_cameras'] == ['front', 'wrist']


def test_a_chunk_is_finite_radians_inside_the_joint_limits(results) -> None:
    chunk = np.asarray(results['first'])
    assert chunk.shape == (N_ACTION_STEPS, 6)
    assert np.all(np.isfinite(chunk))
    assert np.all(np.abs(chunk) < LIMIT_RAD), np.abs(chunk).max(axis=0)


def test_the_instruction_reaches_the_model(results) -> None:
    """Same noise, same observation: the same instruction gives the same chunk, another
    instruction (through the PaliGemma tokenizer; PI0.5's prompt also holds the state)
    another chunk."""
    first = np.asarray(results['first'])
    assert np.array_equal(first, np.asarray(results['again']))
    assert np.abs(np.asarray(results['changed']) - first).max() > 1e-6
