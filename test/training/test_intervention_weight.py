"""Sampling weights of corrections (DAgger): the frames a human or the virtual operator
commanded (the dataset's ``intervention`` column) are drawn as often as ``intervention_weight``
says, the learner's own frames of a corrected episode as ``learner_weight`` says, and plain
demonstrations as before."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml('torch')

import torch  # noqa: E402

from lerobot_lang_nodes.training.data import SettingsError  # noqa: E402
from lerobot_lang_nodes.training.policy import FrameSampler, frame_weights  # noqa: E402

# Episode 0: a plain demonstration (100 frames); episode 1: the learner's 80 frames, then 20
# under the operator's correction.
EPISODES = [0] * 100 + [1] * 100
INTERVENTION = [False] * 180 + [True] * 20


def _drawn(weights: list[float], steps: int = 400, batch: int = 32) -> torch.Tensor:
    sampler = FrameSampler(weights, batch, torch.Generator().manual_seed(0))
    return torch.cat([sampler.next() for _ in range(steps)])


def test_weights_by_frame_and_by_corrected_episode():
    weights = frame_weights(INTERVENTION, EPISODES, intervention_weight=3.0,
                            learner_weight=0.5)
    assert weights[:100] == [1.0] * 100  # no correction in the episode: a demonstration
    assert weights[100:180] == [0.5] * 80 and weights[180:] == [3.0] * 20
    assert frame_weights(INTERVENTION, EPISODES) == [1.0] * 200


def test_the_intervention_weight_changes_what_the_steps_see():
    corrected = torch.tensor(INTERVENTION)
    plain = _drawn(frame_weights(INTERVENTION, EPISODES), steps=100, batch=40)
    # Weight 1: shuffled epochs (5 batches of 40 each), every frame exactly once per epoch;
    # corrections are 10 % of the steps.
    assert torch.bincount(plain, minlength=200).tolist() == [20] * 200
    assert corrected[plain].float().mean().item() == pytest.approx(0.10, abs=0.01)
    weighted = _drawn(frame_weights(INTERVENTION, EPISODES, intervention_weight=4.0))
    # 20 frames x 4 against 180 x 1: 80 / 260 of the draws.
    assert corrected[weighted].float().mean().item() == pytest.approx(80 / 260, abs=0.02)
    hg = _drawn(frame_weights(INTERVENTION, EPISODES, intervention_weight=1.0,
                              learner_weight=0.0))
    # HG-DAgger: the learner's own frames of the corrected episode are never trained on.
    assert not ((hg >= 100) & (hg < 180)).any()
    assert corrected[hg].float().mean().item() == pytest.approx(20 / 120, abs=0.02)


def test_no_frame_to_train_on_is_refused():
    with pytest.raises(SettingsError, match='no frame'):
        FrameSampler(frame_weights([False, False], [0, 0], 1.0, 0.0)[:0], 4,
                     torch.Generator())
