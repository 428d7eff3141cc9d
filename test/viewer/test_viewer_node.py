"""The viewer node in its own process: DDS images + LanguageContext in, MJPEG/PNG/MP4 out."""

from __future__ import annotations

import re
import threading

import av
import numpy as np
from PIL import Image as PilImage
import sensor_msgs.msg as sensor_msgs

import lerobot_lang_msgs.msg as lerobot_lang_msgs
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import wait_until
from lerobot_lang_nodes.viewer.client import MjpegStreamReader
from lerobot_lang_nodes.viewer.compose import Annotation, Composer

MODULE = 'lerobot_lang_nodes.nodes.viewer_node'
HOST = '127.0.0.1'
GREEN = (20, 200, 40)
RED = (210, 30, 30)
CONTEXT = dict(task='put the red cube in the bowl', subtask='grasp the red cube',
               memory='the red cube is left of the bowl')


def image_msg(colour, encoding='rgb8', h=240, w=320):
    pixels = np.full((h, w, 3), colour, np.uint8)
    if encoding == 'bgr8':
        pixels = pixels[:, :, ::-1]
    msg = sensor_msgs.Image(height=h, width=w, encoding=encoding, step=w * 3)
    msg.data = pixels.tobytes()
    return msg


def live_view_port(proc) -> int:
    found = wait_until(lambda: re.search(r'live view: http://127\.0\.0\.1:(\d+)/',
                                         proc.log_text()),
                       30.0, 'the viewer to log its live view URL', [proc])
    return int(found.group(1))


class Publisher(threading.Thread):
    """Republishes the camera images at ~20 Hz: sensor QoS is best effort."""

    def __init__(self, probe):
        super().__init__(daemon=True)
        self.stop_event = threading.Event()
        self.front = probe.publisher(sensor_msgs.Image, 'cameras/front/image_raw', qos.SENSOR,
                                     wait_subscribers=1, timeout_s=30.0)
        self.wrist = probe.publisher(sensor_msgs.Image, 'cameras/wrist/image_raw', qos.SENSOR,
                                     wait_subscribers=1, timeout_s=30.0)
        self.front_msg = image_msg(GREEN)
        self.wrist_msg = image_msg(RED, 'bgr8')  # bgr8 must be shown in the right colours

    def run(self):
        while not self.stop_event.wait(0.05):
            self.front.publish(self.front_msg)
            self.wrist.publish(self.wrist_msg)

    def stop(self):
        self.stop_event.set()
        self.join(timeout=5.0)


def mean_abs_diff(a, b):
    return float(np.abs(a.astype(int) - b.astype(int)).mean())


def test_viewer_node_streams_annotated_views(launch_node, probe, tmp_path):
    png, mp4 = tmp_path / 'latest.png', tmp_path / 'run.mp4'
    proc = launch_node(MODULE, params={'port': 0, 'fps': 10.0, 'latest_png_path': str(png),
                                       'latest_png_every_n': 2, 'mp4_path': str(mp4)})
    port = live_view_port(proc)
    with MjpegStreamReader(HOST, port, timeout=10) as reader:
        headers, first = reader.read_frame()
        assert headers['x-frame-seq'] == '0' and first.shape == (360, 640, 3)  # placeholder

        ctx_pub = probe.publisher(lerobot_lang_msgs.LanguageContext, 'language_context',
                                  qos.LATCHED, wait_subscribers=1, timeout_s=30.0)
        ctx_pub.publish(lerobot_lang_msgs.LanguageContext(revision=4, **CONTEXT))
        publisher = Publisher(probe)
        publisher.start()
        try:
            # What the node should show, rendered locally with the same composer, and the
            # same views before the context arrived or with another subtask.
            views = [('front', np.full((240, 320, 3), GREEN, np.uint8)),
                     ('wrist', np.full((240, 320, 3), RED, np.uint8))]
            expected = Composer().compose(views, Annotation(**CONTEXT))
            blank = Composer().compose(views, Annotation())
            other = Composer().compose(views, Annotation(CONTEXT['task'], 'release the cube',
                                                         CONTEXT['memory']))
            text = (expected != blank).any(axis=2)

            def shows_context(f):
                return (f.shape == expected.shape and mean_abs_diff(f, expected) < 4.0
                        and mean_abs_diff(f[text], expected[text])
                        < mean_abs_diff(f[text], blank[text]) / 2)

            frame = reader.wait_for(shows_context, timeout=30.0)
            assert frame is not None, 'no streamed frame matched the annotated views'
            assert np.abs(frame[150, 160].astype(int) - GREEN).max() < 20
            assert np.abs(frame[150, 480].astype(int) - RED).max() < 20
            # The header shows this subtask's text, not just some text: where the two
            # renderings differ, the streamed frame is much closer to the expected one.
            differs = (expected != other).any(axis=2)
            assert differs.sum() > 100
            err_expected = mean_abs_diff(frame[differs], expected[differs])
            err_other = mean_abs_diff(frame[differs], other[differs])
            assert err_expected < err_other / 2, (err_expected, err_other)

            bad = sensor_msgs.Image(height=2, width=2, encoding='32FC1', step=8, data=bytes(16))
            publisher.front.publish(bad)
            wait_until(lambda: 'unsupported image encoding' in proc.log_text(), 10.0,
                       'the warning about an unsupported encoding', [proc])
            wait_until(png.exists, 10.0, 'latest.png', [proc])
            wait_until(mp4.exists, 10.0, 'the MP4 to be started', [proc])
        finally:
            publisher.stop()
    assert proc.stop() == 0, proc.log_text(3000)
    with PilImage.open(png) as img:
        assert img.format == 'PNG' and img.size == (640, 240)
    with av.open(str(mp4)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        assert (stream.codec_context.name, stream.width, stream.height) == ('h264', 640, 240)
    assert frames >= 1, 'the MP4 was not finalised with frames on SIGINT'


def test_viewer_node_rejects_bad_parameters(launch_node):
    proc = launch_node(MODULE, params={'port': 0, 'image_topic_pattern': 'no_placeholder'})
    wait_until(lambda: not proc.alive, 30.0, 'the viewer to exit on a bad parameter')
    assert proc.returncode == 2
    assert 'image_topic_pattern must contain {name}' in proc.log_text()
