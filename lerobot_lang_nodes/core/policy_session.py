"""ROS-free policy session: what the policy infers for, and what becomes of each result.

The `policy` node is a shell around this class: its subscriptions hand in the language
context (or task), the executor's RuntimeStatus and the joint state as plain values; its
inference thread asks ``start()`` whether and for what to infer, runs the backend, and hands
the result to ``finished()`` (or ``failed()``), which says whether a chunk is to be published
and with which sequence, revision and stamp; ``diagnostics()`` is its /diagnostics status.

A result is kept only if it is still useful, in this order:

* ``timeout``: the inference took longer than ``inference_timeout_s``;
* ``expired``: every action of the chunk is already in the past (``_expired``);
* ``discarded``: an operator change (a newer flush revision) came during the inference; a
  result for the previous subtask of the same flush epoch is published (the executor may
  still run it, see the revision rules);
* else ``published``.

When to start is ``core/inference_gate.py``, the real-time chunking books ``core/rtc.py``,
the record of each inference ``core/inference_file.py``. Two clocks are injected:
``monotonic`` (rate limit, status freshness, latency, the inference log) and ``clock``, the
node's (ROS time: sim time in simulation). Observations are stamped by the robot side, whose
clock another computer's need not agree with: every age (expiry, RTC's delay, freshness) is
measured on ``robot_clock`` (core/freshness.py), the newest robot stamp advanced by ``clock``.

Freshness: an inference does not start on an observation older than
``max_observation_age_s`` on the robot's clock (a stalled or congested link, a robot that
stopped publishing); each refused observation is counted (``stale_observations``) and the
next wake-up looks again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
import logging
import threading
import time
from typing import Any

import numpy as np

from lerobot_lang_nodes.core.control_loop import ThrottledLog, python_logger_emit
from lerobot_lang_nodes.core.freshness import RobotClock
from lerobot_lang_nodes.core.inference_file import InferenceFile
from lerobot_lang_nodes.core.inference_gate import ExecutorView, InferenceGate
from lerobot_lang_nodes.core.prompts import action_instruction
from lerobot_lang_nodes.core.rtc import ChunkContinuity

logger = logging.getLogger(__name__)

# A chunk that the executor has not acknowledged after this long was lost or rejected.
ACK_TIMEOUT_S = 1.0
LATENCY_WINDOW = 100  # inferences behind the latency percentiles on /diagnostics
CONDITIONS = ('context', 'task')


@dataclass(frozen=True)
class SessionConfig:
    condition_on: str = 'context'  # 'context': the planner's subtask (else task); 'task'
    max_inference_hz: float = 20.0
    status_timeout_s: float = 2.0  # infer only while the last status is newer than this
    inference_timeout_s: float = 5.0  # 0 disables
    rtc: bool = False  # the backend is guided by the executing chunk (core/rtc.py)
    ack_timeout_s: float = ACK_TIMEOUT_S
    # Do not infer on an observation older than this on the robot's clock; 0 disables.
    max_observation_age_s: float = 0.2
    # Nor on camera frames the model needs (``image_stamps`` of observe()) older than this:
    # frames come slower than joint states (a camera's rate, a congested link); 0 disables.
    max_image_age_s: float = 1.0

    def __post_init__(self) -> None:
        for name in ('max_observation_age_s', 'max_image_age_s'):
            if getattr(self, name) < 0:
                raise ValueError(f'{name} is {getattr(self, name)}; expected >= 0 (0 disables)')
        if self.condition_on not in CONDITIONS:
            raise ValueError(f'condition_on is {self.condition_on!r}; expected one of '
                             f'{CONDITIONS}')


@dataclass(frozen=True)
class StatusReport:
    """The RuntimeStatus fields the policy acts on."""

    acting: bool  # mode == action
    needs_refill: bool
    revision: int  # context_revision
    flush_revision: int = 0  # 0: not announced (every revision is an operator change)
    last_accepted_sequence: int = 0
    last_chunk_sequence: int = 0  # chunk of the last dispatched action
    queue_depth: int = 0
    control_period_s: float = 0.0  # 0: not announced
    stamp_s: float | None = None  # the executor's clock (robot side); None: not stamped


@dataclass(frozen=True)
class Joints:
    names: tuple[str, ...]
    positions: np.ndarray
    stamp_s: float  # the executor's clock


@dataclass(frozen=True)
class Inference:
    """One inference handed out by ``start()``: the backend's observation and what it is for."""

    instruction: str
    revision: int
    flush_revision: int
    context_wall: float | None  # monotonic arrival of the context's revision (None: task)
    observation: dict[str, Any]
    start: float  # monotonic, when it was handed out


@dataclass(frozen=True)
class ChunkToPublish:
    values: np.ndarray
    sequence: int
    revision: int
    flush_revision: int
    stamp_s: float  # when row 0 is due
    period_s: float  # 0: the executor's own
    instruction: str


@dataclass
class _Counters:
    inferences: int = 0
    chunks_published: int = 0
    failures: int = 0
    timeouts: int = 0
    discarded_in_flight: int = 0
    expired: int = 0  # chunks already in the past when inferred, not published
    rtc_guided: int = 0  # inferences given the executing chunk's left-over
    stale_observations: int = 0  # observations too old to infer on (max_observation_age_s)
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))


class PolicySession:
    """The policy's decisions; thread-safe (subscriptions, inference thread, diagnostics)."""

    def __init__(self, config: SessionConfig, *,
                 monotonic: Callable[[], float] = time.monotonic,
                 clock: Callable[[], float] = time.time,
                 emit: Callable[[int, str], None] | None = None,
                 inference_log: InferenceFile | None = None) -> None:
        self.config = config
        self._mono = monotonic
        self.robot_clock = RobotClock(clock)
        self._clock = self.robot_clock.now
        self._stale_stamp: float | None = None  # the last observation refused as too old
        self._age_last = 0.0  # age of the last observation an inference started on
        self.log = ThrottledLog(emit or python_logger_emit(logger), monotonic)
        self._inference_log = inference_log
        self._lock = threading.Lock()
        self.gate = InferenceGate(config.max_inference_hz, config.ack_timeout_s)
        self.continuity = ChunkContinuity()
        self.counts = _Counters()
        self._context: tuple[str, int, int] | None = None  # (instruction, revision, flush)
        self._context_wall: float | None = None
        self._task = ''
        self._task_revision = 0
        self._status: StatusReport | None = None
        self._status_wall = 0.0
        self._joints: Joints | None = None
        self._sequence = 0
        self._infer_started: float | None = None
        self._expired_last = False
        self._rtc_delay = 0
        self.last_error = ''
        self.last_outcome = ''  # 'ok' | 'failed' | 'timeout' | 'expired' of the last inference

    # --- inputs -------------------------------------------------------------------------
    def on_context(self, task: str, subtask: str, revision: int, flush_revision: int) -> None:
        """A LanguageContext (``flush_revision`` 0 from the publisher: every revision flushes)."""
        with self._lock:
            if self._context is None or revision != self._context[1]:
                self._context_wall = self._mono()
            self._context = (action_instruction((task, subtask)), int(revision),
                             int(flush_revision) or int(revision))

    def on_task(self, text: str) -> None:
        """A task for a task-conditioned policy: each new text is a new revision."""
        with self._lock:
            if text != self._task:
                self._task = text
                self._task_revision += 1

    def on_status(self, status: StatusReport) -> None:
        with self._lock:
            self._status = status
            self._status_wall = self._mono()
            if status.stamp_s is not None:
                self.robot_clock.observe(status.stamp_s)
            self.gate.acknowledged(status.last_accepted_sequence)

    def on_joints(self, joints: Joints) -> None:
        with self._lock:
            self._joints = joints
            self.robot_clock.observe(joints.stamp_s)

    # --- inference ----------------------------------------------------------------------
    def _instruction(self) -> tuple[str, int, int]:
        """(instruction, revision, flush revision) the next chunk is conditioned on."""
        if self.config.condition_on == 'task':
            return self._task, self._task_revision, self._task_revision
        return self._context if self._context is not None else ('', 0, 0)

    def wait_s(self, longest: float) -> float:
        """How long the inference thread may sleep when no input wakes it."""
        with self._lock:
            return self.gate.wait_s(self._mono(), longest)

    def start(self, ready: bool = True,
              observe: Callable[[], Mapping[str, Any]] | None = None) -> Inference | None:
        """The inference to run now, or None. ``ready``: the backend can run (loaded, the
        cameras it cannot run without have sent frames); ``observe()`` adds the observation's
        other inputs (images, ground truth), called only when an inference starts."""
        with self._lock:
            st, joints = self._status, self._joints
            if not ready or st is None or joints is None:
                return None
            instruction, revision, flush = self._instruction()
            if not instruction:
                return None
            now = self._mono()
            view = ExecutorView(acting=st.acting, needs_refill=st.needs_refill,
                                revision=st.revision,
                                fresh=now - self._status_wall <= self.config.status_timeout_s,
                                flush_revision=st.flush_revision or None)
            if not self.gate.should_start(now, view, revision, flush):
                return None
            age = self._clock() - joints.stamp_s
            limit = self.config.max_observation_age_s
            if limit > 0 and age > limit:
                self._refuse_stale(joints.stamp_s, age, limit)
                return None
            period = float(st.control_period_s)
            observation: dict[str, Any] = {
                'instruction': instruction,
                'joint_names': list(joints.names),
                'joint_positions': np.asarray(joints.positions, dtype=np.float64),
                **(observe() if observe is not None else {}),
                'stamp_s': joints.stamp_s,
                'control_period_s': period or None,
                'clock_start_s': self._clock(),
            }
            frames = observation.get('image_stamps') or {}
            limit = self.config.max_image_age_s
            if frames and limit > 0:
                camera, oldest = min(frames.items(), key=lambda kv: kv[1])
                image_age = self._clock() - oldest
                if image_age > limit:
                    self._refuse_stale(oldest, image_age, limit, f'camera {camera}\'s frame',
                                       'max_image_age_s')
                    return None
            self._age_last = age
            if self.last_outcome == 'stale':
                self.last_outcome = ''
            self.gate.started(now, revision, flush)
            # Row 0 is due at the observation's time, or with RTC where it joins the chunk
            # being played.
            observation['chunk_stamp_s'] = observation['stamp_s']
            if self.config.rtc:
                playing = int(st.last_chunk_sequence) if st.queue_depth > 0 else -1
                cont = self.continuity.continuation(observation['clock_start_s'], revision,
                                                    playing, period)
                observation['rtc'] = cont
                if cont is not None:
                    observation['chunk_stamp_s'] = cont.stamp_s
                    self.counts.rtc_guided += 1
                    self._rtc_delay = cont.inference_delay
            start = self._mono()
            self._infer_started = start
            context_wall = self._context_wall if self.config.condition_on == 'context' else None
            return Inference(instruction, revision, flush, context_wall, observation, start)

    def _refuse_stale(self, stamp: float, age: float, limit: float,
                      what: str = 'observation', bound: str = 'max_observation_age_s') -> None:
        """Count an observation too old to infer on, once per observation (lock held)."""
        self.last_outcome = 'stale'
        self._age_last = age
        if stamp == self._stale_stamp:
            return
        self._stale_stamp = stamp
        self.counts.stale_observations += 1
        self.log(logging.WARNING, f'{what} {age:.3f} s old on the robot\'s clock > {bound} '
                 f'{limit:g} s: not inferring on it (a stalled or congested link?); '
                 f'{self.counts.stale_observations} so far', key='stale')

    def failed(self, job: Inference, exc: BaseException) -> None:
        """The backend raised: counted, logged; the next refill retries."""
        end = self._mono()
        with self._lock:
            self._infer_started = None
            self.counts.failures += 1
            self.last_outcome = 'failed'
            self.last_error = f'{type(exc).__name__}: {exc}'
            self._record(job, end, 'failed')
            self.log(logging.ERROR, f'inference failed ({self.counts.failures} so far): '
                     f'{self.last_error}', key='failed')

    def finished(self, job: Inference, values: Any,
                 model_actions: np.ndarray | None = None) -> ChunkToPublish | None:
        """The backend's result; the chunk to publish, or None when it is of no use any more.

        ``model_actions``: the same rows in the model's space, for RTC's next left-over.
        """
        # The backend's end: the log's latency_s is the latency /diagnostics reports.
        end = self._mono()
        values = np.asarray(values, dtype=np.float64)
        elapsed = end - job.start
        timeout = self.config.inference_timeout_s
        obs = job.observation
        with self._lock:
            self._infer_started = None
            self.counts.inferences += 1
            self.counts.latencies.append(elapsed)
            # On the executor's clock (sim time in simulation): RTC's delay is in its steps.
            self.continuity.record_latency(self._clock() - obs['clock_start_s'])
            if timeout > 0 and elapsed > timeout:
                self.counts.timeouts += 1
                self.last_outcome = 'timeout'
                self._record(job, end, 'timeout')
                self.log(logging.WARNING, f'inference took {elapsed:.2f} s > '
                         f'inference_timeout_s {timeout} s: chunk discarded '
                         f'({self.counts.timeouts} so far)', key='timeout')
                return None
            if self._expired(obs, values, elapsed):
                self._record(job, end, 'expired')
                return None
            self.last_outcome = 'ok'
            current = self._instruction()[2]
            if current > job.flush_revision:  # an operator change came during inference
                self.counts.discarded_in_flight += 1
                self._record(job, end, 'discarded')
                self.log(logging.INFO, f'discarded a chunk computed for revision '
                         f'{job.revision}; an operator change came at revision {current}',
                         period_s=0.0)
                return None
            self._sequence += 1
            period = obs['control_period_s'] or 0.0
            self.gate.published(self._sequence, self._mono())
            if self.config.rtc and model_actions is not None:
                self.continuity.published(model_actions, obs['chunk_stamp_s'], period,
                                          job.revision, self._sequence)
            self._record(job, end, 'published', self._sequence)
            return ChunkToPublish(values, self._sequence, job.revision, job.flush_revision,
                                  obs['chunk_stamp_s'], period, job.instruction)

    def sent(self) -> None:
        """The chunk ``finished()`` returned went out."""
        with self._lock:
            self.counts.chunks_published += 1

    def send_failed(self, chunk: ChunkToPublish, error: str) -> None:
        """Publishing it failed: counted, and the next refill retries without awaiting it."""
        with self._lock:
            self.counts.failures += 1
            self.gate.publish_failed()
            self.log(logging.ERROR, f'publishing chunk {chunk.sequence} failed: {error}',
                     key='send')

    def _expired(self, observation: Mapping[str, Any], values: np.ndarray,
                 elapsed: float) -> bool:
        """Drop a chunk whose every action is already in the past (call with the lock held).

        The executor would discard it as expired, and the gate would then wait for an ack
        that never comes (ACK_TIMEOUT_S) while the arm holds: a one-off slow inference (a
        model's first call, a busy CPU) cost the arm a second. Dropped here, the next
        inference starts at once on a fresh observation. Two in a row are published anyway,
        so that a clock that disagrees with the executor's never silences the policy (the
        executor judges, and says a slower device is the cause).
        """
        period = float(observation.get('control_period_s') or 0.0)
        age = self._clock() - float(observation['chunk_stamp_s'])
        if period <= 0.0 or values.ndim != 2 or age < values.shape[0] * period \
                or self._expired_last:
            self._expired_last = False
            return False
        self._expired_last = True
        self.counts.expired += 1
        self.last_outcome = 'expired'
        self.log(logging.WARNING,
                 f'inference took {elapsed:.3f} s: every action of the chunk was in the past '
                 f'(observation {age:.3f} s old >= {values.shape[0]} x {period:.4f} s); '
                 f'dropped, inferring again on a fresh observation ({self.counts.expired} so '
                 'far)', key='expired')
        return True

    def _record(self, job: Inference, end: float, outcome: str,
                sequence: int | None = None) -> None:
        if self._inference_log is None:
            return
        cont = job.observation.get('rtc')
        self._inference_log.write(
            revision=job.revision, flush_revision=job.flush_revision,
            context_wall=job.context_wall, start=job.start, end=end,
            stamp=job.observation['chunk_stamp_s'], outcome=outcome, sequence=sequence,
            rtc_delay=cont.inference_delay if cont is not None else None)

    # --- diagnostics --------------------------------------------------------------------
    def diagnostics(self) -> tuple[str, str, dict[str, Any]]:
        """(level, message, values) of the inference loop, for /diagnostics."""
        with self._lock:
            c = self.counts
            lat = np.asarray(c.latencies) * 1000.0
            running = (self._mono() - self._infer_started
                       if self._infer_started is not None else 0.0)
            values: dict[str, Any] = {
                'inferences': c.inferences, 'chunks_published': c.chunks_published,
                'failures': c.failures, 'timeouts': c.timeouts,
                'discarded_in_flight': c.discarded_in_flight, 'expired_chunks': c.expired,
                'latency_last_ms': float(lat[-1]) if lat.size else 0.0,
                'latency_p50_ms': float(np.median(lat)) if lat.size else 0.0,
                'latency_mean_ms': float(lat.mean()) if lat.size else 0.0,
                'inference_running_s': running, 'last_error': self.last_error,
                'rtc_guided': c.rtc_guided, 'rtc_delay_steps': self._rtc_delay,
                'stale_observations': c.stale_observations,
                'observation_age_last_ms': self._age_last * 1000.0,
                'max_observation_age_s': self.config.max_observation_age_s,
            }
            outcome, published = self.last_outcome, c.chunks_published
        timeout = self.config.inference_timeout_s
        if timeout > 0 and running > timeout:
            return 'warn', f'inference running for {running:.1f} s (timeout {timeout} s)', values
        if outcome == 'failed':
            return 'warn', f'last inference failed: {values["last_error"]}', values
        if outcome == 'timeout':
            return 'warn', 'last inference exceeded inference_timeout_s', values
        if outcome == 'stale':
            return 'warn', (f'observation {values["observation_age_last_ms"]:.0f} ms old > '
                            'max_observation_age_s or max_image_age_s: not inferring'), values
        if outcome == 'expired':
            return 'warn', 'last chunk expired before it could be published (inference slower ' \
                'than a chunk lasts)', values
        return 'ok', f'{published} chunks published', values


__all__ = ['ACK_TIMEOUT_S', 'ChunkToPublish', 'Inference', 'Joints', 'PolicySession',
           'SessionConfig', 'StatusReport']
