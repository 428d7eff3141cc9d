"""The recorder's bag writer: a bounded queue and one writer thread over `rosbags`; ROS-free.

Subscription callbacks only append serialized messages to a queue (`push` never blocks and
never raises): a slow disk costs queued images, counted per topic, never a stalled executor.
The writer thread writes rosbag2 (MCAP by default, sqlite3 on request, metadata version 9),
closes an MCAP chunk / commits sqlite3 every `flush_period_s` so a killed recorder leaves a
bag readable up to that point, and starts a new bag when one exceeds its size or duration.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness, QosReliability,
                                QosTime)
from rosbags.rosbag2 import StoragePlugin, Writer, WriterError
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

from lerobot_lang_nodes.recording.typestore import TypeResolver, UnknownMessageType

logger = logging.getLogger(__name__)

STORAGES = {'mcap': StoragePlugin.MCAP, 'sqlite3': StoragePlugin.SQLITE3}
IMAGE_TYPES = ('sensor_msgs/msg/Image', 'sensor_msgs/msg/CompressedImage')


class RecorderError(RuntimeError):
    """The bag cannot be opened or written (path taken, disk full, unknown type)."""


@dataclass(frozen=True)
class WriterSettings:
    """Where and how bags are written (the recorder node's parameters carry the same names)."""

    output_dir: Path
    storage: str = 'mcap'
    compress: bool = False
    split_size_mb: float = 0.0
    split_duration_s: float = 0.0
    flush_period_s: float = 1.0
    image_queue_size: int = 64
    queue_size: int = 5000

    def __post_init__(self) -> None:
        object.__setattr__(self, 'output_dir', Path(self.output_dir))
        if self.storage not in STORAGES:
            raise ValueError(f'storage is {self.storage!r}; valid choices: {list(STORAGES)}')
        if self.compress and self.storage != 'mcap':
            raise ValueError('compress (zstd chunks) needs storage mcap; sqlite3 bags are '
                             'written uncompressed')
        for name in ('split_size_mb', 'split_duration_s'):
            if getattr(self, name) < 0:
                raise ValueError(f'{name} must be >= 0 (0 disables), got {getattr(self, name)}')
        if self.flush_period_s <= 0:
            raise ValueError(f'flush_period_s must be > 0, got {self.flush_period_s}')
        if self.image_queue_size < 1 or self.queue_size < 1:
            raise ValueError('image_queue_size and queue_size must be >= 1')


class TopicSpec(NamedTuple):
    """One recorded topic: name, ROS type and the QoS its publishers offer."""

    name: str
    msgtype: str
    qos: tuple[Qos, ...]

    @property
    def is_image(self) -> bool:
        return self.msgtype in IMAGE_TYPES


def qos_from_fields(history: str, depth: int, reliability: str, durability: str,
                    deadline_ns: int = 0, lifespan_ns: int = 0, liveliness: str = 'automatic',
                    lease_ns: int = 0) -> Qos:
    """A rosbags Qos from policy names (as rclpy's enums name them, any case)."""
    def t(ns: int) -> QosTime:
        # rclpy reports "infinite" as a huge duration; rosbag2 writes it as the max int32 s.
        if ns <= 0 or ns >= 2**62:
            return QosTime(2147483647, 4294967295) if ns else QosTime(0, 0)
        return QosTime(ns // 1_000_000_000, ns % 1_000_000_000)

    def enum(kind: Any, name: str) -> Any:
        return kind[name.upper()] if name.upper() in kind.__members__ else kind.UNKNOWN

    return Qos(enum(QosHistory, history), int(depth), enum(QosReliability, reliability),
               enum(QosDurability, durability), t(deadline_ns), t(lifespan_ns),
               enum(QosLiveliness, liveliness), t(lease_ns), False)


@dataclass
class WriterStats:
    """Counters reported on /diagnostics: nothing is dropped silently."""

    received: int = 0
    written: int = 0
    flushed: int = 0  # of the written messages, those a flush or close made durable
    dropped: dict[str, int] = field(default_factory=dict)
    bytes_written: int = 0
    bags: list[str] = field(default_factory=list)
    last_error: str = ''

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


class BagWriter:
    """Queue + writer thread; ``start`` opens a bag series, ``stop`` drains and closes it."""

    def __init__(self, settings: WriterSettings, resolver: TypeResolver | None = None,
                 *, on_drop: Callable[[str, int], None] | None = None) -> None:
        self.settings = settings
        self._resolver = resolver or TypeResolver()
        self._on_drop = on_drop
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._queued_images = 0
        self._queued_other = 0
        self._topics: dict[str, TopicSpec] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._prefix = ''
        self._seq = 0
        self.stats = WriterStats()
        # Writer-thread state.
        self._writer: Writer | None = None
        self._conns: dict[str, Any] = {}
        self._bag_bytes = 0
        self._bag_start_ns: int | None = None

    # -- any thread --------------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        with self._cond:
            return (self._thread is not None and self._thread.is_alive()
                    and not self._stopping)

    def start(self, prefix: str) -> Path:
        """Open the first bag `<output_dir>/<prefix>_000` in a new writer thread (sqlite3
        connections belong to the thread that opens them) and return its path."""
        with self._cond:
            if self._thread is not None:
                raise RecorderError(f'already recording into {self.stats.bags[-1]}')
            self._prefix, self._seq, self._stopping = prefix, 0, False
            opened: dict[str, Any] = {}
            ready = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(opened, ready),
                                            name='bag-writer', daemon=True)
            self._thread.start()
        ready.wait()
        if 'error' in opened:
            self._thread.join()
            with self._cond:
                self._thread = None
            raise opened['error']
        return opened['path']

    def add_topic(self, spec: TopicSpec) -> None:
        """Record ``spec`` from now on (its definition is resolved at once: a bad type fails
        here, not in the writer thread)."""
        self._resolver.msgdef(spec.msgtype)  # raises UnknownMessageType
        with self._cond:
            if spec.name in self._topics:
                return
            self._topics[spec.name] = spec
            self._queue.append(('topic', spec))
            self._cond.notify()

    def topics(self) -> dict[str, TopicSpec]:
        with self._cond:
            return dict(self._topics)

    def push(self, topic: str, t_ns: int, data: bytes, is_image: bool = False) -> bool:
        """Queue one serialized message; False when it was dropped (queue full, not started)."""
        with self._cond:
            self.stats.received += 1
            if self._thread is None or self._stopping:
                return False
            # A writer thread that died on a disk error accepts nothing more: count it.
            full = (not self._thread.is_alive()
                    or (self._queued_images >= self.settings.image_queue_size if is_image
                        else self._queued_other >= self.settings.queue_size))
            if full:
                count = self.stats.dropped.get(topic, 0) + 1
                self.stats.dropped[topic] = count
            else:
                self._queue.append(('msg', topic, t_ns, data, is_image))
                if is_image:
                    self._queued_images += 1
                else:
                    self._queued_other += 1
                self._cond.notify()
                return True
        if self._on_drop is not None:
            self._on_drop(topic, count)
        return False

    def stop(self, timeout_s: float = 30.0) -> list[str]:
        """Write everything queued, close the bag (metadata.yaml) and return the bag paths."""
        with self._cond:
            thread = self._thread
            if thread is None:
                return []
            self._stopping = True
            self._cond.notify()
        thread.join(timeout_s)
        with self._cond:
            self._thread = None
            if thread.is_alive():
                raise RecorderError(f'the bag writer did not finish within {timeout_s:.0f} s')
            return list(self.stats.bags)

    def queue_depth(self) -> tuple[int, int]:
        with self._cond:
            return self._queued_images, self._queued_other

    # -- writer thread -----------------------------------------------------------------------

    def _open_bag(self) -> Path:
        while True:
            path = self.settings.output_dir / f'{self._prefix}_{self._seq:03d}'
            self._seq += 1
            if not path.exists():
                break
        writer = Writer(path, version=9, storage_plugin=STORAGES[self.settings.storage])
        if self.settings.compress:
            writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        writer.set_custom_data('lerobot_lang.recorder', 'lerobot_lang_nodes recorder')
        try:
            writer.open()
        except (WriterError, OSError) as exc:
            raise RecorderError(f'cannot create bag {path}: {exc}') from exc
        self._writer, self._conns, self._bag_bytes, self._bag_start_ns = writer, {}, 0, None
        for spec in self._topics.values():
            self._add_connection(spec)
        self.stats.bags.append(str(path))
        logger.info('recording into %s (%s)', path, self.settings.storage)
        return path

    def _add_connection(self, spec: TopicSpec) -> None:
        assert self._writer is not None
        try:
            msgdef, digest = self._resolver.msgdef(spec.msgtype)
        except UnknownMessageType as exc:
            self.stats.last_error = str(exc)
            return
        self._conns[spec.name] = self._writer.add_connection(
            spec.name, spec.msgtype, msgdef=msgdef, rihs01=digest,
            offered_qos_profiles=list(spec.qos))

    def _run(self, opened: dict[str, Any], ready: threading.Event) -> None:
        try:
            self.settings.output_dir.mkdir(parents=True, exist_ok=True)
            opened['path'] = self._open_bag()
        except OSError as exc:
            opened['error'] = RecorderError(f'cannot create {self.settings.output_dir}: {exc}')
            return
        except BaseException as exc:  # noqa: BLE001 - handed to start(), which raises it
            opened['error'] = exc
            return
        finally:
            ready.set()
        next_flush = time.monotonic() + self.settings.flush_period_s
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._stopping:
                        remaining = next_flush - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                    batch = list(self._queue)
                    self._queue.clear()
                    self._queued_images = self._queued_other = 0
                    stopping = self._stopping
                for item in batch:
                    self._write_item(item)
                if time.monotonic() >= next_flush:
                    self._flush()
                    next_flush = time.monotonic() + self.settings.flush_period_s
                if stopping:
                    break
        except (OSError, WriterError, RecorderError) as exc:  # disk full: stop, keep the rest
            self.stats.last_error = f'writing the bag failed: {exc}'
            logger.error('%s; recording stopped', self.stats.last_error)
        finally:
            self._close_bag()

    def _write_item(self, item: tuple) -> None:
        if item[0] == 'topic':
            self._add_connection(item[1])
            return
        _, topic, t_ns, data, _ = item
        conn = self._conns.get(topic)
        if conn is None or self._writer is None:
            return
        if self._bag_start_ns is None:
            self._bag_start_ns = t_ns
        self._writer.write(conn, t_ns, data)
        self.stats.written += 1
        self.stats.bytes_written += len(data)
        self._bag_bytes += len(data)
        s = self.settings
        if ((s.split_size_mb and self._bag_bytes >= s.split_size_mb * 1e6)
                or (s.split_duration_s and t_ns - self._bag_start_ns >= s.split_duration_s * 1e9)):
            self._close_bag()
            self._open_bag()

    def _flush(self) -> None:
        """Make what was written so far survive a SIGKILL of this process."""
        storage = self._writer.storage if self._writer is not None else None
        if storage is None:
            return
        written = self.stats.written
        # rosbags has no public flush: close the pending MCAP chunk (it keeps ~1 MiB in memory
        # otherwise) or commit the sqlite3 transaction. rosbags is pinned (0.11.9).
        if hasattr(storage, 'close_chunk'):
            if storage.chunk.msgs:
                storage.close_chunk()
            storage.bio.flush()
        elif hasattr(storage, 'conn'):
            storage.conn.commit()
        self.stats.flushed = written

    def _close_bag(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        written = self.stats.written
        try:
            writer.close()
        except (OSError, WriterError) as exc:
            self.stats.last_error = f'closing {writer.path} failed: {exc}'
            logger.error('%s', self.stats.last_error)
        else:
            self.stats.flushed = written
            logger.info('closed bag %s (%d messages in total so far)', writer.path,
                        self.stats.written)

