"""The `lerobot` policy backend on a GR00T N1.7 checkpoint of stock LeRobot 0.6.1 (GrootConfig,
GrootPolicy, its processors and save_pretrained; a tiny Qwen3-VL backbone and GR00T base model
built locally; random weights), offline: the Qwen3-VL processor the GR00T preprocessor names
by hub id comes from a test HF_HOME's cache (see lerobot_lang_nodes/tiny_models/groot.py).

The Hugging Face cache location is fixed when huggingface_hub is imported, so the checkpoint is
built and run in child processes given that HF_HOME; the run prints its results as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from lerobot_lang_nodes.testing import require_ml

# diffusers: the DiT action head; tree (dm-tree): GR00TN17.prepare_input. LeRobot's groot extra.
require_ml('torch', 'lerobot', 'transformers', 'diffusers', 'tree')

from lerobot_lang_nodes.tiny_models.groot import install_cosmos_processor  # noqa: E402

pytestmark = pytest.mark.slow
CHUNK_SIZE = 10
N_ACTION_STEPS = 8  # fewer than the chunk: the backend publishes what lerobot-rollout executes
TASK = 'put the red cube in the bowl'
OTHER = 'pick up the blue cube'
LIMIT_RAD = 1.5  # inside the simulated SO-101's joint limits
CHILD_S = 240.0

BUILD = '''
import sys
from lerobot_lang_nodes.tiny_models.groot import build_groot
build_groot(sys.argv[1], chunk_size=int(sys.argv[2]), n_action_steps=int(sys.argv[3]))
'''

RUN = '''
import json, logging, sys
import numpy as np
import torch
from lerobot_lang_nodes.testing import policy_config
from lerobot.configs.policies import PreTrainedConfig
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.policies.utils import prepare_observation_for_inference
from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotPolicy
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

path, task, other, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
records = []
handler = logging.Handler()
handler.emit = lambda record: records.append(record.getMessage())
logging.getLogger('lerobot_lang_nodes').addHandler(handler)
logging.getLogger('lerobot_lang_nodes').setLevel(logging.INFO)
backend = LeRobotPolicy(policy_config(
    model_path=path, cameras=('front', 'wrist'), device='cpu', dtype='auto'))
rng = np.random.default_rng(0)
images = {c: rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) for c in ('front', 'wrist')}

def observation(instruction):
    return {'instruction': instruction, 'joint_names': list(JOINT_NAMES),
            'joint_positions': np.array([0.1, -0.4, 0.5, 0.7, -0.2, 0.3]), 'images': images}

def infer(instruction):
    torch.manual_seed(7)  # the flow's starting noise: the same draw for every instruction
    return backend.infer(observation(instruction)).tolist()

def tokens(instruction):
    frame = backend.frame(observation(instruction))
    batch = backend.preprocessor(backend._prepare(frame, backend.device, instruction,
                                                  backend.robot_type))
    return batch['input_ids'].tolist()

first, again, changed = infer(task), infer(task), infer(other)
# LeRobot's own load and calls on the same frame, cut to n_action_steps as lerobot-rollout.
config = PreTrainedConfig.from_pretrained(path)
policy = get_policy_class('groot').from_pretrained(path, config=config)
pre, post = make_pre_post_processors(config, pretrained_path=path)
batch = prepare_observation_for_inference(backend.frame(observation(task)), backend.device,
                                          task, backend.robot_type)
backend._resize(batch)  # the backend's resize to the checkpoint's image shape
batch = pre(batch)
with torch.inference_mode():
    torch.manual_seed(7)
    policy.reset()
    full = policy.predict_action_chunk(batch)
    torch.manual_seed(7)
    policy.reset()
    popped = torch.stack([policy.select_action(batch) for _ in range(n)], 1)
direct = post(full[:, :n]).numpy().reshape(-1, 6)
print(json.dumps({
    'policy_type': backend.policy_type, 'chunk_length': backend.chunk_length,
    'required_cameras': list(backend.required_cameras), 'rtc': backend.rtc,
    'first': first, 'again': again, 'changed': changed,
    'direct_radians': backend.units.to_radians(direct).tolist(),
    'popped': post(popped).numpy().reshape(-1, 6).tolist(), 'direct': direct.tolist(),
    'full_rows': int(full.shape[1]), 'tokens': [tokens(task), tokens(other)],
    'reloaded': [m for m in records if 'loading it again' in m]}))
'''


def run_child(script: str, args: list[str], env: dict[str, str], what: str) -> str:
    out = subprocess.run([sys.executable, '-c', textwrap.dedent(script), *args],
                         capture_output=True, text=True, env=env, timeout=CHILD_S)
    assert out.returncode == 0, f'{what} failed ({out.returncode}):\n{out.stderr[-4000:]}'
    return out.stdout


@pytest.fixture(scope='module')
def built(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """(checkpoint path, the children's environment: HF_HOME holding the test processor)."""
    root = tmp_path_factory.mktemp('groot')
    hf_home = root / 'hf_home'
    path = root / 'groot'
    env = {**os.environ, 'HF_HOME': str(hf_home), 'HF_HUB_OFFLINE': '1',
           'OMP_NUM_THREADS': '2'}
    run_child(BUILD, [str(path), str(CHUNK_SIZE), str(N_ACTION_STEPS)], env,
              'building the groot checkpoint')
    install_cosmos_processor(hf_home, root / 'groot_backbone')
    return str(path), env


@pytest.fixture(scope='module')
def results(built) -> dict:
    path, env = built
    stdout = run_child(RUN, [path, TASK, OTHER, str(N_ACTION_STEPS)], env,
                       'loading and running the groot checkpoint')
    return json.loads(stdout.strip().splitlines()[-1])


def test_the_checkpoint_loads_as_groot_once_with_n_action_steps(results) -> None:
    assert results['policy_type'] == 'groot'
    assert results['chunk_length'] == N_ACTION_STEPS  # not the model's chunk_size
    assert results['required_cameras'] == ['front', 'wrist']
    # The tied LM head / token embedding is saved under one name: not a missing parameter
    # that would make the backend load the model a second time.
    assert results['reloaded'] == []


def test_a_chunk_is_finite_radians_inside_the_joint_limits(results) -> None:
    chunk = np.asarray(results['first'])
    assert chunk.shape == (N_ACTION_STEPS, 6) and np.all(np.isfinite(chunk))
    assert np.all(np.abs(chunk) < LIMIT_RAD), np.abs(chunk).max(axis=0)


def test_the_instruction_reaches_the_model(results) -> None:
    """The Qwen3-VL tokenizer gives other language tokens; same noise, same observation: the
    same instruction gives the same chunk, another instruction another chunk."""
    task_tokens, other_tokens = results['tokens']
    assert task_tokens != other_tokens
    first = np.asarray(results['first'])
    assert np.array_equal(first, np.asarray(results['again']))
    assert np.abs(np.asarray(results['changed']) - first).max() > 1e-6


def test_the_node_path_equals_lerobots_own_load_and_calls(results) -> None:
    """The backend's chunk is what LeRobot's own from_pretrained, processors and
    predict_action_chunk give (GR00T returns n_action_steps rows), in radians;
    select_action pops the same actions one by one."""
    assert results['full_rows'] == N_ACTION_STEPS
    np.testing.assert_allclose(results['popped'], results['direct'], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(results['first'], results['direct_radians'], rtol=1e-5,
                               atol=1e-6)


HIDE_TREE = '''
import importlib.machinery, sys
class _Hide(importlib.machinery.PathFinder):
    """An environment without dm-tree: the path finder no longer finds `tree`."""
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition('.')[0] == 'tree':
            return None
        return super().find_spec(name, path, target)
sys.meta_path = [_Hide if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
from lerobot_lang_nodes.testing import policy_config
from lerobot_lang_nodes.backends.policies import lerobot_policy as lp
try:
    lp.LeRobotPolicy(policy_config(model_path=sys.argv[1], cameras=('front', 'wrist'),
                                   device='cpu', dtype='auto'))
except lp.PolicyLoadError as exc:
    print('LOAD ERROR:', exc)
'''


def test_without_dm_tree_the_load_fails_naming_it_and_the_extra(built) -> None:
    """GR00T imports dm-tree only when it first infers; the backend checks for it at load, so
    the node reports it (and holds the arm) instead of failing every chunk."""
    path, env = built
    stdout = run_child(HIDE_TREE, [path], env, 'loading the groot checkpoint without dm-tree')
    line = next((ln for ln in stdout.splitlines() if ln.startswith('LOAD ERROR:')), None)
    assert line, stdout[-2000:]
    assert "needs the package 'dm-tree', which is not installed" in line
    assert "pip install 'lerobot[groot]==0.6.1'" in line
