"""The PandaOmron's 12-D action and 16-D state, with names, and the three action orders.

Three 12-D orders exist for the same action (ARCHITECTURE.md, "RoboCasa"):

* ``env``: what robosuite's ``env.step`` takes, in the order of the robot's composite
  controller parts: arm (end-effector position and rotation deltas), torso, base, gripper,
  base mode.
* ``robocasa``: RoboCasa's ``convert_action`` order, which openpi and the LeRobot RoboCasa
  runtime feed their policies: end effector, gripper, base motion (base then torso), control
  mode.
* ``lerobot``: the column order of LeRobot's RoboCasa datasets: base motion, control mode, end
  effector, gripper.

Every order is a permutation of the same named entries, so one mapping by name converts any
order to any other, and an ActionChunk's ``action_names`` say which order it speaks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

EEF_POS = ('eef_pos.x', 'eef_pos.y', 'eef_pos.z')
EEF_ROT = ('eef_rot.x', 'eef_rot.y', 'eef_rot.z')
GRIPPER = ('gripper',)
BASE = ('base.x', 'base.y', 'base.yaw')
TORSO = ('torso.z',)
BASE_MODE = ('base_mode',)

ACTION_ORDERS: dict[str, tuple[str, ...]] = {
    'env': EEF_POS + EEF_ROT + TORSO + BASE + GRIPPER + BASE_MODE,
    'robocasa': EEF_POS + EEF_ROT + GRIPPER + BASE + TORSO + BASE_MODE,
    'lerobot': BASE + TORSO + BASE_MODE + EEF_POS + EEF_ROT + GRIPPER,
}
ACTION_DIM = 12

# 16-D state in the order RoboCasa checkpoints (openpi, LeRobot's runtime) read it: the end
# effector relative to the base, the base in the world, the two gripper fingers. Quaternions
# are (x, y, z, w), robosuite's convention.
STATE_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ('robot0_base_to_eef_pos', ('eef_pos_rel.x', 'eef_pos_rel.y', 'eef_pos_rel.z')),
    ('robot0_base_to_eef_quat', ('eef_quat_rel.x', 'eef_quat_rel.y', 'eef_quat_rel.z',
                                 'eef_quat_rel.w')),
    ('robot0_base_pos', ('base_pos.x', 'base_pos.y', 'base_pos.z')),
    ('robot0_base_quat', ('base_quat.x', 'base_quat.y', 'base_quat.z', 'base_quat.w')),
    ('robot0_gripper_qpos', ('gripper_qpos.left', 'gripper_qpos.right')),
)
STATE_NAMES: tuple[str, ...] = tuple(n for _, names in STATE_PARTS for n in names)
STATE_DIM = 16

# RoboCasa's default views and the labels the viewer shows under them.
DEFAULT_CAMERAS = ('robot0_agentview_left', 'robot0_eye_in_hand', 'robot0_agentview_right')
_VIEW_LABELS = {'agentview_left': 'left', 'agentview_right': 'right', 'eye_in_hand': 'wrist'}


def action_names(order: str) -> tuple[str, ...]:
    """The 12 names of ``order``; ValueError names the known orders."""
    try:
        return ACTION_ORDERS[order]
    except KeyError:
        raise ValueError(f'unknown action order {order!r}; known: {sorted(ACTION_ORDERS)}'
                         ) from None


def order_of(names: Sequence[str]) -> str | None:
    """The order whose names are exactly ``names`` (same sequence), else None."""
    for order, known in ACTION_ORDERS.items():
        if tuple(names) == known:
            return order
    return None


def permutation(src: str, dst: str) -> np.ndarray:
    """Indices ``idx`` with ``values_dst = values_src[..., idx]``."""
    src_names = action_names(src)
    return np.array([src_names.index(n) for n in action_names(dst)], dtype=np.intp)


def reorder(values: np.ndarray | Sequence[float], src: str, dst: str) -> np.ndarray:
    """(..., 12) actions in order ``src`` -> the same actions in order ``dst``."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape[-1:] != (ACTION_DIM,):
        raise ValueError(f'a PandaOmron action has {ACTION_DIM} values, got shape '
                         f'{list(arr.shape)}')
    return arr[..., permutation(src, dst)]


def state_vector(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The 16-D state (STATE_NAMES order) from a robosuite/RoboCasa observation dict."""
    parts = []
    for key, names in STATE_PARTS:
        if key not in obs:
            raise KeyError(f'observation lacks {key!r} (the state needs '
                           f'{[k for k, _ in STATE_PARTS]})')
        value = np.asarray(obs[key], dtype=np.float64).reshape(-1)
        if value.size != len(names):
            raise ValueError(f'observation {key!r} has {value.size} values, expected '
                             f'{len(names)}')
        parts.append(value)
    return np.concatenate(parts)


def view_label(camera: str) -> str:
    """'robot0_agentview_left' -> 'left', 'robot0_eye_in_hand' -> 'wrist'; others unchanged
    but for the robot prefix."""
    short = camera.removeprefix('robot0_')
    return _VIEW_LABELS.get(short, short)
