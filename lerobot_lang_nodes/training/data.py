"""What both trainers need from an exported dataset, checked before anything heavy is imported.

``check_dataset`` reads only ``meta/info.json`` and the folder layout, so a wrong path or an
incomplete folder fails in milliseconds with the folder and what it lacks, not after torch and
LeRobot have loaded. ``language_at`` gives the language state active at a frame with LeRobot's
own resolvers (``active_at``: the persistent row of a style with the latest timestamp <= t),
the semantics LeRobot's recipes train with. Nothing here imports torch at module level.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

STATE_KEY = 'observation.state'
ACTION_KEY = 'action'
IMAGE_PREFIX = 'observation.images.'
PERSISTENT_KEY = 'language_persistent'
EVENTS_KEY = 'language_events'
CODEBASE_VERSION = 'v3.0'
REQUIRED_FILES = ('meta/info.json', 'meta/stats.json', 'meta/tasks.parquet')
REQUIRED_DIRS = ('meta/episodes', 'data')
EXPORT_HINT = ('export one from recorded bags with `lerobot-lang export BAG... OUT_DIR '
               '--units lerobot`')


class DatasetError(ValueError):
    """The dataset folder cannot be trained on; the message names the folder and the gap."""


class SettingsError(ValueError):
    """A training setting is invalid; the message names it and the valid range."""


@dataclass(frozen=True)
class DatasetInfo:
    """The facts of ``meta/info.json`` the trainers use."""

    root: Path
    fps: int
    total_frames: int
    total_episodes: int
    features: dict[str, Any]
    cameras: tuple[str, ...]  # camera names, without the observation.images. prefix
    has_language: bool

    @property
    def state_names(self) -> list[str]:
        return list(self.features[STATE_KEY].get('names') or [])

    @property
    def action_names(self) -> list[str]:
        return list(self.features[ACTION_KEY].get('names') or [])

    def image_shape(self, camera: str) -> tuple[int, int, int]:
        """(height, width, channels) of a camera's frames, as the dataset declares them."""
        ft = self.features[IMAGE_PREFIX + camera]
        shape = [int(v) for v in ft['shape']]
        names = list(ft.get('names') or [])
        if len(shape) == 3 and names[:1] in (['channels'], ['channel']):  # (C, H, W)
            shape = shape[1:] + shape[:1]
        return tuple(shape)  # type: ignore[return-value]


def check_dataset(path: str | Path, *, need_cameras: bool = True,
                  need_language: bool = False) -> DatasetInfo:
    """Check a LeRobot v3.0 dataset folder; raise DatasetError naming the folder and the gap."""
    root = Path(path).expanduser()
    if not root.exists():
        raise DatasetError(f'dataset folder {str(root)!r} does not exist; give the folder of a '
                           f'LeRobot v3.0 dataset ({EXPORT_HINT})')
    if not root.is_dir():
        raise DatasetError(f'dataset path {str(root)!r} is not a folder; give the folder of a '
                           f'LeRobot v3.0 dataset (it holds meta/ and data/)')
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    missing += [d + '/' for d in REQUIRED_DIRS if not (root / d).is_dir()]
    if missing:
        raise DatasetError(f'dataset folder {str(root)!r} is not a complete LeRobot dataset: '
                           f'it lacks {missing}; {EXPORT_HINT}')
    info_file = root / 'meta/info.json'
    try:
        info = json.loads(info_file.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f'{str(info_file)!r} cannot be read as JSON ({exc}); the dataset '
                           'is corrupt, export it again') from exc
    if not isinstance(info, dict) or not isinstance(info.get('features'), dict):
        raise DatasetError(f'{str(info_file)!r} has no "features" mapping; the dataset is '
                           'corrupt, export it again')
    version = info.get('codebase_version')
    if version != CODEBASE_VERSION:
        raise DatasetError(f'dataset folder {str(root)!r} is LeRobot format {version!r}; these '
                           f'trainers read {CODEBASE_VERSION!r} (LeRobot 0.6 writes it)')
    features = info['features']
    lacking = [k for k in (STATE_KEY, ACTION_KEY) if k not in features]
    if lacking:
        raise DatasetError(f'dataset folder {str(root)!r} lacks the feature(s) {lacking}; its '
                           f'features are {sorted(features)}')
    cameras = tuple(sorted(k[len(IMAGE_PREFIX):] for k, ft in features.items()
                           if k.startswith(IMAGE_PREFIX)
                           and ft.get('dtype') in ('video', 'image')))
    if need_cameras and not cameras:
        raise DatasetError(f'dataset folder {str(root)!r} has no camera feature '
                           f'({IMAGE_PREFIX}<camera>); its features are {sorted(features)}')
    has_language = PERSISTENT_KEY in features
    if need_language and not has_language:
        raise DatasetError(f'dataset folder {str(root)!r} has no {PERSISTENT_KEY!r} column '
                           '(the subtask, plan and memory rows); export bags recorded with the '
                           'planner running (its language_context topic) with lerobot-lang export')
    frames = int(info.get('total_frames') or 0)
    if frames < 1:
        raise DatasetError(f'dataset folder {str(root)!r} holds no frame (total_frames = '
                           f'{frames})')
    return DatasetInfo(root=root.absolute(), fps=int(info.get('fps') or 0), total_frames=frames,
                       total_episodes=int(info.get('total_episodes') or 0), features=features,
                       cameras=cameras, has_language=has_language)


def check_so101_units(info: DatasetInfo) -> None:
    """Refuse state / action vectors the `lerobot` policy backend would feed in other units.

    The backend converts the arm's radians to LeRobot's SO-101 units (degrees, gripper 0..100)
    named '<joint>.pos'; `lerobot-lang export` writes them with ``--units lerobot`` and plain
    joint names (radians) by default. A policy trained on radians would be fed degrees.
    """
    state, action = info.state_names, info.action_names
    expected = {f'{j}.pos' for j in JOINT_NAMES}
    if set(action) == set(JOINT_NAMES) or set(state) == set(JOINT_NAMES):
        raise DatasetError(
            f'dataset folder {str(info.root)!r} holds joint positions in radians (names '
            f'{action}); the lerobot policy backend feeds LeRobot SO-101 units (degrees, '
            'gripper 0..100, names <joint>.pos). Export the bags again with --units lerobot')
    if set(action) != expected or set(state) != expected:
        raise DatasetError(f'dataset folder {str(info.root)!r}: {STATE_KEY} names {state} and '
                           f'{ACTION_KEY} names {action}; expected the six SO-101 joints '
                           f'{sorted(expected)} (export with --units lerobot)')
    if state != action:
        raise DatasetError(f'dataset folder {str(info.root)!r}: {STATE_KEY} and {ACTION_KEY} '
                           f'list the joints in different orders ({state} / {action}); the '
                           'policy backend orders both by the action names')


LEROBOT_SUFFIX = '.pos'  # `export --units lerobot` names a joint '<joint>.pos'


def state_in_radians(info: DatasetInfo, calibration: str = ''
                     ) -> tuple[list[str], Callable[[Any], np.ndarray]]:
    """The joint names of ``observation.state`` as the robot's joint_states names them, and a
    function from one state vector to those joints' positions in radians (REP-103), as the
    planner node receives them.

    A dataset exported in ROS units (plain joint names) holds radians already; one exported
    with ``--units lerobot`` ('<joint>.pos': degrees, gripper 0..100) is converted back with
    the export's own conversion and calibration (``calibration``: the id or JSON path given to
    the export; '' = the simulated arm's nominal calibration, the export's default).
    Raises DatasetError when the names say neither, SettingsError for a bad calibration.
    """
    names = info.state_names
    lerobot = [n.endswith(LEROBOT_SUFFIX) for n in names]
    if names and not any(lerobot):
        return names, lambda v: np.asarray(v, dtype=np.float64)
    joints = [n[:-len(LEROBOT_SUFFIX)] for n in names]
    if not names or not all(lerobot) or set(joints) - set(JOINT_NAMES):
        raise DatasetError(
            f'dataset folder {str(info.root)!r}: the units of {STATE_KEY} (names {names}) are '
            'unknown, so its joint state cannot be rendered as the planner node sees it '
            '(radians): expected the joint names of joint_states (ROS units, `lerobot-lang '
            f'export`) or SO-101 joints {[j + LEROBOT_SUFFIX for j in JOINT_NAMES]} '
            '(--units lerobot)')
    from lerobot_lang_nodes.recording.dataset import lerobot_state_units
    from lerobot_lang_nodes.so101.errors import CalibrationError
    try:
        units = lerobot_state_units(joints, calibration)
    except CalibrationError as exc:
        raise SettingsError(f'calibration {calibration!r}: {exc}') from exc
    return joints, units.to_radians


def check_output_dir(path: str | Path) -> Path:
    """The output folder: new, or an existing empty folder (nothing is ever overwritten)."""
    out = Path(path).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(f'output folder {str(out)!r} exists and is not empty; choose a new '
                           'folder or remove it')
    return out.absolute()


@dataclass(frozen=True)
class LanguageAt:
    """The persistent language active at one frame ('' where no row is active)."""

    subtask: str = ''
    plan: str = ''
    memory: str = ''


def _content(row: Any) -> str:
    return str(row.get('content') or '').strip() if row else ''


def language_at(persistent: Sequence[dict] | None, t: float) -> LanguageAt:
    """Subtask, plan and memory active at time ``t`` (LeRobot's ``active_at``)."""
    if not persistent:
        return LanguageAt()
    from lerobot.datasets.language_render import active_at
    rows = list(persistent)
    return LanguageAt(*(_content(active_at(t, persistent=rows, style=s))
                        for s in ('subtask', 'plan', 'memory')))


def previous_row(persistent: Sequence[dict] | None, t: float, style: str) -> str:
    """The content of the ``style`` row before the one active at ``t`` ('' if none)."""
    if not persistent:
        return ''
    from lerobot.datasets.language_render import nth_prev
    return _content(nth_prev(t, persistent=list(persistent), style=style, offset=1))


def rows_of(persistent: Sequence[dict] | None, style: str) -> list[dict]:
    """The persistent rows of ``style``, in time order."""
    return sorted((r for r in persistent or () if r.get('style') == style),
                  key=lambda r: float(r['timestamp']))
