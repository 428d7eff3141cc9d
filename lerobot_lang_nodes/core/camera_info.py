"""Camera intrinsics for sensor_msgs/CameraInfo: ROS calibration YAML files, or a nominal guess.

The file format is the one `camera_calibration` writes and `camera_info_manager` reads
(image_width, image_height, camera_name, camera_matrix, distortion_model,
distortion_coefficients, rectification_matrix, projection_matrix; each matrix a mapping of
rows, cols and row-major data). URLs follow camera_info_manager: ``file:///abs/path.yaml``,
``package://<pkg>/<path>`` or a plain path.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

IDENTITY_3 = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
# Coefficient counts a CameraInfo consumer (image_proc, OpenCV) accepts per model.
DISTORTION_SIZES = {'plumb_bob': (5,), 'rational_polynomial': (8,), 'equidistant': (4,)}
_MATRICES = {'camera_matrix': (3, 3), 'rectification_matrix': (3, 3),
             'projection_matrix': (3, 4)}


class CameraCalibrationError(ValueError):
    """A calibration file that is missing or malformed; the message names file and field."""


@dataclass(frozen=True)
class Intrinsics:
    """What CameraInfo carries besides the header: size, distortion, K, R, P (row-major)."""

    width: int
    height: int
    distortion_model: str
    d: tuple[float, ...]
    k: tuple[float, ...]
    r: tuple[float, ...]
    p: tuple[float, ...]
    camera_name: str = ''
    calibrated: bool = True

    @property
    def fx(self) -> float:
        return self.k[0]

    @property
    def fy(self) -> float:
        return self.k[4]

    @property
    def cx(self) -> float:
        return self.k[2]

    @property
    def cy(self) -> float:
        return self.k[5]

    def scaled_to(self, width: int, height: int) -> Intrinsics:
        """The same lens at another image size (the camera node resizes frames per axis).

        Focal lengths and principal point scale with each axis; distortion, being in
        normalised coordinates, does not.
        """
        if (width, height) == (self.width, self.height):
            return self
        sx, sy = width / self.width, height / self.height
        k = list(self.k)
        k[0], k[1], k[2] = k[0] * sx, k[1] * sx, k[2] * sx
        k[4], k[5] = k[4] * sy, k[5] * sy
        p = list(self.p)
        p[0], p[1], p[2], p[3] = p[0] * sx, p[1] * sx, p[2] * sx, p[3] * sx
        p[5], p[6], p[7] = p[5] * sy, p[6] * sy, p[7] * sy
        return replace(self, width=width, height=height, k=tuple(k), p=tuple(p))


def nominal(width: int, height: int, hfov_rad: float = 2 * math.atan(0.5)) -> Intrinsics:
    """Uncalibrated pinhole guess: square pixels, centred, no distortion (~53 deg wide)."""
    f = (width / 2.0) / math.tan(hfov_rad / 2.0)
    cx, cy = width / 2.0, height / 2.0
    return Intrinsics(width, height, 'plumb_bob', (0.0,) * 5,
                      (f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0), IDENTITY_3,
                      (f, 0.0, cx, 0.0, 0.0, f, cy, 0.0, 0.0, 0.0, 1.0, 0.0),
                      calibrated=False)


def pinhole(width: int, height: int, fovy_deg: float, camera_name: str = '') -> Intrinsics:
    """A rendered (simulated) camera: square pixels from its vertical field of view,
    principal point at the centre, no distortion; exact, so ``calibrated``."""
    f = 0.5 * height / math.tan(math.radians(fovy_deg) / 2.0)
    cx, cy = width / 2.0, height / 2.0
    return Intrinsics(width, height, 'plumb_bob', (0.0,) * 5,
                      (f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0), IDENTITY_3,
                      (f, 0.0, cx, 0.0, 0.0, f, cy, 0.0, 0.0, 0.0, 1.0, 0.0),
                      camera_name=camera_name)


def resolve_url(url: str) -> Path:
    """camera_info_manager URL (file://, package://, or a plain path) -> local path."""
    if url.startswith('file://'):
        return Path(url[len('file://'):])
    if url.startswith('package://'):
        package, _, rest = url[len('package://'):].partition('/')
        if not package or not rest:
            raise CameraCalibrationError(f'camera_info_url {url!r}: write '
                                         'package://<package>/<path inside its share dir>')
        try:
            from ament_index_python.packages import (
                PackageNotFoundError, get_package_share_directory)
        except ImportError as exc:
            raise CameraCalibrationError(
                f'camera_info_url {url!r}: package:// needs ament_index_python; give a file '
                'path instead') from exc
        try:
            return Path(get_package_share_directory(package)) / rest
        except PackageNotFoundError as exc:
            raise CameraCalibrationError(f'camera_info_url {url!r}: package {package!r} is '
                                         'not installed in this ROS environment') from exc
    if '://' in url:
        raise CameraCalibrationError(f'camera_info_url {url!r}: only file://, package:// and '
                                     'plain paths are supported')
    return Path(os.path.expanduser(url))


def load(url: str) -> Intrinsics:
    """Read a ROS camera calibration YAML; CameraCalibrationError says what is wrong where."""
    import yaml
    path = resolve_url(url)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CameraCalibrationError(f'camera calibration {path}: cannot read it '
                                     f'({exc.strerror or exc}); run camera_calibration or '
                                     'fix camera_info_url') from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CameraCalibrationError(f'camera calibration {path}: not YAML ({exc})') from exc
    if not isinstance(data, dict):
        raise CameraCalibrationError(f'camera calibration {path}: expected a mapping with '
                                     'image_width, camera_matrix, ...')
    return parse(data, str(path))


def parse(data: dict[str, Any], source: str = '<calibration>') -> Intrinsics:
    """Intrinsics from the calibration YAML's mapping (see the module docstring)."""
    def fail(field: str, problem: str) -> CameraCalibrationError:
        return CameraCalibrationError(f'camera calibration {source}: {field} {problem}')

    size = []
    for field in ('image_width', 'image_height'):
        value = data.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise fail(field, f'is {value!r}; expected a positive number of pixels')
        size.append(value)
    mats = {}
    for field, shape in _MATRICES.items():
        mats[field] = _matrix(data.get(field), field, shape, fail)
    model = data.get('distortion_model', 'plumb_bob')
    if not isinstance(model, str) or model not in DISTORTION_SIZES:
        raise fail('distortion_model', f'is {model!r}; expected one of '
                   f'{sorted(DISTORTION_SIZES)}')
    d = data.get('distortion_coefficients')
    if not isinstance(d, dict):
        raise fail('distortion_coefficients', 'is missing (rows, cols, data)')
    d = _numbers(d.get('data'), 'distortion_coefficients.data', fail)
    if len(d) not in DISTORTION_SIZES[model]:
        raise fail('distortion_coefficients.data', f'has {len(d)} values; {model} needs '
                   f'{DISTORTION_SIZES[model][0]}')
    k = mats['camera_matrix']
    if not (k[0] > 0 and k[4] > 0 and k[8] == 1.0):
        raise fail('camera_matrix', 'is not an intrinsic matrix (fx, fy > 0, last entry 1)')
    name = data.get('camera_name', '')
    return Intrinsics(size[0], size[1], model, tuple(d), k, mats['rectification_matrix'],
                      mats['projection_matrix'], str(name) if name is not None else '')


def _numbers(values: Any, field: str, fail: Any) -> list[float]:
    if not isinstance(values, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in values):
        raise fail(field, f'is {values!r}; expected a list of finite numbers')
    return [float(v) for v in values]


def _matrix(value: Any, field: str, shape: tuple[int, int], fail: Any) -> tuple[float, ...]:
    if not isinstance(value, dict):
        raise fail(field, f'is missing; expected {{rows: {shape[0]}, cols: {shape[1]}, data: '
                   '[...]}')
    if (value.get('rows'), value.get('cols')) != shape:
        raise fail(field, f'is {value.get("rows")}x{value.get("cols")}; expected '
                   f'{shape[0]}x{shape[1]}')
    data = _numbers(value.get('data'), f'{field}.data', fail)
    if len(data) != shape[0] * shape[1]:
        raise fail(f'{field}.data', f'has {len(data)} values; expected {shape[0] * shape[1]}')
    return tuple(data)


__all__ = ['CameraCalibrationError', 'Intrinsics', 'load', 'nominal', 'parse', 'pinhole',
           'resolve_url']
