"""The `lerobot` policy backend on a SmolVLA checkpoint built offline with stock LeRobot 0.6.1
(its own config, policy, processors and save_pretrained; a tiny SmolVLM backbone directory with
a locally trained tokenizer and processor; random weights)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml('torch', 'lerobot', 'transformers', 'num2words')

from lerobot_lang_nodes.backends.policies import lerobot_policy as lp  # noqa: E402
from lerobot_lang_nodes.tiny_models.vla import build_smolvla  # noqa: E402
from vla_inputs import backend_cfg as cfg, observation, seeded_infer  # noqa: E402

CHUNK_SIZE = 20
N_ACTION_STEPS = 12  # fewer than the chunk: the backend publishes what lerobot-rollout executes
TASK = 'put the red cube in the bowl'


@pytest.fixture(scope='module')
def smolvla(tmp_path_factory) -> Path:
    return build_smolvla(tmp_path_factory.mktemp('vla') / 'smolvla', chunk_size=CHUNK_SIZE,
                         n_action_steps=N_ACTION_STEPS)


@pytest.fixture(scope='module')
def backend(smolvla):
    policy = lp.LeRobotPolicy(cfg(smolvla))
    yield policy
    policy.close()


def test_smolvla_loads_and_gives_n_action_steps_in_radians(backend) -> None:
    assert backend.policy_type == 'smolvla'
    assert backend.chunk_length == N_ACTION_STEPS  # not the model's chunk_size
    assert backend.required_cameras == ('front', 'wrist')
    chunk = seeded_infer(backend, TASK)
    assert chunk.shape == (N_ACTION_STEPS, 6) and np.all(np.isfinite(chunk))
    assert np.all(np.abs(chunk) < np.pi)  # radians, near the statistics' mean (0..40 degrees)


def test_the_instruction_reaches_the_model_through_its_tokenizer(backend) -> None:
    # The preprocessor's tokenizer step turns the instruction into the language tokens.
    frame = backend.frame(observation(TASK))
    tokens = {}
    for text in (TASK, 'pick up the blue cube'):
        batch = backend.preprocessor(backend._prepare(dict(frame), backend.device, text,
                                                      backend.robot_type))
        tokens[text] = batch['observation.language.tokens']
    assert not np.array_equal(tokens[TASK].numpy(), tokens['pick up the blue cube'].numpy())
    # Same noise, same observation: the chunk changes with the instruction and only with it.
    first = seeded_infer(backend, TASK)
    assert np.array_equal(first, seeded_infer(backend, TASK))
    other = seeded_infer(backend, 'pick up the blue cube')
    assert np.abs(other - first).max() > 1e-6


def test_the_node_path_equals_lerobots_own_predict_action_chunk(backend) -> None:
    """The backend's chunk is what LeRobot's pipeline gives for the same frame, cut to
    n_action_steps as lerobot-rollout executes it, converted to radians."""
    import torch
    from lerobot.policies.utils import prepare_observation_for_inference
    obs = observation(TASK)
    batch = prepare_observation_for_inference(backend.frame(obs), backend.device, TASK,
                                              backend.robot_type)
    backend._resize(batch)
    torch.manual_seed(7)
    with torch.inference_mode():
        backend.reset()
        full = backend.policy.predict_action_chunk(backend.preprocessor(batch))
        direct = backend.postprocessor(full[:, :N_ACTION_STEPS]).numpy().reshape(-1, 6)
    assert full.shape[1] == CHUNK_SIZE
    np.testing.assert_allclose(seeded_infer(backend, TASK), backend.units.to_radians(direct),
                               rtol=1e-5, atol=1e-6)


PRELUDE = '''
import importlib.machinery, sys
HIDDEN = {hidden!r}
class _Hide(importlib.machinery.PathFinder):
    """An environment without HIDDEN: the path finder no longer finds them."""
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition('.')[0] in HIDDEN:
            return None
        return super().find_spec(name, path, target)
sys.meta_path = [_Hide if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
'''


def test_a_missing_processor_package_names_the_package_and_the_install_command(
        smolvla) -> None:
    """SmolVLM's processor needs num2words (LeRobot's smolvla extra): without it the load
    fails with a message that says which package and how to install it."""
    script = PRELUDE.format(hidden=('num2words',)) + textwrap.dedent(f'''
        from lerobot_lang_nodes.testing import policy_config
        from lerobot_lang_nodes.backends.policies import lerobot_policy as lp
        try:
            lp.LeRobotPolicy(policy_config(model_path={str(smolvla)!r},
                             cameras=('front', 'wrist'), device='cpu', dtype='auto'))
        except lp.PolicyLoadError as exc:
            print('LOAD ERROR:', exc)
        ''')
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith('LOAD ERROR:')), None)
    assert line, out.stdout[-2000:] + out.stderr[-2000:]
    assert "needs the package 'num2words', which is not installed" in line
    assert "pip install 'lerobot[smolvla]==0.6.1'" in line


@pytest.mark.parametrize('policy_type, exc, package, extra', [
    ('pi05', ModuleNotFoundError("No module named 'scipy'", name='scipy'), 'scipy', 'pi'),
    ('groot', ImportError("'peft' is required but not installed. Install it with: pip install "
                          "'lerobot[groot]'"), 'peft', 'groot'),
    ('xvla', ImportError('something else went wrong'), None, 'xvla'),
])
def test_missing_dependency_messages_name_the_extra_of_each_type(policy_type, exc, package,
                                                                  extra) -> None:
    msg = str(lp.missing_dependency_error(policy_type, Path('/ckpt'), exc))
    assert f"pip install 'lerobot[{extra}]==0.6.1'" in msg
    assert (f'needs the package {package!r}' in msg) if package else 'needs a package' in msg


def test_real_time_chunking_is_on_for_smolvla_and_guides_towards_the_left_over(smolvla):
    """LeRobot's RTC guidance through the backend: given the executing chunk's left-over and
    a delay, the new chunk's first rows follow the left-over; without it they do not."""
    import torch

    from lerobot_lang_nodes.core.rtc import Continuation
    backend = lp.LeRobotPolicy(cfg(smolvla))
    off = lp.LeRobotPolicy(cfg(smolvla, rtc=False))
    try:
        assert backend.rtc and not off.rtc
        assert backend.policy.config.rtc_config.execution_horizon == 10
        left_over = np.full((N_ACTION_STEPS, 6), 1.5, dtype=np.float32)  # model space
        cont = Continuation(left_over=left_over, inference_delay=5, stamp_s=0.0, sequence=1)
        errors = {}
        for name, policy, continuation in (('guided', backend, cont),
                                           ('plain', backend, None), ('off', off, cont)):
            obs = observation(TASK)
            obs['rtc'] = continuation
            torch.manual_seed(3)
            policy.infer(obs)
            model = policy.last_model_actions
            assert model.shape == (N_ACTION_STEPS, 6)
            errors[name] = float(np.abs(model[:5] - left_over[:5]).max())
        assert errors['guided'] < 0.25 * min(errors['plain'], errors['off']), errors
    finally:
        backend.close()
        off.close()


def test_flat_policies_without_rtc_support_keep_plain_chunks(tmp_path) -> None:
    from lerobot_lang_nodes.tiny_models.policies import build_tiny_act
    act = lp.LeRobotPolicy(cfg(build_tiny_act(tmp_path / 'act', chunk_size=8)))
    assert not act.rtc
    with pytest.raises(lp.PolicyLoadError, match="rtc_schedule 'cosine' is not one of"):
        lp.LeRobotPolicy(cfg(tmp_path / 'act', rtc_schedule='cosine'))
    # YAML reads an unquoted `off` as false; a string is refused rather than guessed.
    with pytest.raises(lp.PolicyLoadError, match="rtc is 'off'; expected true or false"):
        lp.LeRobotPolicy(cfg(tmp_path / 'act', rtc='off'))
