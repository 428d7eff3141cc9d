"""The planner's latched state in a file, so a restarted planner resumes where it was; ROS-free.

Written after every published change (one small JSON file, replaced atomically: a crash
mid-write leaves the previous state). A missing file is a fresh start; an unreadable one is
reported and ignored (the planner then learns the revision floor from the executor instead).
"""

from __future__ import annotations

from dataclasses import asdict, fields
import json
import os
from pathlib import Path
import tempfile
from typing import Any

from lerobot_lang_nodes.core.language import LanguageSnapshot

VERSION = 1


class StateFileError(ValueError):
    """The state file exists but cannot be used; the message says why."""


def save(path: str | Path, snap: LanguageSnapshot, extra: dict[str, Any] | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {'version': VERSION, 'context': asdict(snap), **(extra or {})}
    fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', dir=path.parent)
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | Path) -> tuple[LanguageSnapshot, dict[str, Any]] | None:
    """(snapshot, extra keys) from ``path``; None when there is no file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding='utf-8'))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StateFileError(f'{path}: not readable JSON ({exc})') from exc
    if not isinstance(data, dict) or data.get('version') != VERSION:
        raise StateFileError(f'{path}: not a planner state file of version {VERSION}')
    ctx = data.get('context')
    names = {f.name for f in fields(LanguageSnapshot)}
    if not isinstance(ctx, dict) or set(ctx) != names:
        raise StateFileError(f'{path}: context must have exactly the keys {sorted(names)}')
    try:
        snap = LanguageSnapshot(**ctx)
        if not all(isinstance(getattr(snap, k), str) for k in names
                   if k not in ('revision', 'flush_revision')):
            raise TypeError('text fields must be strings')
        if not (isinstance(snap.revision, int) and isinstance(snap.flush_revision, int)
                and 0 <= snap.flush_revision <= snap.revision):
            raise TypeError('revision and flush_revision must be integers, 0 <= flush <= rev')
    except TypeError as exc:
        raise StateFileError(f'{path}: {exc}') from exc
    return snap, {k: v for k, v in data.items() if k not in ('version', 'context')}


__all__ = ['StateFileError', 'load', 'save']
