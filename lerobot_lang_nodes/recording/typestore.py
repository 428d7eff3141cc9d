"""Message definitions for bags: the Kilted type store plus installed interface packages.

A bag must carry each topic's message definition (`ros2 bag info`, Foxglove and the exporter
decode with it). `rosbags` knows the standard ROS 2 types; ours (lerobot_lang_msgs) and any
other installed package's are read from their `share/<pkg>/msg/*.msg` files.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore


class UnknownMessageType(LookupError):
    """No definition of a message type in the type store or in any installed package."""


_FIELD_TYPE = re.compile(r'^\s*([A-Za-z_][\w/]*)(?:\[[^\]]*\])?\s+\w')
_PRIMITIVES = {'bool', 'byte', 'char', 'float32', 'float64', 'int8', 'uint8', 'int16',
               'uint16', 'int32', 'uint32', 'int64', 'uint64', 'string', 'wstring', 'time',
               'duration'}


def share_dirs() -> list[Path]:
    """`share/` directories of the ament prefixes (AMENT_PREFIX_PATH, then this Python's)."""
    prefixes = [p for p in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) if p]
    prefixes.append(sys.prefix)
    out: list[Path] = []
    for prefix in prefixes:
        share = Path(prefix) / 'share'
        if share.is_dir() and share not in out:
            out.append(share)
    return out


def find_msg_file(msgtype: str) -> Path | None:
    """`share/<pkg>/msg/<Name>.msg` of ``pkg/msg/Name`` in an ament prefix, or None."""
    parts = msgtype.split('/')
    if len(parts) != 3:
        return None
    pkg, kind, name = parts
    for share in share_dirs():
        path = share / pkg / kind / f'{name}.msg'
        if path.is_file():
            return path
    return None


class TypeResolver:
    """A rosbags type store that learns missing types from installed `.msg` files on demand."""

    def __init__(self) -> None:
        self.store: Typestore = get_typestore(Stores.ROS2_KILTED)
        self._lock = threading.Lock()

    def ensure(self, msgtype: str) -> None:
        """Register ``msgtype`` (and the custom types it nests) unless already known.

        Raises:
            UnknownMessageType: no installed package defines it.
        """
        with self._lock:
            self._ensure(msgtype, set())

    def _ensure(self, msgtype: str, seen: set[str]) -> None:
        if msgtype in self.store.fielddefs or msgtype in seen:
            return
        seen.add(msgtype)
        path = find_msg_file(msgtype)
        if path is None:
            raise UnknownMessageType(
                f'no definition of message type {msgtype!r}: it is not a standard ROS 2 type '
                'and no share/<package>/msg/<Name>.msg was found under AMENT_PREFIX_PATH '
                f'({os.environ.get("AMENT_PREFIX_PATH", "unset")}); install its interface '
                'package into the environment')
        text = path.read_text(encoding='utf-8')
        pkg = msgtype.split('/')[0]
        for line in text.splitlines():
            match = _FIELD_TYPE.match(line.split('#', 1)[0])
            if not match or '=' in line.split('#', 1)[0]:
                continue
            base = match.group(1)
            if base in _PRIMITIVES:
                continue
            nested = base if '/' in base else f'{pkg}/{base}'
            if nested.count('/') == 1:
                nested = nested.replace('/', '/msg/')
            self._ensure(nested, seen)
        self.store.register(get_types_from_msg(text, msgtype))

    def msgdef(self, msgtype: str) -> tuple[str, str]:
        """(rosbag2 message definition text, RIHS01 type hash) of ``msgtype``."""
        self.ensure(msgtype)
        with self._lock:
            text, _ = self.store.generate_msgdef(msgtype, ros_version=2)
            return text, self.store.hash_rihs01(msgtype)
