"""`planner` node: task -> subtasks, memory, interjection replies and VQA answers over ROS.

A shell around core.planner_session.PlannerSession (which wraps core.high_level's
HighLevelPlanner): this node declares parameters, turns messages into the session's calls,
and publishes what it decides. Generation runs on the session's one worker thread, never on
an executor thread.

The backend is built on that worker too, as its first job: a model that takes seconds to load
does not delay the node's start, jobs queue behind the load, and a checkpoint that cannot be
loaded leaves the node up, reporting the error on /diagnostics (level ERROR) and in every
RunTask / VQA answer, instead of exiting into a restart loop.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from std_msgs.msg import String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.action import RunTask
from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus, TaskOutcome
from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes import paths
from lerobot_lang_nodes.core.images import SO101_CAMERAS
from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersConfig
from lerobot_lang_nodes.backends.registry import known, load_backend
from lerobot_lang_nodes.core import planner_state, prompts
from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.inputs import DEFAULT_MAX_TEXT_CHARS
from lerobot_lang_nodes.core.language import LanguageSnapshot, LanguageState
from lerobot_lang_nodes.core.planner_session import BackendSlot, PlannerSession, SessionConfig
from lerobot_lang_nodes.nodes import qos, runner
from lerobot_lang_nodes.nodes.commands import CommandSubscription, sample_key
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.observations import LatestObservations
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters
from lerobot_lang_nodes.nodes.publishing import PublishError, PublishGuard

# The arm's joint state (the SO-101 driver's and the simulator's): remap it like any topic.
JOINT_STATES_TOPIC = 'joint_states'


@dataclass(frozen=True)
class PlannerConfig:
    """Parameters of the planner node."""

    backend: str = field(default='scripted', metadata={
        'doc': 'Planner backend (text generator); see backends/registry.py.'})
    model_path: str = field(default='', metadata={
        'doc': 'Checkpoint directory or file for model backends (`transformers`: a directory '
               'with config.json, weights and tokenizer/processor, a .gguf file, or a hub id '
               'when online); unused by `scripted`.'})
    device: str = field(default='auto', metadata={
        'doc': 'Model backends (transformers, hierarchical): cpu, cuda, cuda:N, or auto (cuda '
               'when available).'})
    dtype: str = field(default='auto', metadata={
        'doc': 'Model backends: weight dtype; auto = bfloat16 on a GPU that supports it, else '
               'float32.', 'choices': ('auto', 'float32', 'bfloat16', 'float16')})
    max_new_tokens: int = field(default=48, metadata={
        'doc': 'Model backends: generation: maximum new tokens per text.', 'range': (1, 4096)})
    system_prompt: str = field(default='', metadata={
        'doc': 'System turn prepended to every prompt by model backends; empty = the one in '
               'prompts_file (itself empty = no system turn).'})
    prompts_file: str = field(default='', metadata={
        'doc': 'YAML with the system prompt and prompt templates (e.g. the plan line of the '
               'subtask prompt); empty = config/prompts.yaml of this package.'})
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
    cameras: tuple[str, ...] = field(default=SO101_CAMERAS, metadata={
        'doc': 'Cameras whose latest frame the planner keeps for generation and VQA.'})
    transformers: TransformersConfig = field(default_factory=TransformersConfig, metadata={
        'doc': 'The transformers backend\'s parameters (transformers.*).'})
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
    scene_task_topic: str = field(default='', metadata={
        'doc': 'Follow the simulator\'s episode language: each text on this topic '
               '(std_msgs/String, latched; a kitchen\'s sim/task_description, one per '
               'episode and reset) starts as the task, as if sent on /task. Not followed when '
               '`task` is set (the given task wins). Empty disables.'})
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
        image_cameras = self.transformers.image_cameras
        missing = [c for c in image_cameras if c not in self.cameras]
        if missing:
            raise ValueError(f'transformers.image_cameras {list(image_cameras)} names {missing}, '
                             f'which are not in cameras {list(self.cameras)}; the planner keeps '
                             'frames only of `cameras`: add them there or remove them here')


class PlannerNode(Node):
    """ROS adapter for PlannerSession."""

    def __init__(self) -> None:
        self.session: PlannerSession | None = None
        super().__init__('planner')
        self.cfg = declare_config(self, PlannerConfig)
        reject_unknown_parameters(self)
        backend_cls = load_backend('planner', self.cfg.backend)  # a bad name fails start-up
        templates = prompts.load_templates(
            self.cfg.prompts_file or paths.config_path('prompts.yaml'),
            self.cfg.system_prompt or None)
        self.generator = BackendSlot()
        hl_cfg = HighLevelConfig(chunks_per_regen=self.cfg.chunks_per_regen,
                                 high_level_hz=self.cfg.high_level_hz,
                                 subtask_confirmations=self.cfg.subtask_confirmations,
                                 enable_memory=self.cfg.enable_memory,
                                 direct_subtask=self.cfg.direct_subtask,
                                 min_new_tokens=self.cfg.min_new_tokens,
                                 temperature=self.cfg.temperature, top_p=self.cfg.top_p)
        self.state = LanguageState()
        self.planner = HighLevelPlanner(self.generator, self.state, hl_cfg, templates)
        self.planner.on_subtask_changed = self._publish_context_now
        self._published: LanguageSnapshot | None = None
        self._goal_handle = None  # the RunTask goal being executed, for feedback
        self._shared_domain = ''  # what another graph in this domain publishes ('' = none)

        cb = ReentrantCallbackGroup()
        self._ctx_pub = self.create_publisher(LanguageContext, 'language_context', qos.LATCHED)
        # Refused writes (DDS): each costs that output only.
        self._context_refused = PublishGuard(self, 'publishing the language context',
                                             'the next job publishes again', period_s=2.0)
        self._feedback_refused = PublishGuard(self, 'RunTask feedback',
                                              'repeated at feedback_hz anyway',
                                              level=logging.WARNING)
        self._goal_status_refused = PublishGuard(self, 'RunTask final status',
                                                 'the result is still served',
                                                 level=logging.WARNING, period_s=0.0)
        self._text_pubs = {k: self.create_publisher(String, k, qos.LATCHED)
                           for k in ('subtask', 'memory', 'plan')}
        self._speech_pub = self.create_publisher(String, 'speech', qos.COMMAND)
        self._vqa_log_pub = self.create_publisher(String, 'vqa_log', qos.COMMAND)
        # The arm's joint state only for prompt templates that quote it ({joints}).
        self.observations = LatestObservations(
            self, self.cfg.cameras, self.cfg.image_topic_pattern, self.cfg.ground_truth_topic,
            on_update=self._on_observation, on_truth=self._on_truth,
            joint_states_topic=JOINT_STATES_TOPIC if templates.uses('joints') else '')
        self.session = PlannerSession(
            self.planner, self.generator,
            SessionConfig(backend=self.cfg.backend, model_path=self.cfg.model_path,
                          regen_on=self.cfg.regen_on,
                          image_cameras=self.cfg.transformers.image_cameras,
                          max_text_chars=self.cfg.max_text_chars,
                          vqa_max_pending=self.cfg.vqa_max_pending,
                          revision_wait_s=self.cfg.revision_wait_s),
            self.observations, clock=self._now_s, log=runner.log_emitter(self),
            after_job=self._publish_context_now,
            on_speech=lambda text: self._speech_pub.publish(String(data=text)))
        # Latched and default-QoS publishers both reach the planner, each sample once.
        self._task_sub = CommandSubscription(
            self, String, 'task', lambda msg, sent_ns: self.session.on_task(msg.data, sent_ns))
        if self.cfg.scene_task_topic and not self.cfg.task.strip():
            self.create_subscription(String, self.cfg.scene_task_topic, self._on_scene_task,
                                     qos.LATCHED)
        self._interjection_sub = CommandSubscription(
            self, String, 'interjection',
            lambda msg, _sent: self.session.on_interjection(msg.data))
        self.create_subscription(ActionChunk, 'action_chunk',
                                 lambda msg: self.session.on_chunk(int(msg.context_revision)),
                                 qos.COMMAND)
        self.create_subscription(RuntimeStatus, 'runtime_status', self._on_status, qos.STATUS)
        self._outcome_topic = self.resolve_topic_name('task_outcome')
        # The simulator's outcome is latched; an operator's may come from ros2cli defaults.
        CommandSubscription(self, TaskOutcome, 'task_outcome', lambda msg, _sent: (
            self.session.on_outcome(msg.success, msg.context_revision, msg.goal, msg.detail)))
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
        self.create_timer(1.0, self._check_shared_domain)
        # The first job: every later one waits for it.
        self.session.load(lambda: backend_cls(self.cfg)).add_done_callback(
            lambda _f: self._diagnostics.publish_now())
        resumed = self._restore_state()
        if not resumed:
            self.session.start_at_executor_revision(
                lambda: self.count_publishers(self.resolve_topic_name('runtime_status')) > 0)
        self.session.start()
        self._publish_context(force=True)
        if self.cfg.task.strip() and not (resumed and self.state.task == self.cfg.task.strip()):
            self.session.on_task(self.cfg.task)
        elif self.cfg.scene_task_topic and not self.cfg.task.strip():
            self.get_logger().info('task: each episode\'s own, from '
                                   f'{self.resolve_topic_name(self.cfg.scene_task_topic)}')
        else:
            self.get_logger().info(
                'no task yet: send one, e.g. `ros2 topic pub --once --keep-alive 5 '
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

    def _on_truth(self, truth: dict, sent_ns: int | None) -> None:
        if self.session is not None:
            self.session.on_truth(truth, sent_ns)

    def _on_observation(self, source: str) -> None:
        if self.session is not None:
            self.session.on_observation(source)

    def _on_scene_task(self, msg: String) -> None:
        # Every episode's language, the first and each reset's, starts over as the task.
        if msg.data.strip():
            self.session.on_task(msg.data)

    def _on_status(self, msg: RuntimeStatus, info: dict) -> None:
        self.session.on_status(int(msg.context_revision), msg.mode, bool(msg.needs_refill),
                               sample_key(info).split(':', 1)[0])  # the publisher

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

    def _check_shared_domain(self) -> str:
        """A second live executor on this graph's status topic (two bring-ups in one ROS
        domain and namespace): said once on the log, kept on /diagnostics while it lasts."""
        executors = self.session.rival_executors()
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

    def _status(self) -> tuple[str, str, dict[str, Any]]:
        """/diagnostics: load state, every counter of the session, the backend's own values."""
        level, message = self.session.health()
        if level != 'error' and self._shared_domain:
            level, message = 'error', self._shared_domain
        return level, message, self.session.values()

    # --- outputs ------------------------------------------------------------------------
    def _publish_context_now(self) -> bool:
        """Publish the context if it changed; False once ROS is shutting down."""
        try:
            self._publish_context()
        except PublishError as exc:
            return self._context_refused.failed(exc)  # False once ROS is shutting down
        return True

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
        self.session.note_published(snap)
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
        problem = self.session.refuse_text(request.question, 'question') or \
            self.session.refuse_text(request.camera, 'camera name')
        if problem:
            response.success, response.message = False, problem
            return response
        if not self.session.vqa_slot():
            response.success = False
            response.message = (f'busy: {self.cfg.vqa_max_pending} questions are being '
                                'answered; ask again in a moment')
            return response
        try:
            return self._answer_vqa(request, response)
        finally:
            self.session.vqa_done()

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
        problem = self.session.vqa_problem(question, camera)
        if problem:  # nothing will answer: do not stop the arm for it
            response.success, response.message = False, problem
            self.get_logger().warning(f'VQA {question!r} not answered: {problem}',
                                      throttle_duration_sec=5.0)
            return response
        # A human commanding the arm (teleop) is never stopped for a question: the answer
        # comes from the live images of the demonstration.
        if self.cfg.vqa_pause and self.session.state.mode != 'teleop':
            error = self._pause_robot()
            if error:
                response.success, response.message = False, f'{error}; not answering unpaused'
                return response
            self.session.set_mode('paused').result(timeout=10.0)
            self.session.paused_for_question(question)
        answer = self.session.answer_vqa(question, camera)
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
        if self.session.refuse_text(goal.task, 'RunTask goal'):
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _run_task(self, handle) -> RunTask.Result:
        goal = handle.request
        if self.generator.state == 'failed' and not (goal.direct_subtask
                                                     or self.cfg.direct_subtask):
            return self._end_goal(handle.abort, RunTask.Result(
                success=False, message=self.generator.error, subtasks=[]))
        problem = self.session.unjudged_goal_problem(
            goal.time_limit_s, self.count_publishers(self._outcome_topic) > 0,
            self._outcome_topic, goal.task)
        if problem:  # nothing could ever end it: say so instead of running until cancelled
            self.get_logger().warning(f'RunTask {goal.task.strip()!r} aborted: {problem}')
            return self._end_goal(handle.abort, RunTask.Result(
                success=False, message=problem, subtasks=[]))
        self.session.start_goal(goal.task, goal.direct_subtask).result(timeout=60.0)
        start_rev = self.state.revision
        start_s = self._now_s()
        period = 1.0 / self.cfg.feedback_hz
        # Every context change is sent at once by _publish_context (a subtask may last only a
        # few ticks); this loop repeats the current one at feedback_hz, so a feedback lost to
        # discovery is made good, and checks for the end of the run.
        self._goal_handle = handle
        try:
            while True:
                self._send_feedback(handle, self.state.snapshot())
                verdict = self.session.judge(goal.task, start_rev, start_s, goal.time_limit_s,
                                             handle.is_cancel_requested)
                if verdict is not None:
                    self.get_logger().info(f'RunTask {goal.task.strip()!r}: {verdict.message}')
                    transition = {'succeeded': handle.succeed, 'aborted': handle.abort,
                                  'canceled': handle.canceled}[verdict.end]
                    return self._end_goal(transition, RunTask.Result(
                        success=verdict.end == 'succeeded', message=verdict.message,
                        subtasks=list(self.session.subtask_history)))
                time.sleep(period)  # wall-clock pacing of a polling loop; limits use node time
        finally:
            self._goal_handle = None

    def _send_feedback(self, handle, snap: LanguageSnapshot) -> None:
        resume = self.resolve_topic_name(self.cfg.pause_service).rsplit('/', 1)[0] + '/resume'
        with self._feedback_refused:
            handle.publish_feedback(RunTask.Feedback(
                subtask=snap.subtask, memory=snap.memory,
                progress=self.session.progress(snap, resume)))

    def _on_accepted(self, handle) -> None:
        """rclpy's default (execute the goal), surviving a goal-status publish that fails.

        The goal's state changes before its status array is published, so a refused write
        must not keep the goal from running: its result is still served when it ends.
        """
        try:
            handle.execute()
        except PublishError as exc:  # not only counted: the goal must still be executed
            self.get_logger().warning(f'RunTask goal status not published ({exc}); running '
                                      'the goal anyway')
            self._action.notify_execute(handle, None)

    def _end_goal(self, transition, result: RunTask.Result) -> RunTask.Result:
        """Apply succeed/abort/canceled; a failed status publish must not lose the result."""
        with self._goal_status_refused:
            transition()
        return result

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        close = getattr(self.generator.impl, 'close', None)
        if callable(close):
            close()


def main(args: list[str] | None = None) -> int:
    return runner.run(PlannerNode, args, name='planner')


if __name__ == '__main__':
    raise SystemExit(main())
