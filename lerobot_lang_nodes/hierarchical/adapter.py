"""Runtime adapters: what the language runtime needs from a LeRobot checkpoint, and nothing more.

An adapter turns the runtime's language state into the policy's own prompts and batches:
``select_action(observation, state)`` returns an action chunk, ``generate_text(kind,
observation, state, user_text)`` a subtask, memory note or interjection reply. Flat policies
(ACT, Diffusion, SmolVLA, PI0.5, ...) use ``DirectTaskPolicyAdapter``; a hierarchical policy
subclasses ``BaseLanguageAdapter`` and keeps its prompt format next to its model.

``observation`` is the project's observation dict (``joint_names``, ``joint_positions`` in
radians, ``images``: camera name -> HxWx3 uint8, ...), as the policy and planner nodes build it.
torch and LeRobot are imported only when a model is loaded or run.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

logger = logging.getLogger(__name__)

IMAGE_PREFIX = 'observation.images.'
STATE_KEY = 'observation.state'


class NoTextHead(RuntimeError):
    """The checkpoint cannot generate text (a flat policy), or not this kind of text."""


@dataclass(frozen=True)
class AdapterState:
    """The language state an adapter conditions on (a read-only view of the runtime's)."""

    task: str = ''
    subtask: str = ''
    memory: str = ''
    plan: str = ''
    prior_subtask: str = ''

    @classmethod
    def from_snapshot(cls, snapshot: Any) -> AdapterState:
        """From a core LanguageSnapshot (or anything with those attributes); None -> empty."""
        if snapshot is None:
            return cls()
        return cls(**{name: str(getattr(snapshot, name, '') or '')
                      for name in cls.__dataclass_fields__})

    @property
    def instruction(self) -> str:
        """What the action head is conditioned on: the subtask, else the task."""
        return self.subtask.strip() or self.task.strip()


@dataclass
class GenerationSettings:
    """Decoding settings for text heads (from the planner's parameters)."""

    max_new_tokens: int = 0  # 0: the model's own default
    min_new_tokens: int = 0
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0


class BaseLanguageAdapter(ABC):
    """A loaded LeRobot policy with its processors, plus the two runtime primitives."""

    # Units of the checkpoint's joint state and actions: 'lerobot' (LeRobot's SO-101
    # conventions: degrees or -100..100, gripper 0..100, as lerobot-record stores them; the
    # backend converts with the arm's calibration) or 'radians' (the node's own units).
    joint_units = 'lerobot'

    def __init__(self, policy: Any, preprocessor: Any, postprocessor: Any,
                 gen: GenerationSettings | None = None) -> None:
        self.policy = policy
        self.preprocessor = preprocessor
        self.postprocessor = postprocessor
        self.gen = gen or GenerationSettings()
        cfg = policy.config
        self.policy_type = str(cfg.type)
        names = list(getattr(cfg, 'joint_names', None) or JOINT_NAMES)
        self.action_names = self._names_for(cfg.action_feature, names, 'action')
        self.state_names = self._names_for(cfg.robot_state_feature, names, STATE_KEY)
        self.image_keys = sorted(cfg.image_features)
        unsupported = sorted(k for k in cfg.input_features
                             if k != STATE_KEY and not k.startswith(IMAGE_PREFIX))
        if unsupported:
            raise ValueError(f'{self.policy_type} checkpoint wants inputs {unsupported}, which '
                             f'this adapter cannot fill; it fills {STATE_KEY} (joint positions) '
                             f'and {IMAGE_PREFIX}<camera> (camera images)')

    def _names_for(self, feature: Any, names: list[str], key: str) -> tuple[str, ...]:
        if feature is None:
            return ()
        dim = int(np.prod(feature.shape))
        if dim != len(names):
            raise ValueError(f'{self.policy_type} checkpoint declares {key} of size {dim}, but '
                             f'the arm has {len(names)} joints {names}')
        return tuple(names)

    @classmethod
    def from_pretrained(cls, model_path: str | Path, device: str = 'cpu',
                        dtype: str = 'float32') -> BaseLanguageAdapter:
        """Load the checkpoint through LeRobot's factory, as `lerobot-rollout` would."""
        import torch

        from lerobot.configs import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        from lerobot_lang_nodes.backends.policies.lerobot_policy import load_pretrained_policy
        path = str(model_path)
        cfg = PreTrainedConfig.from_pretrained(path)
        cfg.pretrained_path = Path(path)
        cfg.device = device
        # The lerobot backend's load: no random initialisation that the file then overwrites.
        policy = load_pretrained_policy(get_policy_class(cfg.type), Path(path), cfg)
        if dtype != 'float32':
            policy = policy.to(getattr(torch, dtype))
        device_override = {'device_processor': {'device': device}}
        pre, post = make_pre_post_processors(cfg, pretrained_path=path,
                                             preprocessor_overrides=device_override)
        return cls(policy, pre, post)

    # --- the runtime contract ---------------------------------------------------------------
    @abstractmethod
    def select_action(self, observation: Mapping[str, Any], state: AdapterState) -> np.ndarray:
        """(H, len(action_names)) actions in the checkpoint's units for the current state."""

    @abstractmethod
    def generate_text(self, kind: str, observation: Mapping[str, Any] | None,
                      state: AdapterState, user_text: str | None = None) -> str:
        """One text of ``kind`` ('subtask', 'memory', 'interjection', 'vqa'), decoded."""

    # --- helpers for subclasses -------------------------------------------------------------
    def frame(self, observation: Mapping[str, Any], instruction: str) -> dict[str, Any]:
        """An unbatched LeRobot frame: state in ``state_names`` order, CHW float images, task."""
        import torch
        frame: dict[str, Any] = {'task': instruction}
        if self.state_names:
            names = list(observation.get('joint_names', ()))
            positions = np.asarray(observation.get('joint_positions', ()), dtype=np.float32)
            missing = [n for n in self.state_names if n not in names]
            if missing:
                raise RuntimeError(f'joint_states lacks {missing}; the checkpoint needs '
                                   f'{list(self.state_names)}, got {names}')
            frame[STATE_KEY] = torch.from_numpy(positions[[names.index(n)
                                                           for n in self.state_names]])
        images = observation.get('images') or {}
        for key in self.image_keys:
            camera = key[len(IMAGE_PREFIX):]
            image = images.get(camera)
            if image is None:
                raise RuntimeError(f'no image from camera {camera!r} yet (checkpoint input '
                                   f'{key}); cameras with an image: {sorted(images)}')
            tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
            frame[key] = tensor.float() / 255.0 if tensor.dtype == torch.uint8 else tensor
        return frame

    def predict_chunk(self, frame: dict[str, Any]) -> np.ndarray:
        """preprocessor -> predict_action_chunk -> postprocessor, as an (H, A) float array:
        the first ``n_action_steps`` of the model's chunk, the actions lerobot-rollout
        executes of it (SmolVLA and PI0 predict 50 and may execute fewer)."""
        import torch
        steps = int(getattr(self.policy.config, 'n_action_steps', 0) or 0) or None
        with torch.inference_mode():
            batch = self.preprocessor(frame)
            dtype = next(self.policy.parameters()).dtype
            batch = {k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v
                     for k, v in batch.items()}
            predicted = self.policy.predict_action_chunk(batch)
            predicted = predicted[:, :steps] if predicted.ndim == 3 else predicted[:steps]
            chunk = self.postprocessor(predicted.float())
        chunk = chunk.detach().cpu().numpy()
        return chunk[0] if chunk.ndim == 3 else chunk


class DirectTaskPolicyAdapter(BaseLanguageAdapter):
    """Flat policies: the instruction (subtask, else task) conditions predict_action_chunk."""

    def select_action(self, observation: Mapping[str, Any], state: AdapterState) -> np.ndarray:
        return self.predict_chunk(self.frame(observation, state.instruction))

    def generate_text(self, kind: str, observation: Mapping[str, Any] | None,
                      state: AdapterState, user_text: str | None = None) -> str:
        raise NoTextHead(f'policy type {self.policy_type!r} is a flat policy '
                         f'(DirectTaskPolicyAdapter) and has no text head to generate {kind!r}; '
                         'pair it with another planner backend (scripted, transformers)')
