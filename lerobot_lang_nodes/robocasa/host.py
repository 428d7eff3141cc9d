"""ROS-free host of one persistent kitchen scene: reset seeds, actions, observations, outcome.

The ``robocasa_bridge`` node wraps it; the tests and ``bench/robocasa_bridge.py`` drive it
directly. One host owns one environment and must stay on one thread (MuJoCo's renderer).

* One scene persists: success does not end it (the environment is made with a very long
  horizon and the host never resets on success). If the environment ends the episode anyway
  (its horizon), the host resets it with the same seed and counts the event.
* ``reset()`` re-rolls the kitchen: reset ``k`` uses ``seed + 1000 * k``.
* Actions arrive in the policy's order (``action_order``) and are mapped by name (layout.py)
  to the order the environment's ``env.step`` takes (read from its composite controller:
  RoboCasa kitchens take the ``robocasa`` order, stock robosuite the ``env`` order), clipped
  to the action bounds; gripper and base mode are binarised at 0.5 as RoboCasa's gym wrapper
  does. With no action (paused, starved) the host holds: arm and base motion zero, the last
  gripper command and base mode kept.
* Observations: images turned upright (robosuite renders bottom row first), the 16-D state,
  the arm's joint positions.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_lang_nodes.robocasa import layout

RESET_SEED_STRIDE = 1000  # RoboCasa runtime's convention: reset k uses seed + 1000 * k
_HOLD_ZERO = layout.EEF_POS + layout.EEF_ROT + layout.BASE + layout.TORSO


@dataclass(frozen=True)
class KitchenSpec:
    """What scene to build (the bridge's parameters, without ROS)."""

    simulator: str = 'robocasa'
    task: str = 'PickPlaceCounterToSink'
    split: str = 'pretrain'
    seed: int = 0
    robot: str = 'PandaOmron'
    cameras: tuple[str, ...] = layout.DEFAULT_CAMERAS
    image_size: int = 256
    control_hz: float = 20.0
    horizon: int = 1_000_000
    action_order: str = 'robocasa'


@dataclass
class StepTimes:
    """Wall time of the last steps (ms), for diagnostics and the benchmark."""

    step_ms: deque = field(default_factory=lambda: deque(maxlen=200))

    def median_ms(self) -> float:
        return statistics.median(self.step_ms) if self.step_ms else 0.0


def env_action_order(env: Any) -> str:
    """The 12-D order ``env.step`` takes: the environment's own ``action_order`` (stand-in),
    else read from its robot's composite controller (robosuite, RoboCasa)."""
    order = getattr(env, 'action_order', None)
    if isinstance(order, str):
        layout.action_names(order)
        return order
    try:
        split = env.robots[0].composite_controller._action_split_indexes  # noqa: SLF001
    except (AttributeError, IndexError) as exc:
        raise ValueError('cannot tell the action order of this environment (no composite '
                         f'controller on robots[0]: {exc})') from exc
    return layout.order_from_split(split)


class KitchenHost:
    """One kitchen scene driven one control period at a time."""

    def __init__(self, spec: KitchenSpec, make_env: Callable[[KitchenSpec, int], Any],
                 reseed: Callable[[Any, int], None] | None = None) -> None:
        self.spec = spec
        self.action_names = layout.action_names(spec.action_order)
        self._make_env = make_env
        self._reseed = reseed
        self.period_s = 1.0 / spec.control_hz
        self.reset_count = 0
        self.terminations = 0  # episodes the environment ended by itself (then reset)
        self.steps = 0
        self.sim_time = 0.0
        self.times = StepTimes()
        self.seed = spec.seed
        self.env = make_env(spec, spec.seed)
        self.env_order = env_action_order(self.env)
        self._to_env = layout.permutation(spec.action_order, self.env_order)
        self._env_index = {n: i for i, n in enumerate(layout.action_names(self.env_order))}
        low, high = (np.asarray(b, dtype=np.float64).reshape(-1) for b in self.env.action_spec)
        if low.size != layout.ACTION_DIM:
            raise ValueError(f'the environment takes {low.size}-D actions; the bridge drives a '
                             f'PandaOmron with {layout.ACTION_DIM}')
        # Bounds in the policy's order (the executor's limits).
        from_env = layout.permutation(self.env_order, spec.action_order)
        self.lower, self.upper = low[from_env], high[from_env]
        self._env_low, self._env_high = low, high
        self._last_env_action = np.zeros(layout.ACTION_DIM)
        self._last_env_action[self._env_index['gripper']] = low[self._env_index['gripper']]
        self._last_env_action[self._env_index['base_mode']] = low[self._env_index['base_mode']]
        # The first scene is drawn exactly as a reset's: so scene k of any session is the one
        # a host started with seed + 1000 * k shows first.
        if reseed is not None:
            reseed(self.env, spec.seed)
        self._obs: Mapping[str, Any] = self.env.reset()
        self.language = self._language()

    # --- scene ---------------------------------------------------------------------------
    def reset(self) -> int:
        """Re-roll the kitchen with the next reset seed; returns that seed."""
        self.reset_count += 1
        self.seed = self.spec.seed + RESET_SEED_STRIDE * self.reset_count
        if self._reseed is not None:
            self._reseed(self.env, self.seed)
        else:  # no way to re-seed in place: build the environment anew
            self.env.close()
            self.env = self._make_env(self.spec, self.seed)
        self._obs = self.env.reset()
        self._last_env_action[:] = 0.0
        self._last_env_action[self._env_index['gripper']] = self._env_low[
            self._env_index['gripper']]
        self._last_env_action[self._env_index['base_mode']] = self._env_low[
            self._env_index['base_mode']]
        self.language = self._language()
        return self.seed

    def _language(self) -> str:
        meta = self.env.get_ep_meta() if hasattr(self.env, 'get_ep_meta') else {}
        return str((meta or {}).get('lang', '') or '').strip()

    # --- control -------------------------------------------------------------------------
    def hold_action(self) -> np.ndarray:
        """The env-order action that keeps everything still (motion zero, grip kept)."""
        hold = self._last_env_action.copy()
        for name in _HOLD_ZERO:
            hold[self._env_index[name]] = 0.0
        return hold

    def step(self, action: np.ndarray | None) -> bool:
        """One control period with ``action`` (policy order) or holding; True when the
        environment ended the episode and the host reset it (same seed)."""
        if action is None:
            env_action = self.hold_action()
        else:
            values = np.asarray(action, dtype=np.float64).reshape(-1)
            if values.size != layout.ACTION_DIM:
                raise ValueError(f'action has {values.size} values, expected '
                                 f'{layout.ACTION_DIM} ({self.spec.action_order} order)')
            env_action = layout.binarise(np.clip(values[self._to_env], self._env_low,
                                                 self._env_high), self.env_order)
        start = time.perf_counter()
        obs, _reward, done, _info = self.env.step(env_action)
        self.times.step_ms.append((time.perf_counter() - start) * 1000.0)
        self._last_env_action = env_action
        self._obs = obs
        self.steps += 1
        self.sim_time += self.period_s
        if done:
            self.terminations += 1
            if self._reseed is not None:
                self._reseed(self.env, self.seed)
            self._obs = self.env.reset()
            self.language = self._language() or self.language
            return True
        return False

    # --- observations --------------------------------------------------------------------
    def success(self) -> bool:
        return bool(self.env._check_success())  # noqa: SLF001 - RoboCasa's success check

    def images(self) -> dict[str, np.ndarray]:
        """{camera: upright HxWx3 uint8}."""
        out = {}
        for cam in self.spec.cameras:
            img = self._obs.get(f'{cam}_image')
            if img is None:
                raise KeyError(f'observation lacks {cam}_image; the environment renders '
                               f'{sorted(k for k in self._obs if k.endswith("_image"))}')
            out[cam] = np.ascontiguousarray(np.asarray(img)[::-1])
        return out

    def state(self) -> np.ndarray:
        return layout.state_vector(self._obs)

    def joint_positions(self) -> np.ndarray:
        return np.asarray(self._obs.get('robot0_joint_pos', ()), dtype=np.float64).reshape(-1)

    def joint_names(self) -> tuple[str, ...]:
        names = getattr(self.env, 'arm_joint_names', None)
        n = self.joint_positions().size
        if names is not None and len(names) == n:
            return tuple(names)
        return tuple(f'robot0_joint{i + 1}' for i in range(n))

    def camera_fovy(self, camera: str, default: float = 45.0) -> float:
        """Vertical field of view (degrees) of ``camera`` from the MuJoCo model, if any."""
        model = getattr(getattr(self.env, 'sim', None), 'model', None)
        try:
            return float(model.cam_fovy[model.camera_name2id(camera)])
        except Exception:  # noqa: BLE001 - no MuJoCo model (stand-in) or no such camera
            return float(getattr(self.env, 'camera_fovy', {}).get(camera, default))

    def close(self) -> None:
        self.env.close()
