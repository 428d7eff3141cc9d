"""When the policy starts its next inference: the refill rule seen from the policy's side.

The executor reports (RuntimeStatus) its mode, whether its queue is below the refill threshold,
the language revision it runs and the last chunk it accepted. The gate starts an inference when
the executor needs one, one chunk at a time (a published chunk is awaited until acknowledged),
at most ``max_hz`` for refills, and at once for the first chunk after an operator change (a
newer flush revision): the executor drops its queue then, so every tick of delay there is a
tick the arm holds still. A planner subtask change (revision newer, flush revision unchanged)
keeps the queue running, and its first chunk starts as soon as the policy is free (within
``max_hz``), without waiting for the refill edge: the executor merges it into the queue
(``replace``), so the arm moves on to the new subtask one inference after the planner
decided, never idle in between. Without a flush revision (None) every revision counts as an
operator change.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExecutorView:
    """What the policy knows of the executor from its latest RuntimeStatus."""

    acting: bool          # mode == action
    needs_refill: bool
    revision: int         # language revision the executor runs
    fresh: bool = True    # the status is recent enough to act on
    flush_revision: int | None = None  # newest operator change it knows (None: revision)


class InferenceGate:
    """Decides when to start an inference; all times are the caller's monotonic seconds."""

    def __init__(self, max_hz: float, ack_timeout_s: float = 1.0) -> None:
        if max_hz <= 0:
            raise ValueError(f'max_hz must be > 0, got {max_hz}')
        self.min_period_s = 1.0 / max_hz
        self.ack_timeout_s = ack_timeout_s
        self._awaiting: tuple[int, float] | None = None  # (sequence, time published)
        self._last_start = float('-inf')
        self._last_flush = -1  # flush revision of the last inference started
        self._last_revision = -1  # revision of the last inference started

    @property
    def awaiting(self) -> int | None:
        """Sequence of the published chunk not yet acknowledged, if any."""
        return self._awaiting[0] if self._awaiting is not None else None

    def should_start(self, now: float, executor: ExecutorView, revision: int,
                     flush_revision: int | None = None) -> bool:
        """True when an inference for ``revision`` (of ``flush_revision``) should start now."""
        if not (executor.fresh and executor.acting):
            return False
        flush = revision if flush_revision is None else flush_revision
        known = executor.revision if executor.flush_revision is None else executor.flush_revision
        urgent = flush > self._last_flush
        # The planner moved on within the epoch: the queued chunk is for the old subtask.
        newer_subtask = flush == self._last_flush and revision > self._last_revision
        # An operator change newer than the executor's empties its queue as soon as it hears
        # of it: start that chunk without waiting for the status that says so.
        if not executor.needs_refill and flush <= known and not newer_subtask:
            return False
        if self._awaiting is not None:
            # A chunk older than an operator change or a subtask change is rejected as stale
            # or superseded, or at least outdated: waiting for its ack would delay the arm.
            if not (urgent or newer_subtask) and now - self._awaiting[1] < self.ack_timeout_s:
                return False
            self._awaiting = None  # acknowledged late, lost, rejected or moot
        return urgent or now - self._last_start >= self.min_period_s

    def wait_s(self, now: float, longest: float) -> float:
        """How long a caller that polls ``should_start`` may sleep, at most ``longest``: until
        the rate limit lets the next inference start when that comes sooner, so a start it
        refused only for the rate (a newer subtask right after a refill started) is retried
        the moment it is allowed rather than at the next poll."""
        until = self._last_start + self.min_period_s - now
        return min(longest, until) if until > 0 else longest

    def started(self, now: float, revision: int, flush_revision: int | None = None) -> None:
        self._last_start = now
        self._last_revision = max(self._last_revision, revision)
        self._last_flush = revision if flush_revision is None else flush_revision

    def published(self, sequence: int, now: float) -> None:
        self._awaiting = (sequence, now)

    def publish_failed(self) -> None:
        self._awaiting = None

    def acknowledged(self, last_accepted_sequence: int) -> None:
        """The executor accepted every chunk up to this sequence."""
        if self._awaiting is not None and last_accepted_sequence >= self._awaiting[0]:
            self._awaiting = None


__all__ = ['ExecutorView', 'InferenceGate']
