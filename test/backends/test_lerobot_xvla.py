"""The `lerobot` policy backend on an X-VLA checkpoint built offline with stock LeRobot 0.6.1
(its own XVLAConfig, XVLAPolicy, processors and save_pretrained; a tiny native Florence-2 in
the config, a locally trained BART-like tokenizer directory; random weights), see
lerobot_lang_nodes/tiny_models/xvla.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml('torch', 'lerobot', 'transformers')

from lerobot_lang_nodes.backends.policies import lerobot_policy as lp  # noqa: E402
from lerobot_lang_nodes.tiny_models.xvla import build_xvla  # noqa: E402
from vla_inputs import backend_cfg as cfg, observation, seeded_infer  # noqa: E402

CHUNK_SIZE = 10
N_ACTION_STEPS = 8  # fewer than the chunk: the backend publishes what lerobot-rollout executes
TASK = 'put the red cube in the bowl'
OTHER = 'pick up the blue cube'
LIMIT_RAD = 1.5  # inside the simulated SO-101's joint limits


@pytest.fixture(scope='module')
def xvla(tmp_path_factory) -> Path:
    return build_xvla(tmp_path_factory.mktemp('xvla') / 'xvla', chunk_size=CHUNK_SIZE,
                      n_action_steps=N_ACTION_STEPS)


@pytest.fixture(scope='module')
def backend(xvla):
    policy = lp.LeRobotPolicy(cfg(xvla))
    yield policy
    policy.close()


def test_xvla_loads_and_gives_n_action_steps_in_radians(backend) -> None:
    assert backend.policy_type == 'xvla'
    assert backend.chunk_length == N_ACTION_STEPS  # not the model's chunk_size
    assert backend.required_cameras == ('front', 'wrist')
    assert not backend.rtc  # X-VLA has no real-time chunking in LeRobot 0.6.1
    chunk = seeded_infer(backend, TASK)
    assert chunk.shape == (N_ACTION_STEPS, 6) and np.all(np.isfinite(chunk))
    assert np.all(np.abs(chunk) < LIMIT_RAD), np.abs(chunk).max(axis=0)


def test_the_instruction_reaches_the_model_through_its_tokenizer(backend) -> None:
    frame = backend.frame(observation(TASK))
    tokens = {}
    for text in (TASK, OTHER):
        batch = backend.preprocessor(backend._prepare(dict(frame), backend.device, text,
                                                      backend.robot_type))
        tokens[text] = batch['observation.language.tokens'].numpy()
    assert not np.array_equal(tokens[TASK], tokens[OTHER])
    # Same noise, same observation: the chunk changes with the instruction and only with it.
    first = seeded_infer(backend, TASK)
    assert np.array_equal(first, seeded_infer(backend, TASK))
    assert np.abs(seeded_infer(backend, OTHER) - first).max() > 1e-6


def test_the_node_path_equals_lerobots_own_load_and_calls(backend, xvla) -> None:
    """The backend's chunk is what LeRobot's own from_pretrained, processors and
    predict_action_chunk give for the same frame, cut to n_action_steps as lerobot-rollout
    executes it, in radians; select_action pops the same actions one by one."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.policies.utils import prepare_observation_for_inference
    config = PreTrainedConfig.from_pretrained(xvla)
    policy = get_policy_class('xvla').from_pretrained(xvla, config=config)
    pre, post = make_pre_post_processors(config, pretrained_path=str(xvla))
    obs = observation(TASK)
    batch = prepare_observation_for_inference(backend.frame(obs), backend.device, TASK,
                                              backend.robot_type)
    backend._resize(batch)  # the backend's resize to the checkpoint's image shape
    batch = pre(batch)
    with torch.inference_mode():
        torch.manual_seed(7)
        policy.reset()
        full = policy.predict_action_chunk(batch)
        torch.manual_seed(7)
        policy.reset()
        popped = torch.stack([policy.select_action(batch) for _ in range(N_ACTION_STEPS)], 1)
    assert full.shape[1] == CHUNK_SIZE
    direct = post(full[:, :N_ACTION_STEPS]).numpy().reshape(-1, 6)
    np.testing.assert_allclose(post(popped).numpy().reshape(-1, 6), direct, rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_allclose(seeded_infer(backend, TASK), backend.units.to_radians(direct),
                               rtol=1e-5, atol=1e-6)
