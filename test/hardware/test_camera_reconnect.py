"""camera node in its own process: a source that disappears after it was open, then returns.

``synthetic:square@<path>`` delivers the test pattern only while <path> exists, as a USB camera
delivers only while its device node exists: removing the path is an unplug (read fails, the
capture is released), creating it again is a re-plug (the reopen attempted every
reconnect_period_s succeeds). A video file that ends with loop_video off must not crash the node.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from sensor_msgs.msg import Image

from lerobot_lang_nodes.testing import wait_until
from lerobot_lang_nodes.nodes import qos

MODULE = 'lerobot_lang_nodes.nodes.camera_node'
RECONNECT_S = 0.2
LOST = 'stopped delivering'


def test_unplugged_source_stops_publishing_and_resumes(launch_node, probe, tmp_path) -> None:
    device = tmp_path / 'video0'
    device.touch()
    images = probe.subscribe(Image, 'plug/image_raw', qos.SENSOR)
    proc = launch_node(MODULE, '-r', '__node:=plug_cam', '-r', 'image_raw:=plug/image_raw',
                       name='plug_cam', params={'source': f'synthetic:square@{device}',
                                                'width': 64, 'height': 48, 'fps': 20.0,
                                                'reconnect_period_s': RECONNECT_S})
    images.wait_for(lambda m: len(images) >= 5, timeout_s=30.0, what='5 frames before unplug')

    device.unlink()  # unplug
    wait_until(lambda: LOST in proc.log_text(), 10.0, 'the lost-source warning', [proc])
    n_lost = len(images)
    # Absence can only be observed over a window: several reopen periods with the device gone.
    quiet_until = time.monotonic() + 5 * RECONNECT_S
    wait_until(lambda: time.monotonic() >= quiet_until, 10.0, 'the unplugged window', [proc])
    # At most the one frame captured before the unplug may still have been published.
    assert len(images) <= n_lost + 1, f'{len(images) - n_lost} frames published while unplugged'
    assert proc.alive

    device.touch()  # re-plug
    n_back = len(images)
    images.wait_for(lambda m: len(images) >= n_back + 5, timeout_s=15.0,
                    what='frames again after the re-plug')
    log = proc.log_text()
    assert 'opened again' in log
    assert log.count(LOST) == 1 and 'cannot open' not in log, 'not logged exactly once:\n' + log
    msgs = images.snapshot()
    assert all((m.width, m.height, m.encoding) == (64, 48, 'rgb8') for m in msgs[n_back:])
    assert proc.alive


def test_video_file_end_without_loop_keeps_node_alive(launch_node, probe, tmp_path) -> None:
    import cv2
    video = tmp_path / 'short.avi'
    out = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*'MJPG'), 30.0, (64, 48))
    assert out.isOpened(), 'OpenCV cannot write MJPG AVI here'
    for i in range(10):
        out.write(np.full((48, 64, 3), 10 * i, np.uint8))
    out.release()
    images = probe.subscribe(Image, 'short/image_raw', qos.SENSOR)
    proc = launch_node(MODULE, '-r', '__node:=short_cam', '-r', 'image_raw:=short/image_raw',
                       name='short_cam', params={'source': str(video), 'width': 64,
                                                 'height': 48, 'fps': 30.0,
                                                 'loop_video': False})
    wait_until(lambda: 'end of video file' in proc.log_text(), 30.0, 'the end of the file',
               [proc])
    assert len(images) <= 10  # (the probe may have matched too late to see any)
    assert proc.alive
    assert proc.stop() == 0, proc.log_text(3000)


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))
