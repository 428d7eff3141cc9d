"""`recorder` node: records the session's topics into rosbag2 bags (MCAP or sqlite3).

Subscriptions are raw (serialized bytes, no deserialization on the executor) and are made
once a topic has a publisher, with a QoS compatible with every publisher (transient local
when they all latch, so the current task and language context open every bag); the offered
QoS profiles and the message definitions go into the bag, as `ros2 bag record` writes them.
The bag writing itself is `recording.bag_writer.BagWriter` (ROS-free): a bounded queue, one
writer thread, periodic flushes, drops counted and reported on /diagnostics and in the log.
`~/start` and `~/stop` (std_srvs/Trigger) start a new bag and close the current one.
The leader arm's joint states (a human's commands) and episode_event (episode boundaries)
are recorded whatever `topics` says.
"""

from __future__ import annotations

import importlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger

from lerobot_lang_nodes.core.images import SO101_CAMERAS
from lerobot_lang_nodes.nodes.commands import CommandSubscription
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters
from lerobot_lang_nodes.nodes.runner import run
from lerobot_lang_nodes.recording.bag_writer import (IMAGE_TYPES, STORAGES, BagWriter,
                                                     RecorderError, TopicSpec, WriterSettings,
                                                     qos_from_fields)
from lerobot_lang_nodes.recording.typestore import TypeResolver, UnknownMessageType

NODE_NAME = 'recorder'

# Everything the export to a LeRobot dataset reads, plus what explains a session afterwards.
DEFAULT_TOPICS = ('task', 'interjection', 'language_context', 'subtask', 'memory', 'plan',
                  'speech', 'vqa_log', 'action_chunk', 'runtime_status', 'joint_states',
                  'task_outcome', 'clock', 'sim/ground_truth', 'sim/task_description')
CAMERA_TOPICS = ('image_raw', 'camera_info')
# Operator commands come from latched and default-QoS publishers alike: recorded through both
# kinds of subscription, each sample once (nodes/commands.py), as the planner takes them.
COMMAND_TOPICS = ('task', 'interjection')
# Images per camera DDS holds for the recorder while its executor is not scheduled (best effort:
# one beyond it is lost, not queued): 1 s of raw images at 30 Hz, 3 s of JPEG ones. With 5, a
# recorder descheduled for more than five frame periods (3 x 30 Hz beside the sim graph on 2
# cores) lost single frames, a few per 10 s. Memory is taken only while late: up to 0.9 MB per
# raw 640x480 image (whose publisher's 16 MiB shared-memory segment holds ~17 anyway), ~50 kB
# per JPEG.
IMAGE_HISTORY_DEPTH = {'sensor_msgs/msg/Image': 30, 'sensor_msgs/msg/CompressedImage': 90}
# What a human commands the arm with (the leader arm's pose: the export's action for frames
# under human control) and the episode boundaries of an episodic recording (the export cuts
# there). Recorded whatever `topics` says, as the cameras' topics are, once published.
HUMAN_TOPICS = ('leader/joint_states', 'episode_event')


@dataclass(frozen=True)
class RecorderConfig:
    """Parameters of the recorder node."""

    topics: tuple[str, ...] = field(default=DEFAULT_TOPICS, metadata={
        'doc': 'topics to record (relative names resolve in the node namespace); each is '
               'subscribed once it has a publisher'})
    cameras: tuple[str, ...] = field(default=SO101_CAMERAS, metadata={
        'doc': 'cameras whose cameras/<name>/image_raw and camera_info are recorded too'})
    output_dir: str = field(default='recordings', metadata={
        'doc': 'folder the bags are written into (created if missing)'})
    bag_prefix: str = field(default='session', metadata={
        'doc': 'bag folder names: <bag_prefix>_<date-time>_<NNN>, NNN counting splits'})
    storage: str = field(default='mcap', metadata={
        'doc': 'rosbag2 storage: mcap, or sqlite3 for older tools', 'choices': tuple(STORAGES)})
    compress: bool = field(default=False, metadata={
        'doc': 'zstd-compress MCAP chunks (smaller bags, more CPU)'})
    split_size_mb: float = field(default=0.0, metadata={
        'doc': 'start a new bag after this many MB of messages; 0 disables',
        'range': (0.0, 1e7)})
    split_duration_s: float = field(default=0.0, metadata={
        'doc': 'start a new bag after this many seconds; 0 disables', 'range': (0.0, 1e7)})
    flush_period_s: float = field(default=1.0, metadata={
        'doc': 'seconds between flushes to disk: what a killed recorder can lose at most',
        'range': (0.05, 60.0)})
    image_queue_size: int = field(default=64, metadata={
        'doc': 'images waiting for the disk before new ones are dropped (and counted)',
        'range': (1, 100000)})
    queue_size: int = field(default=5000, metadata={
        'doc': 'other messages waiting for the disk before new ones are dropped (and counted)',
        'range': (1, 10000000)})
    start_recording: bool = field(default=True, metadata={
        'doc': 'record from start-up; false waits for the ~/start service'})
    discovery_period_s: float = field(default=0.5, metadata={
        'doc': 'how often topics without a publisher yet are looked up', 'range': (0.05, 10.0)})

    def __post_init__(self) -> None:
        names = [t for t in self.topics if t] + [c for c in self.cameras if c]
        if not names:
            raise ValueError('topics and cameras are both empty: nothing to record')
        if not self.output_dir:
            raise ValueError('output_dir must name a folder')
        WriterSettings(Path(self.output_dir), storage=self.storage, compress=self.compress)

    def topic_names(self) -> list[str]:
        names = [t for t in self.topics if t]
        names += [f'cameras/{c}/{t}' for c in self.cameras if c for t in CAMERA_TOPICS]
        names += list(HUMAN_TOPICS)
        return list(dict.fromkeys(names))

    def writer_settings(self) -> WriterSettings:
        return WriterSettings(Path(self.output_dir).expanduser(), storage=self.storage,
                              compress=self.compress, split_size_mb=self.split_size_mb,
                              split_duration_s=self.split_duration_s,
                              flush_period_s=self.flush_period_s,
                              image_queue_size=self.image_queue_size,
                              queue_size=self.queue_size)


def message_class(msgtype: str) -> Any:
    """The rclpy message class of ``pkg/msg/Name``."""
    pkg, kind, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{pkg}.{kind}'), name)


def subscription_qos(offered: list[Any], is_image: bool, msgtype: str = '') -> QoSProfile:
    """A QoS that matches every offered one: reliable / transient local only if all are."""
    reliable = all(q.reliability == ReliabilityPolicy.RELIABLE for q in offered)
    latched = all(q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in offered)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST,
                      depth=IMAGE_HISTORY_DEPTH.get(msgtype, 30) if is_image else 100,
                      reliability=(ReliabilityPolicy.RELIABLE if reliable
                                   else ReliabilityPolicy.BEST_EFFORT),
                      durability=(DurabilityPolicy.TRANSIENT_LOCAL if latched
                                  else DurabilityPolicy.VOLATILE))


def _bag_qos(q: Any) -> Any:
    def ns(duration: Any) -> int:
        return int(duration.nanoseconds)
    return qos_from_fields(q.history.name, q.depth, q.reliability.name, q.durability.name,
                           ns(q.deadline), ns(q.lifespan), q.liveliness.name,
                           ns(q.liveliness_lease_duration))


class RecorderNode(Node):
    """Raw subscriptions into a BagWriter; start/stop services; health on /diagnostics."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self.cfg = cfg = declare_config(self, RecorderConfig)
        reject_unknown_parameters(self)
        self._lock = threading.Lock()
        self._resolver = TypeResolver()
        self._writer = BagWriter(cfg.writer_settings(), self._resolver, on_drop=self._on_drop)
        self._topics = [self.resolve_topic_name(t) for t in cfg.topic_names()]
        self._command_topics = {self.resolve_topic_name(t) for t in COMMAND_TOPICS}
        self._subs: dict[str, Any] = {}
        self._unknown: set[str] = set()
        self._closing = False
        # One group: a callback only appends to a queue, and a reentrant group makes rclpy's
        # multi-threaded executor spin on callbacks already running.
        self._inputs = MutuallyExclusiveCallbackGroup()
        self.create_service(Trigger, '~/start', self._on_start,
                            callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(Trigger, '~/stop', self._on_stop,
                            callback_group=MutuallyExclusiveCallbackGroup())
        # Steady clock: discovery goes on while sim time is paused or not yet published.
        self._discovery = self.create_timer(cfg.discovery_period_s, self._discover,
                                            callback_group=MutuallyExclusiveCallbackGroup(),
                                            clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._diagnostics = DiagnosticsPublisher(self, 'recording', self._status)
        self.get_logger().info(
            f'recording {len(self._topics)} topics into {cfg.output_dir} ({cfg.storage}, '
            f'flush every {cfg.flush_period_s} s, split at {cfg.split_size_mb or "-"} MB / '
            f'{cfg.split_duration_s or "-"} s)')
        if cfg.start_recording:
            self.start()

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    # -- recording ---------------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        return self._writer.recording

    def start(self) -> str:
        """Open a new bag; subscriptions are (re)made so latched topics open it."""
        with self._lock:
            stamp = time.strftime('%Y%m%d-%H%M%S')
            path = self._writer.start(f'{self.cfg.bag_prefix}_{stamp}')
        self.get_logger().info(f'recording into {path}')
        self._discover()
        return str(path)

    def stop(self) -> list[str]:
        """Close the bag (everything queued is written first); returns the bags written."""
        with self._lock:
            for sub in self._subs.values():
                if isinstance(sub, CommandSubscription):
                    sub.destroy()
                else:
                    self.destroy_subscription(sub)
            self._subs.clear()
            bags = self._writer.stop()
        stats = self._writer.stats
        if bags:
            self.get_logger().info(
                f'recording stopped: {stats.written} messages, {stats.dropped_total} dropped, '
                f'bags: {", ".join(bags)}')
        return bags

    def _discover(self) -> None:
        if not self._writer.recording:
            return
        with self._lock:
            for name in self._topics:
                if name in self._subs or name in self._unknown:
                    continue
                infos = self.get_publishers_info_by_topic(name)
                if infos:
                    self._subscribe(name, infos)

    def _subscribe(self, name: str, infos: list[Any]) -> None:
        msgtype = infos[0].topic_type
        offered = [i.qos_profile for i in infos if i.topic_type == msgtype]
        is_image = msgtype in IMAGE_TYPES
        spec = TopicSpec(name, msgtype, tuple(_bag_qos(q) for q in offered))
        try:
            self._writer.add_topic(spec)
            cls = message_class(msgtype)
        except (UnknownMessageType, ImportError, AttributeError, ValueError) as exc:
            self._unknown.add(name)
            self.get_logger().error(f'cannot record {name}: {exc}')
            return
        if name in self._command_topics:
            self._subs[name] = CommandSubscription(
                self, cls, name, lambda data, _sent, n=name: self._on_message(n, data, False),
                depth=subscription_qos(offered, False).depth, callback_group=self._inputs,
                raw=True)
        else:
            self._subs[name] = self.create_subscription(
                cls, name, lambda data, n=name, img=is_image: self._on_message(n, data, img),
                subscription_qos(offered, is_image, msgtype), callback_group=self._inputs,
                raw=True)
        self.get_logger().info(f'recording {name} ({msgtype})')

    def _on_message(self, topic: str, data: bytes, is_image: bool) -> None:
        self._writer.push(topic, self._now_ns(), data, is_image)

    def _on_drop(self, topic: str, count: int) -> None:
        if count == 1 or count % 100 == 0:
            self.get_logger().warning(
                f'the disk is not keeping up: dropped {count} message(s) of {topic} so far '
                '(raise image_queue_size / queue_size, or record fewer or compressed images)')

    # -- services ----------------------------------------------------------------------------

    def _on_start(self, _req: Any, response: Trigger.Response) -> Trigger.Response:
        if self._writer.recording:
            response.success = False
            response.message = f'already recording into {self._writer.stats.bags[-1]}'
            return response
        try:
            response.message = f'recording into {self.start()}'
            response.success = True
        except RecorderError as exc:
            response.success, response.message = False, str(exc)
        return response

    def _on_stop(self, _req: Any, response: Trigger.Response) -> Trigger.Response:
        if not self._writer.recording:
            response.success, response.message = False, 'not recording'
            return response
        try:
            bags = self.stop()
        except RecorderError as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success = True
        response.message = f'recorded {", ".join(bags)}'
        return response

    # -- health ------------------------------------------------------------------------------

    def _status(self) -> tuple[str, str, dict[str, Any]]:
        stats = self._writer.stats
        images, others = self._writer.queue_depth()
        values: dict[str, Any] = {
            'recording': self._writer.recording,
            'bag': stats.bags[-1] if stats.bags else '',
            'topics_recorded': len(self._subs),
            'topics_waiting': len(self._topics) - len(self._subs) - len(self._unknown),
            'received': stats.received, 'written': stats.written,
            'flushed': stats.flushed,  # written and made durable: what a SIGKILL keeps
            'dropped': stats.dropped_total, 'bytes_written': stats.bytes_written,
            'queued_images': images, 'queued_other': others,
        }
        for topic, count in sorted(dict(stats.dropped).items()):
            values[f'dropped {topic}'] = count
        if stats.last_error:
            values['last_error'] = stats.last_error
            return 'error', stats.last_error, values
        if stats.dropped_total:
            return 'warn', f'{stats.dropped_total} message(s) dropped', values
        if self._unknown:
            return 'warn', f'cannot record {sorted(self._unknown)}', values
        return 'ok', 'recording' if self._writer.recording else 'idle', values

    # -- shutdown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is queued and close the bag; safe to call twice."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._discovery.cancel()
        try:
            self.stop()
        except RecorderError as exc:
            self.get_logger().error(f'closing the bag failed: {exc}')

    def destroy_node(self) -> None:
        self.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    """Entry point: record until Ctrl-C; the bag is closed (metadata.yaml) on the way out."""
    return run(RecorderNode, args, name=NODE_NAME)


if __name__ == '__main__':
    raise SystemExit(main())
