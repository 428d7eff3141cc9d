"""Robot YAML (port, calibration, cameras, safety, policy, planner) -> REAL graph parameters."""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lerobot_lang_nodes.core import camera_info
from lerobot_lang_nodes.core.param_names import dotted
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

TOP_KEYS = ('port', 'calibration', 'cameras', 'safety', 'execution', 'policy', 'planner')
CAMERA_KEYS = ('source', 'width', 'height', 'fps', 'fourcc', 'publish_compressed',
               'camera_info_url')
SAFETY_KEYS = ('max_relative_target_rad', 'command_timeout_s')
# Robot YAML `execution:` key -> so101_driver parameter: how chunks are played. A policy slower
# than its chunk lasts (a VLA on a CPU) is played as LeRobot's synchronous rollout plays it
# with time_align false and max_chunk_age_s 0: each chunk from its first action on arrival.
EXECUTION_KEYS = ('time_align', 'max_chunk_age_s')
# Robot YAML `policy:` key -> policy node parameter (the `lerobot` backend's settings).
POLICY_KEYS = {'path': 'model_path', 'device': 'device', 'dtype': 'dtype',
               'camera_map': 'lerobot.camera_map', 'state_units': 'lerobot.state_units',
               'condition_on': 'condition_on', 'inference_timeout_s': 'inference_timeout_s'}
# Robot YAML `planner:` key -> planner node parameter (the `transformers` backend's settings).
PLANNER_KEYS = {'path': 'model_path', 'gguf_file': 'transformers.gguf_file',
                'device': 'device', 'dtype': 'dtype', 'model_kind': 'transformers.model_kind',
                'image_cameras': 'transformers.image_cameras',
                'max_new_tokens': 'max_new_tokens', 'candidates': 'transformers.candidates',
                'prompts_file': 'prompts_file'}
_NAME = re.compile(r'^[a-z][a-z0-9_]*$')  # a ROS name token: also the topic cameras/<name>/


class _NoAliasDumper(yaml.SafeDumper):
    """rcl's params-file parser rejects YAML anchors/aliases: write every value in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class RobotConfigError(ValueError):
    """The robot YAML is invalid; the message names the field and the fix."""


@dataclass(frozen=True)
class Source:
    """Where robot settings come from: named in every message (the user's robot.yaml, never a
    copy); relative paths in them resolve in ``folder``."""

    label: str
    folder: Path

    def __str__(self) -> str:
        return self.label


def _err(src: Source, fld: str, problem: str, fix: str) -> RobotConfigError:
    return RobotConfigError(f'{src}: field {fld!r} {problem}; {fix}')


def _camera_info_url(src: Source, name: str, url: Any) -> str:
    """Validate a camera's calibration file now (not when its node starts); a relative plain
    path is taken relative to the robot YAML, as a user writing it next to that file means."""
    fld = f'cameras.{name}.camera_info_url'
    if not isinstance(url, str) or not url:
        raise _err(src, fld, f'is {url!r}', 'give a camera_calibration YAML (file:///path.yaml, '
                   'package://<pkg>/<path> or a path)')
    if '://' not in url and not Path(url).expanduser().is_absolute():
        url = str((src.folder / url).resolve())
    try:
        camera_info.load(url)
    except camera_info.CameraCalibrationError as exc:
        raise _err(src, fld, f'is unusable ({exc})', 'fix the file or the path') from None
    return url


def load_robot_yaml(robot_yaml: Path) -> dict[str, Any]:
    """Parse and validate a robot YAML; returns the normalised mapping."""
    path = Path(robot_yaml)
    return check_robot(read_robot_yaml(path), Source(str(path), path.parent))


def read_robot_yaml(path: Path) -> Any:
    """The parsed content of a robot YAML (not yet checked: check_robot)."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding='utf-8'))
    except FileNotFoundError:
        raise RobotConfigError(f'robot YAML {path} does not exist; copy '
                               'config/robot.example.yaml and edit it') from None
    except yaml.YAMLError as exc:
        raise RobotConfigError(f'{path}: not valid YAML ({exc})') from exc


def check_robot(data: Any, src: Source) -> dict[str, Any]:
    """Validate robot settings read from ``src``; returns the normalised mapping."""
    if not isinstance(data, dict):
        raise RobotConfigError(f'{src}: expected a mapping with keys {list(TOP_KEYS)}')
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise _err(src, unknown[0], 'is not a robot YAML field', f'use only {list(TOP_KEYS)}')
    port = data.get('port')
    if not isinstance(port, str) or not port:
        raise _err(src, 'port', f'is {port!r}', 'set the serial device, e.g. '
                   '/dev/serial/by-id/usb-1a86_USB_Single_Serial_...-if00 (or the emulator '
                   '--link path for a dry run)')
    cal = data.get('calibration') or {}
    if isinstance(cal, str):
        cal = {'id': cal}
    if not isinstance(cal, dict) or not (cal.get('id') or cal.get('path')):
        raise _err(src, 'calibration', f'is {data.get("calibration")!r}',
                   'give {id: <robot id used with lerobot-calibrate>} or {path: file.json}')
    bad = sorted(set(cal) - {'id', 'path'})
    if bad:
        raise _err(src, f'calibration.{bad[0]}', 'is unknown', 'use calibration.id or .path')
    cameras = data.get('cameras') or {}
    if not isinstance(cameras, dict):
        raise _err(src, 'cameras', 'is not a mapping', 'write cameras: {front: {source: 0}}')
    for name, cam in cameras.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise _err(src, f'cameras.{name}', 'is not a valid camera name',
                       'use lower-case letters, digits and _ (it becomes cameras/<name>/...)')
        cam = cam if isinstance(cam, dict) else {'source': cam}
        cameras[name] = cam
        extra = sorted(set(cam) - set(CAMERA_KEYS))
        if extra:
            raise _err(src, f'cameras.{name}.{extra[0]}', 'is unknown',
                       f'use only {list(CAMERA_KEYS)}')
        if 'source' not in cam:
            raise _err(src, f'cameras.{name}.source', 'is missing',
                       'give a device index (0), a path (/dev/video0) or a video file')
        cam['source'] = str(cam['source'])
        for key in ('width', 'height'):
            if key in cam and (not isinstance(cam[key], int) or cam[key] < 0):
                raise _err(src, f'cameras.{name}.{key}', f'is {cam[key]!r}',
                           'give a whole number of pixels (0 = camera default)')
        if 'fps' in cam:
            if not isinstance(cam['fps'], (int, float)) or not cam['fps'] > 0:
                raise _err(src, f'cameras.{name}.fps', f'is {cam["fps"]!r}',
                           'give a positive frame rate')
            cam['fps'] = float(cam['fps'])
        if 'fourcc' in cam and (not isinstance(cam['fourcc'], str) or len(cam['fourcc']) != 4):
            raise _err(src, f'cameras.{name}.fourcc', f'is {cam["fourcc"]!r}',
                       "give four characters such as 'MJPG' or 'YUYV'")
        if 'camera_info_url' in cam:
            cam['camera_info_url'] = _camera_info_url(src, name, cam['camera_info_url'])
    safety = data.get('safety') or {}
    if not isinstance(safety, dict):
        raise _err(src, 'safety', 'is not a mapping', f'use keys {list(SAFETY_KEYS)}')
    extra = sorted(set(safety) - set(SAFETY_KEYS))
    if extra:
        raise _err(src, f'safety.{extra[0]}', 'is unknown', f'use only {list(SAFETY_KEYS)}')
    mrt = safety.get('max_relative_target_rad')
    if isinstance(mrt, dict):
        for joint, value in mrt.items():
            if joint not in JOINT_NAMES:
                raise _err(src, f'safety.max_relative_target_rad.{joint}', 'is not a joint',
                           f'use joints of {list(JOINT_NAMES)}')
            _positive(src, f'safety.max_relative_target_rad.{joint}', value)
    elif mrt is not None:
        _positive(src, 'safety.max_relative_target_rad', mrt)
    if 'command_timeout_s' in safety:
        _positive(src, 'safety.command_timeout_s', safety['command_timeout_s'])
    return {'port': port, 'calibration': cal, 'cameras': cameras, 'safety': safety,
            'execution': _execution(src, data.get('execution')),
            'policy': _policy(src, data.get('policy')),
            'planner': _planner(src, data.get('planner'))}


def _execution(src: Source, execution: Any) -> dict[str, Any]:
    """The `execution:` block (EXECUTION_KEYS), checked."""
    execution = execution or {}
    if not isinstance(execution, dict):
        raise _err(src, 'execution', 'is not a mapping', f'use keys {list(EXECUTION_KEYS)}')
    extra = sorted(set(execution) - set(EXECUTION_KEYS))
    if extra:
        raise _err(src, f'execution.{extra[0]}', 'is unknown', f'use only {list(EXECUTION_KEYS)}')
    out = dict(execution)
    if 'time_align' in out and not isinstance(out['time_align'], bool):
        raise _err(src, 'execution.time_align', f'is {out["time_align"]!r}', 'give true or false')
    if 'max_chunk_age_s' in out:
        age = out['max_chunk_age_s']
        if isinstance(age, bool) or not isinstance(age, (int, float)) or not (
                age >= 0 and math.isfinite(age)):
            raise _err(src, 'execution.max_chunk_age_s', f'is {age!r}',
                       'give seconds >= 0 (0: no limit)')
        out['max_chunk_age_s'] = float(age)
    return out


def _planner(src: Source, planner: Any) -> dict[str, Any]:
    """The `planner:` block: a model path (string) or a mapping of PLANNER_KEYS. None: the
    operator's task conditions the policy directly (direct-subtask mode)."""
    if planner is None:
        return {}
    if isinstance(planner, str):
        planner = {'path': planner}
    if not isinstance(planner, dict):
        raise _err(src, 'planner', f'is {planner!r}', 'write planner: {path: <Hugging Face '
                   'model directory or .gguf file>}')
    extra = sorted(set(planner) - set(PLANNER_KEYS))
    if extra:
        raise _err(src, f'planner.{extra[0]}', 'is unknown', f'use only {list(PLANNER_KEYS)}')
    out = dict(planner)
    for key in ('path', 'prompts_file'):
        if key not in out:
            continue
        if not isinstance(out[key], str) or not out[key]:
            raise _err(src, f'planner.{key}', f'is {out[key]!r}', 'give a file or directory')
        target = Path(out[key]).expanduser()
        if not target.is_absolute():  # relative to the robot YAML, like policy.path
            target = (src.folder / target).resolve()
        out[key] = str(target)
    if 'path' in out and out['path'].endswith('.gguf') and 'gguf_file' not in out:
        out['path'], out['gguf_file'] = str(Path(out['path']).parent), Path(out['path']).name
    return out


def _policy(src: Source, policy: Any) -> dict[str, Any]:
    """The `policy:` block: a checkpoint path (string) or a mapping of POLICY_KEYS."""
    if policy is None:
        return {}
    if isinstance(policy, str):
        policy = {'path': policy}
    if not isinstance(policy, dict):
        raise _err(src, 'policy', f'is {policy!r}', 'write policy: {path: <LeRobot '
                   'pretrained_model directory>}')
    extra = sorted(set(policy) - set(POLICY_KEYS))
    if extra:
        raise _err(src, f'policy.{extra[0]}', 'is unknown', f'use only {list(POLICY_KEYS)}')
    out = dict(policy)
    if 'path' in out:
        if not isinstance(out['path'], str) or not out['path']:
            raise _err(src, 'policy.path', f'is {out["path"]!r}',
                       'give the LeRobot checkpoint (pretrained_model) directory')
        model = Path(out['path']).expanduser()
        if not model.is_absolute():  # relative to the robot YAML, like camera_info_url
            model = (src.folder / model).resolve()
        out['path'] = str(model)
    if 'camera_map' in out:
        cmap = out['camera_map']
        if isinstance(cmap, dict):  # {front: observation.images.top} reads best in YAML
            cmap = [f'{k}:{v}' for k, v in cmap.items()]
        if not isinstance(cmap, list) or not all(isinstance(e, str) for e in cmap):
            raise _err(src, 'policy.camera_map', f'is {out["camera_map"]!r}',
                       'map cameras to checkpoint image keys, e.g. {front: '
                       'observation.images.top}')
        out['camera_map'] = cmap
    if 'inference_timeout_s' in out:
        # A VLA on a CPU takes seconds to minutes a chunk: past the 5 s default every chunk
        # would be discarded and the arm would never move.
        timeout = out['inference_timeout_s']
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise _err(src, 'policy.inference_timeout_s', f'is {timeout!r}',
                       'give seconds >= 0 (0: no limit), e.g. 60 for a VLA on a CPU')
        out['inference_timeout_s'] = float(timeout)
    return out


def check_planner(params: dict[str, Any], source: str) -> None:
    """Refuse a REAL graph whose planner would generate from simulator ground truth."""
    planner = params.get('planner', {}).get('ros__parameters', {})
    if planner.get('backend', 'scripted') == 'scripted' and not planner.get('direct_subtask'):
        raise RobotConfigError(f'{source}: the planner backend is scripted without '
                               'direct_subtask, which plans from sim/ground_truth and cannot '
                               'see a real scene; set planner.direct_subtask: true (the task '
                               'conditions the policy) or add `planner: {path: <model '
                               'directory>}` to the robot YAML')


def check_policy(params: dict[str, Any], source: str) -> None:
    """Refuse a REAL graph whose policy cannot emit a chunk: the scripted sim expert, or the
    lerobot backend without a checkpoint directory."""
    policy = params.get('policy', {}).get('ros__parameters', {})
    backend = policy.get('backend', 'scripted')
    fix = ('add `policy: {path: <LeRobot pretrained_model directory>}` to the robot YAML (or '
           'give --policy-path / policy_path:=, or set policy.model_path in the parameters '
           'file)')
    if backend == 'scripted':
        raise RobotConfigError(f'{source}: the policy backend is scripted, a simulator expert '
                               'that needs sim/ground_truth and cannot drive a real arm; use '
                               f'backend lerobot and {fix}')
    if backend == 'lerobot':
        model = str(policy.get('model_path') or '')
        if not model:
            raise RobotConfigError(f'{source}: no policy checkpoint is set for the real graph; '
                                   f'{fix}')
        if not (Path(model).expanduser() / 'config.json').is_file():
            raise RobotConfigError(f'{source}: policy checkpoint {model} is not a LeRobot '
                                   'checkpoint directory (no config.json there); give the '
                                   'pretrained_model directory that lerobot-train saved')


def _positive(src: Source, fld: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            value > 0 and math.isfinite(value)):
        raise _err(src, fld, f'is {value!r}', 'give a positive number (radians / seconds)')


def merged_parameters(robot: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The REAL graph's parameters: defaults overlaid with one robot's settings."""
    out = {k: {'ros__parameters': dict((v or {}).get('ros__parameters', {}))}
           for k, v in defaults.items() if k != 'camera'}
    cam_defaults = dict((defaults.get('camera') or {}).get('ros__parameters', {}))
    drv = out.setdefault('so101_driver', {'ros__parameters': {}})['ros__parameters']
    drv['port'] = robot['port']
    drv['calibration_id'] = str(robot['calibration'].get('id') or '')
    drv['calibration_path'] = str(robot['calibration'].get('path') or '')
    safety = robot['safety']
    mrt = safety.get('max_relative_target_rad')
    if isinstance(mrt, dict):
        drv['max_relative_target_per_joint_rad'] = [float(mrt.get(j, 0.0)) for j in JOINT_NAMES]
    elif mrt is not None:
        drv['max_relative_target_rad'] = float(mrt)
    if 'command_timeout_s' in safety:
        drv['command_timeout_s'] = float(safety['command_timeout_s'])
    drv.update(robot.get('execution', {}))
    names = list(robot['cameras'])
    for name, cam in robot['cameras'].items():
        out[f'{name}_camera'] = {'ros__parameters': {**cam_defaults, **cam}}
    pol = out.setdefault('policy', {'ros__parameters': {}})['ros__parameters']
    for key, value in robot.get('policy', {}).items():
        pol[POLICY_KEYS[key]] = value
    # The policy converts joint states to the checkpoint's units with the driver's calibration.
    pol['lerobot.calibration_id'] = drv['calibration_id']
    pol['lerobot.calibration_path'] = drv['calibration_path']
    plan = out.setdefault('planner', {'ros__parameters': {}})['ros__parameters']
    if robot.get('planner'):
        # A vision-language model generates subtasks from the task and the cameras.
        plan['backend'] = 'transformers'
        plan['direct_subtask'] = False
        for key, value in robot['planner'].items():
            plan[PLANNER_KEYS[key]] = value
    plan['ground_truth_topic'] = ''  # no simulator: nothing may wait for ground truth
    for node in ('planner', 'policy', 'viewer'):
        params = out.get(node, {}).get('ros__parameters')
        if params is not None and names:
            params['cameras'] = names
            if 'default_camera' in params and params['default_camera'] not in names:
                params['default_camera'] = names[0]
    return out


def robot_parameters(robot: dict[str, Any], default_params_file: Path,
                     overrides: dict[str, dict[str, Any]] | None = None,
                     source: str = 'the robot YAML',
                     elsewhere: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The REAL graph's checked parameters from validated robot settings (load_robot_yaml,
    check_robot); ``overrides`` (node -> parameters, from the command line) win. A refusal
    names ``source`` and the defaults file. ``elsewhere``: nodes another computer runs
    (policy, planner), whose models are checked there, not here."""
    defaults = yaml.safe_load(Path(default_params_file).read_text(encoding='utf-8')) or {}
    defaults = {node: {**block, 'ros__parameters': dotted(block.get('ros__parameters') or {})}
                if isinstance(block, dict) else block for node, block in defaults.items()}
    merged = merged_parameters(robot, defaults)
    for node, values in (overrides or {}).items():
        merged.setdefault(node, {}).setdefault('ros__parameters', {}).update(values)
    if 'policy' not in elsewhere:
        check_policy(merged, f'{source} + {default_params_file}')
    if 'planner' not in elsewhere:
        check_planner(merged, f'{source} + {default_params_file}')
    return merged


def params_file_from_robot_yaml(robot_yaml: Path, default_params_file: Path,
                                overrides: dict[str, dict[str, Any]] | None = None) -> Path:
    """Write the merged ros__parameters file (a temp file) and return its path.

    ``overrides`` (node -> parameters, from the command line) win over the robot YAML.
    """
    merged = robot_parameters(load_robot_yaml(robot_yaml), default_params_file, overrides,
                              str(robot_yaml))
    fd, name = tempfile.mkstemp(prefix='lerobot_lang_real_', suffix='.yaml')
    with open(fd, 'w', encoding='utf-8') as f:
        f.write(f'# generated from {robot_yaml} and {default_params_file}\n')
        yaml.dump(merged, f, Dumper=_NoAliasDumper, sort_keys=False)
    return Path(name)
