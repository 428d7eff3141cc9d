"""Camera calibration files (ROS camera_calibration YAML) -> CameraInfo intrinsics."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from lerobot_lang_nodes.core import camera_info
from lerobot_lang_nodes.core.camera_info import CameraCalibrationError

SAMPLE = Path(__file__).resolve().parents[1] / 'data' / 'front_camera.yaml'
CALIBRATION = yaml.safe_load(SAMPLE.read_text())


def write(tmp_path, data, name='front.yaml'):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize('url', ['{p}', 'file://{p}'])
def test_loads_the_camera_calibration_format(url):
    intr = camera_info.load(url.format(p=SAMPLE))
    assert (intr.width, intr.height, intr.camera_name) == (640, 480, 'front')
    assert intr.k == tuple(CALIBRATION['camera_matrix']['data'])
    assert intr.d == tuple(CALIBRATION['distortion_coefficients']['data'])
    assert intr.p == tuple(CALIBRATION['projection_matrix']['data'])
    assert intr.distortion_model == 'plumb_bob' and intr.calibrated


def test_scaling_to_the_published_size_maps_pixels_consistently():
    intr = camera_info.parse(CALIBRATION)
    half = intr.scaled_to(320, 240)
    assert half.k[0] == pytest.approx(306.25) and half.k[2] == pytest.approx(159.1)
    assert half.k[4] == pytest.approx(305.95) and half.k[5] == pytest.approx(120.85)
    assert half.d == intr.d and half.r == intr.r and half.k[8] == 1.0
    # A 3-D point projects to the same place of the picture at either size.
    x, y, z = 0.1, -0.05, 0.8
    u_full = (intr.p[0] * x + intr.p[2] * z) / z
    u_half = (half.p[0] * x + half.p[2] * z) / z
    assert u_half == pytest.approx(u_full * 320 / 640)
    v_full = (intr.p[5] * y + intr.p[6] * z) / z
    v_half = (half.p[5] * y + half.p[6] * z) / z
    assert v_half == pytest.approx(v_full * 240 / 480)
    assert intr.scaled_to(640, 480) is intr


def test_nominal_is_an_undistorted_centred_pinhole():
    intr = camera_info.nominal(640, 480)
    assert not intr.calibrated and intr.d == (0.0,) * 5
    assert intr.k[2:6:3] == (320.0, 240.0)
    assert 2 * math.degrees(math.atan(320 / intr.k[0])) == pytest.approx(53.13, abs=0.01)


def test_a_rendered_camera_is_a_centred_pinhole_from_its_vertical_field_of_view():
    intr = camera_info.pinhole(320, 240, 90.0, camera_name='front')
    assert intr.calibrated and intr.d == (0.0,) * 5 and intr.camera_name == 'front'
    assert (intr.fx, intr.fy, intr.cx, intr.cy) == pytest.approx((120.0, 120.0, 160.0, 120.0))
    assert intr.p == pytest.approx((120.0, 0.0, 160.0, 0.0, 0.0, 120.0, 120.0, 0.0,
                                    0.0, 0.0, 1.0, 0.0))
    # The top edge of the image is fovy / 2 above the optical axis.
    assert math.degrees(math.atan(intr.cy / intr.fy)) == pytest.approx(45.0)


@pytest.mark.parametrize('change,field', [
    ({'image_width': 0}, 'image_width'),
    ({'image_height': '480'}, 'image_height'),
    ({'camera_matrix': None}, 'camera_matrix is missing'),
    ({'camera_matrix': {'rows': 3, 'cols': 4, 'data': [1.0] * 12}}, 'camera_matrix is 3x4'),
    ({'camera_matrix': {'rows': 3, 'cols': 3, 'data': [1.0] * 8}}, 'camera_matrix.data has 8'),
    ({'camera_matrix': {'rows': 3, 'cols': 3, 'data': [0.0] * 8 + [1.0]}},
     'not an intrinsic matrix'),
    ({'projection_matrix': {'rows': 3, 'cols': 4, 'data': ['a'] * 12}},
     'projection_matrix.data'),
    ({'distortion_model': 'fisheye9'}, 'distortion_model'),
    ({'distortion_coefficients': {'rows': 1, 'cols': 4, 'data': [0.0] * 4}},
     'has 4 values; plumb_bob needs 5'),
    ({'distortion_coefficients': {'rows': 1, 'cols': 5, 'data': [float('nan')] * 5}},
     'finite numbers'),
])
def test_malformed_files_name_file_and_field(tmp_path, change, field):
    path = write(tmp_path, {**CALIBRATION, **change})
    with pytest.raises(CameraCalibrationError) as err:
        camera_info.load(str(path))
    assert field in str(err.value) and str(path) in str(err.value)


def test_missing_or_unreadable_files_are_clear_errors(tmp_path):
    with pytest.raises(CameraCalibrationError, match='cannot read it'):
        camera_info.load(str(tmp_path / 'absent.yaml'))
    (tmp_path / 'bad.yaml').write_text('image_width: [unclosed')
    with pytest.raises(CameraCalibrationError, match='not YAML'):
        camera_info.load(str(tmp_path / 'bad.yaml'))
    with pytest.raises(CameraCalibrationError, match='only file://'):
        camera_info.load('http://example.invalid/front.yaml')
    with pytest.raises(CameraCalibrationError, match='not installed'):
        camera_info.load('package://no_such_package_here/front.yaml')
