"""The `lang_chunk` policy's image parts: the training-time random shift and the spatial-softmax
keypoints, and that a checkpoint's config keeps which encoder it was trained with."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml('torch', 'lerobot')

import torch  # noqa: E402

from lerobot_lang_nodes.training.policy import random_shift  # noqa: E402


def _ramp(b: int = 6, h: int = 12, w: int = 16) -> torch.Tensor:
    """uint8 images whose pixel (y, x) is 10 y + x, the same in every channel and frame."""
    base = (torch.arange(h)[:, None] * 10 + torch.arange(w)[None, :]).to(torch.uint8)
    return base.expand(b, 3, h, w).clone()


def test_random_shift_moves_each_frame_by_at_most_pad_pixels_and_repeats_the_edge():
    images = _ramp()
    gen = torch.Generator().manual_seed(3)
    shifted = random_shift(images, 2, gen)
    assert shifted.shape == images.shape and shifted.dtype == images.dtype
    def moved(dy: int, dx: int) -> torch.Tensor:
        # The original moved by (dy, dx), edge rows and columns repeated past the border.
        ys = (torch.arange(12) + dy).clamp(0, 11)
        xs = (torch.arange(16) + dx).clamp(0, 15)
        return (ys[:, None] * 10 + xs[None, :]).to(torch.uint8)

    seen = set()
    for frame in shifted:
        offsets = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                   if all(torch.equal(frame[c], moved(dy, dx)) for c in range(3))]
        assert len(offsets) == 1, 'a frame is not the original moved by at most 2 pixels'
        seen.add(offsets[0])
    assert len(seen) > 1, 'six frames all got the same offset'


def test_random_shift_is_reproducible_from_the_generator():
    images = _ramp()
    a = random_shift(images, 3, torch.Generator().manual_seed(7))
    b = random_shift(images, 3, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_spatial_keypoints_find_a_peak_between_grid_cells():
    from lerobot_lang_nodes.training.modeling_lang_chunk import spatial_keypoints
    fmap = torch.full((1, 2, 9, 13), -50.0)
    fmap[0, 0, 0, 12] = 50.0      # channel 0: top-right corner
    fmap[0, 1, 4, 3] = 50.0       # channel 1: row 4 of 9 (centre), column 3 of 13
    fmap[0, 1, 4, 4] = 50.0       # ... and column 4: expected x halfway between them
    x0, x1, y0, y1 = spatial_keypoints(fmap)[0].tolist()
    assert (x0, y0) == pytest.approx((1.0, -1.0), abs=1e-4)
    assert y1 == pytest.approx(0.0, abs=1e-4)
    assert x1 == pytest.approx(-1.0 + 2 * 3.5 / 12, abs=1e-4)


def test_the_keypoint_encoder_is_part_of_the_saved_config(tmp_path):
    from lerobot.configs import FeatureType, PolicyFeature
    from lerobot.configs.policies import PreTrainedConfig

    from lerobot_lang_nodes.training.configuration_lang_chunk import LangChunkConfig
    from lerobot_lang_nodes.training.modeling_lang_chunk import LangChunkPolicy

    features = {'observation.state': PolicyFeature(FeatureType.STATE, (6,)),
                'observation.images.front': PolicyFeature(FeatureType.VISUAL, (3, 48, 64))}
    action = {'action': PolicyFeature(FeatureType.ACTION, (6,))}
    config = LangChunkConfig(input_features=features, output_features=action,
                             image_keypoints=True, conv_strides=[2, 2, 2, 1])
    policy = LangChunkPolicy(config).eval()
    batch = {'observation.state': torch.zeros(2, 6),
             'observation.images.front': torch.rand(2, 3, 48, 64),
             'task': ['reach the red cube', 'reach the blue cube']}
    with torch.no_grad():
        chunk = policy.predict_action_chunk(batch)
    assert chunk.shape == (2, config.chunk_size, 6)
    policy.save_pretrained(tmp_path)
    loaded = PreTrainedConfig.from_pretrained(tmp_path)
    assert loaded.image_keypoints is True and list(loaded.conv_strides) == [2, 2, 2, 1]
    again = LangChunkPolicy.from_pretrained(tmp_path, config=loaded).eval()
    with torch.no_grad():
        assert torch.allclose(again.predict_action_chunk(batch), chunk)


def test_conv_strides_must_match_the_conv_channels():
    from lerobot_lang_nodes.training.configuration_lang_chunk import LangChunkConfig
    with pytest.raises(ValueError, match='conv_strides'):
        LangChunkConfig(conv_channels=[16, 32], conv_strides=[2])
    with pytest.raises(ValueError, match='conv_strides'):
        LangChunkConfig(conv_channels=[16, 32], conv_strides=[2, 0])


def test_a_relative_policy_predicts_offsets_from_the_current_state(tmp_path):
    from lerobot.configs import FeatureType, PolicyFeature
    from lerobot.configs.policies import PreTrainedConfig

    from lerobot_lang_nodes.training.configuration_lang_chunk import LangChunkConfig
    from lerobot_lang_nodes.training.modeling_lang_chunk import LangChunkPolicy

    features = {'observation.state': PolicyFeature(FeatureType.STATE, (3,))}
    action = {'action': PolicyFeature(FeatureType.ACTION, (3,))}
    config = LangChunkConfig(input_features=features, output_features=action, chunk_size=4,
                             n_action_steps=4, relative_actions=True)
    policy = LangChunkPolicy(config).eval()
    s_mean, s_std = torch.tensor([10.0, -5.0, 0.0]), torch.tensor([2.0, 4.0, 1.0])
    a_mean, a_std = torch.tensor([12.0, -4.0, 1.0]), torch.tensor([3.0, 5.0, 2.0])
    policy.set_action_reference(s_mean, s_std, a_mean, a_std, torch.tensor([0.5, 1.0, 0.1]))
    raw_state = torch.tensor([[14.0, -1.0, 0.5]])
    batch = {'observation.state': (raw_state - s_mean) / s_std, 'task': ['reach the red cube']}
    # A head that outputs zero offsets: every step of the chunk is the current state.
    last = policy.head[-1]
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.zeros_(last.bias)
    with torch.no_grad():
        chunk = policy.predict_action_chunk(batch) * a_std + a_mean
    assert torch.allclose(chunk, raw_state.expand(4, 3)[None], atol=1e-5)
    # An output of one is one offset_std from the state, per joint.
    torch.nn.init.ones_(last.bias)
    with torch.no_grad():
        chunk = policy.predict_action_chunk(batch) * a_std + a_mean
    assert torch.allclose(chunk[0, 0], raw_state[0] + torch.tensor([0.5, 1.0, 0.1]), atol=1e-5)
    # The reference travels with the weights.
    policy.save_pretrained(tmp_path)
    loaded = LangChunkPolicy.from_pretrained(tmp_path,
                                             config=PreTrainedConfig.from_pretrained(tmp_path))
    assert torch.equal(loaded.offset_std, policy.offset_std)
    assert torch.equal(loaded.state_mean, s_mean)
    with torch.no_grad():
        assert torch.allclose(loaded.eval().predict_action_chunk(batch) * a_std + a_mean, chunk)


def test_relative_actions_need_the_state_and_the_action_to_be_the_same_joints():
    from lerobot.configs import FeatureType, PolicyFeature

    from lerobot_lang_nodes.training.configuration_lang_chunk import LangChunkConfig
    from lerobot_lang_nodes.training.modeling_lang_chunk import LangChunkPolicy

    config = LangChunkConfig(
        input_features={'observation.state': PolicyFeature(FeatureType.STATE, (16,))},
        output_features={'action': PolicyFeature(FeatureType.ACTION, (12,))},
        relative_actions=True)
    with pytest.raises(ValueError, match='same joints'):
        LangChunkPolicy(config)
