"""`camera` node: OpenCV capture (index, device path, video file / URL, synthetic) to ROS.

A capture thread reads as fast as the source delivers and keeps only the newest frame (a
slow consumer sees drops, never growing latency); a timer publishes that frame at ``fps``
with the capture time as stamp. A source that fails (device unplugged) is reopened every
``reconnect_period_s``. ``synthetic:square`` is a moving coloured square, for tests and dry runs;
``synthetic:square@<path>`` delivers it only while ``<path>`` exists, like a device node that can
be unplugged (for testing the reconnect path without a camera).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from lerobot_lang_nodes.core import camera_info
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters

SYNTHETIC_PREFIX = 'synthetic:'


@dataclass(frozen=True)
class CameraConfig:
    """Parameters of the camera node."""

    source: str = field(default='0', metadata={
        'doc': "Device index ('0'), device path (/dev/video0), video file or URL, or "
               "'synthetic:square' (moving square test pattern; 'synthetic:square@<path>' "
               'delivers only while <path> exists, like an unpluggable device).'})
    width: int = field(default=640, metadata={'doc': 'Requested width (px); 0 = source '
                                                     'default.', 'range': (0, 7680)})
    height: int = field(default=480, metadata={'doc': 'Requested height (px); 0 = source '
                                                      'default.', 'range': (0, 4320)})
    fps: float = field(default=30.0, metadata={'doc': 'Publish (and requested capture) rate.',
                                               'range': (0.1, 240.0)})
    fourcc: str = field(default='', metadata={
        'doc': "Capture pixel format for devices, e.g. 'MJPG' (USB bandwidth); empty = "
               'driver default.'})
    frame_id: str = field(default='', metadata={
        'doc': "Optical frame of the images; empty = '<node name>_optical_frame'."})
    loop_video: bool = field(default=True, metadata={
        'doc': 'Restart a video file at its end (files only).'})
    publish_compressed: bool = field(default=False, metadata={
        'doc': 'Also publish image_raw/compressed (JPEG) for remote consumers.'})
    jpeg_quality: int = field(default=85, metadata={'doc': 'JPEG quality of the compressed '
                                                           'image.', 'range': (1, 100)})
    reconnect_period_s: float = field(default=1.0, metadata={
        'doc': 'Period of reopen attempts after the source failed (s).',
        'range': (0.05, 60.0)})
    camera_info_url: str = field(default='', metadata={
        'doc': 'Intrinsics calibration (camera_calibration YAML): file:///path.yaml, '
               'package://<pkg>/<path> or a path; scaled to the published size. Empty = a '
               'nominal uncalibrated pinhole (no distortion, ~53 deg wide).'})


class _Synthetic:
    """cv2.VideoCapture look-alike: a coloured square moving across a dark background."""

    def __init__(self, width: int, height: int, fps: float, device: str = '') -> None:
        self.width, self.height, self.period = width or 320, height or 240, 1.0 / fps
        self.device = device  # when set, frames exist only while this path exists
        self.n = 0
        self._next = time.monotonic()

    def isOpened(self) -> bool:  # noqa: N802 - the cv2 API
        return not self.device or os.path.exists(self.device)

    def read(self) -> tuple[bool, np.ndarray | None]:
        delay = self._next - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # a camera delivers at its frame rate
        if not self.isOpened():
            return False, None  # unplugged
        self._next = max(self._next + self.period, time.monotonic() - self.period)
        img = np.full((self.height, self.width, 3), 20, np.uint8)  # BGR like cv2
        s = max(4, self.height // 6)
        x = (self.n * 4) % max(1, self.width - s)
        y = (self.height - s) // 2
        img[y:y + s, x:x + s] = (0, 0, 255)  # red in BGR
        self.n += 1
        return True, img

    def release(self) -> None:
        pass


def _is_file_or_url(source: str) -> bool:
    return '://' in source or source.rsplit('.', 1)[-1].lower() in (
        'mp4', 'avi', 'mkv', 'mov', 'webm', 'mjpg', 'mjpeg')


def _make_node_class() -> type:
    from rclpy.node import Node

    class _CameraNode(Node):
        """Publishes image_raw, camera_info and optionally image_raw/compressed."""

        def __init__(self) -> None:
            self._thread: threading.Thread | None = None
            self._running = False
            super().__init__('camera')
            self.cfg = declare_config(self, CameraConfig)
            reject_unknown_parameters(self)
            # Read before anything starts: a missing or malformed file fails start-up.
            self.calibration = (camera_info.load(self.cfg.camera_info_url)
                                if self.cfg.camera_info_url else None)
            self._info_cache: dict[tuple[int, int], camera_info.Intrinsics] = {}
            import cv2  # lazily: only camera processes pay for OpenCV
            self._cv2 = cv2
            self.frame_id = self.cfg.frame_id or f'{self.get_name()}_optical_frame'
            self._lock = threading.Lock()
            self._latest: tuple[float, np.ndarray] | None = None
            self._published_stamp = -1.0
            self.captured = 0
            self.dropped = 0
            self._image_pub = self.create_publisher(Image, 'image_raw', qos.SENSOR)
            self._info_pub = self.create_publisher(CameraInfo, 'camera_info', qos.SENSOR)
            self._jpeg_pub = (self.create_publisher(CompressedImage, 'image_raw/compressed',
                                                    qos.SENSOR)
                              if self.cfg.publish_compressed else None)
            self._running = True
            self._thread = threading.Thread(target=self._capture_loop, name='camera-capture',
                                            daemon=True)
            self._thread.start()
            self.create_timer(1.0 / self.cfg.fps, self._publish)
            self.get_logger().info(
                f'camera {self.cfg.source!r} {self.cfg.width}x{self.cfg.height}@{self.cfg.fps} '
                f'frame_id={self.frame_id} compressed={self.cfg.publish_compressed}')

        # --- capture thread -------------------------------------------------------------
        def _open(self) -> Any:
            cfg, cv2 = self.cfg, self._cv2
            if cfg.source.startswith(SYNTHETIC_PREFIX):
                device = cfg.source.partition('@')[2]
                synthetic = _Synthetic(cfg.width, cfg.height, cfg.fps, device)
                return synthetic if synthetic.isOpened() else None
            src: Any = int(cfg.source) if cfg.source.isdigit() else cfg.source
            cap = cv2.VideoCapture(src)
            if not cap.isOpened():
                cap.release()
                return None
            if not _is_file_or_url(cfg.source):
                if cfg.fourcc:
                    cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*cfg.fourcc[:4]))
                if cfg.width:
                    cap.set(cv2.CAP_PROP_FRAME_WIDTH, cfg.width)
                if cfg.height:
                    cap.set(cv2.CAP_PROP_FRAME_HEIGHT, cfg.height)
                cap.set(cv2.CAP_PROP_FPS, cfg.fps)
                cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # latest frame, not a driver queue
            return cap

        def _capture_loop(self) -> None:
            cfg = self.cfg
            is_file = (not cfg.source.startswith(SYNTHETIC_PREFIX)
                       and _is_file_or_url(cfg.source) and '://' not in cfg.source)
            cap = None
            failed_logged = False
            period = 1.0 / cfg.fps
            while self._running:
                if cap is None:
                    cap = self._open()
                    if cap is None:
                        if not failed_logged:
                            self.get_logger().error(
                                f'cannot open camera source {cfg.source!r}; check the device '
                                'index/path or the file; retrying every '
                                f'{cfg.reconnect_period_s:.1f} s')
                            failed_logged = True
                        time.sleep(cfg.reconnect_period_s)  # polling for a device node
                        continue
                    if failed_logged:
                        self.get_logger().info(f'camera source {cfg.source!r} opened again')
                    failed_logged = False
                    next_t = time.monotonic()
                ok, frame = cap.read()
                stamp = self.get_clock().now().nanoseconds * 1e-9
                if not ok or frame is None:
                    if is_file and cfg.loop_video:
                        cap.release()
                        cap = None  # reopen at the start
                        continue
                    if is_file:
                        self._running = False
                        self.get_logger().info('end of video file; loop_video is false')
                        break
                    self.get_logger().warning(f'camera {cfg.source!r} stopped delivering; '
                                              'reopening')
                    cap.release()
                    cap = None
                    failed_logged = True
                    continue
                rgb = self._to_rgb(frame)
                with self._lock:
                    if self._latest is not None and self._latest[0] > self._published_stamp:
                        self.dropped += 1  # never published: newer frame wins
                    self._latest = (stamp, rgb)
                    self.captured += 1
                if is_file:  # files decode faster than real time: pace them at fps
                    next_t += period
                    delay = next_t - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        next_t = time.monotonic()
            if cap is not None:
                cap.release()

        def _to_rgb(self, frame: np.ndarray) -> np.ndarray:
            cv2 = self._cv2
            if frame.ndim == 2:
                frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2RGB)
            else:
                frame = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
            h, w = frame.shape[:2]
            cfg = self.cfg
            if cfg.width and cfg.height and (w, h) != (cfg.width, cfg.height):
                frame = cv2.resize(frame, (cfg.width, cfg.height), interpolation=cv2.INTER_AREA)
            return np.ascontiguousarray(frame)

        # --- publishing -----------------------------------------------------------------
        def _publish(self) -> None:
            with self._lock:
                latest = self._latest
                if latest is None or latest[0] <= self._published_stamp:
                    return  # no new frame since the last publish
                self._published_stamp = latest[0]
            stamp, rgb = latest
            self._image_pub.publish(convert.rgb_to_image(rgb, stamp, self.frame_id))
            self._info_pub.publish(convert.intrinsics_to_camera_info(
                self._intrinsics(*rgb.shape[1::-1]), stamp, self.frame_id))
            if self._jpeg_pub is not None:
                cv2 = self._cv2
                ok, buf = cv2.imencode('.jpg', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                                       [cv2.IMWRITE_JPEG_QUALITY, self.cfg.jpeg_quality])
                if ok:
                    msg = CompressedImage(format='jpeg', data=buf.tobytes())
                    convert.s_to_stamp(stamp, msg.header.stamp)
                    msg.header.frame_id = self.frame_id
                    self._jpeg_pub.publish(msg)

        def _intrinsics(self, width: int, height: int) -> camera_info.Intrinsics:
            """The intrinsics of frames of this size."""
            intr = self._info_cache.get((width, height))
            if intr is None:
                cal = self.calibration
                if cal is None:
                    intr = camera_info.nominal(width, height)
                else:
                    intr = cal.scaled_to(width, height)
                    if intr is not cal:
                        self.get_logger().warning(
                            f'frames are {width}x{height} but {self.cfg.camera_info_url} was '
                            f'calibrated at {cal.width}x{cal.height}: publishing its '
                            'intrinsics scaled to the frame size')
                self._info_cache[(width, height)] = intr
            return intr

        def close(self) -> None:
            self._running = False
            if self._thread is not None:
                self._thread.join(timeout=5.0)

    return _CameraNode


def main(args: list[str] | None = None) -> int:
    return runner.run(lambda: _make_node_class()(), args, name='camera')


if __name__ == '__main__':
    raise SystemExit(main())
