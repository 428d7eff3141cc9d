"""The PandaOmron's 12-D action and 16-D state, with names, and the three action orders.

Three 12-D orders exist for the same action (ARCHITECTURE.md, "RoboCasa"):

* ``env``: what a stock robosuite environment's ``env.step`` takes for a PandaOmron, in the
  order of its composite controller's parts: arm (end-effector position and rotation deltas),
  torso, base, gripper, base mode.
* ``robocasa``: RoboCasa's ``convert_action`` order, which openpi and the LeRobot RoboCasa
  runtime feed their policies: end effector, gripper, base motion (base then torso), control
  mode. RoboCasa's kitchens reorder their controller parts so that their ``env.step`` takes
  this order too.
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


# The composite controller's part names (robosuite) -> the entries they drive.
CONTROLLER_PARTS = {'right': EEF_POS + EEF_ROT, 'right_gripper': GRIPPER, 'base': BASE,
                    'torso': TORSO}
# Entries RoboCasa's gym wrapper binarises before env.step: -1 below 0.5, +1 from 0.5 on, so
# policies trained on {0, 1} or on {-1, +1} targets both work.
BINARY = ('gripper', 'base_mode')


def order_from_split(split_indexes: Mapping[str, tuple[int, int]]) -> str:
    """The order an environment's ``env.step`` takes, from its composite controller's
    ``_action_split_indexes`` ({part: (start, end)}; base mode is the last entry)."""
    names: list[str] = []
    for part, (start, end) in sorted(split_indexes.items(), key=lambda kv: kv[1][0]):
        entries = CONTROLLER_PARTS.get(part)
        if entries is None or len(entries) != end - start:
            raise ValueError(f'controller part {part!r} ({end - start} values) is not one of a '
                             f'PandaOmron\'s {sorted(CONTROLLER_PARTS)}')
        names.extend(entries)
    order = order_of((*names, *BASE_MODE))
    if order is None:
        raise ValueError(f'the controller takes {names + list(BASE_MODE)}, which is none of '
                         f'the known orders {sorted(ACTION_ORDERS)}')
    return order


def binarise(env_action: np.ndarray, order: str) -> np.ndarray:
    """Gripper and base mode of ``env_action`` (in ``order``) as RoboCasa sends them."""
    out = np.array(env_action, dtype=np.float64)
    names = action_names(order)
    for name in BINARY:
        i = names.index(name)
        out[..., i] = np.where(out[..., i] < 0.5, -1.0, 1.0)
    return out


def view_label(camera: str) -> str:
    """'robot0_agentview_left' -> 'left', 'robot0_eye_in_hand' -> 'wrist'; others unchanged
    but for the robot prefix."""
    short = camera.removeprefix('robot0_')
    return _VIEW_LABELS.get(short, short)
