"""Real-time chunking seen from the policy node: what the next inference is told about the
chunk the executor is playing, and where the new chunk joins it.

A flow-matching policy (SmolVLA, PI0, PI0.5) with real-time chunking (Black et al. 2025;
LeRobot's ``lerobot.policies.rtc``) is given, with each inference, the actions of the
executing chunk that have not been played yet (``left_over``, in the model's own normalised
space) and the number of control steps the inference is expected to take
(``inference_delay``). LeRobot's guidance makes the new chunk's first ``inference_delay``
actions follow ``left_over`` and blends towards its own plan up to ``execution_horizon``, so
the two chunks join without a jump. The policy guides; this module only keeps the books:

- the executing chunk is the last one the policy published, provided the executor accepted
  it and is playing it (``RuntimeStatus.last_chunk_sequence``) for the same revision;
- action ``i`` of a chunk stamped ``s`` is due at ``s + i * period`` (the executor's time
  alignment), so at ``now`` the first action not yet played is ``k0 = floor((now - s) /
  period) + 1`` and ``left_over = actions[k0:]``;
- the new chunk's row 0 stands for ``left_over[0]``: it is stamped ``s + k0 * period``, and
  the executor, aligning by stamps, starts it at the action due when it arrives (the first
  ``inference_delay`` rows, played meanwhile from the old chunk, are skipped), so a late
  result neither repeats nor skips an action;
- ``inference_delay`` is ``ceil(latency / period)`` for the largest of the recent latencies
  (LeRobot's rollout estimates it the same way: ``LatencyTracker.max()``), never more than
  ``left_over`` holds.

Times are the caller's clock (the node's ROS clock: sim time in simulation), in seconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
import math

import numpy as np

LATENCY_WINDOW = 20  # inferences whose latency bounds the next delay


@dataclass(frozen=True)
class Continuation:
    """What the next inference is told about the executing chunk."""

    left_over: np.ndarray  # (n, action_dim) model-space actions not yet played, n >= 1
    inference_delay: int  # control steps the inference is expected to take, 0..n
    stamp_s: float  # when left_over[0] is due: the stamp of the chunk the inference makes
    sequence: int  # the executing chunk's sequence number


@dataclass(frozen=True)
class _Published:
    actions: np.ndarray
    stamp_s: float
    period_s: float
    revision: int
    sequence: int


class ChunkContinuity:
    """The last published chunk in model space and the recent inference latencies."""

    def __init__(self, window: int = LATENCY_WINDOW) -> None:
        self._latencies: deque[float] = deque(maxlen=window)
        self._last: _Published | None = None

    def record_latency(self, seconds: float) -> None:
        """An inference's duration on the caller's clock (negative clock jumps count as 0)."""
        if math.isfinite(seconds):
            self._latencies.append(max(0.0, float(seconds)))

    def delay_steps(self, period_s: float) -> int:
        """Control steps the next inference is expected to take (0 before any was timed)."""
        if not self._latencies or period_s <= 0:
            return 0
        return math.ceil(max(self._latencies) / period_s - 1e-9)

    def published(self, model_actions: np.ndarray, stamp_s: float, period_s: float,
                  revision: int, sequence: int) -> None:
        """The chunk just published: its rows in model space, as the executor will play them."""
        actions = np.asarray(model_actions, dtype=np.float32)
        if actions.ndim != 2 or period_s <= 0:
            self._last = None
            return
        self._last = _Published(actions.copy(), float(stamp_s), float(period_s), int(revision),
                                int(sequence))

    def forget(self) -> None:
        """Nothing is executing any more (a reset, a pause, an operator change)."""
        self._last = None

    def continuation(self, now_s: float, revision: int, playing_sequence: int,
                     period_s: float) -> Continuation | None:
        """What an inference starting at ``now_s`` for ``revision`` continues, or None.

        None when the executor is not playing the last published chunk (``playing_sequence``:
        the chunk of its last dispatched action), the revision changed, the period changed,
        or every action of it has been played.
        """
        last = self._last
        if (last is None or last.revision != revision or last.sequence != playing_sequence
                or not math.isclose(last.period_s, period_s, rel_tol=0.02)):
            return None
        elapsed = now_s - last.stamp_s
        k0 = 0 if elapsed < 0 else math.floor(elapsed / last.period_s + 1e-9) + 1
        left_over = last.actions[k0:]
        if not len(left_over):
            return None
        delay = min(self.delay_steps(last.period_s), len(left_over))
        return Continuation(left_over=left_over, inference_delay=delay,
                            stamp_s=last.stamp_s + k0 * last.period_s, sequence=last.sequence)


__all__ = ['ChunkContinuity', 'Continuation', 'LATENCY_WINDOW']
