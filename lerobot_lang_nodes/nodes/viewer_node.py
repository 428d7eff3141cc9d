"""`viewer` node: annotated camera views as an MJPEG live view, latest.png and an MP4."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import Image

from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus
from lerobot_lang_nodes.core.images import ImageFormatError, SO101_CAMERAS
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters
from lerobot_lang_nodes.nodes.runner import run
from lerobot_lang_nodes.viewer.compose import Annotation, Composer
from lerobot_lang_nodes.viewer.mjpeg import MjpegServer, MjpegServerError
from lerobot_lang_nodes.viewer.video import LatestPngWriter, Mp4Writer, VideoWriterError

NODE_NAME = 'viewer'


def dry_run_text(msg: RuntimeStatus) -> str:
    """The header row of a dry run: the arm holds, the planned target (rad) is shown."""
    if not msg.dry_run:
        return ''
    target = ' '.join(f'{v:+.2f}' for v in msg.planned_target) or '-'
    return f'the arm holds; planned target (rad) {target} ({msg.planned} actions played)'


class ViewerStartError(OSError):
    """The live view or a recording sink cannot be opened (port in use, bad path)."""


@dataclass(frozen=True)
class ViewerConfig:
    """Parameters of the viewer node."""

    cameras: tuple[str, ...] = field(default=SO101_CAMERAS, metadata={
        'doc': 'camera names, composed left to right'})
    camera_labels: tuple[str, ...] = field(default=('',), metadata={
        'doc': 'label drawn under each camera\'s view, one per camera (e.g. left, wrist, '
               'right for RoboCasa\'s robot0_* views); [""] = the camera names'})
    image_topic_pattern: str = field(default='cameras/{name}/image_raw', metadata={
        'doc': 'image topic per camera; {name} is replaced by the camera name'})
    bind_address: str = field(default='127.0.0.1', metadata={
        'doc': 'address the live view binds; 0.0.0.0 exposes it to the network'})
    port: int = field(default=8010, metadata={
        'doc': 'live view TCP port (0 picks a free one, logged at start)', 'range': (0, 65535)})
    port_attempts: int = field(default=20, metadata={
        'doc': 'when port is taken, try the next port_attempts - 1 ports (the one used is '
               'logged); 1 fails at once', 'range': (1, 1000)})
    fps: float = field(default=10.0, metadata={
        'doc': 'composition rate in Hz (wall clock)', 'range': (0.1, 60.0)})
    view_height: int = field(default=0, metadata={
        'doc': 'height views are resized to; 0 keeps the tallest camera', 'range': (0, 4096)})
    jpeg_quality: int = field(default=80, metadata={
        'doc': 'JPEG quality of the stream', 'range': (1, 95)})
    latest_png_path: str = field(default='', metadata={
        'doc': 'rolling PNG of the composed view, written atomically; empty disables'})
    latest_png_every_n: int = field(default=5, metadata={
        'doc': 'write latest_png_path every n composed frames', 'range': (1, 10000)})
    mp4_path: str = field(default='', metadata={
        'doc': 'H.264 MP4 recording, finalised on shutdown; empty disables'})
    mp4_fps: float = field(default=0.0, metadata={
        'doc': 'MP4 frame rate; 0 uses fps', 'range': (0.0, 60.0)})

    def labels(self) -> dict[str, str] | None:
        """{camera: label}; None when camera_labels does not fit cameras."""
        given = [label for label in self.camera_labels if label]
        if not given:
            return {c: c for c in self.cameras}
        if len(self.camera_labels) != len(self.cameras):
            return None
        return {c: label or c for c, label in zip(self.cameras, self.camera_labels)}

    def __post_init__(self) -> None:
        if not self.cameras:
            raise ValueError('cameras must name at least one camera')
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f'cameras contains duplicates: {list(self.cameras)}')
        if self.labels() is None:
            raise ValueError(f'camera_labels has {len(self.camera_labels)} entries for '
                             f'{len(self.cameras)} cameras {list(self.cameras)}; give one '
                             'label per camera, or [""] for the camera names')
        if '{name}' not in self.image_topic_pattern:
            raise ValueError('image_topic_pattern must contain {name}, got '
                             f'{self.image_topic_pattern!r}')
        if 0 < self.view_height < 16:
            raise ValueError(f'view_height must be 0 or >= 16, got {self.view_height}')


class ViewerNode(Node):
    """Subscribes camera images and language_context; composes and serves the live view."""

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self.cfg = cfg = declare_config(self, ViewerConfig)
        reject_unknown_parameters(self)
        self._lock = threading.Lock()
        # Held for a whole tick, so close() can wait for an in-flight frame before finalising.
        self._tick_lock = threading.Lock()
        self._frames: dict[str, np.ndarray | None] = {name: None for name in cfg.cameras}
        self._labels = cfg.labels() or {}
        self._annotation = Annotation()
        self._revision: int | None = None
        self._dirty = False
        self._last_composite: np.ndarray | None = None
        self._closing = False
        self._composer = Composer(height=cfg.view_height or None)

        # Open the sinks before subscribing, so a bad path fails the start with a clear error.
        try:
            self._png = (LatestPngWriter(cfg.latest_png_path, cfg.latest_png_every_n)
                         if cfg.latest_png_path else None)
            self._mp4 = (Mp4Writer(cfg.mp4_path, fps=cfg.mp4_fps or cfg.fps)
                         if cfg.mp4_path else None)
            self._server = self._start_server(cfg)
        except (MjpegServerError, VideoWriterError) as exc:
            raise ViewerStartError(str(exc)) from exc
        self.get_logger().info(f'live view: {self._server.url}')

        inputs = MutuallyExclusiveCallbackGroup()
        for name in cfg.cameras:
            topic = cfg.image_topic_pattern.format(name=name)
            self.create_subscription(Image, topic, lambda msg, n=name: self._on_image(n, msg),
                                     qos.SENSOR, callback_group=inputs)
        self.create_subscription(LanguageContext, 'language_context', self._on_context,
                                 qos.LATCHED, callback_group=inputs)
        self.create_subscription(RuntimeStatus, 'runtime_status', self._on_status, qos.STATUS,
                                 callback_group=inputs)
        # Steady clock: the live view keeps its rate when sim time is slow, paused or absent.
        self._timer = self.create_timer(1.0 / cfg.fps, self._on_timer,
                                        callback_group=MutuallyExclusiveCallbackGroup(),
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))

    def _start_server(self, cfg: ViewerConfig) -> MjpegServer:
        # Another viewer (or anything) on the port must not kill the live view: take the next.
        attempts = 1 if cfg.port == 0 else cfg.port_attempts
        for port in range(cfg.port, min(cfg.port + attempts, 65536)):
            try:
                server = MjpegServer(cfg.bind_address, port, jpeg_quality=cfg.jpeg_quality)
                server.start()
                if port != cfg.port:
                    self.get_logger().warning(f'port {cfg.port} is taken; the live view uses '
                                              f'port {port}')
                return server
            except MjpegServerError as exc:
                last = exc
        raise MjpegServerError(f'{last}; tried ports {cfg.port}..{port}: set the `port` '
                               'parameter (launch argument viewer_port, lerobot-lang '
                               '--viewer-port) to a free port, or 0 for any free one')

    @property
    def server(self) -> MjpegServer:
        return self._server

    # -- callbacks --------------------------------------------------------------------------

    def _on_image(self, camera: str, msg: Image) -> None:
        try:
            rgb = convert.image_to_rgb(msg)
        except ImageFormatError as exc:
            self.get_logger().warning(f'camera {camera!r}: {exc}', throttle_duration_sec=5.0)
            return
        with self._lock:
            self._frames[camera] = rgb
            self._dirty = True

    def _on_context(self, msg: LanguageContext) -> None:
        with self._lock:
            annotation = Annotation(task=msg.task, subtask=msg.subtask, memory=msg.memory,
                                    dry_run=self._annotation.dry_run)
            self._annotation = annotation
            self._revision = int(msg.revision)
            self._dirty = True
        self._server.set_status(f'rev {msg.revision} | subtask: {msg.subtask or "-"}')

    def _on_status(self, msg: RuntimeStatus) -> None:
        text = dry_run_text(msg)
        with self._lock:
            if text != self._annotation.dry_run:
                self._annotation = replace(self._annotation, dry_run=text)
                self._dirty = True

    def _on_timer(self) -> None:
        with self._tick_lock:
            self._tick()

    def _tick(self) -> None:
        with self._lock:
            if self._closing:
                return
            have_frame = any(f is not None for f in self._frames.values())
            dirty = self._dirty and have_frame
            views = [(self._labels[c], f) for c, f in self._frames.items()]
            annotation = self._annotation
            self._dirty = False
        try:
            if dirty:
                composite = self._composer.compose(views, annotation)
                self._last_composite = composite
                self._server.publish(composite)
                if self._png is not None:
                    self._png.submit(composite)
            # The MP4 repeats an unchanged view so that its timeline follows the wall clock.
            if self._mp4 is not None and self._last_composite is not None:
                self._mp4.write(self._last_composite)
        except (OSError, VideoWriterError) as exc:
            if not self._closing:
                self.get_logger().error(f'writing the live view failed: {exc}',
                                        throttle_duration_sec=5.0)

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the server and finalise the MP4; safe to call twice."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._timer.cancel()
        with self._tick_lock:  # a tick already running finishes its frame first
            pass
        self._server.stop()
        if self._mp4 is not None:
            try:
                self._mp4.close()
                if self._mp4.frames_written:
                    self.get_logger().info(
                        f'recorded {self._mp4.frames_written} frames to {self._mp4.path}')
            except (OSError, VideoWriterError) as exc:
                self.get_logger().error(f'could not finalise {self._mp4.path}: {exc}')

    def destroy_node(self) -> None:
        self.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    """Entry point: run the viewer until Ctrl-C; the MP4 is closed on the way out."""
    return run(ViewerNode, args, name=NODE_NAME)


if __name__ == '__main__':
    raise SystemExit(main())

