"""`scripted` policy: the MuJoCo scene's IK expert as an action-policy backend.

A privileged sim expert: it reads the simulator's ground truth (object poses) instead of
images, and returns H-step joint-position chunks in radians for the active instruction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np


class ScriptedSimExpert:
    """Policy backend wrapping lerobot_lang_nodes.sim.expert.ScriptedExpert."""

    def __init__(self, cfg: Any) -> None:
        from lerobot_lang_nodes.sim.expert import ExpertConfig, ScriptedExpert
        from lerobot_lang_nodes.sim.scene import JOINT_NAMES, SceneConfig, build_model
        self.action_names = tuple(JOINT_NAMES)
        horizon = int(cfg.chunk_horizon)
        # The IK model only: no renderer, and its own MjData so the simulator is untouched.
        # Its rate follows the executor's control period, given with each observation.
        self._expert = ScriptedExpert(build_model(SceneConfig()), ExpertConfig(horizon=horizon))

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """(H, 6) joint targets for observation['instruction']."""
        truth = observation.get('ground_truth')
        if not truth:
            raise RuntimeError('the scripted sim expert needs sim/ground_truth; is sim_bridge '
                               'running and ground_truth_topic set?')
        names = list(observation['joint_names'])
        positions = np.asarray(observation['joint_positions'], dtype=np.float64)
        try:
            q = positions[[names.index(n) for n in self.action_names]]
        except ValueError as exc:
            raise RuntimeError(f'joint_states lacks a joint of {list(self.action_names)}: '
                               f'got {names}') from exc
        period = observation.get('control_period_s')
        if period and abs(period * self._expert.config.ctrl_hz - 1.0) > 1e-9:
            self._expert.config = replace(self._expert.config, ctrl_hz=1.0 / period)
        # Row k is due at the observation's stamp + k periods (the executor's time alignment):
        # the expert continues its previous chunk's command at that time.
        return self._expert.act(observation['instruction'], q, truth,
                                now_s=observation.get('stamp_s'))
