"""What the VLA backend tests feed the `lerobot` backend: its parameters and one observation."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lerobot_lang_nodes.testing import policy_config
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES


def backend_cfg(path: Path | str, **kw) -> SimpleNamespace:
    """The policy node's parameters the backend reads, for a checkpoint at ``path``."""
    base = dict(model_path=str(path), cameras=('front', 'wrist'), device='cpu', dtype='auto')
    return policy_config(**{**base, **kw})


def observation(instruction: str) -> dict:
    """The same joints and camera frames every time, with ``instruction``."""
    rng = np.random.default_rng(0)
    return {'instruction': instruction, 'joint_names': list(JOINT_NAMES),
            'joint_positions': np.array([0.1, -0.4, 0.5, 0.7, -0.2, 0.3]),
            'images': {c: rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)
                       for c in ('front', 'wrist')}}


def seeded_infer(backend, instruction: str) -> np.ndarray:
    """One chunk with the same starting noise for every instruction (flow matching)."""
    import torch
    torch.manual_seed(7)
    return backend.infer(observation(instruction))
