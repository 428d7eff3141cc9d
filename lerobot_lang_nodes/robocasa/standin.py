"""A stand-in for a RoboCasa kitchen environment, for machines without RoboCasa's assets.

It has the method surface the bridge uses on RoboCasa's environments (robosuite's
``MujocoEnv``): ``reset()``, ``step(action)`` returning ``(obs, reward, done, info)``,
``get_ep_meta()`` with the episode's ``lang``, ``_check_success()``, ``action_spec``,
``action_dim``, a seeded ``rng`` that the next ``reset()`` draws the layout from, ``horizon``
and ``ignore_done``, and ``close()``. The observation holds the same keys and shapes as a
PandaOmron's (``robot0_base_pos``, ``robot0_base_quat``, ``robot0_base_to_eef_pos``,
``robot0_base_to_eef_quat``, ``robot0_gripper_qpos``, ``robot0_joint_pos``,
``<camera>_image``), with images in robosuite's OpenGL convention (bottom row first). Actions
are the raw ``env.step`` order (layout.ACTION_ORDERS['env']), each in [-1, 1].

The world is a plain kinematic one: the end effector moves by the arm's delta command, the
base by the base command, the fingers follow the gripper command, and the task ("pick up the
<object>") succeeds when the closed gripper is at the object. The camera images draw the
object and the gripper, so an executed action is visible in the next observation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobot_lang_nodes.robocasa import layout

OBJECTS = ('apple', 'mug', 'sponge', 'banana', 'bowl')
_ENV = layout.ACTION_ORDERS['env']
_I = {name: _ENV.index(name) for name in _ENV}
EEF_STEP_M = 0.05  # end-effector travel per step at a full command (OSC delta scale)
BASE_STEP_M = 0.02
FINGER_OPEN, FINGER_CLOSED = 0.04, 0.0
REACH_M = 0.05  # success: the closed gripper within this of the object
N_ARM_JOINTS = 7


def _quat_z(yaw: float) -> np.ndarray:
    """(x, y, z, w) of a rotation by ``yaw`` about z."""
    return np.array([0.0, 0.0, np.sin(yaw / 2), np.cos(yaw / 2)])


class StandInKitchen:
    """Kinematic PandaOmron in a one-object 'kitchen' with RoboCasa's environment interface."""

    def __init__(self, env_name: str = 'PickPlaceCounterToSink', robots: str = 'PandaOmron',
                 camera_names: tuple[str, ...] | list[str] = layout.DEFAULT_CAMERAS,
                 camera_widths: int = 128, camera_heights: int = 128, seed: int | None = None,
                 split: str | None = 'pretrain', horizon: int = 1000,
                 ignore_done: bool = False, control_freq: float = 20.0,
                 **_ignored: Any) -> None:
        if robots != 'PandaOmron':
            raise ValueError(f'the stand-in kitchen has a PandaOmron only, not {robots!r}')
        self.env_name = env_name
        self.split = split
        self.camera_names = tuple(camera_names)
        self.width, self.height = int(camera_widths), int(camera_heights)
        self.horizon = int(horizon)
        self.ignore_done = bool(ignore_done)
        self.control_freq = float(control_freq)
        self.rng = np.random.default_rng(seed)
        self.action_order = 'env'  # a stock robosuite PandaOmron's controller order
        self.action_dim = layout.ACTION_DIM
        self.action_spec = (-np.ones(self.action_dim), np.ones(self.action_dim))
        self.timestep = 0
        self._meta: dict[str, Any] = {}
        self._base = np.zeros(3)  # x, y, yaw
        self._torso = 0.0
        self._eef_rel = np.zeros(3)
        self._fingers = FINGER_OPEN
        self._object = np.zeros(3)
        self._held = False

    # --- RoboCasa's environment surface ---------------------------------------------------
    def reset(self) -> dict[str, np.ndarray]:
        name = OBJECTS[int(self.rng.integers(len(OBJECTS)))]
        self._object = np.array([self.rng.uniform(0.35, 0.6), self.rng.uniform(-0.25, 0.25),
                                 0.9])
        self._base = np.array([self.rng.uniform(-0.1, 0.1), self.rng.uniform(-0.1, 0.1), 0.0])
        self._torso = 0.0
        self._eef_rel = np.array([0.3, 0.0, 0.95])
        self._fingers = FINGER_OPEN
        self._held = False
        self.timestep = 0
        self._meta = {'lang': f'pick up the {name} from the counter', 'object': name,
                      'layout_id': int(self.rng.integers(10)),
                      'style_id': int(self.rng.integers(12)), 'split': self.split}
        return self._observation()

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, dict]:
        if self.timestep >= self.horizon and not self.ignore_done:
            raise ValueError('executing action in terminated episode')
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(-1), -1.0, 1.0)
        if a.size != self.action_dim:
            raise ValueError(f'environment got invalid action dimension -- expected '
                             f'{self.action_dim}, got {a.size}')
        if a[_I['base_mode']] > 0:  # base mode: the base moves, the arm holds
            yaw = self._base[2]
            dx, dy = a[_I['base.x']] * BASE_STEP_M, a[_I['base.y']] * BASE_STEP_M
            self._base += [dx * np.cos(yaw) - dy * np.sin(yaw),
                           dx * np.sin(yaw) + dy * np.cos(yaw), a[_I['base.yaw']] * 0.05]
        else:
            delta = np.array([a[_I[n]] for n in layout.EEF_POS]) * EEF_STEP_M
            self._eef_rel = np.clip(self._eef_rel + delta, [0.1, -0.6, 0.4], [0.9, 0.6, 1.4])
            self._torso = float(np.clip(self._torso + a[_I['torso.z']] * 0.01, 0.0, 0.3))
        closing = a[_I['gripper']] > 0
        self._fingers = float(np.clip(self._fingers + (-0.01 if closing else 0.01),
                                      FINGER_CLOSED, FINGER_OPEN))
        if closing and np.linalg.norm(self._eef_world() - self._object) < REACH_M:
            self._held = True
        elif not closing:
            self._held = False
        if self._held:
            self._object = self._eef_world().copy()
        self.timestep += 1
        done = self.timestep >= self.horizon and not self.ignore_done
        success = self._check_success()
        return self._observation(), float(success), done, {'success': success}

    def get_ep_meta(self) -> dict[str, Any]:
        return dict(self._meta)

    def _check_success(self) -> bool:
        return bool(self._held and self._fingers <= FINGER_OPEN / 2)

    def close(self) -> None:
        pass

    # --- the kinematic world --------------------------------------------------------------
    def _eef_world(self) -> np.ndarray:
        yaw = self._base[2]
        rot = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
        xy = self._base[:2] + rot @ self._eef_rel[:2]
        return np.array([xy[0], xy[1], self._eef_rel[2] + self._torso])

    def _observation(self) -> dict[str, np.ndarray]:
        eef_rel = self._eef_rel + [0.0, 0.0, self._torso]
        # Seven arm angles that follow the end effector (the stand-in has no arm dynamics).
        joints = np.tanh(np.array([eef_rel[1], eef_rel[0] - 0.5, 0.0, eef_rel[2] - 1.0,
                                   0.0, 0.5 - eef_rel[0], 0.0]))
        obs = {
            'robot0_base_pos': np.array([self._base[0], self._base[1], 0.0]),
            'robot0_base_quat': _quat_z(self._base[2]),
            'robot0_base_to_eef_pos': eef_rel,
            'robot0_base_to_eef_quat': np.array([1.0, 0.0, 0.0, 0.0]),
            'robot0_gripper_qpos': np.array([self._fingers, -self._fingers]),
            'robot0_eef_pos': self._eef_world(),
            'robot0_joint_pos': joints,
            'object_pos': self._object.copy(),
        }
        for cam in self.camera_names:
            obs[f'{cam}_image'] = self._render(cam)[::-1]  # OpenGL convention, as robosuite
        return obs

    def _render(self, camera: str) -> np.ndarray:
        """An upright top view: object red, gripper green (brighter when closed), a white
        bar along the top edge so a flipped image is detectable."""
        h, w = self.height, self.width
        img = np.full((h, w, 3), 40 + 30 * (sum(camera.encode()) % 3), dtype=np.uint8)
        img[: max(1, h // 16)] = 255

        def pixel(p: np.ndarray) -> tuple[int, int]:
            # x in [0, 1] m runs up the image, y in [-0.6, 0.6] m left to right.
            row = int(np.clip((1.0 - p[0]) * (h - 1), 0, h - 1))
            col = int(np.clip((p[1] + 0.6) / 1.2 * (w - 1), 0, w - 1))
            return row, col

        r = max(1, min(h, w) // 24)
        for pos, colour in ((self._object, (220, 30, 30)),
                            (self._eef_world(), (30, 220 if self._fingers < 0.02 else 140, 30))):
            row, col = pixel(pos)
            img[max(0, row - r):row + r + 1, max(0, col - r):col + r + 1] = colour
        return img
