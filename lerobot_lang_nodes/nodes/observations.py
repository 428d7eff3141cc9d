"""Latest camera frames, simulator ground truth and joint state, as the planner and the policy
keep them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from lerobot_lang_nodes.core.images import ImageFormatError
from lerobot_lang_nodes.nodes import convert, qos


class LatestObservations:
    """Subscribes camera images (and optionally ground truth) and keeps only the newest of each.

    Bad input (an unsupported encoding, ground truth that is not JSON) is logged, throttled,
    and leaves the previous value in place.

    Each source (a camera name, or ``GROUND_TRUTH``) counts the values it received
    (``version``), and ``on_update(source)``, when given, is called after each one (outside the
    lock, on the subscription's thread): the planner looks again when something new arrives.
    ``on_truth(truth, sent_ns)``, when given, sees each ground truth with its DDS source time
    (wall clock, ns; None where the RMW gives none) once it is the current one.

    ``transport`` 'compressed' subscribes ``<image topic>/compressed`` (image_transport's
    name; a policy on another computer than the cameras) and decodes each JPEG into the same
    HxWx3 uint8 RGB array the raw path gives.

    ``joint_states_topic`` (a sensor_msgs/JointState; empty: not subscribed) keeps the arm's
    newest joint names and positions for ``joints()``; a sample is no news to look at (it
    comes at the control rate), only the state the next look quotes.
    """

    GROUND_TRUTH = 'ground_truth'

    def __init__(self, node: Any, cameras: Sequence[str], image_topic_pattern: str,
                 ground_truth_topic: str = '',
                 on_update: Callable[[str], None] | None = None,
                 on_truth: Callable[[dict, int | None], None] | None = None,
                 transport: str = 'raw', joint_states_topic: str = '') -> None:
        self._node = node
        self._lock = threading.Lock()
        self._images: dict[str, np.ndarray] = {}
        self._stamps: dict[str, float] = {}
        self._truth: dict | None = None
        self._joints: tuple[list[str], np.ndarray] | None = None
        self._counts: dict[str, int] = {}
        self._on_update = on_update
        self._on_truth_hook = on_truth
        if transport not in ('raw', 'compressed'):
            raise ValueError(f"image transport {transport!r}; expected 'raw' or 'compressed'")
        msg_type, suffix, self._decode = ((Image, '', convert.image_to_rgb)
                                          if transport == 'raw' else
                                          (CompressedImage, '/compressed',
                                           convert.compressed_to_rgb))
        for cam in cameras:
            node.create_subscription(msg_type, image_topic_pattern.format(name=cam) + suffix,
                                     lambda m, c=cam: self._on_image(c, m), qos.SENSOR)
        self._truth_topic = ground_truth_topic
        if ground_truth_topic:
            node.create_subscription(String, ground_truth_topic, self._on_truth, qos.LATCHED)
        if joint_states_topic:
            node.create_subscription(JointState, joint_states_topic, self._on_joints,
                                     qos.SENSOR)

    def _on_joints(self, msg: JointState) -> None:
        joints = (list(msg.name), np.asarray(msg.position, dtype=np.float64))
        with self._lock:
            self._joints = joints

    def _on_image(self, camera: str, msg: Image | CompressedImage) -> None:
        try:
            rgb = self._decode(msg)
        except ImageFormatError as exc:
            self._node.get_logger().warning(f'camera {camera}: {exc}',
                                            throttle_duration_sec=5.0)
            return
        with self._lock:
            self._images[camera] = rgb
            self._stamps[camera] = convert.stamp_to_s(msg.header.stamp)
            self._counts[camera] = self._counts.get(camera, 0) + 1
        if self._on_update is not None:
            self._on_update(camera)

    def _on_truth(self, msg: String, info: dict) -> None:
        try:
            truth = json.loads(msg.data)
            if not isinstance(truth, dict):
                raise ValueError(f'a JSON {type(truth).__name__}, not an object')
        except ValueError as exc:
            self._node.get_logger().warning(f'{self._truth_topic}: not JSON ({exc})',
                                            throttle_duration_sec=5.0)
            return
        with self._lock:
            self._truth = truth
            self._counts[self.GROUND_TRUTH] = self._counts.get(self.GROUND_TRUTH, 0) + 1
        if self._on_truth_hook is not None:
            stamp = info.get('source_timestamp') if isinstance(info, dict) else None
            self._on_truth_hook(truth, int(stamp) if stamp else None)
        if self._on_update is not None:
            self._on_update(self.GROUND_TRUTH)

    def version(self, sources: Sequence[str]) -> tuple[int, ...]:
        """How many values each of ``sources`` (cameras, GROUND_TRUTH) received so far: a
        different version means something new to see."""
        with self._lock:
            return tuple(self._counts.get(s, 0) for s in sources)

    def images(self) -> dict[str, np.ndarray]:
        with self._lock:
            return dict(self._images)

    def stamps(self) -> dict[str, float]:
        """The header stamp of each camera's newest image (the robot side's clock)."""
        with self._lock:
            return dict(self._stamps)

    def image(self, camera: str) -> np.ndarray | None:
        with self._lock:
            return self._images.get(camera)

    def ground_truth(self) -> dict | None:
        with self._lock:
            return self._truth

    def joints(self) -> tuple[list[str], np.ndarray] | None:
        """(names, positions) of the newest joint state; None before one came (or without
        ``joint_states_topic``)."""
        with self._lock:
            return self._joints
