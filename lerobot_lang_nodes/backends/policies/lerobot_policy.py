"""`lerobot` policy: a LeRobot pretrained policy directory run through LeRobot's own classes.

Loading follows lerobot-rollout: ``PreTrainedConfig.from_pretrained`` -> the factory's
``get_policy_class(type).from_pretrained`` -> ``make_pre_post_processors(pretrained_path=...)``
(the checkpoint's saved normalisation statistics and steps). Each inference builds the frame a
LeRobot robot loop builds (``observation.state`` in the checkpoint's SO-101 units,
``observation.images.<key>`` as HWC uint8), passes it through
``prepare_observation_for_inference`` and the preprocessor, predicts a chunk and unnormalises
it with the postprocessor; the actions are then converted back to radians.

With ``state_units: raw`` (another robot, e.g. RoboCasa's PandaOmron) nothing is converted:
the state vector is the incoming values picked by name (``state_names``) and the actions are
the postprocessor's output, columns named ``action_names``; any dimensions are accepted as long
as the names count them.

Only this module imports torch / lerobot, and only when the backend is constructed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import contextlib
import logging
import math
from pathlib import Path
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_lang_nodes import dependencies
from lerobot_lang_nodes.so101 import units
from lerobot_lang_nodes.so101.calibration import Calibration, JOINT_NAMES, load_calibration

logger = logging.getLogger(__name__)

IMAGE_PREFIX = 'observation.images.'
STATE_KEY = 'observation.state'
ACTION_KEY = 'action'
REQUIRED_FILES = ('config.json', 'model.safetensors', 'policy_preprocessor.json',
                  'policy_postprocessor.json')
SO101_UNITS = ('degrees', 'range_m100_100')
# 'raw': no SO-101 conversion; the state and actions are the checkpoint's own values.
STATE_UNITS = (*SO101_UNITS, 'raw')
DTYPES = ('auto', 'float32', 'bfloat16', 'float16')
# LeRobot's RTCAttentionSchedule members, by the names the `rtc_schedule` parameter takes.
RTC_SCHEDULES = ('linear', 'exp', 'ones', 'zeros')
# LeRobot >= 0.5 names the SO-100/101 follower robot type `so_follower`; the default of the
# `robot_type` parameter.
ROBOT_TYPE = 'so_follower'


@dataclass(frozen=True)
class LeRobotConfig:
    """Parameters of LeRobot checkpoints (policy node: ``lerobot.*``; backends lerobot and
    hierarchical). Light to import: the policy node declares them whatever its backend."""

    camera_map: tuple[str, ...] = field(default=('',), metadata={
        'doc': '"<camera>:<checkpoint image key>" per camera whose checkpoint key '
               'differs from observation.images.<camera>; [""] or [] = identity.'})
    state_units: str = field(default='degrees', metadata={
        'doc': 'Units of observation.state / action in the checkpoint (LeRobot SO-101 '
               'conventions): "degrees" (use_degrees=True) or "range_m100_100"; the gripper '
               'is 0..100 in both. "raw": another robot (e.g. RoboCasa): no unit conversion '
               'and no calibration; observation.state is the state_topic values picked by '
               'state_names, the actions are published as the checkpoint outputs them, '
               'columns named action_names; any state / action size.',
        'choices': STATE_UNITS})
    state_names: tuple[str, ...] = field(default=('',), metadata={
        'doc': 'With state_units raw: names (in state_topic\'s JointState) of the '
               'observation.state values in the checkpoint\'s order; [""] = the checkpoint\'s '
               'declared names if any, else the incoming values in their order. Must count '
               'the checkpoint\'s state.'})
    action_names: tuple[str, ...] = field(default=('',), metadata={
        'doc': 'Names of the action columns (the chunk\'s action_names) in the '
               'checkpoint\'s order; [""] = the checkpoint\'s action_feature_names, else the '
               'six SO-101 joints. With state_units raw it must count the checkpoint\'s '
               'action; otherwise it must be the six SO-101 joints in any order.'})
    robot_type: str = field(default=ROBOT_TYPE, metadata={
        'doc': 'The robot_type given to the policy with each observation (LeRobot\'s '
               'prepare_observation_for_inference); so_follower is LeRobot\'s SO-100/101.'})
    calibration_id: str = field(default='', metadata={
        'doc': 'LeRobot robot id whose SO-101 calibration JSON converts radians to '
               'the checkpoint\'s units (the driver\'s file); empty with calibration_path '
               'empty = a nominal calibration spanning the simulator\'s joint ranges.'})
    calibration_path: str = field(default='', metadata={
        'doc': 'Explicit calibration JSON path instead of calibration_id.'})
    rtc: bool = field(default=True, metadata={
        'doc': 'Real-time chunking (LeRobot\'s lerobot.policies.rtc) for the policy types that '
               'support it (SmolVLA, PI0, PI0.5; others keep plain chunks): each inference is '
               'given the executing chunk\'s actions not played yet and the expected delay in '
               'control steps, and the new chunk is guided to continue them and stamped where '
               'it joins. false: plain chunks.'})
    rtc_execution_horizon: int = field(default=10, metadata={
        'doc': 'Real-time chunking: actions after the expected delay over which the '
               'guidance towards the executing chunk fades (the delay\'s own actions follow '
               'it fully); passed to LeRobot as execution_horizon = delay + this.',
        'range': (1, 1000)})
    rtc_max_guidance_weight: float = field(default=10.0, metadata={
        'doc': 'Real-time chunking: upper bound of the guidance weight (LeRobot\'s '
               'max_guidance_weight).',
        'range': (0.01, 1000.0)})
    rtc_schedule: str = field(default='linear', metadata={
        'doc': 'Real-time chunking: how the guidance weight falls from the delay to the '
               'execution horizon (LeRobot\'s prefix_attention_schedule).',
        'choices': RTC_SCHEDULES})


class PolicyLoadError(RuntimeError):
    """The checkpoint cannot be loaded or cannot run on this graph; the message says why."""


# The LeRobot 0.6.1 extra that brings a policy type's optional packages (its processor's
# num2words, scipy, GR00T's dm-tree, ...); a type not listed here has an extra of its own name.
LEROBOT_EXTRAS = {'pi0': 'pi', 'pi05': 'pi', 'pi0_fast': 'pi', 'wall_x': 'wallx',
                  'multi_task_dit': 'multi-task-dit', 'lingbot_va': 'lingbot-va',
                  'vla_jepa': 'vla-jepa'}
LEROBOT_VERSION = '0.6.1'
# Packages (distribution, module) a LeRobot 0.6.1 policy type imports only at its first
# inference (GR00T: dm-tree in GR00TN17.prepare_input): checked at load, so that a missing one
# fails the load with its name instead of every chunk.
INFERENCE_PACKAGES = {'groot': (('dm-tree', 'tree'),)}


def check_inference_packages(policy_type: str) -> None:
    """Raise ModuleNotFoundError (named after the distribution) for a missing package of
    ``INFERENCE_PACKAGES``."""
    import importlib.util
    for dist, module in INFERENCE_PACKAGES.get(policy_type, ()):
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named '{module}' (the package {dist!r}, "
                                      f'imported at inference)', name=dist)


def missing_dependency_error(policy_type: str, path: Path, exc: ImportError) -> PolicyLoadError:
    """A load failure caused by an optional package that is not installed, with the package
    and the command that installs what the policy type needs: the model stack's requirement
    file for torch, LeRobot and the like, else the type's LeRobot extra."""
    stack = dependencies.model_stack_message(f'the {policy_type} checkpoint {path}', exc)
    if stack:
        return PolicyLoadError(stack)
    name = dependencies.missing_module(exc)
    extra = LEROBOT_EXTRAS.get(policy_type, policy_type.replace('_', '-'))
    package = f'the package {name!r}' if name else 'a package'
    return PolicyLoadError(
        f'the {policy_type} checkpoint {path} needs {package}, which is not installed '
        f"({exc}). Install LeRobot's {extra!r} extra into this environment: pip install "
        f"'lerobot[{extra}]=={LEROBOT_VERSION}' (scripts/setup.sh --ml installs the smolvla, "
        "pi, groot and xvla extras)")


def parse_camera_map(entries: Sequence[str], cameras: Sequence[str]) -> dict[str, str]:
    """'ros_camera:checkpoint_key' entries -> {camera: 'observation.images.<key>'}.

    A key without the ``observation.images.`` prefix gets it. Cameras without an entry map to
    ``observation.images.<camera>`` (identity). Empty entries are skipped.
    """
    out = {c: IMAGE_PREFIX + c for c in cameras}
    for entry in entries:
        if not entry:  # ROS has no empty string array literal: [''] means no entries
            continue
        camera, sep, key = entry.partition(':')
        if not sep or not camera or not key:
            raise ValueError(f'camera_map entry {entry!r} is not "<ros camera>:<checkpoint '
                             "image key>\", e.g. 'front:observation.images.top'")
        if camera not in cameras:
            raise ValueError(f'camera_map entry {entry!r} names camera {camera!r}, which is not '
                             f'in cameras {list(cameras)}; add it there or fix the entry')
        out[camera] = key if key.startswith(IMAGE_PREFIX) else IMAGE_PREFIX + key
    return out


def check_device(device: str) -> None:
    """Raise ValueError unless device is cpu, cuda, cuda:<n> or auto."""
    head, _, index = device.partition(':')
    if device in ('cpu', 'cuda', 'auto') or (head == 'cuda' and index.isdigit()):
        return
    raise ValueError(f"device {device!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:<n>'")


def joint_order(action_feature_names: Sequence[str] | None) -> tuple[str, ...]:
    """The joint order of the checkpoint's state/action vectors.

    The checkpoint's declared action names ('shoulder_pan.pos', ...) when it has them, else
    LeRobot's SO-101 motor order.
    """
    if not action_feature_names:
        return JOINT_NAMES
    names = tuple(n.removesuffix('.pos') for n in action_feature_names)
    if sorted(names) != sorted(JOINT_NAMES):
        raise PolicyLoadError(f'the checkpoint declares action names {list(action_feature_names)}'
                              f'; expected the six SO-101 joints {list(JOINT_NAMES)} (with or '
                              "without '.pos') in any order")
    return names


def names_param(values: Sequence[str] | None) -> tuple[str, ...]:
    """A string-array parameter where [''] (ROS has no empty array literal) or [] means unset."""
    return tuple(str(v) for v in (values or ()) if str(v))


def checkpoint_state_names(config: Any, state_dim: int | None) -> tuple[str, ...]:
    """State names a checkpoint declares, for ``state_units: raw``; () when it declares none.

    A ``state_feature_names`` / ``state_names`` attribute of the config when it has one, else
    its ``action_feature_names`` when they count the state (a joint-space robot whose state and
    action are the same joints).
    """
    for attr in ('state_feature_names', 'state_names'):
        names = names_param(getattr(config, attr, None))
        if names:
            return names
    names = names_param(getattr(config, 'action_feature_names', None))
    return names if names and state_dim == len(names) else ()


def check_files(path: Path) -> None:
    """Raise PolicyLoadError naming what a checkpoint directory lacks."""
    if not path.exists():
        raise PolicyLoadError(f'policy checkpoint directory {path} does not exist; set '
                              'model_path to a LeRobot pretrained_model directory (it holds '
                              f'{list(REQUIRED_FILES)})')
    if not path.is_dir():
        raise PolicyLoadError(f'policy model_path {path} is not a directory; give the '
                              f'pretrained_model directory holding {list(REQUIRED_FILES)}')
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise PolicyLoadError(f'policy checkpoint {path} lacks {missing}; a LeRobot checkpoint '
                              f'(save_pretrained of the policy and of its pre/post-processors) '
                              f'holds {list(REQUIRED_FILES)}')


def check_features(path: Path, policy_type: str, input_features: Mapping[str, Any],
                   output_features: Mapping[str, Any], camera_keys: Mapping[str, str],
                   n_joints: int = len(JOINT_NAMES), *, raw: bool = False,
                   state_names: Sequence[str] = (), action_names: Sequence[str] = ()) -> None:
    """Refuse a checkpoint whose features this graph cannot feed or execute.

    ``*_features`` map a key to an object with ``type`` (a FeatureType or its name) and
    ``shape``; ``camera_keys`` is the camera -> image key map of the graph. SO-101 units: the
    state and the action have ``n_joints`` values. ``raw`` (state_units raw): any dimensions,
    but the state must have one value per name in ``state_names`` (when given; empty = the
    incoming order, checked at inference) and the action one per name in ``action_names``.
    """
    if raw:
        _check_raw_features(path, policy_type, input_features, output_features, camera_keys,
                            tuple(state_names), tuple(action_names))
        return

    def kind(ft: Any) -> str:
        return str(getattr(ft.type, 'value', ft.type))

    offered = set(camera_keys.values()) | {STATE_KEY}
    problems = []
    for key, ft in input_features.items():
        if kind(ft) == 'VISUAL':
            if key not in offered:
                problems.append(f'image {key!r} is fed by no camera')
        elif kind(ft) == 'STATE':
            if key != STATE_KEY:
                problems.append(f'state {key!r} is not {STATE_KEY!r}')
            elif tuple(ft.shape) != (n_joints,):
                problems.append(f'{key} has shape {list(ft.shape)}, the arm has {n_joints} '
                                'joints')
        else:
            problems.append(f'input {key!r} of type {kind(ft)} has no ROS source')
    actions = {k: ft for k, ft in output_features.items() if kind(ft) == 'ACTION'}
    if list(actions) != [ACTION_KEY]:
        problems.append(f'outputs {sorted(output_features)}; expected one {ACTION_KEY!r}')
    elif tuple(actions[ACTION_KEY].shape) != (n_joints,):
        problems.append(f'action has shape {list(actions[ACTION_KEY].shape)}, the arm has '
                        f'{n_joints} joint targets')
    if problems:
        expects = {k: f'{kind(ft)} {list(ft.shape)}'
                   for k, ft in {**input_features, **output_features}.items()}
        cams = ', '.join(f'{c} -> {k}' for c, k in camera_keys.items()) or 'no cameras'
        raise PolicyLoadError(
            f'checkpoint {path} ({policy_type}) cannot run on this graph: '
            f"{'; '.join(problems)}. It expects {expects}; the graph offers cameras [{cams}], "
            f'{STATE_KEY} [{n_joints}] (SO-101 joints) and action [{n_joints}]. Map cameras '
            "with camera_map ('<camera>:<image key>') and cameras, or use a checkpoint trained "
            'on an SO-101')


def _kind(ft: Any) -> str:
    return str(getattr(ft.type, 'value', ft.type))


def _check_raw_features(path: Path, policy_type: str, input_features: Mapping[str, Any],
                        output_features: Mapping[str, Any], camera_keys: Mapping[str, str],
                        state_names: tuple[str, ...], action_names: tuple[str, ...]) -> None:
    offered = set(camera_keys.values()) | {STATE_KEY}
    problems = []
    for key, ft in input_features.items():
        if _kind(ft) == 'VISUAL':
            if key not in offered:
                problems.append(f'image {key!r} is fed by no camera')
        elif _kind(ft) == 'STATE':
            if key != STATE_KEY:
                problems.append(f'state {key!r} is not {STATE_KEY!r}')
            elif len(ft.shape) != 1:
                problems.append(f'{key} has shape {list(ft.shape)}, not a vector')
            elif state_names and ft.shape[0] != len(state_names):
                problems.append(f'{key} has {ft.shape[0]} values but there are '
                                f'{len(state_names)} state names {list(state_names)}; set '
                                f'state_names to the {ft.shape[0]} names of the state topic '
                                "in the checkpoint's order")
        else:
            problems.append(f'input {key!r} of type {_kind(ft)} has no ROS source')
    actions = {k: ft for k, ft in output_features.items() if _kind(ft) == 'ACTION'}
    if list(actions) != [ACTION_KEY]:
        problems.append(f'outputs {sorted(output_features)}; expected one {ACTION_KEY!r}')
    elif tuple(actions[ACTION_KEY].shape) != (len(action_names),):
        shape = list(actions[ACTION_KEY].shape)
        problems.append(f'action has shape {shape} but there are {len(action_names)} action '
                        f'names {list(action_names)}; set action_names to the names of the '
                        f"{shape[-1] if shape else 0} action columns in the checkpoint's order")
    if problems:
        expects = {k: f'{_kind(ft)} {list(ft.shape)}'
                   for k, ft in {**input_features, **output_features}.items()}
        cams = ', '.join(f'{c} -> {k}' for c, k in camera_keys.items()) or 'no cameras'
        state = (f'[{len(state_names)}] {list(state_names)}' if state_names
                 else '(the incoming order)')
        raise PolicyLoadError(
            f'checkpoint {path} ({policy_type}, state_units raw) cannot run on this graph: '
            f"{'; '.join(problems)}. It expects {expects}; the graph offers cameras [{cams}], "
            f'{STATE_KEY} {state} and action [{len(action_names)}] {list(action_names)}. Map '
            "cameras with camera_map ('<camera>:<image key>') and cameras, name the state and "
            'action columns with state_names and action_names')


def nominal_sim_calibration() -> tuple[Calibration, np.ndarray]:
    """The calibration the simulator stands for, from its MJCF joint ranges (needs MuJoCo),
    and the radians of each range centre (see units.nominal_calibration)."""
    from lerobot_lang_nodes.sim.scene import JOINT_NAMES as SIM_JOINTS
    from lerobot_lang_nodes.sim.scene import SceneConfig, build_model
    model = build_model(SceneConfig())
    rng = model.jnt_range[[model.joint(n).id for n in SIM_JOINTS]]
    ranges = dict(zip(SIM_JOINTS, rng))
    return units.nominal_calibration([ranges[j][0] for j in JOINT_NAMES],
                                     [ranges[j][1] for j in JOINT_NAMES])


def arm_calibration(own: LeRobotConfig) -> tuple[Calibration, np.ndarray | None]:
    """The arm's calibration file (``calibration_id`` / ``calibration_path``); without one,
    the simulator's nominal calibration and the radians of its range centres."""
    cal_id, cal_path = own.calibration_id, own.calibration_path
    if cal_id or cal_path:
        try:
            return load_calibration(cal_id or None, cal_path or None), None
        except Exception as exc:  # noqa: BLE001 - CalibrationError with its own message
            raise PolicyLoadError(str(exc)) from exc
    return nominal_sim_calibration()


class StateUnits:
    """Radians <-> the checkpoint's LeRobot units for the joints in ``order``."""

    def __init__(self, calibration: Calibration, state_units: str,
                 order: Sequence[str] = JOINT_NAMES,
                 zero_rad: Sequence[float] | None = None) -> None:
        if state_units not in STATE_UNITS:
            raise ValueError(f'state_units {state_units!r} is not one of {list(STATE_UNITS)}')
        self.order = tuple(order)
        self._conv = units.JointConverter(calibration, use_degrees=state_units == 'degrees')
        # Radians of the calibrated joint zero (JOINT_NAMES order): 0 on a calibrated arm.
        self._zero = np.zeros(len(JOINT_NAMES)) if zero_rad is None else np.asarray(
            zero_rad, dtype=np.float64)
        # LeRobot units -> radians is affine per joint after LeRobot's bounding (none in
        # degrees, -100..100 or 0..100 otherwise): slope, offset and bounds per column of
        # ``order``, so a whole chunk converts in a few array operations instead of a Python
        # call per value (about 1 ms of a 50-action chunk, a few % of a small model's call).
        lo, hi, slope, offset = [], [], [], []
        for j in self.order:
            k = JOINT_NAMES.index(j)
            cal, mode = self._conv.calibration[j], self._conv.modes[j]
            at0, at1 = (units.lerobot_to_radians(v, cal, mode) for v in (0.0, 1.0))
            bounds = {units.NormMode.RANGE_M100_100: (-100.0, 100.0),
                      units.NormMode.RANGE_0_100: (0.0, 100.0)}.get(mode, (-np.inf, np.inf))
            lo.append(bounds[0])
            hi.append(bounds[1])
            slope.append(at1 - at0)
            offset.append(at0 + self._zero[k])
        self._lo, self._hi = np.array(lo), np.array(hi)
        self._slope, self._offset = np.array(slope), np.array(offset)

    def to_lerobot(self, radians: Sequence[float]) -> np.ndarray:
        """Radians (``order``) -> LeRobot units (``order``)."""
        by_name = dict(zip(self.order, radians))
        values = self._conv.to_lerobot(np.array([by_name[j] for j in JOINT_NAMES]) - self._zero)
        return np.array([values[f'{j}.pos'] for j in self.order], dtype=np.float64)

    def to_radians(self, values: np.ndarray) -> np.ndarray:
        """(..., n) LeRobot units (``order``) -> radians (``order``)."""
        flat = np.asarray(values, dtype=np.float64).reshape(-1, len(self.order))
        out = np.clip(flat, self._lo, self._hi) * self._slope + self._offset
        return out.reshape(np.shape(values))


def load_pretrained_policy(policy_cls: Any, path: Path, config: Any) -> Any:
    """``policy_cls.from_pretrained`` without the random initialisation the checkpoint then
    overwrites: a PI0 (3.3 B parameters) otherwise draws every weight in float32 first, minutes
    and about twice the memory of the model on a CPU. Parameters missing from the file would
    be left uninitialised, so when the loaded model has any, it is loaded again the ordinary
    way (LeRobot initialises what the checkpoint does not hold)."""
    try:
        from safetensors import safe_open
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers is an extra of LeRobot's: ACT / Diffusion need not have it
        return policy_cls.from_pretrained(path, config=config)
    with no_init_weights():
        policy = policy_cls.from_pretrained(path, config=config)
    with safe_open(str(path / 'model.safetensors'), 'pt') as f:
        saved = set(f.keys())
    state = policy.state_dict()
    # A tied parameter (GR00T's Qwen3-VL LM head is its token embedding) is saved once, under
    # one of its names; the other name shares the loaded storage and is not missing.
    loaded = {state[k].data_ptr() for k in saved & set(state) if state[k].numel()}
    missing = sorted(k for k in set(state) - saved
                     if not (state[k].numel() and state[k].data_ptr() in loaded))
    del state  # no reference may keep this copy's tensors alive through a second load
    if missing:
        logger.info('%d parameters of %s are not in its model.safetensors (%s, ...); loading it '
                    'again with LeRobot\'s initialisation for them', len(missing), path,
                    ', '.join(missing[:3]))
        del policy
        policy = policy_cls.from_pretrained(path, config=config)
    return policy


# The project's own LeRobot policy types. LeRobot knows a type only once the module holding
# its config class has been imported; a checkpoint's config.json names its type.
PROJECT_POLICY_TYPES = {
    'lang_chunk': 'lerobot_lang_nodes.training.configuration_lang_chunk',
    'two_head': 'lerobot_lang_nodes.hierarchical.configuration_two_head',
}


def register_project_policy_type(model_path: Path) -> None:
    """Import the config module of the checkpoint's type when it is one of the project's."""
    import importlib
    import json
    try:
        policy_type = json.loads((model_path / 'config.json').read_text()).get('type')
    except (OSError, ValueError, AttributeError):
        return  # PreTrainedConfig.from_pretrained reports the broken file with its reason
    module = PROJECT_POLICY_TYPES.get(policy_type)
    if module:
        importlib.import_module(module)


class LeRobotPolicy:
    """Policy backend for any LeRobot-registered policy type (ACT, Diffusion, SmolVLA, PI0...)."""

    def __init__(self, cfg: Any) -> None:
        self.model_path = Path(str(cfg.model_path)).expanduser()
        if not str(cfg.model_path):
            raise PolicyLoadError('no policy checkpoint set: the lerobot backend needs '
                                  'model_path (a LeRobot pretrained_model directory)')
        check_files(self.model_path)
        cameras = tuple(cfg.cameras)
        try:
            self.camera_keys = parse_camera_map(tuple(cfg.lerobot.camera_map), cameras)
            check_device(str(cfg.device))
        except ValueError as exc:
            raise PolicyLoadError(str(exc)) from exc
        # Without the model stack: one line naming requirements/ml.txt, not `No module named
        # 'torch'` on /diagnostics.
        with dependencies.model_stack_required('the lerobot policy backend'):
            import torch
            from lerobot.configs.policies import PreTrainedConfig
            from lerobot.policies.factory import get_policy_class, make_pre_post_processors
            from lerobot.policies.utils import prepare_observation_for_inference
        self._torch = torch
        self._prepare = prepare_observation_for_inference
        device = str(cfg.device)
        if device == 'auto':
            device = 'cuda' if torch.cuda.is_available() else 'cpu'
        self.device = torch.device(device)
        register_project_policy_type(self.model_path)
        try:
            config = PreTrainedConfig.from_pretrained(self.model_path)
        except Exception as exc:  # noqa: BLE001 - draccus / JSON raise many types
            raise PolicyLoadError(f'{self.model_path / "config.json"} is not a LeRobot policy '
                                  f'config ({type(exc).__name__}: {exc})') from exc
        self.policy_type = str(config.type)
        self._names(cfg, config)
        check_features(self.model_path, self.policy_type, config.input_features,
                       config.output_features, self.camera_keys, raw=self.raw,
                       state_names=self.state_names, action_names=self.action_names)
        self.image_shapes = {k: tuple(ft.shape) for k, ft in config.input_features.items()
                             if k.startswith(IMAGE_PREFIX)}
        self.uses_state = STATE_KEY in config.input_features
        # The node starts inferring only once each of these has delivered a frame.
        self.required_cameras = tuple(c for c, k in self.camera_keys.items()
                                      if k in self.image_shapes)
        config.device = str(self.device)
        config.pretrained_path = str(self.model_path)
        dtype = str(cfg.dtype)
        if dtype not in DTYPES:
            raise PolicyLoadError(f'dtype {dtype!r} is not one of {list(DTYPES)}')
        try:
            check_inference_packages(self.policy_type)
            policy = load_pretrained_policy(get_policy_class(self.policy_type),
                                            self.model_path, config)
            # Reduced precision as lerobot-rollout's use_amp: autocast around the model, since
            # several policies build float32 tensors inside forward (ACT's latent).
            self._dtype = None if dtype in ('auto', 'float32') else getattr(torch, dtype)
            self.preprocessor, self.postprocessor = make_pre_post_processors(
                config, pretrained_path=str(self.model_path),
                preprocessor_overrides={'device_processor': {'device': str(self.device)}})
        except PolicyLoadError:
            raise
        except ImportError as exc:
            raise missing_dependency_error(self.policy_type, self.model_path, exc) from exc
        except Exception as exc:  # noqa: BLE001 - safetensors / torch / lerobot raise many
            raise PolicyLoadError(f'loading the {self.policy_type} checkpoint {self.model_path} '
                                  f'failed: {type(exc).__name__}: {exc}') from exc
        policy.eval()
        self.policy = policy
        self.config = config
        self.rtc = self._enable_rtc(cfg, policy)
        self.last_model_actions: np.ndarray | None = None
        # A policy with an observation history (Diffusion's n_obs_steps > 1) keeps it in the
        # queues select_action fills; its chunk comes from select_action, as lerobot-rollout
        # drives it. Others give the chunk directly.
        self.n_obs_steps = int(getattr(config, 'n_obs_steps', 1) or 1)
        self.chunk_length = int(getattr(config, 'n_action_steps', 0)
                                or getattr(config, 'chunk_size', 1) or 1)
        self._use_chunk_method = (self.n_obs_steps == 1
                                  and hasattr(policy, 'predict_action_chunk'))
        self.units: StateUnits | None = None
        if not self.raw:
            calibration, zero = arm_calibration(cfg.lerobot)
            self.units = StateUnits(calibration, self.state_units, self.order, zero)
        self._instruction: str | None = None
        self._lock = threading.Lock()  # one inference at a time on one model
        self._warned_aspect: set[str] = set()
        logger.info('loaded %s checkpoint %s on %s: chunk %d actions, inputs %s',
                    self.policy_type, self.model_path, self.device, self.chunk_length,
                    sorted(config.input_features))

    def _names(self, cfg: Any, config: Any) -> None:
        """State units, robot type and the state / action names (``order``, ``state_names``,
        ``action_names``) from the parameters and the checkpoint's config."""
        self.state_units = str(cfg.lerobot.state_units)
        if self.state_units not in STATE_UNITS:
            raise PolicyLoadError(f'state_units {self.state_units!r} is not one of '
                                  f'{list(STATE_UNITS)}')
        self.raw = self.state_units == 'raw'
        self.robot_type = str(cfg.lerobot.robot_type)
        self.state_topic = str(cfg.state_topic)
        declared = names_param(getattr(config, 'action_feature_names', None))
        given_actions = names_param(cfg.lerobot.action_names)
        given_state = names_param(cfg.lerobot.state_names)
        if self.raw:
            state = config.input_features.get(STATE_KEY)
            state_dim = int(state.shape[0]) if state is not None and state.shape else None
            self.action_names = given_actions or declared or JOINT_NAMES
            # () = the incoming values in their order.
            self.state_names = given_state or checkpoint_state_names(config, state_dim)
            self.order = self.action_names
            return
        if given_state:
            raise PolicyLoadError(f'state_names {list(given_state)} is for state_units raw; '
                                  f'with state_units {self.state_units!r} the state is the '
                                  'SO-101 joints in the action order (action_names or the '
                                  "checkpoint's)")
        self.order = joint_order(given_actions or declared or None)
        self.action_names = self.order
        self.state_names = self.order

    def _enable_rtc(self, cfg: Any, policy: Any) -> bool:
        """Real-time chunking with LeRobot's own guidance, as ``lerobot-rollout
        --inference.type=rtc`` sets it up: an ``RTCConfig`` on the policy's config and
        ``init_rtc_processor()``. ``rtc`` (default true) turns it on for the types that
        support it (SmolVLA, PI0, PI0.5); the others keep plain chunks."""
        wanted = cfg.lerobot.rtc
        if not isinstance(wanted, bool):
            raise PolicyLoadError(f'rtc is {wanted!r}; expected true or false')
        schedule = str(cfg.lerobot.rtc_schedule)
        if schedule not in RTC_SCHEDULES:
            raise PolicyLoadError(f'rtc_schedule {schedule!r} is not one of '
                                  f'{list(RTC_SCHEDULES)}')
        supports = getattr(policy, 'supports_rtc', None)
        if not wanted or not callable(supports) or not supports() \
                or not hasattr(policy, 'init_rtc_processor'):
            return False
        from lerobot.configs import RTCAttentionSchedule
        from lerobot.policies.rtc.configuration_rtc import RTCConfig
        policy.config.rtc_config = RTCConfig(
            execution_horizon=int(cfg.lerobot.rtc_execution_horizon),
            max_guidance_weight=float(cfg.lerobot.rtc_max_guidance_weight),
            prefix_attention_schedule=RTCAttentionSchedule[schedule.upper()])
        policy.init_rtc_processor()
        return True

    # --- inference ----------------------------------------------------------------------
    def frame(self, observation: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The LeRobot observation frame (state in checkpoint units, HWC uint8 images)."""
        frame: dict[str, np.ndarray] = {}
        if self.uses_state:
            names = list(observation['joint_names'])
            positions = np.asarray(observation['joint_positions'], dtype=np.float64)
            if self.raw:
                frame[STATE_KEY] = self._raw_state(names, positions).astype(np.float32)
            else:
                missing = [j for j in self.order if j not in names]
                if missing:
                    raise ValueError(f'{self.state_topic} lacks {missing}; got {names}')
                rad = positions[[names.index(j) for j in self.order]]
                frame[STATE_KEY] = self.units.to_lerobot(rad).astype(np.float32)
        images = observation.get('images') or {}
        for camera, key in self.camera_keys.items():
            if key not in self.image_shapes:
                continue
            img = images.get(camera)
            if img is None:
                raise ValueError(f'no image yet from camera {camera!r} (checkpoint key {key})')
            frame[key] = np.ascontiguousarray(img)
        return frame

    def _raw_state(self, names: list[str], positions: np.ndarray) -> np.ndarray:
        """The state vector of ``state_units: raw``: the values of ``state_names`` in their
        order, or the incoming values as they are when no names are set."""
        dim = int(self.config.input_features[STATE_KEY].shape[0])
        if not self.state_names:
            if positions.shape != (dim,):
                raise ValueError(f'{self.state_topic} has {positions.size} values, the '
                                 f'checkpoint\'s {STATE_KEY} {dim}; set state_names to pick '
                                 f'them by name (got {names})')
            return positions
        if len(positions) != len(names):
            raise ValueError(f'{self.state_topic} has {len(names)} names but {len(positions)} '
                             'positions')
        missing = [n for n in self.state_names if n not in names]
        if missing:
            raise ValueError(f'{self.state_topic} lacks {missing}; got {names}')
        return positions[[names.index(n) for n in self.state_names]]

    def _resize(self, batch: dict[str, Any]) -> None:
        """Bring each image to the checkpoint's declared (C, H, W) (bilinear, antialiased)."""
        torch = self._torch
        for key, (_, h, w) in self.image_shapes.items():
            img = batch[key]
            if tuple(img.shape[-2:]) == (h, w):
                continue
            src_h, src_w = img.shape[-2:]
            if key not in self._warned_aspect and not math.isclose(src_w / src_h, w / h,
                                                                   rel_tol=0.02):
                self._warned_aspect.add(key)
                logger.warning('%s: camera frames are %dx%d, the checkpoint expects %dx%d '
                               '(another aspect ratio); they are stretched', key, src_w, src_h,
                               w, h)
            batch[key] = torch.nn.functional.interpolate(img, size=(h, w), mode='bilinear',
                                                         antialias=True, align_corners=False)

    def infer_lerobot_units(self, observation: Mapping[str, Any]) -> np.ndarray:
        """(H, n) actions in the checkpoint's units, columns ``action_names``."""
        torch = self._torch
        instruction = str(observation.get('instruction') or '')
        frame = self.frame(observation)
        rtc_kwargs = self._rtc_kwargs(observation.get('rtc'))
        # RTC's guidance takes a gradient through the denoiser: no_grad, not inference_mode,
        # when there is a left-over to guide towards (inference_mode is the cheaper one).
        guided = rtc_kwargs.get('prev_chunk_left_over') is not None
        grad_off = torch.no_grad() if guided else torch.inference_mode()
        with self._lock, grad_off:
            if instruction != self._instruction:
                self.reset()
                self._instruction = instruction
            batch = self._prepare(frame, self.device, instruction, self.robot_type)
            self._resize(batch)
            batch = self.preprocessor(batch)
            amp = (torch.autocast(device_type=self.device.type, dtype=self._dtype)
                   if self._dtype is not None else contextlib.nullcontext())
            with amp:
                if self._use_chunk_method:
                    actions = self.policy.predict_action_chunk(
                        batch, **rtc_kwargs)[:, :self.chunk_length]
                else:
                    # select_action fills the observation history and generates a whole chunk
                    # at its first call; the rest of the chunk is popped from its action queue.
                    steps = [self.policy.select_action(batch) for _ in range(self.chunk_length)]
                    actions = torch.stack(steps, dim=1)
            # The chunk in the model's own space: what the next inference's RTC continues.
            self.last_model_actions = actions[0].detach().to('cpu', torch.float32).numpy()
            actions = self.postprocessor(actions.float())
        out = actions.detach().to('cpu', torch.float32).numpy()
        return out.reshape(-1, out.shape[-1])

    def _rtc_kwargs(self, continuation: Any) -> dict[str, Any]:
        """predict_action_chunk's RTC arguments: the left-over of the executing chunk (model
        space) and the delay in control steps (core/rtc.py's Continuation); none without RTC."""
        if not self.rtc:
            return {}
        if continuation is None:
            return {'inference_delay': 0, 'prev_chunk_left_over': None}
        left = self._torch.as_tensor(np.asarray(continuation.left_over, dtype=np.float32),
                                     device=self.device)
        delay = int(continuation.inference_delay)
        # The rows played first are those after the delay: the guidance fades over
        # rtc_execution_horizon rows from there (LeRobot's execution_horizon counts from row
        # 0, so a delay longer than it would leave the joining rows unguided).
        horizon = delay + self.policy.config.rtc_config.execution_horizon
        return {'inference_delay': delay, 'prev_chunk_left_over': left,
                'execution_horizon': horizon}

    def infer(self, observation: Mapping[str, Any]) -> np.ndarray:
        """(H, 6) joint targets in radians, columns ``action_names``; with ``state_units: raw``
        (H, n) actions as the checkpoint gives them."""
        actions = self.infer_lerobot_units(observation)
        if self.units is None:
            return actions.astype(np.float64)
        return self.units.to_radians(actions)

    def reset(self) -> None:
        """Forget the episode state (history queues, ensembles): at every instruction change."""
        self.policy.reset()
        self.preprocessor.reset()
        self.postprocessor.reset()

    def close(self) -> None:
        """Drop the model (and the CUDA cache it held)."""
        self.policy = None
        if self.device.type == 'cuda':
            self._torch.cuda.empty_cache()


__all__ = ['LEROBOT_EXTRAS', 'LeRobotPolicy', 'PolicyLoadError', 'StateUnits', 'arm_calibration',
           'check_features',
           'checkpoint_state_names', 'joint_order', 'load_pretrained_policy',
           'missing_dependency_error', 'names_param', 'nominal_sim_calibration',
           'parse_camera_map']
