"""Resampling a recorded session onto a fixed-rate frame timeline; ROS-free and pure.

The rule, for every stream (joint states, each camera, the commanded action): the value of a
frame at tick ``t`` is the **last value at or before t**, and only if it is at most
``max_age_s`` old. A tick where any required stream has no such value is dropped, and a
dropped tick ends the episode (LeRobot's timestamps within an episode are exactly
``frame_index / fps``, so an episode cannot have holes). The action at ``t`` is the step of
the newest action chunk received at or before ``t`` that the executor would be running:
``k = floor((t - chunk.start) / chunk.period)``, held at its last step once it runs out (the
robot holds its last target), as the chunk executor dispatches it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChunkRecord:
    """One action chunk as the exporter sees it (times in seconds on the session clock)."""

    received: float          # when the chunk reached the robot side (bag time)
    start: float             # time its first step applies (the observation stamp)
    period: float            # seconds per step
    values: np.ndarray       # (horizon, dim)
    revision: int = 0


def frame_ticks(start: float, end: float, fps: float) -> np.ndarray:
    """Tick times ``start + i / fps`` for every i with the tick at or before ``end``."""
    if fps <= 0:
        raise ValueError(f'fps must be > 0, got {fps}')
    if end < start:
        return np.zeros(0)
    n = int(math.floor((end - start) * fps + 1e-9)) + 1
    return start + np.arange(n) / fps


def sample_indices(times: Sequence[float] | np.ndarray, ticks: np.ndarray,
                   max_age_s: float) -> np.ndarray:
    """Index of the last sample at or before each tick, -1 when none or older than max age.

    ``times`` must be sorted ascending.
    """
    times = np.asarray(times, dtype=np.float64)
    idx = np.searchsorted(times, ticks, side='right') - 1
    if len(times):
        age = ticks - times[np.clip(idx, 0, None)]
        idx = np.where((idx >= 0) & (age <= max_age_s + 1e-9), idx, -1)
    else:
        idx = np.full(len(ticks), -1)
    return idx


def chunk_actions(chunks: Sequence[ChunkRecord], ticks: np.ndarray, dim: int,
                  max_age_s: float | None = None) -> np.ndarray:
    """(n, dim) commanded action per tick; NaN rows where no chunk was received yet.

    ``chunks`` sorted by ``received``. ``max_age_s`` (None: no limit) bounds how long a held
    last step stays valid after its chunk ran out.
    """
    out = np.full((len(ticks), dim), np.nan)
    if not chunks:
        return out
    received = np.array([c.received for c in chunks])
    which = np.searchsorted(received, ticks, side='right') - 1
    for i, (tick, ci) in enumerate(zip(ticks, which)):
        if ci < 0:
            continue
        chunk = chunks[ci]
        k = int(math.floor((tick - chunk.start) / chunk.period + 1e-9))
        horizon = len(chunk.values)
        if max_age_s is not None and k >= horizon:
            ran_out = chunk.start + horizon * chunk.period
            if tick - ran_out > max_age_s:
                continue
        out[i] = chunk.values[min(max(k, 0), horizon - 1)]
    return out


def segments(valid: np.ndarray, cuts: Sequence[int] = (),
             min_frames: int = 1) -> list[tuple[int, int]]:
    """Half-open tick ranges of episodes: runs of valid ticks, also cut before each index in
    ``cuts``; runs shorter than ``min_frames`` are dropped."""
    cut = set(int(c) for c in cuts)
    out: list[tuple[int, int]] = []
    begin = None
    for i, ok in enumerate(valid):
        if begin is not None and (not ok or i in cut):
            out.append((begin, i))
            begin = None
        if ok and begin is None:
            begin = i
    if begin is not None:
        out.append((begin, len(valid)))
    return [(a, b) for a, b in out if b - a >= max(1, min_frames)]


def cut_indices(ticks: np.ndarray, times: Sequence[float]) -> list[int]:
    """Tick index where an episode starting at each time begins (first tick at or after it)."""
    return sorted(set(int(i) for i in np.searchsorted(ticks, np.asarray(times), side='left')
                      if 0 < i < len(ticks)))


def snap_forward(frame_times: np.ndarray, t: float) -> int:
    """Index of the first frame at or after ``t``, clamped to the last frame.

    An event is stored on the first frame that can know of it (the rule of the timeline).
    """
    i = int(np.searchsorted(frame_times, t - 1e-9, side='left'))
    return min(i, len(frame_times) - 1)
