"""camera node in its own process: a video file written here and the synthetic source."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.testing import node_command

MODULE = 'lerobot_lang_nodes.nodes.camera_node'


def write_video(path, n: int = 30, size: tuple[int, int] = (160, 120)) -> None:
    """n frames of a red square moving right (MJPG AVI: built into every OpenCV)."""
    w, h = size
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 30.0, (w, h))
    assert out.isOpened(), 'OpenCV cannot write MJPG AVI here'
    for i in range(n):
        img = np.full((h, w, 3), 30, np.uint8)
        x = 4 * i
        img[40:80, x:x + 30] = (0, 0, 255)  # BGR red
        out.write(img)
    out.release()


def test_video_file_frames_stamps_and_compressed(launch_node, probe, tmp_path) -> None:
    video = tmp_path / 'square.avi'
    write_video(video)
    images = probe.subscribe(Image, 'cameras/front/image_raw', qos.SENSOR)
    infos = probe.subscribe(CameraInfo, 'cameras/front/camera_info', qos.SENSOR)
    jpegs = probe.subscribe(CompressedImage, 'cameras/front/image_raw/compressed', qos.SENSOR)
    remaps = [a for t in ('image_raw', 'camera_info', 'image_raw/compressed')
              for a in ('-r', f'{t}:=cameras/front/{t}')]  # as graph.real_specs does
    proc = launch_node(MODULE, '-r', '__node:=front_camera', *remaps, name='front',
                       params={'source': str(video), 'width': 160, 'height': 120, 'fps': 15.0,
                               'publish_compressed': True})
    first = images.wait_for(timeout_s=30.0, what='an image from the video file')
    assert proc.alive
    assert (first.width, first.height, first.encoding) == (160, 120, 'rgb8')
    assert first.header.frame_id == 'front_camera_optical_frame'
    assert abs(convert.stamp_to_s(first.header.stamp) - time.time()) < 5.0
    rgb = convert.image_to_rgb(first)
    red = (rgb[..., 0] > 150) & (rgb[..., 1] < 100)
    assert red.sum() > 500, 'the red square is missing (BGR/RGB swapped?)'
    # The file has 30 frames: more than that means loop_video restarted it.
    images.wait_for(lambda m: len(images) > 35, timeout_s=30.0, what='more than 35 frames')
    stamps = [convert.stamp_to_s(m.header.stamp) for m in images.snapshot()]
    assert all(b > a for a, b in zip(stamps, stamps[1:])), 'stamps not increasing'
    info = infos.wait_for(timeout_s=10.0, what='camera_info')
    assert (info.width, info.height) == (160, 120)
    assert info.header.frame_id == 'front_camera_optical_frame'
    jpeg = jpegs.wait_for(timeout_s=10.0, what='a compressed image')
    decoded = cv2.imdecode(np.frombuffer(bytes(jpeg.data), np.uint8), cv2.IMREAD_COLOR)
    assert jpeg.format == 'jpeg' and decoded.shape == (120, 160, 3)


def test_synthetic_source_moves_and_loops(launch_node, probe) -> None:
    images = probe.subscribe(Image, 'synth/image_raw', qos.SENSOR)
    launch_node(MODULE, '-r', '__node:=synth_cam', '-r', 'image_raw:=synth/image_raw',
                name='synth', params={'source': 'synthetic:square', 'width': 64, 'height': 48,
                                      'fps': 20.0, 'frame_id': 'wrist_optical_frame'})
    images.wait_for(lambda m: len(images) >= 5, timeout_s=30.0, what='5 synthetic frames')
    msgs = images.snapshot()
    assert all((m.width, m.height, m.encoding) == (64, 48, 'rgb8') for m in msgs)
    assert msgs[0].header.frame_id == 'wrist_optical_frame'
    a, b = convert.image_to_rgb(msgs[0]), convert.image_to_rgb(msgs[-1])
    assert not np.array_equal(a, b), 'the synthetic square did not move'


def test_missing_device_keeps_node_alive(launch_node, tmp_path) -> None:
    proc = launch_node(MODULE, name='absent_cam',
                       params={'source': str(tmp_path / 'video99'), 'reconnect_period_s': 0.2})
    from lerobot_lang_nodes.testing import wait_until
    wait_until(lambda: 'cannot open camera source' in proc.log_text(), 30.0,
               'the open error in the log', [proc])
    assert proc.alive


SAMPLE_CALIBRATION = Path(__file__).resolve().parents[1] / 'data' / 'front_camera.yaml'


def test_camera_info_comes_from_the_calibration_file(launch_node, probe) -> None:
    # Calibrated at 640x480, published at 320x240: the intrinsics follow the resize.
    infos = probe.subscribe(CameraInfo, 'cal/camera_info', qos.SENSOR)
    proc = launch_node(MODULE, '-r', 'camera_info:=cal/camera_info', name='cal',
                       params={'source': 'synthetic:square', 'width': 320, 'height': 240,
                               'fps': 20.0, 'camera_info_url': f'file://{SAMPLE_CALIBRATION}'})
    info = infos.wait_for(timeout_s=30.0, what='camera_info')
    cal = yaml.safe_load(SAMPLE_CALIBRATION.read_text())
    k = cal['camera_matrix']['data']
    assert (info.width, info.height, info.distortion_model) == (320, 240, 'plumb_bob')
    assert list(info.d) == cal['distortion_coefficients']['data']
    assert list(info.k) == pytest.approx([k[0] / 2, 0.0, k[2] / 2, 0.0, k[4] / 2, k[5] / 2,
                                          0.0, 0.0, 1.0])
    assert list(info.r) == cal['rectification_matrix']['data']
    assert info.p[0] == pytest.approx(cal['projection_matrix']['data'][0] / 2)
    assert 'calibrated at 640x480: publishing its intrinsics scaled' in proc.log_text()


def test_a_broken_calibration_file_stops_start_up_with_the_field(tmp_path) -> None:
    bad = tmp_path / 'front.yaml'
    bad.write_text(SAMPLE_CALIBRATION.read_text().replace('rows: 3\n  cols: 4', 'rows: 4\n  '
                                                                               'cols: 4'))
    out = subprocess.run(node_command(MODULE, params={'source': 'synthetic:square',
                                                      'camera_info_url': str(bad)}),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f'camera calibration {bad}: projection_matrix is 4x4' in out.stdout + out.stderr
