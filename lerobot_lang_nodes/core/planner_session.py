"""The planner's decisions, ROS-free: the planner node is a shell around a PlannerSession.

The node turns messages into the plain calls below (``on_task``, ``on_interjection``,
``on_truth``, ``on_status``, ``on_chunk``, ``on_observation``, ``on_outcome``) and publishes
what the session decides: the language state after every job (``after_job``), speech
(``on_speech``), and its counters on /diagnostics (``values``). Everything in between lives
here and is tested with injected time and a scripted backend:

* one worker thread runs every job in order (the backend is never called concurrently, and
  each input is applied in the order it arrived);
* the backend's load state (``loading`` -> ``ready`` | ``failed``);
* operator text refused with a reason (length, control characters), ``direct:`` parsing,
  interjections coalesced (one waits; a newer one replaces its text);
* simulator resets ordered against the commands sent after them (core/scene_reset.py);
* chunk boundaries (a chunk, or the executor's refill edge) and looks on new observations;
* the executor's revision followed (a restart never reuses one), not while a second graph's
  executor interleaves (core/shared_domain.py);
* RunTask: whether anything can judge a goal, and when it has ended;
* VQA: whether an answer can come before the robot is paused, busy refusal.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from lerobot_lang_nodes.core.control_loop import ThrottledLog
from lerobot_lang_nodes.core.high_level import HighLevelPlanner
from lerobot_lang_nodes.core.inputs import DEFAULT_MAX_TEXT_CHARS, text_problem
from lerobot_lang_nodes.core.language import MODES, LanguageSnapshot, LanguageState
from lerobot_lang_nodes.core.scene_reset import Command, ResetOrdering
from lerobot_lang_nodes.core.shared_domain import LiveSources

DIRECT_PREFIX = 'direct:'
# Why an executor is paused when the planner did not pause it (RunTask feedback).
PAUSE_REASON = ('the executor is paused: by /pause, or at start on the real arm until the '
                'first /resume')
LOAD_STATES = ('loading', 'ready', 'failed')

Log = Callable[[int, str], None]


@dataclass(frozen=True)
class SessionConfig:
    """What the session decides with (the node's parameters of the same names)."""

    backend: str = 'scripted'
    model_path: str = ''
    regen_on: str = 'refill'  # 'refill' | 'chunk'
    image_cameras: tuple[str, ...] = ()
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    vqa_max_pending: int = 2
    revision_wait_s: float = 10.0
    vqa_timeout_s: float = 60.0


class BackendSlot:
    """The configured backend, built on the worker thread; a TextGenerator meanwhile too.

    ``generate`` raises until the backend is ready, so a job that reaches the core before the
    load ended (or after it failed) is an ordinary counted failure.
    """

    def __init__(self) -> None:
        self.impl: Any = None
        self.state = 'loading'  # one of LOAD_STATES
        self.error = ''
        self.load_time_s = 0.0

    def generate(self, kind: str, messages: list[dict], observation: Any) -> str:
        if self.impl is None:
            raise RuntimeError(self.error or 'the planner backend is still loading')
        return self.impl.generate(kind, messages, observation)


@dataclass(frozen=True)
class Verdict:
    """How a RunTask goal ended: ``end`` is 'succeeded', 'aborted' or 'canceled'."""

    end: str
    message: str


class PlannerSession:
    """Inputs in, language state and speech out; one worker thread runs the jobs in order.

    ``observations`` has ``version(sources)``, ``images()``, ``image(camera)``,
    ``ground_truth()`` and ``joints()`` (the node's LatestObservations). ``clock`` is the node
    clock (sim time in simulation), ``monotonic`` wall-clock pacing. ``after_job`` is called
    after every job (the node publishes the language state if it changed; False stops the
    worker).
    """

    def __init__(self, planner: HighLevelPlanner, generator: BackendSlot,
                 cfg: SessionConfig, observations: Any, *,
                 clock: Callable[[], float], log: Log,
                 after_job: Callable[[], bool] = lambda: True,
                 on_speech: Callable[[str], None] = lambda _text: None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.planner = planner
        self.state: LanguageState = planner.state
        self.generator = generator
        self.cfg = cfg
        self.observations = observations
        self._clock = clock
        self._log = log
        self._throttled = ThrottledLog(log, monotonic)
        self._after_job = after_job
        self._on_speech = on_speech
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._jobs: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._closing = threading.Event()
        # Counters (on /diagnostics).
        self.refused_inputs = 0
        self.vqa_busy = 0
        self.interjections_coalesced = 0
        self.scene_resets = 0
        # Inputs waiting for the worker.
        self._pending_interjection: str | None = None
        self._look_queued = False
        # Executor status.
        self._refill_seen = False
        self._last_boundary = float('-inf')
        self._chunk_revision = -1  # newest context revision of a chunk seen
        self._first_status = threading.Event()
        self._first_revision = 0
        self._status_sources = LiveSources()
        self.pause_reason = PAUSE_REASON
        # Simulator resets and the commands they must not clear (the worker's only).
        self._sim_seed: Any = None
        self._resets = ResetOrdering()
        # Task outcome (a simulator's, or an operator's) and the subtasks of the current task.
        self._outcome: tuple[bool, int, str, str] | None = None  # success, revision, goal, detail
        self._outcome_at = float('-inf')
        self.subtask_history: list[str] = []
        self._vqa_slots = threading.BoundedSemaphore(cfg.vqa_max_pending)

    # --- worker -------------------------------------------------------------------------
    def start(self) -> None:
        self._worker = threading.Thread(target=self._work, name='planner-generation',
                                        daemon=True)
        self._worker.start()

    def close(self, timeout_s: float = 5.0) -> None:
        self._closing.set()  # a job waiting for the executor's first status gives up
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(timeout=timeout_s)

    def submit(self, fn: Callable, *args: Any) -> concurrent.futures.Future:
        """Run ``fn(*args)`` on the worker after every job submitted before it."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fn, args, future))
        return future

    def queued_jobs(self) -> int:
        return self._jobs.qsize()

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            fn, args, future = item
            try:
                future.set_result(fn(*args))
            except Exception as exc:  # noqa: BLE001 - a bad job must not kill the worker
                self._log(logging.ERROR, f'{getattr(fn, "__name__", fn)} failed: '
                                         f'{type(exc).__name__}: {exc}')
                future.set_exception(exc)
            if not self._after_job():
                return

    # --- backend ------------------------------------------------------------------------
    def load(self, factory: Callable[[], Any]) -> concurrent.futures.Future:
        """Build the backend on the worker (the first job: every later one waits for it)."""
        return self.submit(self._job_load, factory)

    def _job_load(self, factory: Callable[[], Any]) -> None:
        gen = self.generator
        start = self._monotonic()
        where = f' from {self.cfg.model_path!r}' if self.cfg.model_path else ''
        self._log(logging.INFO, f'loading planner backend {self.cfg.backend!r}{where}')
        try:
            impl = factory()
        except Exception as exc:  # noqa: BLE001 - model loading runs third-party code; report
            gen.error = (f'planner backend {self.cfg.backend!r} failed to load: '
                         f'{type(exc).__name__}: {exc}')
            gen.state = 'failed'
            gen.load_time_s = self._monotonic() - start
            self._log(logging.ERROR, f'{gen.error}. The node stays up without a model: fix '
                                     'model_path (or the backend parameters) and restart it')
            return
        gen.impl = impl
        gen.load_time_s = self._monotonic() - start
        gen.state = 'ready'
        self._log(logging.INFO, f'planner backend {self.cfg.backend!r} ready in '
                                f'{gen.load_time_s:.1f} s')

    def _load_failed(self, what: str) -> bool:
        """True (and one throttled log line) when the backend failed to load."""
        if self.generator.state != 'failed':
            return False
        self._throttled(logging.ERROR, f'{what} ignored: {self.generator.error}',
                        key='load failed', period_s=30.0)
        return True

    # --- operator text --------------------------------------------------------------------
    def refuse_text(self, text: str, what: str) -> str:
        """Why ``text`` is refused ('' if acceptable); a refusal is counted and logged."""
        problem = text_problem(text, self.cfg.max_text_chars, what)
        if problem:
            with self._lock:
                self.refused_inputs += 1
            self._throttled(logging.WARNING, f'{problem} ({self.refused_inputs} refused so '
                                             'far)', key=what)
        return problem

    def on_task(self, text: str, sent_ns: int | None = None) -> None:
        """A task text; ``sent_ns`` is when it was sent (wall clock, ns; None: now)."""
        if self.refuse_text(text, 'task'):
            return
        sent_ns = sent_ns or time.time_ns()
        text = text.strip()
        if text.lower().startswith(DIRECT_PREFIX):
            # `direct: X` with a task set: X becomes the active subtask, the task stays.
            self.submit(self._job_direct_subtask, text[len(DIRECT_PREFIX):].strip(), sent_ns)
            return
        self.submit(self._job_set_task, text, False, sent_ns)

    def on_interjection(self, text: str) -> None:
        if not text.strip():
            self._log(logging.WARNING, 'ignored an empty interjection')
            return
        if self.refuse_text(text, 'interjection'):
            return
        with self._lock:
            waiting = self._pending_interjection is not None
            self._pending_interjection = text
            if waiting:  # newest wins: the queued job answers this text instead
                self.interjections_coalesced += 1
        if waiting:
            self._throttled(logging.INFO, 'interjection replaced the one still waiting '
                                          f'(newest wins; {self.interjections_coalesced} so '
                                          'far)', key='coalesced')
            return
        self.submit(self._job_pending_interjection)

    def _job_pending_interjection(self) -> None:
        with self._lock:
            text, self._pending_interjection = self._pending_interjection, None
        if text is not None:
            self._job_interject(text)

    # --- jobs that change the task --------------------------------------------------------
    def _job_set_task(self, text: str, direct: bool, sent_ns: int | None = None,
                      restart: bool = False) -> None:
        self._resets.note('task', text, direct, sent_ns)
        self.planner.set_task(text, direct_subtask=direct, restart=restart)
        self.subtask_history = [self.state.subtask] if self.state.subtask else []
        self._log(logging.INFO, f'task: {text!r}' + (' (direct subtask)' if direct else ''))
        if text and not self.planner.direct and not self._load_failed('subtask generation'):
            self.planner.regenerate(self._clock(), self.observation())

    def _job_direct_subtask(self, text: str, sent_ns: int | None = None) -> None:
        task = self.state.task
        if not task:  # nothing to keep: the text is task and subtask
            self._job_set_task(text, True, sent_ns)
            return
        self._resets.note('direct', text, True, sent_ns)
        # Same task: only the mode changes (an interjection's plan stays).
        self.planner.set_task(task, direct_subtask=True, restate=False, subtask=text)
        self._log(logging.INFO, f'subtask (direct): {text!r}; task stays {task!r}')

    def _job_interject(self, text: str) -> None:
        if self._load_failed(f'interjection {text!r}'):
            return
        plan, speech = self.planner.interject(text, self.observation())
        self._log(logging.INFO, f'interjection {text!r} -> plan {plan!r}, speech {speech!r}')
        if speech:
            self._on_speech(speech)
        if plan and not self.planner.direct:
            # Re-plan now rather than at the next throttled boundary: the operator is waiting,
            # and the new subtask is an operator change (the queue is flushed).
            self.planner.regenerate(self._clock(), self.observation(), flush=True)

    # --- simulator resets -------------------------------------------------------------
    def on_truth(self, truth: Mapping, sent_ns: int | None) -> None:
        """Ground truth, already the current observation; its seed changes on every reset.

        The simulator stamps the reset (``reset_ns``, wall clock) before its reset service
        answers, so a command sent after the answer is newer. Without that stamp the
        sample's source time stands in for it (late by as much as a replaced sample).
        """
        seed = truth.get('seed')
        stamp = truth.get('reset_ns')
        if isinstance(stamp, int) and stamp > 0:
            sent_ns = stamp
        with self._lock:
            previous, self._sim_seed = self._sim_seed, seed
        if previous is not None and seed != previous:
            self.submit(self._job_sim_reset, seed, sent_ns)

    def _job_sim_reset(self, seed: Any, reset_ns: int | None) -> None:
        # A new scene: the finished task and its memory belong to the old one; a command
        # sent after the reset (that reached this worker first) starts over on the new scene.
        later = self._resets.reset(reset_ns)
        self.subtask_history = []
        if not later:
            self.planner.set_task('', direct_subtask=False)
            self.scene_resets += 1
            self._log(logging.INFO, f'simulator reset (seed {seed}): task and memory '
                                    'cleared; send a new task on /task')
            return
        first, rest = later[0], later[1:]
        if first.kind == 'task':  # one step: a RunTask goal never sees an empty task
            self._job_set_task(first.text, first.direct, first.sent_ns, restart=True)
        else:
            self.planner.set_task('', direct_subtask=False)
            self._job_direct_subtask(first.text, first.sent_ns)
        for command in rest:
            self._replay(command)
        self.scene_resets += 1
        self._log(logging.INFO, f'simulator reset (seed {seed}): task and memory cleared; '
                                f'kept {len(later)} command(s) sent after the reset: task '
                                f'{self.state.task!r}, started over on the new scene')

    def _replay(self, command: Command) -> None:
        if command.kind == 'task':
            self._job_set_task(command.text, command.direct, command.sent_ns)
        else:
            self._job_direct_subtask(command.text, command.sent_ns)

    # --- observations and boundaries ------------------------------------------------------
    def observation(self) -> dict[str, Any]:
        """What the generator sees: latest images, simulator truth, the language state, and
        the arm's latest joint state (``joint_names``, ``joint_positions``) where one came."""
        out = {'images': self.observations.images(),
               'ground_truth': self.observations.ground_truth(),
               'language': self.state.snapshot(), 'time_s': self._clock()}
        joints = self.observations.joints()
        if joints is not None:
            out['joint_names'], out['joint_positions'] = joints
        return out

    def _look_sources(self) -> tuple[str, ...] | None:
        """The observations the backend decides from: its ``observes`` (the scripted planner:
        the simulator's ground truth), else the frames of ``image_cameras``; None = unknown
        (every look counts as new)."""
        observes = getattr(self.generator.impl, 'observes', None)
        if observes is not None:
            return tuple(observes)
        return tuple(self.cfg.image_cameras) or None

    def _observed(self) -> tuple[int, ...] | None:
        """Versions of the look sources; None before any arrived (nothing to wait for)."""
        sources = self._look_sources()
        version = self.observations.version(sources) if sources else ()
        return version if any(version) else None

    def on_observation(self, source: str) -> None:
        """Something new to see: a boundary left pending for want of news is looked at now."""
        sources = self._look_sources()
        if sources is None or source not in sources or self.generator.state != 'ready':
            return
        if self.planner.direct or not self.state.task or self.state.mode == 'paused':
            return
        if not self.planner.throttle.due(self._clock()):
            return
        with self._lock:
            if self._look_queued:
                return
            self._look_queued = True
        self.submit(self._job_look)

    def _job_look(self) -> None:
        with self._lock:
            self._look_queued = False
        observed = self._observed()
        self.planner.look(self._clock(), self.observation(), observed)

    def on_chunk(self, context_revision: int) -> None:
        """An action chunk was published for ``context_revision``."""
        if self.cfg.regen_on == 'chunk':
            self.submit(self._job_chunk_boundary)
            return
        # refill: the first chunk of a newer revision (a subtask or task change) started off
        # the refill cadence, at once after the change: it is a chunk boundary too, as it
        # would be counted with regen_on chunk, so a short subtask is looked at again after
        # its own chunk instead of after the next refill.
        with self._lock:
            newer = context_revision > self._chunk_revision
            self._chunk_revision = max(self._chunk_revision, int(context_revision))
        if newer:
            self.submit(self._job_chunk_boundary)

    def _job_chunk_boundary(self) -> None:
        if self.generator.state == 'failed':
            return  # reported once at load and on /diagnostics; a boundary is no news
        # The observation's version is read first: what the generator sees is as new or newer.
        observed = self._observed()
        self.planner.on_chunk_boundary(self._clock(), self.observation(), observed)

    # --- executor status --------------------------------------------------------------
    def on_status(self, context_revision: int, mode: str, needs_refill: bool,
                  source: Hashable = '') -> None:
        """One runtime_status from the executor ``source`` (its publisher)."""
        with self._lock:
            self._status_sources.note(source)
            one_executor = self._status_sources.single()
        if not self._first_status.is_set():
            self._first_revision = int(context_revision)
            self._first_status.set()
        if context_revision > self.state.revision and one_executor:
            # Never follow another graph's executor: two planners would ratchet each other.
            self.submit(self._job_revision_floor, int(context_revision))
        if mode in MODES and mode != self.state.mode:
            if mode == 'action':
                self.pause_reason = PAUSE_REASON
            self.submit(self._job_set_mode, mode)
        if self.cfg.regen_on != 'refill':
            return
        # In teleop no chunk boundary comes (the policy is idle): the planner still follows
        # the operator's demonstration at its throttled rate, as with a queue that stays empty.
        needs_refill = needs_refill or mode == 'teleop'
        now = self._monotonic()
        interval = self.planner.throttle.min_interval_s
        with self._lock:
            rising = needs_refill and not self._refill_seen
            # A queue that stays empty (no chunk arrives) raises no edge: look again at the
            # throttled rate, so the planner still notices a subtask done.
            stuck = needs_refill and now - self._last_boundary >= interval
            self._refill_seen = bool(needs_refill)
            if rising or stuck:
                self._last_boundary = now
        if rising or stuck:
            self.submit(self._job_chunk_boundary)

    def rival_executors(self) -> int:
        """Executors interleaving on the status topic (0 unless a second graph is live)."""
        with self._lock:
            return self._status_sources.rivals()

    def start_at_executor_revision(self, executor_present: Callable[[], bool]) -> None:
        """Before any input: learn the executor's revision (a restart must not reuse one)."""
        if self.cfg.revision_wait_s > 0:
            self.submit(self._job_revision_start, executor_present)

    def _wait_first_status(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s  # a real wait, whatever clock is injected
        while not self._first_status.wait(0.05):
            if self._closing.is_set() or time.monotonic() >= deadline:
                return False
        return True

    def _job_revision_start(self, executor_present: Callable[[], bool]) -> None:
        half = self.cfg.revision_wait_s / 2
        if not self._wait_first_status(half):
            if self._closing.is_set() or not executor_present():
                return  # shutting down, or no executor yet: a fresh system starts at 0
            if not self._wait_first_status(half):
                if self._closing.is_set():
                    return
                self._log(logging.WARNING,
                          f'no runtime_status within {self.cfg.revision_wait_s:.0f} s although '
                          'an executor publishes it; starting at revision 0')
                return
        if self._first_revision > 0:
            self._job_revision_floor(self._first_revision)

    def _job_revision_floor(self, revision: int) -> None:
        if self.state.advance_past(revision):
            self._log(logging.WARNING,
                      f'the executor is at revision {revision}, newer than this planner\'s (a '
                      f'restart without state_file?): continuing at {self.state.revision}, so '
                      'every chunk from before the restart is stale')

    def set_mode(self, mode: str) -> concurrent.futures.Future:
        return self.submit(self._job_set_mode, mode)

    def _job_set_mode(self, mode: str) -> None:
        if self.state.set_mode(mode):
            self._log(logging.INFO, f'run mode: {mode}')

    # --- what was published ---------------------------------------------------------------
    def note_published(self, snap: LanguageSnapshot) -> None:
        """The node published ``snap``: a new subtask joins the current task's history."""
        if snap.subtask and (not self.subtask_history
                             or self.subtask_history[-1] != snap.subtask):
            self.subtask_history.append(snap.subtask)

    # --- RunTask ------------------------------------------------------------------------
    def on_outcome(self, success: bool, context_revision: int, goal: str, detail: str) -> None:
        with self._lock:
            self._outcome = (bool(success), int(context_revision), goal, detail)
            self._outcome_at = self._clock()

    def start_goal(self, task: str, direct: bool) -> concurrent.futures.Future:
        """Set a RunTask goal's task (sent now: a reset answered before it does not clear it)."""
        return self.submit(self._job_set_task, task.strip(), bool(direct), time.time_ns())

    @staticmethod
    def unjudged_goal_problem(time_limit_s: float, judge_present: bool,
                              outcome_topic: str, task: str) -> str:
        """Why a goal cannot end by itself ('' if it can): no limit and nothing judges it."""
        if time_limit_s > 0 or judge_present:
            return ''
        return (f'nothing judges success on this graph (no publisher on {outcome_topic}; the '
                'real arm has no success detector): give time_limit_s, or judge the task '
                'yourself while it runs: `ros2 topic pub --once --keep-alive 5 '
                f'--qos-durability transient_local --qos-reliability reliable {outcome_topic} '
                f'lerobot_lang_msgs/msg/TaskOutcome "{{goal: \'{task.strip()}\', success: '
                'true}"`')

    def judge(self, task: str, start_rev: int, start_s: float, time_limit_s: float,
              cancel_requested: bool = False) -> Verdict | None:
        """How a running goal ended, or None while it runs."""
        if cancel_requested:
            return Verdict('canceled', 'canceled')
        snap = self.state.snapshot()
        if snap.task != task.strip():
            return Verdict('aborted', f'task replaced by {snap.task!r}')
        with self._lock:
            outcome, outcome_at = self._outcome, self._outcome_at
        if outcome is not None:
            success, revision, goal, detail = outcome
            # The simulator judges the planner's context (revision); an operator judges by
            # the task's text (revision 0) while the goal runs.
            if success and (revision >= start_rev or (
                    revision == 0 and goal.strip() == task.strip() and outcome_at >= start_s)):
                return Verdict('succeeded', f'succeeded: {detail}')
        if time_limit_s > 0 and self._clock() - start_s > time_limit_s:
            return Verdict('aborted', f'time limit {time_limit_s:.1f} s reached')
        return None

    def progress(self, snap: LanguageSnapshot, resume_service: str) -> str:
        """RunTask's progress line: the subtask, or that the robot is paused, why, and how to
        go on (a goal sent to a paused executor otherwise just sits)."""
        if snap.mode != 'paused':
            return f'subtask {len(self.subtask_history)}: {snap.subtask}'
        return (f'paused ({self.pause_reason}): the robot holds; resume with `ros2 service '
                f'call {resume_service} std_srvs/srv/Trigger` or `lerobot-lang resume`; next '
                f'subtask {len(self.subtask_history)}: {snap.subtask}')

    # --- VQA ------------------------------------------------------------------------------
    def vqa_slot(self) -> bool:
        """Take one of ``vqa_max_pending`` slots (release with ``vqa_done``); False = busy."""
        if self._vqa_slots.acquire(blocking=False):
            return True
        with self._lock:
            self.vqa_busy += 1
        return False

    def vqa_done(self) -> None:
        self._vqa_slots.release()

    def vqa_problem(self, question: str, camera: str) -> str:
        """Why no answer can come ('' if one can), checked before the robot is paused: no
        frame yet, or the backend's own ``vqa_problem`` hook."""
        if self.observations.image(camera) is None:
            return f'no image received yet from camera {camera!r}'
        check = getattr(self.generator.impl, 'vqa_problem', None)
        if not callable(check):
            return ''
        future = self.submit(lambda: check(question, self.observation()))
        try:
            return str(future.result(timeout=10.0) or '')
        except concurrent.futures.TimeoutError:
            return ''  # busy: let the answer itself tell

    def paused_for_question(self, question: str) -> None:
        self.pause_reason = f'paused to answer the question {question!r}'

    def answer_vqa(self, question: str, camera: str) -> str:
        """The backend's answer from ``camera``'s latest frame ('' if none in time)."""
        image = self.observations.image(camera)
        future = self.submit(lambda: self.planner.answer_vqa(question, image, camera,
                                                             self.observation()))
        try:
            return future.result(timeout=self.cfg.vqa_timeout_s)
        except concurrent.futures.TimeoutError:
            return ''

    # --- diagnostics ----------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """Every counter of the session and its core, and the backend's own values."""
        gen = self.generator
        snap = self.state.snapshot()
        values: dict[str, Any] = {
            'backend': self.cfg.backend, 'model_path': self.cfg.model_path,
            'load_state': gen.state, 'load_error': gen.error, 'load_time_s': gen.load_time_s,
            'revision': snap.revision, 'mode': snap.mode, 'task': snap.task,
            'subtask': snap.subtask, 'refused_inputs': self.refused_inputs,
            'vqa_busy': self.vqa_busy, 'interjections_coalesced': self.interjections_coalesced,
            'queued_jobs': self.queued_jobs(), 'scene_seed': self._sim_seed,
            'scene_resets': self.scene_resets, 'commands_kept_over_reset': self._resets.kept}
        values.update(self.planner.stats())
        backend_values = getattr(gen.impl, 'diagnostics', None)
        if callable(backend_values):
            values.update(backend_values())
        return values

    def health(self) -> tuple[str, str]:
        """(level, message) of the backend: failed load, loading, failed generations."""
        gen = self.generator
        if gen.state == 'failed':
            return 'error', gen.error
        if gen.state == 'loading':
            return 'warn', 'loading the planner backend'
        failures = sum(self.planner.failures.values())
        if failures:
            return 'warn', (f'{failures} failed generation(s) ('
                            f'{sum(self.planner.timeouts.values())} timeouts); see failures.*')
        return 'ok', 'ready'
