"""The `hierarchical` planner and policy backends: two views of one shared loaded checkpoint.

Both are built as ``cls(cfg)`` from their node's config (``model_path``, and ``device`` /
``dtype`` when the node declares them). In one process they share the model through
``loading``; in separate processes each loads its own copy, which works the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import loading
from .adapter import AdapterState, GenerationSettings

# core/prompts.py memory_messages(): the turns that carry the previous memory and the subtask
# that just ended (the snapshot in the observation may predate the subtask change).
_PREVIOUS_MEMORY = 'Previous memory: '
_COMPLETED_SUBTASK = 'Completed subtask: '


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get('content', '')
    if isinstance(content, str):
        return content
    return ' '.join(str(part.get('text', '')) for part in content
                    if isinstance(part, Mapping) and part.get('type') == 'text')


def _image_of(messages: list[dict]) -> tuple[Any, str]:
    for message in messages:
        content = message.get('content')
        if isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and part.get('type') == 'image':
                    return part.get('image'), str(part.get('camera', ''))
    return None, ''


def _acquire(cfg: Any, user: str) -> loading.SharedModel:
    return loading.acquire(str(cfg.model_path), str(cfg.device or 'auto'),
                           str(cfg.dtype or 'auto'), user=user)


class HierarchicalPlanner:
    """TextGenerator over the adapter's text head (``generate_text``)."""

    def __init__(self, cfg: Any) -> None:
        self._model = _acquire(cfg, 'planner')
        self.adapter = self._model.adapter
        # The planner is the text head's one user, so its decoding settings are the adapter's.
        self.adapter.gen = GenerationSettings(
            max_new_tokens=int(cfg.max_new_tokens),
            min_new_tokens=int(cfg.min_new_tokens),
            temperature=float(cfg.temperature),
            top_p=float(cfg.top_p))

    @property
    def shared_model(self) -> loading.SharedModel:
        return self._model

    def generate(self, kind: str, messages: list[dict], observation: Mapping | None) -> str:
        """Map the core's (kind, chat turns) to the adapter's (kind, state, user_text)."""
        obs = dict(observation or {})
        state = AdapterState.from_snapshot(obs.get('language'))
        user_text = None
        if kind == 'memory':
            fields = {'memory': '', 'prior_subtask': ''}
            for message in messages[1:]:
                text = _text_of(message)
                if text.startswith(_PREVIOUS_MEMORY):
                    fields['memory'] = text[len(_PREVIOUS_MEMORY):]
                elif text.startswith(_COMPLETED_SUBTASK):
                    fields['prior_subtask'] = text[len(_COMPLETED_SUBTASK):]
            state = AdapterState(task=state.task or _text_of(messages[0]), subtask=state.subtask,
                                 plan=state.plan, **fields)
        elif kind in ('interjection', 'vqa'):
            user_text = _text_of(messages[-1]) if messages else ''
            if kind == 'vqa':
                obs['vqa_image'], obs['vqa_camera'] = _image_of(messages)
        elif not state.task and messages:
            state = AdapterState(task=_text_of(messages[0]))
        with self._model.call_lock:
            return self.adapter.generate_text(kind, obs, state, user_text)

    def close(self) -> None:
        loading.release(self._model, 'planner')


class HierarchicalPolicy:
    """Policy backend over the adapter's action head (``select_action``), radians out."""

    def __init__(self, cfg: Any) -> None:
        self._model = _acquire(cfg, 'policy')
        self.adapter = self._model.adapter
        self.action_names = tuple(self.adapter.action_names)
        if not self.action_names:
            raise ValueError(f'{self._model.model_path} declares no action output; the policy '
                             'backend needs one (joint positions)')
        # A stock LeRobot checkpoint (a flat VLA) works in LeRobot's SO-101 units: joint
        # states go in and actions come out through the arm's calibration, as in the lerobot
        # backend; the project's own two_head type works in radians.
        self._units = None
        if self.adapter.joint_units == 'lerobot':
            from lerobot_lang_nodes.backends.policies.lerobot_policy import (
                PolicyLoadError, StateUnits, arm_calibration, joint_order)
            state_units = str(cfg.lerobot.state_units)
            if state_units == 'raw':
                raise PolicyLoadError('state_units raw is for the lerobot backend; the '
                                      'hierarchical backend runs SO-101 checkpoints')
            calibration, zero = arm_calibration(cfg.lerobot)
            self._units = StateUnits(calibration, state_units, joint_order(self.action_names),
                                     zero)

    @property
    def shared_model(self) -> loading.SharedModel:
        return self._model

    def infer(self, observation: Mapping[str, Any]) -> np.ndarray:
        """(H, len(action_names)) joint targets for observation['instruction']."""
        # The node has already chosen the instruction (subtask, else task).
        state = AdapterState(subtask=str(observation.get('instruction', '')))
        if self._units is not None:
            observation = self._to_lerobot_units(observation)
        with self._model.call_lock:
            chunk = np.asarray(self.adapter.select_action(observation, state),
                               dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != len(self.action_names):
            raise RuntimeError(f'the adapter returned actions of shape {chunk.shape}, expected '
                               f'(H, {len(self.action_names)})')
        return chunk if self._units is None else self._units.to_radians(chunk)

    def _to_lerobot_units(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        """The observation with the arm's joints in the checkpoint's LeRobot units."""
        names = list(observation.get('joint_names', ()))
        positions = np.array(observation.get('joint_positions', ()), dtype=np.float64)
        order = self._units.order
        missing = [j for j in order if j not in names]
        if missing:
            raise RuntimeError(f'joint_states lacks {missing}; got {names}')
        index = [names.index(j) for j in order]
        positions[index] = self._units.to_lerobot(positions[index])
        return {**observation, 'joint_positions': positions}

    def close(self) -> None:
        loading.release(self._model, 'policy')
