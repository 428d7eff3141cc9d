"""Reading rosbag2 bags (MCAP or sqlite3, ours or `ros2 bag record`'s), salvaging killed ones.

A bag closed cleanly has `metadata.yaml`; `rosbags` reads it and any defect is an error. A bag
without `metadata.yaml` is one whose recorder never closed it (killed): its MCAP file is read
up to the last complete chunk (no summary, no footer needed) and its sqlite3 database up to
the last committed transaction, with a warning that says so.
"""

from __future__ import annotations

import heapq
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rosbags.interfaces import MessageDefinitionFormat
from rosbags.rosbag2 import Reader, ReaderError
from rosbags.rosbag2.storage_mcap import McapReader
from rosbags.serde import SerdeError
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.base import TypesysError

from lerobot_lang_nodes.recording.typestore import TypeResolver, UnknownMessageType

logger = logging.getLogger(__name__)

MCAP_MAGIC = b'\x89MCAP0\r\n'
# A killed recorder's last messages may sit in the file slightly out of order (several
# callback threads); messages are re-sorted within this window.
REORDER_WINDOW_NS = 5_000_000_000


class BagError(RuntimeError):
    """A bag is missing, corrupt or truncated, or lacks what is asked of it."""


@dataclass(frozen=True)
class Topic:
    """A topic of a bag set: its type, message count and definition."""

    name: str
    msgtype: str
    count: int


@dataclass
class _Conn:
    topic: str
    msgtype: str
    msgdef: str
    fmt: MessageDefinitionFormat


@dataclass
class _Source:
    path: Path
    conns: dict[Any, _Conn]
    counts: dict[Any, int]
    iterate: Callable[[set], Iterator[tuple[Any, int, bytes]]]
    close: Callable[[], None]
    salvaged: bool


def find_bags(paths: Iterable[str | Path]) -> list[Path]:
    """Bag directories named by ``paths``: a bag, or a folder holding bags (sorted)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise BagError(f'bag {path} does not exist')
        if path.is_file() and path.suffix in ('.mcap', '.db3'):
            path = path.parent
        if _is_bag(path):
            out.append(path)
            continue
        children = sorted(p for p in path.iterdir() if p.is_dir() and _is_bag(p)) \
            if path.is_dir() else []
        if not children:
            raise BagError(f'{path} is not a rosbag2 bag (no metadata.yaml, .mcap or .db3 file) '
                           'and holds none')
        out += children
    return out


def _is_bag(path: Path) -> bool:
    return path.is_dir() and ((path / 'metadata.yaml').is_file()
                              or any(path.glob('*.mcap')) or any(path.glob('*.db3')))


class BagSet:
    """Several bags read as one time-ordered stream; use as a context manager."""

    def __init__(self, paths: Sequence[str | Path]) -> None:
        self.paths = find_bags(paths)
        self.warnings: list[str] = []
        self._sources: list[_Source] = []
        self._resolver = TypeResolver()
        self.store = get_typestore(Stores.EMPTY)

    def __enter__(self) -> BagSet:
        try:
            for path in self.paths:
                self._sources.append(self._open(path))
            self._register_types()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for source in self._sources:
            try:
                source.close()
            except Exception:  # noqa: BLE001 - teardown of a reader
                logger.debug('closing %s failed', source.path, exc_info=True)
        self._sources = []

    # -- opening -----------------------------------------------------------------------------

    def _open(self, path: Path) -> _Source:
        if (path / 'metadata.yaml').is_file():
            return self._open_closed(path)
        mcaps, dbs = sorted(path.glob('*.mcap')), sorted(path.glob('*.db3'))
        if mcaps:
            source = _salvage_mcap(path, mcaps)
        else:
            source = _salvage_sqlite(path, dbs)
        total = sum(source.counts.values())
        self.warnings.append(f'{path} was not closed (recorder killed?): read {total} messages '
                             'up to its last flushed chunk')
        return source

    @staticmethod
    def _open_closed(path: Path) -> _Source:
        reader = Reader(path)
        try:
            reader.open()
        except (ReaderError, OSError, ValueError, KeyError) as exc:
            raise BagError(f'cannot read bag {path}: {exc}. The bag is corrupt or truncated; if '
                           'its recorder was killed, delete its metadata.yaml to read it up to '
                           'the last flushed chunk') from exc
        by_id = {c.id: c for c in reader.connections}
        conns = {c.id: _Conn(c.topic, c.msgtype, c.msgdef.data, c.msgdef.format)
                 for c in reader.connections}
        counts = {c.id: c.msgcount for c in reader.connections}

        def iterate(wanted: set) -> Iterator[tuple[Any, int, bytes]]:
            try:
                for conn, t_ns, raw in reader.messages(connections=[by_id[k] for k in wanted]):
                    yield conn.id, t_ns, raw
            except (ReaderError, OSError, ValueError) as exc:
                raise BagError(f'bag {path} is corrupt or truncated: {exc}') from exc

        return _Source(path, conns, counts, iterate, reader.close, salvaged=False)

    def _register_types(self) -> None:
        types: dict = {}
        for source in self._sources:
            for conn in source.conns.values():
                if conn.msgtype in types or conn.msgtype in self.store.fielddefs:
                    continue
                try:
                    if conn.fmt == MessageDefinitionFormat.MSG and conn.msgdef:
                        types.update(get_types_from_msg(conn.msgdef, conn.msgtype))
                    elif conn.fmt == MessageDefinitionFormat.IDL and conn.msgdef:
                        types.update(_idl_types(conn.msgdef))
                    else:  # an old bag without definitions: use the installed packages
                        self._resolver.ensure(conn.msgtype)
                        types.update({k: v for k, v in self._resolver.store.fielddefs.items()
                                      if k not in types})
                except (TypesysError, UnknownMessageType) as exc:
                    raise BagError(f'{source.path}: cannot decode topic {conn.topic} '
                                   f'({conn.msgtype}): {exc}') from exc
        try:
            self.store.register(types)
        except TypesysError as exc:
            raise BagError(f'the bags define a message type differently: {exc}') from exc

    # -- reading -----------------------------------------------------------------------------

    def topics(self) -> dict[str, Topic]:
        """Every topic of the set with its type and total message count."""
        out: dict[str, Topic] = {}
        for source in self._sources:
            for key, conn in source.conns.items():
                prev = out.get(conn.topic)
                count = source.counts.get(key, 0) + (prev.count if prev else 0)
                out[conn.topic] = Topic(conn.topic, conn.msgtype, count)
        return out

    def messages(self, topics: Iterable[str]) -> Iterator[tuple[int, str, str, bytes]]:
        """(log time ns, topic, type, raw CDR) of ``topics``, time-ordered over all bags."""
        wanted = set(topics)
        streams = []
        for source in self._sources:
            keys = {k for k, c in source.conns.items() if c.topic in wanted}
            if keys:
                streams.append(_tagged(source, keys))
        return heapq.merge(*streams, key=lambda m: m[0])

    def decode(self, raw: bytes, msgtype: str) -> Any:
        """Deserialize one CDR message."""
        try:
            return self.store.deserialize_cdr(raw, msgtype)
        except (SerdeError, ValueError, IndexError, KeyError) as exc:
            raise BagError(f'a {msgtype} message cannot be decoded ({exc}); the bag is '
                           'corrupt') from exc


def _tagged(source: _Source, keys: set) -> Iterator[tuple[int, str, str, bytes]]:
    conns = source.conns
    it = ((t, conns[k].topic, conns[k].msgtype, raw) for k, t, raw in source.iterate(keys))
    if not source.salvaged:
        yield from it
        return
    heap: list = []
    n = 0
    for item in it:
        heapq.heappush(heap, (item[0], n, item))
        n += 1
        while heap and heap[0][0] < item[0] - REORDER_WINDOW_NS:
            yield heapq.heappop(heap)[2]
    while heap:
        yield heapq.heappop(heap)[2]


def _idl_types(text: str) -> dict:
    sep = '=' * 80 + '\n'
    types: dict = {}
    if text.startswith(sep + 'IDL: '):
        for part in text.split(sep)[1:]:
            _hdr, idl = part.split('\n', 1)
            types.update(get_types_from_idl(idl))
    else:
        types.update(get_types_from_idl(text))
    return types


def _last_complete_record(bio: Any, start: int, size: int) -> int:
    """Offset just after the last complete data-section MCAP record from ``start``."""
    pos = start
    while pos + 9 <= size:
        bio.seek(pos)
        opcode = bio.read(1)
        if opcode == b'\x0f':  # DataEnd: the summary that follows is not data
            break
        end = pos + 9 + int.from_bytes(bio.read(8), 'little')
        if end > size:  # the record the recorder was writing when it died
            break
        pos = end
    return pos


def _salvage_mcap(path: Path, files: list[Path]) -> _Source:
    if len(files) != 1:
        raise BagError(f'{path}: an unclosed bag should hold one .mcap file, found '
                       f'{[f.name for f in files]}')
    file = files[0]
    reader = McapReader(file)
    bio = file.open('rb')
    reader.bio = bio
    try:
        size = file.stat().st_size
        magic = bio.read(8)
        if len(magic) < 8 and MCAP_MAGIC.startswith(magic):
            raise BagError(f'{file} holds no complete MCAP header (the recorder died at once, '
                           'or has not flushed yet): nothing to read')
        if magic != MCAP_MAGIC:
            raise BagError(f'{file} is not an MCAP file (bad magic); the bag is corrupt')
        if bio.read(1) != b'\x01':
            raise BagError(f'{file} does not start with an MCAP header record; it is corrupt')
        length = int.from_bytes(bio.read(8), 'little')
        reader.data_start = 17 + length
        reader.data_end = _last_complete_record(bio, reader.data_start, size)
        reader.meta_scan()
    except (ReaderError, ValueError, EOFError) as exc:
        bio.close()
        raise BagError(f'cannot salvage {file}: {exc}') from exc
    except BaseException:
        bio.close()
        raise
    conns = {c.id: _Conn(c.topic, c.msgtype, c.msgdef.data, c.msgdef.format)
             for c in reader.connections}
    stats = reader.statistics
    counts = dict(stats.channel_message_counts) if stats else {}
    by_id = {c.id: c for c in reader.connections}

    def iterate(wanted: set) -> Iterator[tuple[Any, int, bytes]]:
        try:
            for conn, t_ns, raw in reader.messages_scan([by_id[k] for k in wanted]):
                yield conn.id, t_ns, raw
        except (ReaderError, ValueError, EOFError) as exc:
            raise BagError(f'{file} is corrupt beyond its last chunk: {exc}') from exc

    return _Source(path, conns, counts, iterate, bio.close, salvaged=True)


def _salvage_sqlite(path: Path, files: list[Path]) -> _Source:
    if len(files) != 1:
        raise BagError(f'{path}: an unclosed bag should hold one .db3 file, found '
                       f'{[f.name for f in files]}')
    file = files[0]
    try:
        db = sqlite3.connect(f'file:{file}?mode=ro&immutable=1', uri=True)
        topics = db.execute('SELECT id, name, type FROM topics').fetchall()
        defs = dict(db.execute('SELECT topic_type, encoded_message_definition FROM '
                               'message_definitions').fetchall())
        encodings = dict(db.execute('SELECT topic_type, encoding FROM '
                                    'message_definitions').fetchall())
        counts = dict(db.execute('SELECT topic_id, COUNT(*) FROM messages GROUP BY topic_id')
                      .fetchall())
    except sqlite3.DatabaseError as exc:
        raise BagError(f'cannot salvage {file}: {exc}; the database is corrupt') from exc
    conns = {}
    for tid, name, msgtype in topics:
        fmt = (MessageDefinitionFormat.IDL if encodings.get(msgtype) == 'ros2idl'
               else MessageDefinitionFormat.MSG if msgtype in defs
               else MessageDefinitionFormat.NONE)
        conns[tid] = _Conn(name, msgtype, defs.get(msgtype, ''), fmt)

    def iterate(wanted: set) -> Iterator[tuple[Any, int, bytes]]:
        marks = ','.join('?' * len(wanted))
        try:
            cur = db.execute(f'SELECT topic_id, timestamp, data FROM messages WHERE topic_id IN '
                             f'({marks}) ORDER BY timestamp', sorted(wanted))
            for tid, t_ns, raw in cur:
                yield tid, t_ns, bytes(raw)
        except sqlite3.DatabaseError as exc:
            raise BagError(f'{file} is corrupt: {exc}') from exc

    return _Source(path, conns, counts, iterate, db.close, salvaged=True)
