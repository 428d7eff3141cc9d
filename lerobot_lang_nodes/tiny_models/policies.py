"""Tiny LeRobot ACT / Diffusion checkpoints for the SO-101 (and an ACT one in RoboCasa's
PandaOmron layout), random weights, built offline.

Saved as lerobot-train saves a checkpoint (``save_pretrained`` of the policy and of its
pre/post-processor pipelines made from dataset statistics), so the `lerobot` policy backend
loads them exactly as it loads a user's checkpoint. No vision backbone weights are downloaded
(``pretrained_backbone_weights=None``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

CAMERAS: tuple[str, ...] = ('front', 'wrist')
# Smaller than the simulator's 240x320 frames (same 3:4 aspect): the backend resizes, and the
# ResNet-18 encoder stays cheap on a CPU.
IMAGE_SHAPE: tuple[int, int, int] = (3, 96, 128)
# Dataset-like statistics in LeRobot's SO-101 units: arm joints in degrees, gripper 0..100.
STATE_MEAN = (0.0, -20.0, 20.0, 40.0, 0.0, 20.0)
STATE_STD = (30.0, 30.0, 30.0, 25.0, 40.0, 15.0)
STATE_MIN = (-110.0, -100.0, -95.0, -95.0, -160.0, 0.0)
STATE_MAX = (110.0, 100.0, 95.0, 95.0, 160.0, 100.0)


def _features(image_shape: tuple[int, int, int], cameras: tuple[str, ...],
              state_dim: int, action_dim: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from lerobot.configs.types import FeatureType, PolicyFeature
    inputs: dict[str, Any] = {f'observation.images.{c}': PolicyFeature(FeatureType.VISUAL,
                                                                       image_shape)
                              for c in cameras}
    inputs['observation.state'] = PolicyFeature(FeatureType.STATE, (state_dim,))
    outputs = {'action': PolicyFeature(FeatureType.ACTION, (action_dim,))}
    return inputs, outputs


def _stats(inputs: dict[str, Any], outputs: dict[str, Any],
           vectors: dict[str, dict[str, tuple[float, ...]]] | None = None
           ) -> dict[str, dict[str, Any]]:
    """Dataset-like statistics: images around mid-grey; vectors from ``vectors[key]`` (mean,
    std, min, max, each repeated to the feature's size), by default the SO-101 ones."""
    import torch

    def vec(values: tuple[float, ...], dim: int) -> torch.Tensor:
        return torch.tensor((list(values) * dim)[:dim], dtype=torch.float32)

    stats: dict[str, dict[str, Any]] = {}
    for key, ft in {**inputs, **outputs}.items():
        if key.startswith('observation.images.'):
            c = ft.shape[0]
            stats[key] = {'mean': torch.full((c, 1, 1), 0.45), 'std': torch.full((c, 1, 1), 0.25),
                          'min': torch.zeros((c, 1, 1)), 'max': torch.ones((c, 1, 1))}
        else:
            dim = ft.shape[0]
            given = (vectors or {}).get(key) or {'mean': STATE_MEAN, 'std': STATE_STD,
                                                 'min': STATE_MIN, 'max': STATE_MAX}
            stats[key] = {name: vec(given[name], dim) for name in ('mean', 'std', 'min', 'max')}
    return stats


def _save(policy: Any, cfg: Any, stats: dict[str, Any], out: Path) -> Path:
    from lerobot.policies.factory import make_pre_post_processors
    out.mkdir(parents=True, exist_ok=True)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out


def build_tiny_act(out: str | Path, *, chunk_size: int = 20, n_action_steps: int | None = None,
                   cameras: tuple[str, ...] = CAMERAS,
                   image_shape: tuple[int, int, int] = IMAGE_SHAPE, state_dim: int = 6,
                   action_dim: int = 6, action_scale: float = 0.1, seed: int = 0,
                   vectors: dict[str, dict[str, tuple[float, ...]]] | None = None) -> Path:
    """A tiny ACT checkpoint directory (about 12 M parameters, mostly the ResNet-18).

    ``action_scale`` shrinks the random action head, so the unnormalised actions stay near the
    statistics' mean (inside the SO-101 joint limits) instead of spreading over several
    standard deviations, as a trained policy's would not. ``vectors`` overrides the state and
    action statistics (see ``_stats``).
    """
    import torch
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    torch.manual_seed(seed)
    inputs, outputs = _features(image_shape, cameras, state_dim, action_dim)
    cfg = ACTConfig(input_features=inputs, output_features=outputs, device='cpu',
                    chunk_size=chunk_size, n_action_steps=n_action_steps or chunk_size,
                    pretrained_backbone_weights=None, dim_model=32, n_heads=2,
                    dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1,
                    n_vae_encoder_layers=1, latent_dim=8, push_to_hub=False)
    policy = ACTPolicy(cfg)
    with torch.no_grad():
        policy.model.action_head.weight.mul_(action_scale)
        policy.model.action_head.bias.zero_()
    return _save(policy, cfg, _stats(inputs, outputs, vectors), Path(out))


# RoboCasa (PandaOmron): the three default views, small square frames (cheap on a CPU; the
# backend resizes the bridge's frames); the 16-D state and 12-D action of
# lerobot_lang_nodes.robocasa.layout. RoboCasa's action space is [-1, 1]: with ACT's MEAN_STD
# unnormalisation (mean 0, std 0.2) and the random head shrunk, the actions stay well inside.
ROBOCASA_CAMERAS: tuple[str, ...] = ('robot0_agentview_left', 'robot0_eye_in_hand',
                                     'robot0_agentview_right')
ROBOCASA_IMAGE_SHAPE: tuple[int, int, int] = (3, 64, 64)
ROBOCASA_STATE = {'mean': (0.0,), 'std': (0.5,), 'min': (-2.0,), 'max': (2.0,)}
ROBOCASA_ACTION = {'mean': (0.0,), 'std': (0.2,), 'min': (-1.0,), 'max': (1.0,)}
# The action order (layout.ACTION_ORDERS) the tiny checkpoint's columns are named in.
ROBOCASA_ACTION_ORDER = 'robocasa'


def build_tiny_robocasa_act(out: str | Path, *, chunk_size: int = 20,
                            n_action_steps: int | None = None,
                            cameras: tuple[str, ...] = ROBOCASA_CAMERAS,
                            image_shape: tuple[int, int, int] = ROBOCASA_IMAGE_SHAPE,
                            action_scale: float = 0.1, seed: int = 0) -> Path:
    """A tiny ACT checkpoint in RoboCasa's layout, as LeRobot's RoboCasa checkpoints are:
    ``observation.state`` [16] (layout.STATE_NAMES), ``observation.images.<camera>`` for the
    three PandaOmron views, ``action`` [12] inside [-1, 1].

    ACT's config has no field for action names: the `lerobot` backend names the columns with
    its ``action_names`` parameter (layout.action_names(order) of the order it was trained in;
    ``ROBOCASA_ACTION_ORDER`` for this one, whose random weights mean no order in particular).
    """
    from lerobot_lang_nodes.robocasa import layout
    return build_tiny_act(out, chunk_size=chunk_size, n_action_steps=n_action_steps,
                          cameras=cameras, image_shape=image_shape,
                          state_dim=layout.STATE_DIM, action_dim=layout.ACTION_DIM,
                          action_scale=action_scale, seed=seed,
                          vectors={'observation.state': ROBOCASA_STATE,
                                   'action': ROBOCASA_ACTION})


def build_tiny_diffusion(out: str | Path, *, horizon: int = 16, n_action_steps: int = 8,
                         n_obs_steps: int = 2, cameras: tuple[str, ...] = CAMERAS,
                         image_shape: tuple[int, int, int] = IMAGE_SHAPE, state_dim: int = 6,
                         action_dim: int = 6, num_inference_steps: int = 4,
                         seed: int = 0) -> Path:
    """A tiny Diffusion Policy checkpoint directory (a 2-level U-Net, few denoising steps)."""
    import torch
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    torch.manual_seed(seed)
    inputs, outputs = _features(image_shape, cameras, state_dim, action_dim)
    cfg = DiffusionConfig(input_features=inputs, output_features=outputs, device='cpu',
                          horizon=horizon, n_action_steps=n_action_steps,
                          n_obs_steps=n_obs_steps, drop_n_last_frames=0,
                          pretrained_backbone_weights=None, use_group_norm=True,
                          crop_shape=None, spatial_softmax_num_keypoints=8,
                          down_dims=(16, 32), kernel_size=3, n_groups=4,
                          diffusion_step_embed_dim=16, num_train_timesteps=20,
                          num_inference_steps=num_inference_steps, push_to_hub=False)
    return _save(DiffusionPolicy(cfg), cfg, _stats(inputs, outputs), Path(out))


__all__ = ['CAMERAS', 'IMAGE_SHAPE', 'JOINT_NAMES', 'ROBOCASA_ACTION_ORDER', 'ROBOCASA_CAMERAS',
           'ROBOCASA_IMAGE_SHAPE', 'build_tiny_act', 'build_tiny_diffusion',
           'build_tiny_robocasa_act']
