"""`planner` node: task -> subtasks, memory, interjection replies and VQA answers over ROS.

All language logic lives in core.high_level.HighLevelPlanner; this node feeds it messages and
publishes its state. Generation runs on one worker thread, never on an executor thread.

The backend is built on that worker too, as its first job: a model that takes seconds to load
does not delay the node's start, jobs queue behind the load, and a checkpoint that cannot be
loaded leaves the node up, reporting the error on /diagnostics (level ERROR) and in every
RunTask / VQA answer, instead of exiting into a restart loop.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from std_msgs.msg import String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.action import RunTask
from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus, TaskOutcome
from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes import paths
from lerobot_lang_nodes.backends.registry import known, load_backend
from lerobot_lang_nodes.core import planner_state, prompts
from lerobot_lang_nodes.core.control_loop import ThrottledLog
from lerobot_lang_nodes.core.inputs import DEFAULT_MAX_TEXT_CHARS, text_problem
from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.language import LanguageSnapshot, LanguageState
from lerobot_lang_nodes.core.scene_reset import Command, ResetOrdering
from lerobot_lang_nodes.core.shared_domain import LiveSources
from lerobot_lang_nodes.nodes import qos, runner
from lerobot_lang_nodes.nodes.commands import CommandSubscription, sample_key
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.observations import LatestObservations
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters

logger = logging.getLogger(__name__)

DIRECT_PREFIX = 'direct:'
# Why an executor is paused when the planner did not pause it (RunTask feedback).
PAUSE_REASON = ('the executor is paused: by /pause, or at start on the real arm until the '
                'first /resume')


@dataclass(frozen=True)
class PlannerConfig:
    """Parameters of the planner node."""

    backend: str = field(default='scripted', metadata={
        'doc': 'Planner backend (text generator); see backends/registry.py.'})
    model_path: str = field(default='', metadata={
        'doc': 'Checkpoint directory or file for model backends (`transformers`: a directory '
               'with config.json, weights and tokenizer/processor, a .gguf file, or a hub id '
               'when online); unused by `scripted`.'})
    model_kind: str = field(default='auto', metadata={
        'doc': 'transformers: vlm (AutoModelForImageTextToText + AutoProcessor), text '
               '(AutoModelForCausalLM + AutoTokenizer), or auto (from config.json model_type; '
               'GGUF files are text).', 'choices': ('auto', 'vlm', 'text')})
    gguf_file: str = field(default='', metadata={
        'doc': 'transformers: GGUF file name inside model_path (or give the .gguf path as '
               'model_path); empty = not GGUF.'})
    device: str = field(default='auto', metadata={
        'doc': 'transformers: cpu, cuda, cuda:N, or auto (cuda when available).'})
    dtype: str = field(default='auto', metadata={
        'doc': 'transformers: weight dtype; auto = bfloat16 on a GPU that supports it, else '
               'float32.', 'choices': ('auto', 'float32', 'bfloat16', 'float16')})
    image_cameras: tuple[str, ...] = field(default=('front',), metadata={
        'doc': 'transformers (vision-language): cameras whose latest frame goes into the '
               'subtask and interjection prompts (VQA uses the camera asked about); each must '
               'be in `cameras`; empty = text-only prompts.'})
    image_size: int = field(default=0, metadata={
        'doc': 'transformers: resize frames to image_size x image_size pixels before the '
               'processor; 0 keeps the frame size (the processor still resizes as the model '
               'needs).', 'range': (0, 4096)})
    max_new_tokens: int = field(default=48, metadata={
        'doc': 'transformers: generation: maximum new tokens per text.', 'range': (1, 4096)})
    generation_timeout_s: float = field(default=30.0, metadata={
        'doc': 'transformers: stop a generation after this long (generate(max_time=...)); it '
               'counts as a timeout and a failure, the previous text stays. 0 disables.',
        'range': (0.0, 3600.0)})
    system_prompt: str = field(default='', metadata={
        'doc': 'System turn prepended to every prompt by model backends; empty = the one in '
               'prompts_file (itself empty = no system turn).'})
    prompts_file: str = field(default='', metadata={
        'doc': 'YAML with the system prompt and prompt templates (e.g. the plan line of the '
               'subtask prompt); empty = config/prompts.yaml of this package.'})
    candidates: tuple[str, ...] = field(default=(), metadata={
        'doc': 'transformers constrained mode: allowed subtasks (e.g. the skills the policy '
               'was trained on); the subtask is the candidate the model scores highest instead '
               'of free text. Empty (and no candidates_file) = free generation.'})
    candidates_file: str = field(default='', metadata={
        'doc': 'transformers constrained mode: a text file with one more candidate per line '
               '(# comments allowed); empty = none.'})
    diagnostics_period_s: float = field(default=1.0, metadata={
        'doc': 'Period of the planner status on /diagnostics.', 'range': (0.05, 60.0)})
    chunks_per_regen: int = field(default=1, metadata={
        'doc': 'Regenerate the subtask at most every N action chunks.', 'range': (1, 1000)})
    regen_on: str = field(default='refill', metadata={
        'doc': 'What counts as a chunk boundary: "refill", the executor asking for its next '
               'chunk (runtime_status needs_refill rising), so the new subtask is decided as '
               'the next chunk is; "chunk", a chunk being published (after its inference).',
        'choices': ('refill', 'chunk')})
    high_level_hz: float = field(default=1.0, metadata={
        'doc': 'Regenerate the subtask at most this often (Hz).', 'range': (0.01, 100.0)})
    subtask_confirmations: int = field(default=1, metadata={
        'doc': 'Looks in a row that must answer the same new subtask before the planner '
               'leaves the current one (1 = at the first answer). For a model that now and '
               'then moves on too early on a single frame; operator changes never wait.',
        'range': (1, 20)})
    subtask_change_flushes: bool = field(default=False, metadata={
        'doc': 'Publish every revision as an operator change (flush_revision = revision), so '
               'each planner subtask change flushes the executor queue: the rule before '
               'revision epochs, kept to compare against in benchmarks.'})
    enable_memory: bool = field(default=True, metadata={
        'doc': 'Regenerate the memory note when the subtask changes.'})
    direct_subtask: bool = field(default=False, metadata={
        'doc': 'Use every task text as the subtask directly (no generation). A single task '
               'can also ask for it with the prefix "direct:".'})
    min_new_tokens: int = field(default=0, metadata={'doc': 'Generation: minimum new tokens.'})
    temperature: float = field(default=0.0, metadata={
        'doc': 'Generation temperature; 0 = greedy.', 'range': (0.0, 10.0)})
    top_p: float = field(default=1.0, metadata={
        'doc': 'Generation nucleus sampling mass; 1 disables.', 'range': (0.0, 1.0)})
    cameras: tuple[str, ...] = field(default=('front', 'wrist'), metadata={
        'doc': 'Cameras whose latest frame the planner keeps for generation and VQA.'})
    default_camera: str = field(default='front', metadata={
        'doc': 'Camera used by VQA when the request names none.'})
    image_topic_pattern: str = field(default='cameras/{name}/image_raw', metadata={
        'doc': 'Image topic of each camera; {name} is replaced by the camera name.'})
    ground_truth_topic: str = field(default='sim/ground_truth', metadata={
        'doc': 'Simulator ground truth (JSON in std_msgs/String) for the scripted backend; '
               'empty disables.'})
    vqa_pause: bool = field(default=True, metadata={
        'doc': 'Pause the robot (and clear its queue) before answering a question.'})
    pause_service: str = field(default='pause', metadata={
        'doc': 'std_srvs/Trigger service of the executor that pauses the robot.'})
    service_timeout_s: float = field(default=5.0, metadata={
        'doc': 'How long VQA waits for the pause service.', 'range': (0.1, 60.0)})
    task: str = field(default='', metadata={
        'doc': 'Task to start with, as if sent on /task (a "direct:" prefix is honoured); '
               'empty = wait for /task (the start-up log says how to send one).'})
    feedback_hz: float = field(default=2.0, metadata={
        'doc': 'RunTask feedback and progress check rate (Hz).', 'range': (0.1, 50.0)})
    max_text_chars: int = field(default=DEFAULT_MAX_TEXT_CHARS, metadata={
        'doc': 'Tasks, interjections and questions longer than this (or with control '
               'characters) are refused: logged and counted on topics, an error in service '
               'and action responses.', 'range': (16, 1_000_000)})
    vqa_max_pending: int = field(default=2, metadata={
        'doc': 'Questions answered or waiting at once; more are refused at once with a busy '
               'message (ask again), so a flood cannot tie up the node.', 'range': (1, 64)})
    revision_wait_s: float = field(default=10.0, metadata={
        'doc': 'At start without a state to resume, wait up to this long for the executor\'s '
               'runtime_status before taking any input, so the first revisions continue past '
               'the executor\'s (a restarted planner never reuses a revision); after half of '
               'it, stop waiting if no runtime_status publisher was discovered (no executor '
               'yet: a fresh system starts at 0). 0 disables.', 'range': (0.0, 60.0)})
    state_file: str = field(default='', metadata={
        'doc': 'JSON file holding the latched task, subtask, memory, plan and revision, '
               'rewritten on every change; a restarted planner resumes from it. Empty = '
               'none (the session folder\'s planner_state.json under `lerobot-lang`); the '
               'revision then still never goes backwards: it continues past the executor\'s.'})

    def __post_init__(self) -> None:
        missing = [c for c in self.image_cameras if c not in self.cameras]
        if missing:
            raise ValueError(f'image_cameras {list(self.image_cameras)} names {missing}, which '
                             f'are not in cameras {list(self.cameras)}; the planner keeps frames '
                             'only of `cameras`: add them there or remove them here')


class _LazyBackend:
    """The configured backend, built on the worker thread; a TextGenerator meanwhile too.

    ``generate`` raises until the backend is ready, so a job that reaches the core before the
    load ended (or after it failed) is an ordinary counted failure.
    """

    def __init__(self) -> None:
        self.impl: Any = None
        self.state = 'loading'  # -> 'ready' | 'failed'
        self.error = ''
        self.load_time_s = 0.0

    def generate(self, kind: str, messages: list[dict], observation: Any) -> str:
        if self.impl is None:
            raise RuntimeError(self.error or 'the planner backend is still loading')
        return self.impl.generate(kind, messages, observation)


class PlannerNode(Node):
    """ROS adapter for HighLevelPlanner."""

    def __init__(self) -> None:
        self._worker: threading.Thread | None = None
        self._jobs: queue.Queue = queue.Queue()
        super().__init__('planner')
        self.cfg = declare_config(self, PlannerConfig)
        reject_unknown_parameters(self)
        backend_cls = load_backend('planner', self.cfg.backend)  # a bad name fails start-up
        self.templates = prompts.load_templates(
            self.cfg.prompts_file or paths.config_path('prompts.yaml'),
            self.cfg.system_prompt or None)
        self.generator = _LazyBackend()
        hl_cfg = HighLevelConfig(chunks_per_regen=self.cfg.chunks_per_regen,
                                 high_level_hz=self.cfg.high_level_hz,
                                 subtask_confirmations=self.cfg.subtask_confirmations,
                                 enable_memory=self.cfg.enable_memory,
                                 direct_subtask=self.cfg.direct_subtask,
                                 min_new_tokens=self.cfg.min_new_tokens,
                                 temperature=self.cfg.temperature, top_p=self.cfg.top_p)
        self.state = LanguageState()
        self.planner = HighLevelPlanner(self.generator, self.state, hl_cfg, self.templates)
        self.planner.on_subtask_changed = self._publish_context_now
        self._lock = threading.Lock()
        self._refill_seen = False
        self._last_boundary = float('-inf')
        self._chunk_revision = -1  # newest context revision of a chunk seen on action_chunk
        self._outcome: TaskOutcome | None = None
        self._outcome_at = float('-inf')  # node time the outcome arrived
        self._published: LanguageSnapshot | None = None
        self._subtask_history: list[str] = []
        self._goal_handle = None  # the RunTask goal being executed, for feedback
        self.refused_inputs = 0  # texts refused by max_text_chars / control characters
        self.vqa_busy = 0  # questions refused because vqa_max_pending were in progress
        self.interjections_coalesced = 0  # replaced by a newer one before their turn
        self._vqa_slots = threading.BoundedSemaphore(self.cfg.vqa_max_pending)
        # Throttled per kind of input: a flood of bad tasks must not hide a bad question.
        self._refusal_log = ThrottledLog(lambda _level, text: self.get_logger().warning(text))
        # At most one interjection waits for the worker; a newer one replaces its text.
        self._pending_interjection: str | None = None
        self._first_status: RuntimeStatus | None = None
        self._status_seen = threading.Event()

        cb = ReentrantCallbackGroup()
        self._ctx_pub = self.create_publisher(LanguageContext, 'language_context', qos.LATCHED)
        self._text_pubs = {k: self.create_publisher(String, k, qos.LATCHED)
                           for k in ('subtask', 'memory', 'plan')}
        self._speech_pub = self.create_publisher(String, 'speech', qos.COMMAND)
        # Latched and default-QoS publishers both reach the planner, each sample once.
        self._task_sub = CommandSubscription(self, String, 'task', self._on_task)
        self._vqa_log_pub = self.create_publisher(String, 'vqa_log', qos.COMMAND)
        self._sim_seed: Any = None
        self._resets = ResetOrdering()  # touched by the worker only
        self.scene_resets = 0  # simulator resets handled (counted once handled)
        self._interjection_sub = CommandSubscription(self, String, 'interjection',
                                                     self._on_interjection)
        self.create_subscription(ActionChunk, 'action_chunk', self._on_chunk, qos.COMMAND)
        self.create_subscription(RuntimeStatus, 'runtime_status', self._on_status, qos.STATUS)
        self._outcome_topic = self.resolve_topic_name('task_outcome')
        # The simulator's outcome is latched; an operator's may come from ros2cli defaults.
        CommandSubscription(self, TaskOutcome, 'task_outcome',
                            lambda msg, _sent: self._on_outcome(msg))
        self._look_queued = False  # a look job for a new observation waits for the worker
        self.observations = LatestObservations(self, self.cfg.cameras,
                                               self.cfg.image_topic_pattern,
                                               self.cfg.ground_truth_topic,
                                               on_update=self._on_observation,
                                               on_truth=self._on_truth)
        self._pause_reason = PAUSE_REASON  # why the executor is paused, for RunTask feedback
        self._pause_client = self.create_client(Trigger, self.cfg.pause_service,
                                                callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(AskVqa, 'vqa', self._on_vqa, callback_group=cb,
                            qos_profile=qos.SERVICE_BURST)
        self._action = ActionServer(self, RunTask, 'run_task', self._run_task,
                                    goal_callback=self._on_goal,
                                    handle_accepted_callback=self._on_accepted,
                                    cancel_callback=lambda _g: CancelResponse.ACCEPT,
                                    callback_group=cb)
        self._diagnostics = DiagnosticsPublisher(self, 'text generation', self._status,
                                                 self.cfg.diagnostics_period_s)
        self._shared_domain = ''  # what another graph in this domain publishes ('' = none)
        self._status_sources = LiveSources()
        self.create_timer(1.0, self._check_shared_domain)
        self._submit(self._job_load, backend_cls)  # first job: every later one waits for it
        resumed = self._restore_state()
        if not resumed and self.cfg.revision_wait_s > 0:
            self._submit(self._job_revision_start)
        self._worker = threading.Thread(target=self._work, name='planner-generation',
                                        daemon=True)
        self._worker.start()
        self._publish_context(force=True)
        if self.cfg.task.strip() and not (resumed and self.state.task == self.cfg.task.strip()):
            self._on_task(String(data=self.cfg.task))
        else:
            self.get_logger().info(
                'no task yet: send one, e.g. `ros2 topic pub --once --keep-alive 2 '
                '--qos-durability transient_local --qos-reliability reliable '
                f"{self.resolve_topic_name('task')} std_msgs/msg/String \"{{data: 'put the red "
                "cube in the bowl'}\"` or `lerobot-lang task put the red cube in the bowl`")
        self.get_logger().info(f'planner ready: backend={self.cfg.backend!r} (known: '
                               f"{known('planner')}), chunks_per_regen="
                               f'{self.cfg.chunks_per_regen}, high_level_hz='
                               f'{self.cfg.high_level_hz}, memory={self.cfg.enable_memory}')

    # --- inputs -------------------------------------------------------------------------
    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_outcome(self, msg: TaskOutcome) -> None:
        with self._lock:
            self._outcome = msg
            self._outcome_at = self._now_s()

    def _restore_state(self) -> bool:
        """Resume task, subtask, memory, plan and revision from ``state_file``."""
        if not self.cfg.state_file:
            return False
        try:
            loaded = planner_state.load(self.cfg.state_file)
        except planner_state.StateFileError as exc:
            self.get_logger().error(f'state file ignored: {exc}; starting fresh (the revision '
                                    "continues past the executor's)")
            return False
        if loaded is None:
            return False
        snap, extra = loaded
        self.state.restore(snap)
        self._task_sub.remember(extra.get('seen_tasks', []))
        self._interjection_sub.remember(extra.get('seen_interjections', []))
        self.get_logger().info(f'resumed from {self.cfg.state_file}: rev {snap.revision}, '
                               f'task {snap.task!r}, subtask {snap.subtask!r}')
        return True

    def _refuse_text(self, text: str, what: str) -> str:
        problem = text_problem(text, self.cfg.max_text_chars, what)
        if problem:
            with self._lock:
                self.refused_inputs += 1
            self._refusal_log(logging.WARNING, f'{problem} ({self.refused_inputs} refused so '
                              'far)', key=what)
        return problem

    def _on_task(self, msg: String, sent_ns: int | None = None) -> None:
        """A /task text; ``sent_ns`` is when it was sent (wall clock; None: now)."""
        if self._refuse_text(msg.data, 'task'):
            return
        sent_ns = sent_ns or time.time_ns()
        text = msg.data.strip()
        direct = text.lower().startswith(DIRECT_PREFIX)
        if direct:
            text = text[len(DIRECT_PREFIX):].strip()
            # `direct: X` with a task set: X becomes the active subtask, the task stays.
            self._submit(self._job_direct_subtask, text, sent_ns)
            return
        self._submit(self._job_set_task, text, direct, sent_ns)

    def _on_truth(self, truth: dict, sent_ns: int | None) -> None:
        """Ground truth, already the observation: the simulator's seed changes on every reset."""
        seed = truth.get('seed')
        with self._lock:
            previous, self._sim_seed = self._sim_seed, seed
        if previous is not None and seed != previous:
            # The simulator published the new scene before its reset service answered: the
            # sample's source time orders the reset before any command sent after the answer.
            self._submit(self._job_sim_reset, seed, sent_ns)

    def _on_interjection(self, msg: String, _sent_ns: int | None = None) -> None:
        if not msg.data.strip():
            self.get_logger().warning('ignored an empty interjection')
            return
        if self._refuse_text(msg.data, 'interjection'):
            return
        with self._lock:
            waiting = self._pending_interjection is not None
            self._pending_interjection = msg.data
            if waiting:  # newest wins: the queued job answers this text instead
                self.interjections_coalesced += 1
        if waiting:
            self.get_logger().info('interjection replaced the one still waiting (newest '
                                   f'wins; {self.interjections_coalesced} so far)',
                                   throttle_duration_sec=2.0)
            return
        self._submit(self._job_pending_interjection)

    def _job_pending_interjection(self) -> None:
        with self._lock:
            text, self._pending_interjection = self._pending_interjection, None
        if text is not None:
            self._job_interject(text)

    def _look_sources(self) -> tuple[str, ...] | None:
        """The observations the backend decides from: its ``observes`` (the scripted planner:
        the simulator's ground truth), else the frames of ``image_cameras``; None = unknown
        (every look counts as new)."""
        observes = getattr(self.generator.impl, 'observes', None)
        if observes is not None:
            return tuple(LatestObservations.GROUND_TRUTH if s == 'ground_truth' else s
                         for s in observes)
        return tuple(self.cfg.image_cameras) or None

    def _observed(self) -> tuple[int, ...] | None:
        """Versions of the look sources; None before any arrived (nothing to wait for)."""
        sources = self._look_sources()
        version = self.observations.version(sources) if sources else ()
        return version if any(version) else None

    def _on_observation(self, source: str) -> None:
        """Something new to see: a boundary left pending for want of news is looked at now."""
        sources = self._look_sources()
        if sources is None or source not in sources or self.generator.state != 'ready':
            return
        if self.planner.direct or not self.state.task or self.state.mode != 'action':
            return
        if not self.planner.throttle.due(self._now_s()):
            return
        with self._lock:
            if self._look_queued:
                return
            self._look_queued = True
        self._submit(self._job_look)

    def _job_look(self) -> None:
        with self._lock:
            self._look_queued = False
        observed = self._observed()
        self.planner.look(self._now_s(), self.observation(), observed)

    def _on_chunk(self, msg: ActionChunk) -> None:
        if self.cfg.regen_on == 'chunk':
            self._submit(self._job_chunk_boundary)
            return
        # refill: the first chunk of a newer revision (a subtask or task change) started off
        # the refill cadence, at once after the change: it is a chunk boundary too, as it
        # would be counted with regen_on chunk, so a short subtask is looked at again after
        # its own chunk instead of after the next refill.
        with self._lock:
            newer = msg.context_revision > self._chunk_revision
            self._chunk_revision = max(self._chunk_revision, int(msg.context_revision))
        if newer:
            self._submit(self._job_chunk_boundary)

    def _on_status(self, msg: RuntimeStatus, info: dict) -> None:
        with self._lock:
            self._status_sources.note(sample_key(info).split(':', 1)[0])  # the publisher
        if not self._status_seen.is_set():
            self._first_status = msg
            self._status_seen.set()
        with self._lock:
            one_executor = self._status_sources.single()
        if msg.context_revision > self.state.revision and one_executor:
            # Never follow another graph's executor: two planners would ratchet each other.
            self._submit(self._job_revision_floor, int(msg.context_revision))
        if msg.mode in ('action', 'paused') and msg.mode != self.state.mode:
            if msg.mode == 'action':
                self._pause_reason = PAUSE_REASON
            self._submit(self._job_set_mode, msg.mode)
        if self.cfg.regen_on != 'refill':
            return
        now = time.monotonic()
        interval = self.planner.throttle.min_interval_s
        with self._lock:
            rising = msg.needs_refill and not self._refill_seen
            # A queue that stays empty (no chunk arrives) raises no edge: look again at the
            # throttled rate, so the planner still notices a subtask done.
            stuck = msg.needs_refill and now - self._last_boundary >= interval
            self._refill_seen = bool(msg.needs_refill)
            if rising or stuck:
                self._last_boundary = now
        if rising or stuck:
            self._submit(self._job_chunk_boundary)

    # --- worker -------------------------------------------------------------------------
    def _submit(self, fn, *args) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fn, args, future))
        return future

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            fn, args, future = item
            try:
                future.set_result(fn(*args))
            except Exception as exc:  # noqa: BLE001 - a bad job must not kill the worker
                self.get_logger().error(f'{fn.__name__} failed: {type(exc).__name__}: {exc}')
                future.set_exception(exc)
            if not self._publish_context_now():
                return

    def _publish_context_now(self) -> bool:
        """Publish the context if it changed; False once ROS is shutting down."""
        try:
            self._publish_context()
        except _rclpy.RCLError as exc:  # DDS refused a write: the next job publishes again
            if not self.context.ok():
                return False
            self.get_logger().error(f'publishing the language context failed: {exc}',
                                    throttle_duration_sec=2.0)
        return True

    def _job_load(self, backend_cls: type) -> None:
        start = time.monotonic()
        self.get_logger().info(f'loading planner backend {self.cfg.backend!r}'
                               + (f' from {self.cfg.model_path!r}' if self.cfg.model_path
                                  else ''))
        try:
            impl = backend_cls(self.cfg)
        except Exception as exc:  # noqa: BLE001 - model loading runs third-party code; report
            gen = self.generator
            gen.error = (f'planner backend {self.cfg.backend!r} failed to load: '
                         f'{type(exc).__name__}: {exc}')
            gen.state = 'failed'
            gen.load_time_s = time.monotonic() - start
            self.get_logger().error(f'{gen.error}. The node stays up without a model: fix '
                                    'model_path (or the backend parameters) and restart it')
            self._diagnostics.publish_now()
            return
        self.generator.impl = impl
        self.generator.load_time_s = time.monotonic() - start
        self.generator.state = 'ready'
        self.get_logger().info(f'planner backend {self.cfg.backend!r} ready in '
                               f'{self.generator.load_time_s:.1f} s')
        self._diagnostics.publish_now()

    def _load_failed(self, what: str) -> bool:
        """True (and one throttled log line) when the backend failed to load."""
        if self.generator.state != 'failed':
            return False
        self.get_logger().error(f'{what} ignored: {self.generator.error}',
                                throttle_duration_sec=30.0)
        return True

    def _status(self) -> tuple[str, str, dict[str, Any]]:
        """/diagnostics: load state, every counter of the core, the backend's own values."""
        gen = self.generator
        values: dict[str, Any] = {'backend': self.cfg.backend, 'model_path': self.cfg.model_path,
                                  'load_state': gen.state, 'load_error': gen.error,
                                  'load_time_s': gen.load_time_s}
        snap = self.state.snapshot()
        values.update(revision=snap.revision, mode=snap.mode, task=snap.task,
                      subtask=snap.subtask, refused_inputs=self.refused_inputs,
                      vqa_busy=self.vqa_busy,
                      interjections_coalesced=self.interjections_coalesced,
                      queued_jobs=self._jobs.qsize(), scene_seed=self._sim_seed,
                      scene_resets=self.scene_resets,
                      commands_kept_over_reset=self._resets.kept)
        values.update(self.planner.stats())
        backend_values = getattr(gen.impl, 'diagnostics', None)
        if callable(backend_values):
            values.update(backend_values())
        if gen.state == 'failed':
            return 'error', gen.error, values
        if self._shared_domain:
            return 'error', self._shared_domain, values
        if gen.state == 'loading':
            return 'warn', 'loading the planner backend', values
        failures = sum(self.planner.failures.values())
        if failures:
            return 'warn', (f'{failures} failed generation(s) ('
                            f'{sum(self.planner.timeouts.values())} timeouts); see failures.*'
                            ), values
        return 'ok', 'ready', values

    def observation(self) -> dict[str, Any]:
        """What the generator sees: latest images, simulator truth, the language state."""
        return {'images': self.observations.images(),
                'ground_truth': self.observations.ground_truth(),
                'language': self.state.snapshot(), 'time_s': self._now_s()}

    def _job_set_task(self, text: str, direct: bool, sent_ns: int | None = None,
                      restart: bool = False) -> None:
        self._resets.note('task', text, direct, sent_ns)
        self.planner.set_task(text, direct_subtask=direct, restart=restart)
        self._subtask_history = [self.state.subtask] if self.state.subtask else []
        self.get_logger().info(f'task: {text!r}' + (' (direct subtask)' if direct else ''))
        if text and not self.planner.direct and not self._load_failed('subtask generation'):
            self.planner.regenerate(self._now_s(), self.observation())

    def _job_direct_subtask(self, text: str, sent_ns: int | None = None) -> None:
        task = self.state.task
        if not task:  # nothing to keep: the text is task and subtask
            self._job_set_task(text, True, sent_ns)
            return
        self._resets.note('direct', text, True, sent_ns)
        # Same task: only the mode changes (an interjection's plan stays).
        self.planner.set_task(task, direct_subtask=True, restate=False, subtask=text)
        self.get_logger().info(f'subtask (direct): {text!r}; task stays {task!r}')

    def _job_sim_reset(self, seed: Any, reset_ns: int | None) -> None:
        # A new scene: the finished task and its memory belong to the old one; a command
        # sent after the reset (that reached this worker first) starts over on the new scene.
        later = self._resets.reset(reset_ns)
        self._subtask_history = []
        if not later:
            self.planner.set_task('', direct_subtask=False)
            self.scene_resets += 1
            self.get_logger().info(f'simulator reset (seed {seed}): task and memory cleared; '
                                   'send a new task on /task')
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
        self.get_logger().info(f'simulator reset (seed {seed}): task and memory cleared; '
                               f'kept {len(later)} command(s) sent after the reset: task '
                               f'{self.state.task!r}, started over on the new scene')

    def _replay(self, command: Command) -> None:
        if command.kind == 'task':
            self._job_set_task(command.text, command.direct, command.sent_ns)
        else:
            self._job_direct_subtask(command.text, command.sent_ns)

    def _job_interject(self, text: str) -> None:
        if self._load_failed(f'interjection {text!r}'):
            return
        plan, speech = self.planner.interject(text, self.observation())
        self.get_logger().info(f'interjection {text!r} -> plan {plan!r}, speech {speech!r}')
        if speech:
            self._speech_pub.publish(String(data=speech))
        if plan and not self.planner.direct:
            # Re-plan now rather than at the next throttled boundary: the operator is waiting,
            # and the new subtask is an operator change (the queue is flushed).
            self.planner.regenerate(self._now_s(), self.observation(), flush=True)

    def _job_chunk_boundary(self) -> None:
        if self.generator.state == 'failed':
            return  # reported once at load and on /diagnostics; a boundary is no news
        # The observation's version is read first: what the generator sees is as new or newer.
        observed = self._observed()
        self.planner.on_chunk_boundary(self._now_s(), self.observation(), observed)

    def _check_shared_domain(self) -> str:
        """A second live executor on this graph's status topic (two bring-ups in one ROS
        domain and namespace): said once on the log, kept on /diagnostics while it lasts."""
        with self._lock:
            executors = self._status_sources.rivals()
        problem = ''
        if executors:
            found = [f'{executors} executors publish {self.resolve_topic_name("runtime_status")}']
            planners = self.count_publishers(self._ctx_pub.topic_name)
            if planners > 1:
                found.append(f'{planners} publishers of {self._ctx_pub.topic_name}')
            problem = (f"another graph shares this ROS domain "
                       f"(ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')}) and namespace "
                       f"{self.get_namespace()!r}: {', '.join(found)}. Their tasks and "
                       'revisions mix; this planner no longer follows an executor\'s revision. '
                       'Give each bring-up its own ROS_DOMAIN_ID (export ROS_DOMAIN_ID=<n> '
                       'before starting it) or its own namespace (namespace:=/robot2)')
        if problem and not self._shared_domain:
            self.get_logger().error(problem)
        elif self._shared_domain and not problem:
            self.get_logger().info('no other graph in this domain any more')
        self._shared_domain = problem
        return problem

    def _job_revision_start(self) -> None:
        """Before any input: learn the executor's revision (a restart must not reuse one)."""
        half = self.cfg.revision_wait_s / 2
        if not self._status_seen.wait(half):
            if self.count_publishers(self.resolve_topic_name('runtime_status')) == 0:
                return  # no executor yet: a fresh system starts at 0
            if not self._status_seen.wait(half):
                self.get_logger().warning(
                    f'no runtime_status within {self.cfg.revision_wait_s:.0f} s although an '
                    'executor publishes it; starting at revision 0')
                return
        revision = int(self._first_status.context_revision)
        if revision > 0:
            self._job_revision_floor(revision)

    def _job_revision_floor(self, revision: int) -> None:
        if self.state.advance_past(revision):
            self.get_logger().warning(
                f'the executor is at revision {revision}, newer than this planner\'s (a '
                f'restart without state_file?): continuing at {self.state.revision}, so every '
                'chunk from before the restart is stale')

    def _job_set_mode(self, mode: str) -> None:
        if self.state.set_mode(mode):
            self.get_logger().info(f'run mode: {mode}')

    def _publish_context(self, force: bool = False) -> None:
        snap = self.state.snapshot()
        prev = self._published
        if not force and prev == snap:
            return
        msg = LanguageContext(task=snap.task, subtask=snap.subtask,
                              prior_subtask=snap.prior_subtask, memory=snap.memory,
                              plan=snap.plan, revision=snap.revision, source=snap.source,
                              flush_revision=(snap.revision if self.cfg.subtask_change_flushes
                                              else snap.flush_revision))
        msg.header.stamp = self.get_clock().now().to_msg()
        self._ctx_pub.publish(msg)  # first: if it fails, this snapshot is published again
        self._published = snap
        if self.cfg.state_file:
            try:
                planner_state.save(self.cfg.state_file, snap, {
                    'seen_tasks': self._task_sub.seen(),
                    'seen_interjections': self._interjection_sub.seen()})
            except OSError as exc:
                self.get_logger().error(f'state file not written: {exc}',
                                        throttle_duration_sec=10.0)
        if snap.subtask and (not self._subtask_history or self._subtask_history[-1] !=
                             snap.subtask):
            self._subtask_history.append(snap.subtask)
        handle = self._goal_handle
        if handle is not None and handle.is_active:
            self._send_feedback(handle, snap)
        for key, pub in self._text_pubs.items():
            if prev is None or getattr(prev, key) != getattr(snap, key):
                pub.publish(String(data=getattr(snap, key)))
        if prev is None or (prev.subtask, prev.memory) != (snap.subtask, snap.memory):
            self.get_logger().info(f'rev {snap.revision}: subtask={snap.subtask!r} '
                                   f'memory={snap.memory!r}')

    # --- VQA ----------------------------------------------------------------------------
    def _vqa_problem(self, question: str) -> str:
        """Why the backend cannot answer (its optional ``vqa_problem``), '' if it can."""
        check = getattr(self.generator.impl, 'vqa_problem', None)
        if not callable(check):
            return ''
        future = self._submit(lambda: check(question, self.observation()))
        try:
            return str(future.result(timeout=10.0) or '')
        except concurrent.futures.TimeoutError:
            return ''  # busy: let the answer itself tell

    def _pause_robot(self) -> str:
        if not self._pause_client.wait_for_service(timeout_sec=self.cfg.service_timeout_s):
            return f'pause service {self.cfg.pause_service!r} not available'
        done = threading.Event()
        future = self._pause_client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(self.cfg.service_timeout_s) or not future.result().success:
            return f'pause service {self.cfg.pause_service!r} did not confirm'
        return ''

    def _on_vqa(self, request: AskVqa.Request, response: AskVqa.Response) -> AskVqa.Response:
        problem = self._refuse_text(request.question, 'question') or \
            self._refuse_text(request.camera, 'camera name')
        if problem:
            response.success, response.message = False, problem
            return response
        if not self._vqa_slots.acquire(blocking=False):
            with self._lock:
                self.vqa_busy += 1
            response.success = False
            response.message = (f'busy: {self.cfg.vqa_max_pending} questions are being '
                                'answered; ask again in a moment')
            return response
        try:
            return self._answer_vqa(request, response)
        finally:
            self._vqa_slots.release()

    def _answer_vqa(self, request: AskVqa.Request,
                    response: AskVqa.Response) -> AskVqa.Response:
        question = request.question.strip()
        camera = request.camera.strip() or self.cfg.default_camera
        if not question:
            response.success, response.message = False, 'empty question; ask something'
            return response
        if self.generator.state == 'failed':
            response.success, response.message = False, self.generator.error
            return response
        if camera not in self.cfg.cameras:
            response.success = False
            response.message = f'unknown camera {camera!r}; cameras: {list(self.cfg.cameras)}'
            return response
        problem = ('' if self.observations.image(camera) is not None else
                   f'no image received yet from camera {camera!r}') or \
            self._vqa_problem(question)
        if problem:  # nothing will answer: do not stop the arm for it
            response.success, response.message = False, problem
            self.get_logger().warning(f'VQA {question!r} not answered: {problem}',
                                      throttle_duration_sec=5.0)
            return response
        if self.cfg.vqa_pause:
            error = self._pause_robot()
            if error:
                response.success, response.message = False, f'{error}; not answering unpaused'
                return response
            self._submit(self._job_set_mode, 'paused').result(timeout=10.0)
            self._pause_reason = f'paused to answer the question {question!r}'
        image = self.observations.image(camera)
        if image is None:
            response.success = False
            response.message = f'no image received yet from camera {camera!r}'
            return response
        future = self._submit(lambda: self.planner.answer_vqa(question, image, camera,
                                                              self.observation()))
        try:
            answer = future.result(timeout=60.0)
        except concurrent.futures.TimeoutError:
            answer = ''
        response.success = bool(answer)
        response.answer = answer
        response.message = (f'answered from camera {camera!r}' if answer else
                            'the planner produced no answer (see planner log)')
        self.get_logger().info(f'VQA {question!r} -> {answer!r}')
        # The /vqa service is invisible to a bag: log the exchange on a topic for the recorder.
        self._vqa_log_pub.publish(String(data=json.dumps({
            'question': question, 'answer': answer, 'camera': camera,
            'success': response.success, 'stamp': self._now_s()})))
        return response

    # --- RunTask ------------------------------------------------------------------------
    def _on_goal(self, goal: RunTask.Goal) -> GoalResponse:
        if not goal.task.strip():
            self.get_logger().error('RunTask goal rejected: empty task')
            return GoalResponse.REJECT
        if self._refuse_text(goal.task, 'RunTask goal'):
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _run_task(self, handle) -> RunTask.Result:
        goal = handle.request
        if self.generator.state == 'failed' and not (goal.direct_subtask
                                                     or self.cfg.direct_subtask):
            return self._end_goal(handle.abort, RunTask.Result(
                success=False, message=self.generator.error, subtasks=[]))
        if goal.time_limit_s <= 0 and not self.count_publishers(self._outcome_topic):
            # Nothing could ever end it: say so instead of running until cancelled.
            message = (f'nothing judges success on this graph (no publisher on '
                       f'{self._outcome_topic}; the real arm has no success detector): give '
                       'time_limit_s, or judge the task yourself while it runs: `ros2 topic '
                       'pub --once --keep-alive 2 --qos-durability transient_local '
                       f'--qos-reliability reliable {self._outcome_topic} '
                       'lerobot_lang_msgs/msg/TaskOutcome '
                       f'"{{goal: \'{goal.task.strip()}\', success: true}}"`')
            self.get_logger().warning(f'RunTask {goal.task.strip()!r} aborted: {message}')
            return self._end_goal(handle.abort, RunTask.Result(
                success=False, message=message, subtasks=[]))
        self._submit(self._job_set_task, goal.task.strip(), bool(goal.direct_subtask),
                     time.time_ns()).result(timeout=60.0)
        start_rev = self.state.revision
        start_s = self._now_s()
        period = 1.0 / self.cfg.feedback_hz
        # Every context change is sent at once by _publish_context (a subtask may last only a
        # few ticks); this loop repeats the current one at feedback_hz, so a feedback lost to
        # discovery is made good, and checks for the end of the run.
        self._goal_handle = handle
        try:
            while True:
                snap = self.state.snapshot()
                self._send_feedback(handle, snap)
                result = self._finished(handle, snap, start_rev, start_s, goal)
                if result is not None:
                    self.get_logger().info(f'RunTask {goal.task.strip()!r}: {result.message}')
                    return result
                time.sleep(period)  # wall-clock pacing of a polling loop; limits use node time
        finally:
            self._goal_handle = None

    def _progress(self, snap: LanguageSnapshot) -> str:
        """RunTask's progress line: the subtask, or that the robot is paused, why, and how to
        go on (a goal sent to a paused executor otherwise just sits)."""
        if snap.mode != 'paused':
            return f'subtask {len(self._subtask_history)}: {snap.subtask}'
        resume = self.resolve_topic_name(self.cfg.pause_service).rsplit('/', 1)[0] + '/resume'
        return (f'paused ({self._pause_reason}): the robot holds; resume with `ros2 service '
                f'call {resume} std_srvs/srv/Trigger` or `lerobot-lang resume`; next subtask '
                f'{len(self._subtask_history)}: {snap.subtask}')

    def _send_feedback(self, handle, snap: LanguageSnapshot) -> None:
        try:
            handle.publish_feedback(RunTask.Feedback(
                subtask=snap.subtask, memory=snap.memory, progress=self._progress(snap)))
        except _rclpy.RCLError as exc:  # repeated at feedback_hz anyway
            self.get_logger().warning(f'RunTask feedback not published: {exc}',
                                      throttle_duration_sec=5.0)

    def _on_accepted(self, handle) -> None:
        """rclpy's default (execute the goal), surviving a goal-status publish that fails.

        The goal's state changes before its status array is published, so a refused write
        must not keep the goal from running: its result is still served when it ends.
        """
        try:
            handle.execute()
        except _rclpy.RCLError as exc:
            self.get_logger().warning(f'RunTask goal status not published ({exc}); running '
                                      'the goal anyway')
            self._action.notify_execute(handle, None)

    def _end_goal(self, transition, result: RunTask.Result) -> RunTask.Result:
        """Apply succeed/abort/canceled; a failed status publish must not lose the result."""
        try:
            transition()
        except _rclpy.RCLError as exc:
            self.get_logger().warning(f'RunTask final status not published ({exc}); the '
                                      'result is still served')
        return result

    def _finished(self, handle, snap: LanguageSnapshot, start_rev: int, start_s: float,
                  goal: RunTask.Goal) -> RunTask.Result | None:
        subtasks = list(self._subtask_history)
        if handle.is_cancel_requested:
            return self._end_goal(handle.canceled, RunTask.Result(
                success=False, message='canceled', subtasks=subtasks))
        if snap.task != goal.task.strip():
            return self._end_goal(handle.abort, RunTask.Result(
                success=False, message=f'task replaced by {snap.task!r}', subtasks=subtasks))
        with self._lock:
            outcome, outcome_at = self._outcome, self._outcome_at
        # The simulator judges the planner's context (revision); an operator judges by the
        # task's text (revision 0) while the goal runs.
        judged = outcome is not None and outcome.success and (
            outcome.context_revision >= start_rev
            or (outcome.context_revision == 0 and outcome.goal.strip() == goal.task.strip()
                and outcome_at >= start_s))
        if judged:
            return self._end_goal(handle.succeed, RunTask.Result(
                success=True, message=f'succeeded: {outcome.detail}', subtasks=subtasks))
        elapsed = self._now_s() - start_s
        if goal.time_limit_s > 0 and elapsed > goal.time_limit_s:
            return self._end_goal(handle.abort, RunTask.Result(
                success=False, subtasks=subtasks,
                message=f'time limit {goal.time_limit_s:.1f} s reached'))
        return None

    def close(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(timeout=5.0)
        close = getattr(self.generator.impl, 'close', None)
        if callable(close):
            close()


def main(args: list[str] | None = None) -> int:
    return runner.run(PlannerNode, args, name='planner')


if __name__ == '__main__':
    raise SystemExit(main())
