"""Action-chunk executor: validate, queue and dispatch policy action chunks at the control rate.

The executor is a pure state machine: every method that depends on time takes ``now_s``
explicitly, so the node supplies its clock and the tests supply exact instants.

Rules (see ``ChunkExecutor`` for the details of each):

* A chunk is *invalid* when its action names differ from the robot's (same order), its shape
  disagrees with the names, it is empty or longer than ``max_horizon``, it holds a non-finite
  value, or a value is outside the configured limits. Invalid chunks are rejected with a reason.
* Revisions (ARCHITECTURE.md, "Revision rules"): the executor knows the newest ``revision``
  and the newest ``flush_revision`` (the revision of the latest operator change). A chunk
  computed for a revision older than ``flush_revision`` is stale, and learning a newer
  ``flush_revision`` (from the context or from a chunk) drops every queued action older than
  it. A chunk of an older *subtask* of the current flush epoch is still accepted, unless a
  chunk of a newer revision was accepted already ('superseded'): accepted chunks, and so
  dispatched actions, never go back in revision.
  A chunk without ``flush_revision`` (None) treats its own revision as one (every change
  flushes).
* A chunk is *stale* when its revision is too old (above), when it was
  observed before the last pause, when it arrives while paused, or when time alignment finds
  that all its actions are already in the past. Stale chunks are discarded, never executed.
* ``discarded_stale`` counts chunks, never single actions: a rejected stale submission counts
  one, and a revision change counts one for every distinct chunk that still had queued actions.
* Pause clears the queue; resume restarts from an empty queue; a burst auto-pauses at the first
  tick at or after its deadline (``now_s >= deadline``, so a burst of ``d`` seconds at ``hz``
  dispatches ``d * hz`` actions when ticked on time).
* ``tick`` pops one action per call; after a gap longer than one period it pops
  ``round(elapsed * ctrl_hz)`` actions (at least one, at most the queue) and returns only the
  latest. An empty queue returns ``None`` (the caller holds position; nothing is replayed).
  The first dispatch after a pause, a starvation gap or a clock regression pops exactly one.
* Time alignment: action ``i`` of a chunk is due during ``[stamp + i*period,
  stamp + (i+1)*period)``; on arrival the actions whose slot has fully elapsed are skipped
  (the one due now is kept). It applies to every replace policy.
* Replace policies for an accepted chunk: ``tail`` drops the queue and queues the new chunk;
  ``blend`` pairs the queue and the new chunk position by position, queues
  ``(1 - w) * old + w * new`` over the overlap followed by the rest of the new chunk, and drops
  old actions beyond it (as LeRobot's async-inference aggregation); ``append`` queues after the
  existing actions. If the queue would exceed ``max_queue``, the far-future end is truncated.
* Clock regressions (``now_s`` lower than before, e.g. a simulator reset) keep a burst's
  remaining duration and pull the pause guard back to the new timeline.
* Teleop (``teleop``: a human's leader arm commands, see core/teleop.py): entering it drops
  the queue and sets the pause guard, chunks are refused as stale while in it, and ``tick``
  returns the leader's pose (after the handover slide) or None when the leader is silent for
  longer than ``leader_timeout_s``. Leaving it (resume, burst) sets the pause guard again, so
  nothing the policy observed before the hand-back is played.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .errors import ConfigError, InvalidChunk, config_error
from .teleop import LeaderTracker

logger = logging.getLogger(__name__)

MODE_ACTION = 'action'
MODE_PAUSED = 'paused'
MODE_TELEOP = 'teleop'
MODES = (MODE_ACTION, MODE_PAUSED, MODE_TELEOP)
# Who commands the arm (RuntimeStatus.control_source): the policy's chunks in action mode, a
# human's leader arm in teleop, or nobody (paused, dry run, a silent leader).
CONTROL_POLICY = 'policy'
CONTROL_HUMAN = 'human'
CONTROL_NONE = 'none'
REPLACE_POLICIES = ('tail', 'blend', 'append')

# Tolerance for float error when deciding how many action slots have fully elapsed.
_TIME_EPS = 1e-9
# A chunk observed less than this after a hand-back counts as observed before it.
_HANDBACK_EPS_S = 1e-6

DispatchCallback = Callable[[int, int, int, np.ndarray], None]


@dataclass(frozen=True, eq=False)
class Chunk:
    """H future actions of dimension D, conditioned on one language-context revision."""

    values: np.ndarray
    action_names: tuple[str, ...]
    revision: int
    sequence: int
    stamp_s: float
    period_s: float = 0.0
    instruction: str = ''
    backend: str = ''
    flush_revision: int | None = None  # None: the chunk's own revision (every change flushes)

    def __post_init__(self) -> None:
        try:
            values = np.array(self.values, dtype=np.float64, order='C')
        except (TypeError, ValueError) as exc:
            raise InvalidChunk(
                f'chunk values are not numeric ({exc}); pass a (horizon, dim) array of floats',
                reason=f'values not numeric: {exc}') from exc
        if values.ndim != 2:
            raise InvalidChunk(
                f'chunk values have shape {values.shape}, expected a 2-D (horizon, dim) array; '
                'use Chunk.from_flat for row-major flat values',
                reason=f'values shape {values.shape} is not 2-D')
        # The chunk is shared between the queue and callers: make it truly immutable.
        values.setflags(write=False)
        object.__setattr__(self, 'values', values)
        object.__setattr__(self, 'action_names', tuple(str(n) for n in self.action_names))
        for name in ('revision', 'sequence'):
            raw = getattr(self, name)
            try:
                object.__setattr__(self, name, int(raw))
            except (TypeError, ValueError) as exc:
                raise InvalidChunk(f'chunk {name} must be an integer, got {raw!r}',
                                   reason=f'{name} {raw!r} is not an integer') from exc
        if self.flush_revision is not None:
            try:
                object.__setattr__(self, 'flush_revision', int(self.flush_revision))
            except (TypeError, ValueError) as exc:
                raise InvalidChunk(
                    f'chunk flush_revision must be an integer, got {self.flush_revision!r}',
                    reason=f'flush_revision {self.flush_revision!r} is not an integer') from exc
        for name in ('stamp_s', 'period_s'):
            raw = getattr(self, name)
            try:
                object.__setattr__(self, name, float(raw))
            except (TypeError, ValueError) as exc:
                raise InvalidChunk(f'chunk {name} must be a number, got {raw!r}',
                                   reason=f'{name} {raw!r} is not a number') from exc

    @property
    def horizon(self) -> int:
        """Number of actions in the chunk."""
        return int(self.values.shape[0])

    @property
    def action_dim(self) -> int:
        """Dimension of one action."""
        return int(self.values.shape[1])

    @classmethod
    def from_flat(cls, values: Sequence[float], horizon: int, action_dim: int,
                  **kw: object) -> Chunk:
        """Build a chunk from row-major flat values (as carried by ActionChunk.msg)."""
        if int(horizon) < 1 or int(action_dim) < 1:
            raise InvalidChunk(
                f'chunk horizon={horizon} and action_dim={action_dim} must both be >= 1; '
                'an empty chunk carries no action',
                reason=f'empty chunk (horizon={horizon}, action_dim={action_dim})')
        try:
            flat = np.asarray(values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise InvalidChunk(f'chunk values are not numeric ({exc}); send a flat list of floats',
                               reason=f'values not numeric: {exc}') from exc
        expected = int(horizon) * int(action_dim)
        if flat.size != expected:
            raise InvalidChunk(
                f'chunk has {flat.size} values, expected horizon*action_dim = '
                f'{horizon}*{action_dim} = {expected}; fix the producer so the sizes agree',
                reason=f'{flat.size} values != horizon {horizon} * dim {action_dim}')
        shaped = flat.reshape(int(horizon), int(action_dim))
        return cls(values=shaped, **kw)  # type: ignore[arg-type]


def _as_limits(name: str, limits: Sequence[float] | None, dim: int) -> tuple[float, ...] | None:
    if limits is None:
        return None
    try:
        arr = np.asarray(limits, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise config_error(name, limits, f'{dim} numbers (one per action name)',
                           'use a list of floats or None') from exc
    if arr.size != dim:
        raise config_error(name, list(limits), f'{dim} values (one per action name)',
                           'give one limit per action name, or None to disable')
    if np.isnan(arr).any():
        raise config_error(name, list(limits), 'numbers or +-inf, not NaN',
                           'use inf to leave a dimension unbounded')
    return tuple(float(v) for v in arr)


@dataclass
class ExecutorConfig:
    """Configuration of a ChunkExecutor; validated on construction."""

    action_names: tuple[str, ...]
    ctrl_hz: float = 30.0
    lower_limits: Sequence[float] | None = None
    upper_limits: Sequence[float] | None = None
    max_horizon: int = 1000
    max_queue: int = 1000
    refill_fraction: float = 0.5
    replace: str = 'tail'
    blend_new_weight: float = 0.5
    time_align: bool = True
    start_paused: bool = False
    # Dry run: chunks are validated, queued and played at the control rate as usual, but
    # tick() returns None (hold) and the action is kept as the planned target instead.
    dry_run: bool = False
    # Teleop: a leader silent for longer than this holds the follower (s); at a takeover the
    # follower slides from its pose to the leader's at this speed (rad/s) until within the
    # tolerance (rad), then tracks the leader directly.
    leader_timeout_s: float = 0.25
    teleop_align_speed_rad_s: float = 0.5
    teleop_align_tolerance_rad: float = 0.02
    # A chunk's control period may differ from 1/ctrl_hz by this fraction; the queue plays one
    # action per tick, so a chunk made for another rate would run too fast or too slow.
    period_tolerance: float = 0.02
    # Chunks stamped further ahead than this (on the executor's clock) are refused: a policy
    # stamps the observation it was computed from, which cannot lie in the future.
    max_future_s: float = 1.0
    # Chunks computed from an observation older than this (stamp against the executor's own
    # clock, so no other computer's clock is trusted) are discarded: a chunk delayed by a
    # stalled link is not played after it; 0 disables.
    max_observation_age_s: float = 0.0
    # Rejections are logged on the first one of each kind, then on every Nth with a count.
    log_every: int = 20

    def __post_init__(self) -> None:
        if isinstance(self.action_names, str):
            raise config_error('action_names', self.action_names, 'a sequence of names',
                               "wrap a single name in a list: ['joint']")
        names = tuple(str(n) for n in self.action_names)
        if not names or any(not n for n in names):
            raise config_error('action_names', self.action_names,
                               'at least one non-empty name', 'list the robot action names')
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise config_error('action_names', names, 'unique names',
                               f'remove the duplicates {dupes}')
        self.action_names = names
        if not (isinstance(self.ctrl_hz, (int, float)) and math.isfinite(self.ctrl_hz)
                and self.ctrl_hz > 0):
            raise config_error('ctrl_hz', self.ctrl_hz, 'a finite rate > 0 Hz',
                               'e.g. 50.0 for SO-101 or 20.0 for RoboCasa')
        self.ctrl_hz = float(self.ctrl_hz)
        dim = len(names)
        self.lower_limits = _as_limits('lower_limits', self.lower_limits, dim)
        self.upper_limits = _as_limits('upper_limits', self.upper_limits, dim)
        if self.lower_limits is not None and self.upper_limits is not None:
            bad = [names[i] for i in range(dim) if self.lower_limits[i] > self.upper_limits[i]]
            if bad:
                raise config_error('lower_limits', self.lower_limits,
                                   'lower <= upper for every dimension',
                                   f'swap or fix the limits of {bad}')
        for name in ('max_horizon', 'max_queue'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise config_error(name, value, 'an integer >= 1', 'e.g. 1000')
        for name in ('refill_fraction', 'blend_new_weight'):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise config_error(name, value, 'a number in [0, 1]', 'e.g. 0.5')
            setattr(self, name, float(value))
        if self.replace not in REPLACE_POLICIES:
            raise config_error('replace', self.replace, f'one of {REPLACE_POLICIES}',
                               "use 'tail' unless you need blending or appending")
        for name in ('time_align', 'start_paused', 'dry_run'):
            if not isinstance(getattr(self, name), bool):
                raise config_error(name, getattr(self, name), 'True or False')
        for name in ('period_tolerance', 'max_future_s', 'max_observation_age_s'):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise config_error(name, value, 'a finite number >= 0')
        for name in ('leader_timeout_s', 'teleop_align_speed_rad_s',
                     'teleop_align_tolerance_rad'):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise config_error(name, value, 'a finite number > 0')
        if not isinstance(self.log_every, int) or self.log_every < 1:
            raise config_error('log_every', self.log_every, 'an integer >= 1')


@dataclass(frozen=True)
class SubmitResult:
    """Outcome of ChunkExecutor.submit."""

    accepted: bool
    kind: str  # 'ok' | 'stale' | 'invalid'
    reason: str
    skipped: int = 0  # leading actions dropped by time alignment
    queued: int = 0  # actions of this chunk in the queue after submission


@dataclass(frozen=True)
class ExecutorStatus:
    """Snapshot of the executor's state and counters (mirrors RuntimeStatus.msg)."""

    mode: str
    queue_depth: int
    needs_refill: bool
    context_revision: int
    last_chunk_sequence: int  # chunk of the last dispatched action; -1 before any dispatch
    last_chunk_revision: int  # revision of the last dispatched action; -1 before any dispatch
    dispatched: int  # actions popped from the queue, catch-up skips included
    discarded_stale: int  # chunks (not actions) discarded as stale
    rejected_invalid: int  # chunks rejected as invalid
    starved_ticks: int  # action-mode ticks that found the queue empty
    active_instruction: str  # instruction of the chunk of the last dispatched action
    last_reject_reason: str
    accepted_chunks: int = 0
    last_accepted_sequence: int = -1
    dropped_actions: int = 0  # queued actions removed without dispatch (any cause)
    catchup_skipped: int = 0  # actions popped by catch-up but not returned
    burst_deadline_s: float | None = None
    flush_revision: int = 0  # newest operator change known; older chunks are discarded
    control_period_s: float = 0.0  # 1 / ctrl_hz: the period chunks must be computed for
    dry_run: bool = False  # actions are played without being sent (tick returns None)
    planned: int = 0  # dry run: actions played without being sent
    planned_target: tuple[float, ...] = ()  # dry run: the last action that was not sent
    control_source: str = CONTROL_NONE  # who commands the arm: CONTROL_* (RuntimeStatus)
    teleop_dispatched: int = 0  # leader poses sent to the robot in teleop
    leader_received: int = 0  # leader samples taken
    leader_refused: int = 0  # leader samples refused (missing joints, non-finite, limits)
    leader_silent_ticks: int = 0  # teleop ticks held because the leader was silent
    handover_aligned: bool = True  # the takeover's slide reached the leader's pose
    discarded_old_observation: int = 0  # of discarded_stale: older than max_observation_age_s


class DispatchRecord(NamedTuple):
    """One action returned by ChunkExecutor.tick."""

    chunk_sequence: int
    revision: int
    step_index: int
    action: np.ndarray


class DispatchLog:
    """A bounded in-memory on_dispatch callback that records every returned action."""

    def __init__(self, maxlen: int | None = 100_000) -> None:
        self.records: deque[DispatchRecord] = deque(maxlen=maxlen)

    def __call__(self, chunk_sequence: int, revision: int, step_index: int,
                 action: np.ndarray) -> None:
        self.records.append(DispatchRecord(chunk_sequence, revision, step_index,
                                           np.array(action, dtype=np.float64)))

    def __len__(self) -> int:
        return len(self.records)


class _Entry(NamedTuple):
    sequence: int
    revision: int
    step: int
    action: np.ndarray
    instruction: str


class ChunkExecutor:
    """Queues validated action chunks and dispatches one action per control tick.

    Thread-safe: every public method takes an internal lock, and ``on_dispatch`` is called
    after the lock is released (a callback may call back into the executor).
    ``on_dispatch(chunk_sequence, revision, step_index, action)`` is called once per tick for
    the action actually returned; actions popped by catch-up but not returned are counted in
    ``dispatched`` and ``catchup_skipped`` only. A failing callback is logged, never raised.

    Submitting while paused is rejected as ``kind='stale'`` with ``reason='paused'`` (and
    counted in ``discarded_stale``): pause cleared the queue, and a chunk that was being
    computed when the robot paused must not start moving it later. For the same reason a chunk
    observed (``stamp_s``) before the last pause instant is rejected after resume.
    """

    def __init__(self, cfg: ExecutorConfig, on_dispatch: DispatchCallback | None = None) -> None:
        self.cfg = cfg
        self.on_dispatch = on_dispatch
        self._lock = threading.RLock()
        self._dim = len(cfg.action_names)
        self._period = 1.0 / cfg.ctrl_hz
        self._lower = None if cfg.lower_limits is None else np.asarray(cfg.lower_limits)
        self._upper = None if cfg.upper_limits is None else np.asarray(cfg.upper_limits)
        self._queue: deque[_Entry] = deque()
        self._mode = MODE_PAUSED if cfg.start_paused else MODE_ACTION
        self._revision = 0
        self._flush_revision = 0
        self._newest_chunk_rev = -1  # revision of the newest accepted chunk
        self._deadline: float | None = None
        self._last_dispatch_s: float | None = None
        self._last_now_s: float | None = None
        # Chunks observed before this instant were computed before the last pause.
        self._pause_guard_s = -math.inf
        self._last_horizon = 0
        self._last_seq = -1
        self._last_rev = -1
        self._last_accepted_seq = -1
        self._active_instruction = ''
        self._last_reject = ''
        self._reject_counts: dict[str, int] = {}
        self._dispatched = 0
        self._discarded_stale = 0
        self._old_observation = 0
        self._rejected_invalid = 0
        self._starved = 0
        self._accepted = 0
        self._dropped = 0
        self._catchup_skipped = 0
        self._planned = 0
        self._planned_target: tuple[float, ...] = ()
        self._leader = LeaderTracker(cfg.action_names, cfg.leader_timeout_s,
                                     cfg.teleop_align_speed_rad_s,
                                     cfg.teleop_align_tolerance_rad,
                                     cfg.lower_limits, cfg.upper_limits)
        self._teleop_dispatched = 0

    # ---------------------------------------------------------------- properties

    @property
    def mode(self) -> str:
        """'action', 'paused' or 'teleop'."""
        with self._lock:
            return self._mode

    @property
    def revision(self) -> int:
        """The language-context revision chunks must be conditioned on."""
        with self._lock:
            return self._revision

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    # ---------------------------------------------------------------- submission

    def validate(self, chunk: Chunk) -> str:
        """Return '' when the chunk is executable on this robot, else what is wrong."""
        names = self.cfg.action_names
        values = chunk.values
        if values.ndim != 2:
            return f'values shape {values.shape} is not 2-D (horizon, dim)'
        horizon, dim = values.shape
        if horizon < 1:
            return 'empty chunk: horizon 0, expected at least 1 action'
        if horizon > self.cfg.max_horizon:
            return f'horizon {horizon} exceeds max_horizon {self.cfg.max_horizon}'
        if dim != len(chunk.action_names):
            return (f'action dim {dim} != {len(chunk.action_names)} action names '
                    f'{list(chunk.action_names)}')
        if chunk.action_names != names:
            if sorted(chunk.action_names) == sorted(names):
                return (f'action names in a different order: got {list(chunk.action_names)}, '
                        f'expected {list(names)}')
            missing = [n for n in names if n not in chunk.action_names]
            extra = [n for n in chunk.action_names if n not in names]
            return (f'action names {list(chunk.action_names)} do not match the robot '
                    f'{list(names)} (missing {missing}, unexpected {extra})')
        bad = ~np.isfinite(values)
        if bad.any():
            step, col = (int(i) for i in np.argwhere(bad)[0])
            return (f'non-finite value {values[step, col]!r} at step {step}, '
                    f'dim {col} ({names[col]!r}); {int(bad.sum())} non-finite in total')
        for limits, side, cmp in ((self._lower, 'below lower', np.less),
                                  (self._upper, 'above upper', np.greater)):
            if limits is None:
                continue
            out = cmp(values, limits)
            if out.any():
                step, col = (int(i) for i in np.argwhere(out)[0])
                return (f'value {values[step, col]:.6g} at step {step}, dim {col} '
                        f'({names[col]!r}) is {side} limit {limits[col]:.6g}')
        if not math.isfinite(chunk.stamp_s):
            return f'stamp_s {chunk.stamp_s!r} is not finite'
        if not math.isfinite(chunk.period_s) or chunk.period_s < 0:
            return f'period_s {chunk.period_s!r} must be finite and >= 0 (0 = 1/ctrl_hz)'
        if chunk.period_s and abs(chunk.period_s - self._period) > (
                self.cfg.period_tolerance * self._period):
            return (f'control period {chunk.period_s:.6g} s does not match the executor\'s '
                    f'{self._period:.6g} s (ctrl_hz {self.cfg.ctrl_hz:g}); the executor plays '
                    'one action per tick: compute the chunk at its rate (RuntimeStatus.'
                    'control_period_s) or resample it')
        return ''

    def submit(self, chunk: Chunk, now_s: float) -> SubmitResult:
        """Validate a chunk and merge it into the queue according to ``cfg.replace``."""
        with self._lock:
            self._observe_clock(now_s)
            problem = self.validate(chunk)
            if not problem and chunk.stamp_s > now_s + self.cfg.max_future_s:
                problem = (f'stamped {chunk.stamp_s - now_s:.3f} s in the future (stamp '
                           f'{chunk.stamp_s:.6f}, now {now_s:.6f}, at most '
                           f'{self.cfg.max_future_s:g} s ahead): are the clocks the same '
                           '(use_sim_time on every node)?')
            if problem:
                self._rejected_invalid += 1
                self._last_reject = problem
                self._log_reject('invalid', f'rejected invalid chunk {chunk.sequence}: {problem}')
                return SubmitResult(False, 'invalid', problem)
            flush = chunk.revision if chunk.flush_revision is None else min(
                chunk.flush_revision, chunk.revision)
            if chunk.revision < self._flush_revision:
                return self._stale(chunk, f'stale revision: chunk revision {chunk.revision} '
                                          f'< flush revision {self._flush_revision} (an '
                                          'operator change came after it)')
            self._advance_revision(chunk.revision, flush)
            if chunk.revision < self._newest_chunk_rev:
                return self._stale(chunk, f'superseded: chunk revision {chunk.revision} < '
                                          f'revision {self._newest_chunk_rev} of an accepted '
                                          'chunk')
            if self._mode == MODE_PAUSED:
                return self._stale(chunk, 'paused')
            if self._mode == MODE_TELEOP:
                return self._stale(chunk, 'teleop: a human commands the arm')
            if chunk.stamp_s < self._pause_guard_s:
                return self._stale(chunk, f'observed before pause: stamp {chunk.stamp_s:.6f} '
                                          f'< pause at {self._pause_guard_s:.6f}')
            period = chunk.period_s or self._period
            skipped = 0
            if self.cfg.time_align and now_s > chunk.stamp_s:
                # Action i is due during [stamp + i*period, stamp + (i+1)*period): only slots
                # that have fully elapsed are skipped, so the action due now is kept.
                slots = (now_s - chunk.stamp_s) / period + _TIME_EPS
                if not math.isfinite(slots) or slots >= chunk.horizon:
                    return self._stale(
                        chunk, f'expired: all {chunk.horizon} actions are in the past '
                               f'(age {now_s - chunk.stamp_s:.3f} s >= '
                               f'{chunk.horizon} * {period:.4f} s): the chunk took longer '
                               'to arrive than it lasts; a longer chunk (n_action_steps) or a '
                               'faster device')
                skipped = int(math.floor(slots))
            # Not wholly expired (a long chunk), yet computed from an observation too old.
            limit = self.cfg.max_observation_age_s
            if limit > 0 and now_s - chunk.stamp_s > limit:
                self._old_observation += 1
                return self._stale(chunk, f'observation too old: {now_s - chunk.stamp_s:.3f} s '
                                          f'> max_observation_age_s {limit:g} s (a delayed '
                                          'link?)')
            new = [_Entry(chunk.sequence, chunk.revision, i, chunk.values[i], chunk.instruction)
                   for i in range(skipped, chunk.horizon)]
            self._merge(new)
            truncated = 0
            if len(self._queue) > self.cfg.max_queue:
                truncated = len(self._queue) - self.cfg.max_queue
                for _ in range(truncated):
                    self._queue.pop()  # the far future goes first; the next chunk refills it
                self._dropped += truncated
            self._accepted += 1
            self._newest_chunk_rev = max(self._newest_chunk_rev, chunk.revision)
            self._last_accepted_seq = chunk.sequence
            self._last_horizon = chunk.horizon
            queued = sum(1 for e in self._queue if e.sequence == chunk.sequence)
            reason = 'ok' if not truncated else f'ok; queue full, {truncated} actions dropped'
            return SubmitResult(True, 'ok', reason, skipped=skipped, queued=queued)

    def record_invalid(self, reason: str) -> SubmitResult:
        """Count a chunk that could not even be built (e.g. a malformed message) as invalid."""
        with self._lock:
            self._rejected_invalid += 1
            self._last_reject = reason
            self._log_reject('invalid', f'rejected malformed chunk: {reason}')
        return SubmitResult(False, 'invalid', reason)

    def _stale(self, chunk: Chunk, reason: str) -> SubmitResult:
        self._discarded_stale += 1
        self._last_reject = reason
        self._log_reject('stale', f'discarded stale chunk {chunk.sequence}: {reason}')
        return SubmitResult(False, 'stale', reason)

    def _log_reject(self, kind: str, text: str) -> None:
        """One line per refused chunk, throttled: the first of a kind, then every Nth."""
        n = self._reject_counts[kind] = self._reject_counts.get(kind, 0) + 1
        if n != 1 and n % self.cfg.log_every:
            return
        suffix = '' if n == 1 else f' ({n} {kind} chunks so far)'
        # Stale chunks are routine after an operator change; invalid ones are a policy bug.
        logger.log(logging.WARNING if kind == 'invalid' else logging.INFO, text + suffix)

    def _merge(self, new: list[_Entry]) -> None:
        if self.cfg.replace == 'append':
            self._queue.extend(new)
            return
        old = list(self._queue)
        self._dropped += max(0, len(old) - len(new)) if self.cfg.replace == 'blend' else len(old)
        self._queue.clear()
        if self.cfg.replace == 'tail':
            self._queue.extend(new)
            return
        w = self.cfg.blend_new_weight
        for k, entry in enumerate(new):
            if k < len(old):
                # Pair by position: both queues start at the action due now (time alignment).
                blended = (1.0 - w) * old[k].action + w * entry.action
                entry = entry._replace(action=blended)
            self._queue.append(entry)

    # ---------------------------------------------------------------- context / mode

    @property
    def flush_revision(self) -> int:
        """The newest operator change known: chunks of older revisions are discarded."""
        with self._lock:
            return self._flush_revision

    def set_revision(self, revision: int, flush_revision: int | None = None) -> None:
        """Learn the context's revision and flush revision (None: ``revision`` flushes).

        Queued actions older than a newer flush revision are dropped; a planner subtask change
        (``revision`` newer, flush revision unchanged) keeps the queue.
        """
        with self._lock:
            revision = int(revision)
            self._advance_revision(revision, revision if flush_revision is None
                                   else min(int(flush_revision), revision))

    def _advance_revision(self, revision: int, flush_revision: int) -> None:
        if flush_revision > self._flush_revision:
            stale = [e for e in self._queue if e.revision < flush_revision]
            if stale:
                self._discarded_stale += len({e.sequence for e in stale})
                self._dropped += len(stale)
                self._queue = deque(e for e in self._queue if e.revision >= flush_revision)
                logger.info('flush at revision %s (was %s): dropped %s queued actions',
                            flush_revision, self._flush_revision, len(stale))
            self._flush_revision = flush_revision
        self._revision = max(self._revision, revision)

    def pause(self, now_s: float | None = None) -> None:
        """Stop dispatching and clear the queue; ``now_s`` defaults to the last time seen."""
        with self._lock:
            if now_s is not None:
                self._observe_clock(now_s)
            self._pause_locked(now_s)

    def _pause_locked(self, now_s: float | None) -> None:
        self._drop_all()
        self._mode = MODE_PAUSED
        self._deadline = None
        self._last_dispatch_s = None
        at = now_s if now_s is not None else self._last_now_s
        if at is not None:
            self._pause_guard_s = max(self._pause_guard_s, float(at))

    def resume(self, now_s: float | None = None) -> None:
        """Dispatch continuously (cancels a pending burst deadline); from teleop this is the
        hand-back to the policy (``now_s`` defaults to the last time seen)."""
        with self._lock:
            if now_s is not None:
                self._observe_clock(now_s)
            self._leave_teleop(now_s)
            if self._mode != MODE_ACTION:
                self._last_dispatch_s = None
            self._mode = MODE_ACTION
            self._deadline = None

    def burst(self, duration_s: float, now_s: float) -> None:
        """Run for ``duration_s`` seconds from ``now_s``, then auto-pause."""
        if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s)
                and duration_s > 0):
            raise config_error('duration_s', duration_s, 'a finite number of seconds > 0',
                               'use resume() to run without a deadline')
        with self._lock:
            self._observe_clock(now_s)
            self._leave_teleop(now_s)
            if self._mode != MODE_ACTION:
                self._last_dispatch_s = None
            self._mode = MODE_ACTION
            self._deadline = float(now_s) + float(duration_s)

    # ---------------------------------------------------------------- teleop

    def teleop(self, now_s: float, follower: Sequence[float] | None = None) -> None:
        """Take over: the leader arm commands from now on (the policy's queue is dropped).

        ``follower`` (the follower's present pose, action order) starts the handover slide
        from there to the leader's pose; None tracks the leader at once (it was driven to the
        follower's pose first, or the caller knows both agree).
        """
        with self._lock:
            self._observe_clock(now_s)
            previous = self._mode
            self._drop_all()
            self._mode = MODE_TELEOP
            self._deadline = None
            self._last_dispatch_s = None
            # Chunks the policy computed before the takeover must never play after it.
            self._pause_guard_s = max(self._pause_guard_s, float(now_s))
            self._leader.start(now_s, follower)
        if previous != MODE_TELEOP:
            logger.info('takeover: %s -> teleop (a human commands the arm)', previous)

    def set_leader(self, names: Sequence[str], positions: Sequence[float],
                   now_s: float) -> str:
        """One leader sample (joint names, radians) received at ``now_s``; '' when taken,
        else why it was refused (it is then counted and never tracked)."""
        with self._lock:
            return self._leader.update(names, positions, now_s)

    def _leave_teleop(self, now_s: float | None) -> None:
        if self._mode != MODE_TELEOP:
            return
        at = now_s if now_s is not None else self._last_now_s
        if at is not None:
            # Nothing observed while the human commanded is played by the policy, not even an
            # observation of the hand-back's own instant (a simulator's clock moves in steps;
            # a stamp in whole nanoseconds may read that instant rounded up).
            self._pause_guard_s = max(self._pause_guard_s, float(at) + _HANDBACK_EPS_S)
        self._mode = MODE_PAUSED  # the caller sets the new mode
        logger.info('hand-back: teleop -> policy (chunks observed before %s are stale)',
                    'now' if at is None else f'{float(at):.3f}')

    def clear(self) -> None:
        """Drop every queued action without changing the mode."""
        with self._lock:
            self._drop_all()
            self._last_dispatch_s = None

    def _drop_all(self) -> None:
        self._dropped += len(self._queue)
        self._queue.clear()

    def _observe_clock(self, now_s: float) -> None:
        now_s = float(now_s)
        if not math.isfinite(now_s):
            raise ConfigError(f'now_s: got {now_s!r}, expected a finite time in seconds; '
                              'pass the node clock reading', field='now_s')
        last = self._last_now_s
        if last is not None and now_s < last:
            # The clock went backwards (e.g. a simulator reset): keep a burst's remaining
            # duration instead of letting it run until the old timeline's deadline, and pull
            # the pause guard back so chunks of the new timeline are not all rejected.
            if self._deadline is not None:
                self._deadline = now_s + max(0.0, self._deadline - last)
            self._pause_guard_s = min(self._pause_guard_s, now_s)
            self._last_dispatch_s = None
            logger.warning('clock went backwards: %.6f -> %.6f', last, now_s)
        self._last_now_s = now_s

    # ---------------------------------------------------------------- dispatch

    def tick(self, now_s: float) -> np.ndarray | None:
        """Return the action to send now (a float64 copy), or None to hold position."""
        with self._lock:
            self._observe_clock(now_s)
            if self._mode == MODE_TELEOP:
                return self._tick_teleop(now_s)
            if self._mode != MODE_ACTION:
                return None
            if self._deadline is not None and now_s >= self._deadline:
                logger.info('burst deadline %.3f reached at %.3f: pausing', self._deadline, now_s)
                self._pause_locked(now_s)
                return None
            if not self._queue:
                self._starved += 1
                # The next action after a starvation gap is not a catch-up.
                self._last_dispatch_s = None
                return None
            n = 1
            if self._last_dispatch_s is not None:
                elapsed = now_s - self._last_dispatch_s
                if elapsed > self._period:
                    due = elapsed * self.cfg.ctrl_hz
                    # Compare before rounding: a huge clock jump must not overflow round().
                    n = len(self._queue) if due >= len(self._queue) else max(1, round(due))
            for _ in range(n):
                entry = self._queue.popleft()
            self._catchup_skipped += n - 1
            self._last_dispatch_s = float(now_s)
            self._last_seq = entry.sequence
            self._last_rev = entry.revision
            self._active_instruction = entry.instruction
            action = np.array(entry.action, dtype=np.float64)
            if self.cfg.dry_run:  # played on time, never sent: the robot holds
                self._planned += n
                self._planned_target = tuple(float(v) for v in action)
                return None
            self._dispatched += n
            callback = self.on_dispatch
        if callback is not None:
            try:
                callback(entry.sequence, entry.revision, entry.step, action.copy())
            except Exception:  # noqa: BLE001 - a logging hook must never stop the control loop
                logger.exception('on_dispatch callback failed')
        return action

    def _tick_teleop(self, now_s: float) -> np.ndarray | None:
        target = self._leader.target(now_s)
        if target is None:
            return None  # silent leader: hold the last safe goal
        if self.cfg.dry_run:
            self._planned += 1
            self._planned_target = tuple(float(v) for v in target)
            return None
        self._teleop_dispatched += 1
        callback = self.on_dispatch
        if callback is not None:
            try:  # chunk 0: no chunk, the leader's pose
                callback(0, self._revision, self._teleop_dispatched, target.copy())
            except Exception:  # noqa: BLE001 - a logging hook must never stop the control loop
                logger.exception('on_dispatch callback failed')
        return target

    # ---------------------------------------------------------------- status

    def needs_refill(self) -> bool:
        """True when the policy should start the next inference (never while paused)."""
        with self._lock:
            if self._mode != MODE_ACTION:
                return False
            depth = len(self._queue)
            return depth == 0 or depth < self.cfg.refill_fraction * self._last_horizon

    @property
    def control_source(self) -> str:
        """Who commands the arm now: CONTROL_POLICY, CONTROL_HUMAN or CONTROL_NONE."""
        with self._lock:
            return self._control_source_locked()

    def _control_source_locked(self) -> str:
        # A starved queue keeps the policy in control (the arm holds its last target between
        # chunks); a dry run sends nothing, so nobody commands the arm.
        if self._mode == MODE_ACTION and not self.cfg.dry_run:
            return CONTROL_POLICY
        if (self._mode == MODE_TELEOP and not self.cfg.dry_run and self._last_now_s is not None
                and self._leader.fresh(self._last_now_s)):
            return CONTROL_HUMAN
        return CONTROL_NONE

    def status(self) -> ExecutorStatus:
        """A consistent snapshot of mode, queue and counters."""
        with self._lock:
            return ExecutorStatus(
                mode=self._mode,
                queue_depth=len(self._queue),
                needs_refill=self.needs_refill(),
                context_revision=self._revision,
                last_chunk_sequence=self._last_seq,
                last_chunk_revision=self._last_rev,
                dispatched=self._dispatched,
                discarded_stale=self._discarded_stale,
                rejected_invalid=self._rejected_invalid,
                starved_ticks=self._starved,
                active_instruction=self._active_instruction,
                last_reject_reason=self._last_reject,
                accepted_chunks=self._accepted,
                last_accepted_sequence=self._last_accepted_seq,
                dropped_actions=self._dropped,
                catchup_skipped=self._catchup_skipped,
                burst_deadline_s=self._deadline,
                flush_revision=self._flush_revision, control_period_s=self._period,
                dry_run=self.cfg.dry_run, planned=self._planned,
                planned_target=self._planned_target,
                control_source=self._control_source_locked(),
                teleop_dispatched=self._teleop_dispatched,
                leader_received=self._leader.received, leader_refused=self._leader.refused,
                leader_silent_ticks=self._leader.silent_ticks,
                handover_aligned=self._leader.aligned,
                discarded_old_observation=self._old_observation,
            )
