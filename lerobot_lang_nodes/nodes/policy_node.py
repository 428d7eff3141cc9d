"""`policy` node: active instruction + images + joint states -> ActionChunk, refilled early.

The robot's state comes from ``state_topic`` (a JointState: ``joint_states`` of the SO-101
graphs, or e.g. the RoboCasa bridge's ``robot_state``, whose names and ``position`` carry any
state vector).

Inference runs on its own thread. It starts when the executor's RuntimeStatus reports that
the queue fell below its refill threshold (not only when empty), or at once after an operator
change (a newer flush revision). A result computed before an operator change that came
meanwhile is discarded instead of published; one computed for the previous subtask of the same
flush epoch is published (the executor may still run it, see the revision rules). A backend that
cannot load (missing or corrupt checkpoint) leaves the node up, publishing the error on
/diagnostics and no chunks, so the executor holds instead of the process crash-looping.
"""

from __future__ import annotations

from collections import deque
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
from lerobot_lang_nodes.backends.registry import BackendNotFound, load_backend
from lerobot_lang_nodes.core.inference_file import InferenceFile
from lerobot_lang_nodes.core.inference_gate import ExecutorView, InferenceGate
from lerobot_lang_nodes.core.prompts import action_instruction
from lerobot_lang_nodes.core.rtc import ChunkContinuity
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.commands import CommandSubscription
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.observations import LatestObservations
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters

# A chunk that the executor has not acknowledged after this long was lost or rejected.
ACK_TIMEOUT_S = 1.0
LATENCY_WINDOW = 100  # inferences behind the latency percentiles on /diagnostics


@dataclass(frozen=True)
class PolicyConfig:
    """Parameters of the policy node."""

    backend: str = field(default='scripted', metadata={
        'doc': 'Action policy backend; see backends/registry.py.'})
    model_path: str = field(default='', metadata={
        'doc': 'Checkpoint directory for model backends (lerobot: a LeRobot pretrained_model '
               'directory); unused by `scripted`.'})
    device: str = field(default='auto', metadata={
        'doc': 'Torch device of model backends: auto (cuda if available, else cpu), cpu, '
               'cuda or cuda:<n>.'})
    dtype: str = field(default='auto', metadata={
        'doc': 'Float dtype of model backends; auto keeps the checkpoint\'s.',
        'choices': ('auto', 'float32', 'bfloat16', 'float16')})
    camera_map: tuple[str, ...] = field(default=('',), metadata={
        'doc': 'lerobot: "<camera>:<checkpoint image key>" per camera whose checkpoint key '
               'differs from observation.images.<camera>; [""] or [] = identity.'})
    state_units: str = field(default='degrees', metadata={
        'doc': 'lerobot: units of observation.state / action in the checkpoint (LeRobot SO-101 '
               'conventions): "degrees" (use_degrees=True) or "range_m100_100"; the gripper '
               'is 0..100 in both. "raw": another robot (e.g. RoboCasa): no unit conversion '
               'and no calibration; observation.state is the state_topic values picked by '
               'state_names, the actions are published as the checkpoint outputs them, '
               'columns named action_names; any state / action size.',
        'choices': ('degrees', 'range_m100_100', 'raw')})
    state_names: tuple[str, ...] = field(default=('',), metadata={
        'doc': 'lerobot, state_units raw: names (in state_topic\'s JointState) of the '
               'observation.state values in the checkpoint\'s order; [""] = the checkpoint\'s '
               'declared names if any, else the incoming values in their order. Must count '
               'the checkpoint\'s state.'})
    action_names: tuple[str, ...] = field(default=('',), metadata={
        'doc': 'lerobot: names of the action columns (the chunk\'s action_names) in the '
               'checkpoint\'s order; [""] = the checkpoint\'s action_feature_names, else the '
               'six SO-101 joints. With state_units raw it must count the checkpoint\'s '
               'action; otherwise it must be the six SO-101 joints in any order.'})
    robot_type: str = field(default='so_follower', metadata={
        'doc': 'lerobot: the robot_type given to the policy with each observation (LeRobot\'s '
               'prepare_observation_for_inference); so_follower is LeRobot\'s SO-100/101.'})
    calibration_id: str = field(default='', metadata={
        'doc': 'lerobot: LeRobot robot id whose SO-101 calibration JSON converts radians to '
               'the checkpoint\'s units (the driver\'s file); empty with calibration_path '
               'empty = a nominal calibration spanning the simulator\'s joint ranges.'})
    calibration_path: str = field(default='', metadata={
        'doc': 'lerobot: explicit calibration JSON path instead of calibration_id.'})
    added_latency_s: float = field(default=0.0, metadata={
        'doc': 'Benchmarks: wait this long in every inference before the backend runs, as a '
               'slower model would (counted in the latency); 0 disables.',
        'range': (0.0, 10.0)})
    inference_timeout_s: float = field(default=5.0, metadata={
        'doc': 'An inference that takes longer is discarded and counted as a timeout; the '
               'next refill retries. 0 disables.', 'range': (0.0, 600.0)})
    diagnostics_period_s: float = field(default=1.0, metadata={
        'doc': 'Period of the policy status on /diagnostics (s).', 'range': (0.05, 60.0)})
    condition_on: str = field(default='context', metadata={
        'doc': '"context": the planner\'s subtask (else task) from language_context; '
               '"task": the task only (flat policies, e.g. SmolVLA, PI0.5, ACT).',
        'choices': ('context', 'task')})
    chunk_horizon: int = field(default=15, metadata={
        'doc': 'Actions per chunk (H).', 'range': (1, 1000)})
    max_inference_hz: float = field(default=20.0, metadata={
        'doc': 'Upper bound on inference starts per second (chunk_hz).', 'range': (0.1, 200.0)})
    state_topic: str = field(default='joint_states', metadata={
        'doc': 'JointState topic of the robot state given to the policy (names and position): '
               'joint_states of the SO-101, e.g. robot_state of the RoboCasa bridge.'})
    cameras: tuple[str, ...] = field(default=('front', 'wrist'), metadata={
        'doc': 'Cameras whose latest frames are given to the policy.'})
    image_topic_pattern: str = field(default='cameras/{name}/image_raw', metadata={
        'doc': 'Image topic of each camera; {name} is replaced by the camera name.'})
    ground_truth_topic: str = field(default='sim/ground_truth', metadata={
        'doc': 'Simulator ground truth (JSON) for privileged sim experts; empty disables.'})
    status_timeout_s: float = field(default=2.0, metadata={
        'doc': 'Infer only while a runtime_status newer than this was received (s).',
        'range': (0.1, 60.0)})
    rtc: bool = field(default=True, metadata={
        'doc': 'Real-time chunking (LeRobot\'s lerobot.policies.rtc) for the policy types that '
               'support it (SmolVLA, PI0, PI0.5; others keep plain chunks): each inference is '
               'given the executing chunk\'s actions not played yet and the expected delay in '
               'control steps, and the new chunk is guided to continue them and stamped where '
               'it joins. false: plain chunks.'})
    rtc_execution_horizon: int = field(default=10, metadata={
        'doc': 'RTC: actions after the expected delay over which the guidance towards the '
               'executing chunk fades (the delay\'s own actions follow it fully); passed to '
               'LeRobot as execution_horizon = delay + this.',
        'range': (1, 1000)})
    rtc_max_guidance_weight: float = field(default=10.0, metadata={
        'doc': 'RTC: upper bound of the guidance weight (LeRobot\'s max_guidance_weight).',
        'range': (0.01, 1000.0)})
    rtc_schedule: str = field(default='linear', metadata={
        'doc': 'RTC: how the guidance weight falls from the delay to the execution horizon '
               '(LeRobot\'s prefix_attention_schedule).',
        'choices': ('linear', 'exp', 'ones', 'zeros')})
    inference_log_path: str = field(default='', metadata={
        'doc': 'Write one JSON line per inference here (context received, start, end, '
               'observation stamp, outcome, chunk sequence; core/inference_file.py): where '
               'a reaction\'s time goes. Empty disables.'})

    def __post_init__(self) -> None:
        head, _, index = self.device.partition(':')
        if self.device not in ('auto', 'cpu', 'cuda') and not (head == 'cuda'
                                                               and index.isdigit()):
            raise ValueError(f"device is {self.device!r}; expected 'auto', 'cpu', 'cuda' or "
                             "'cuda:<n>'")
        if not self.state_topic:
            raise ValueError('state_topic is empty; give the JointState topic of the robot '
                             'state (joint_states, robot_state)')
        for entry in self.camera_map:
            camera, sep, key = entry.partition(':')
            if entry and not (sep and camera and key):
                raise ValueError(f'camera_map entry {entry!r} is not "<camera>:<image key>", '
                                 "e.g. 'front:observation.images.top'")
            if entry and camera not in self.cameras:
                raise ValueError(f'camera_map entry {entry!r} names camera {camera!r}, not one '
                                 f'of cameras {list(self.cameras)}')


class PolicyNode(Node):
    """ROS adapter for a policy backend, with refill-driven inference on a worker thread."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._running = False
        super().__init__('policy')
        self.cfg = declare_config(self, PolicyConfig)
        reject_unknown_parameters(self)
        self.load_error = ''
        self.load_time_s = 0.0
        self.backend: Any = None
        self._load_backend()
        self.action_names = tuple(self.backend.action_names) if self.backend else ()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._joints: JointState | None = None
        self._lang_ctx: LanguageContext | None = None
        self._context_wall: float | None = None  # monotonic arrival of the context's revision
        self._inference_log = (InferenceFile(self.cfg.inference_log_path)
                               if self.cfg.inference_log_path else None)
        self._task_revision = 0
        self._task = ''
        self._status: RuntimeStatus | None = None
        self._status_wall = 0.0
        self._sequence = 0
        self.gate = InferenceGate(self.cfg.max_inference_hz, ACK_TIMEOUT_S)
        self.discarded_in_flight = 0
        self.failures = 0
        self.timeouts = 0
        self.expired = 0  # chunks already in the past when inferred, not published
        self._expired_last = False
        self.inferences = 0
        self.chunks_published = 0
        self.last_error = ''
        self._last_outcome = ''  # 'ok' | 'failed' | 'timeout' | 'expired' of the last inference
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._infer_started: float | None = None
        self.continuity = ChunkContinuity()
        self.rtc_guided = 0  # inferences given the executing chunk's left-over
        self._rtc_delay = 0

        self._pub = self.create_publisher(ActionChunk, 'action_chunk', qos.COMMAND)
        self.create_subscription(JointState, self.cfg.state_topic, self._on_joints,
                                 qos.SENSOR)
        self.create_subscription(RuntimeStatus, 'runtime_status', self._on_status, qos.STATUS)
        if self.cfg.condition_on == 'context':
            self.create_subscription(LanguageContext, 'language_context', self._on_context,
                                     qos.LATCHED)
        else:
            # Latched and default-QoS publishers both reach it (nodes/commands.py).
            CommandSubscription(self, String, 'task', lambda msg, _sent: self._on_task(msg))
        self.observations = LatestObservations(self, self.cfg.cameras,
                                               self.cfg.image_topic_pattern,
                                               self.cfg.ground_truth_topic)
        self._running = True
        self._thread = threading.Thread(target=self._work, name='policy-inference',
                                        daemon=True)
        self._thread.start()
        self.diagnostics = DiagnosticsPublisher(self, 'policy', self._diagnostic_status,
                                                self.cfg.diagnostics_period_s)
        if self.backend is None:
            self.diagnostics.publish_now()
            return
        self.get_logger().info(f'policy ready: backend={self.cfg.backend!r}, horizon='
                               f'{self.cfg.chunk_horizon}, conditioned on '
                               f'{self.cfg.condition_on}, actions {list(self.action_names)}')

    def _load_backend(self) -> None:
        """Build the backend; a failure is kept (diagnostics) instead of ending the process."""
        cls = load_backend('policy', self.cfg.backend)  # an unknown name is a parameter error
        if self.cfg.backend == 'scripted' and not self.cfg.ground_truth_topic:
            self.load_error = ('the scripted policy is a simulator expert that needs '
                               'sim/ground_truth, and ground_truth_topic is empty (a real '
                               'graph); use backend lerobot with model_path')
            self.get_logger().error(f'policy not loaded: {self.load_error}')
            return
        start = time.monotonic()
        self.get_logger().info(f'loading policy backend {self.cfg.backend!r}'
                               + (f' from {self.cfg.model_path}' if self.cfg.model_path
                                  else ''))
        try:
            self.backend = cls(self.cfg)
        except BackendNotFound:
            raise
        except Exception as exc:  # noqa: BLE001 - any load failure is reported, not fatal
            self.load_error = f'{type(exc).__name__}: {exc}'
            self.get_logger().error(f'policy backend {self.cfg.backend!r} failed to load; the '
                                    f'node stays up without chunks: {self.load_error}')
        self.load_time_s = time.monotonic() - start
        if self.backend is not None:
            self.get_logger().info(f'policy backend {self.cfg.backend!r} loaded in '
                                   f'{self.load_time_s:.1f} s')

    def _diagnostic_status(self) -> tuple[str, str, dict[str, Any]]:
        with self._lock:
            lat = np.asarray(self._latencies) * 1000.0
            running = (time.monotonic() - self._infer_started
                       if self._infer_started is not None else 0.0)
            values: dict[str, Any] = {
                'backend': self.cfg.backend, 'model_path': self.cfg.model_path,
                'load_state': 'failed' if self.backend is None else 'loaded',
                'load_error': self.load_error, 'load_time_s': self.load_time_s,
                'inferences': self.inferences, 'chunks_published': self.chunks_published,
                'failures': self.failures, 'timeouts': self.timeouts,
                'discarded_in_flight': self.discarded_in_flight,
                'expired_chunks': self.expired,
                'latency_last_ms': float(lat[-1]) if lat.size else 0.0,
                'latency_p50_ms': float(np.median(lat)) if lat.size else 0.0,
                'latency_mean_ms': float(lat.mean()) if lat.size else 0.0,
                'inference_running_s': running, 'last_error': self.last_error,
                'actions': ','.join(self.action_names),
                'rtc': 'on' if self._rtc_on() else 'off', 'rtc_guided': self.rtc_guided,
                'rtc_delay_steps': self._rtc_delay,
            }
            outcome = self._last_outcome
        for attr in ('policy_type', 'device', 'chunk_length'):
            if hasattr(self.backend, attr):
                values[attr] = getattr(self.backend, attr)
        timeout = self.cfg.inference_timeout_s
        if self.backend is None:
            return 'error', f'policy not loaded: {self.load_error}', values
        if timeout > 0 and running > timeout:
            return 'warn', f'inference running for {running:.1f} s (timeout {timeout} s)', values
        if outcome == 'failed':
            return 'warn', f'last inference failed: {self.last_error}', values
        if outcome == 'timeout':
            return 'warn', 'last inference exceeded inference_timeout_s', values
        if outcome == 'expired':
            return 'warn', 'last chunk expired before it could be published (inference slower ' \
                'than a chunk lasts)', values
        return 'ok', f'{self.chunks_published} chunks published', values

    def _rtc_on(self) -> bool:
        return bool(getattr(self.backend, 'rtc', False))

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    # --- inputs -------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        with self._lock:
            self._joints = msg

    def _on_context(self, msg: LanguageContext) -> None:
        with self._lock:
            if self._lang_ctx is None or msg.revision != self._lang_ctx.revision:
                self._context_wall = time.monotonic()
            self._lang_ctx = msg
        self._wake.set()

    def _on_task(self, msg: String) -> None:
        with self._lock:
            if msg.data != self._task:
                self._task = msg.data
                self._task_revision += 1
        self._wake.set()

    def _on_status(self, msg: RuntimeStatus) -> None:
        with self._lock:
            self._status = msg
            self._status_wall = time.monotonic()
            self.gate.acknowledged(msg.last_accepted_sequence)
        self._wake.set()

    # --- inference ----------------------------------------------------------------------
    def _instruction(self) -> tuple[str, int]:
        """(instruction, revision) the next chunk is conditioned on; '' when there is none."""
        if self.cfg.condition_on == 'task':
            return self._task, self._task_revision
        ctx = self._lang_ctx
        if ctx is None:
            return '', 0
        return action_instruction((ctx.task, ctx.subtask)), int(ctx.revision)

    def _flush_revision(self) -> int:
        """Flush revision of the context (0 from the publisher = every revision flushes)."""
        if self.cfg.condition_on == 'task':
            return self._task_revision
        ctx = self._lang_ctx
        if ctx is None:
            return 0
        return int(ctx.flush_revision) or int(ctx.revision)

    def _should_infer(self) -> bool:
        st = self._status
        if self.backend is None:
            return False
        # Cameras the model cannot run without: wait for their first frames instead of
        # counting start-up as failed inferences.
        needed = getattr(self.backend, 'required_cameras', ())
        if needed and not all(self.observations.image(c) is not None for c in needed):
            return False
        if st is None or self._joints is None:
            return False
        instruction, revision = self._instruction()
        if not instruction:
            return False
        now = time.monotonic()
        return self.gate.should_start(now, ExecutorView(
            acting=st.mode == RuntimeStatus.MODE_ACTION, needs_refill=st.needs_refill,
            revision=st.context_revision,
            fresh=now - self._status_wall <= self.cfg.status_timeout_s,
            flush_revision=int(st.flush_revision) or None), revision, self._flush_revision())

    def _work(self) -> None:
        while self._running:
            with self._lock:
                # Inputs wake the loop; so does the end of the rate limit (a newer subtask that
                # came just after a refill started must not wait for the next input).
                timeout = self.gate.wait_s(time.monotonic(), 0.1)
            self._wake.wait(timeout=timeout)
            self._wake.clear()
            with self._lock:
                if not self._running or not self._should_infer():
                    continue
                instruction, revision = self._instruction()
                flush = self._flush_revision()
                context_wall = self._context_wall if self.cfg.condition_on == 'context' else None
                self.gate.started(time.monotonic(), revision, flush)
                joints = self._joints
                # The executor owns the control rate; 0 (not announced) = its own period.
                period = float(self._status.control_period_s)
                observation = {
                    'instruction': instruction,
                    'joint_names': list(joints.name),
                    'joint_positions': np.asarray(joints.position, dtype=np.float64),
                    'images': self.observations.images(),
                    'ground_truth': self.observations.ground_truth(),
                    'stamp_s': convert.stamp_to_s(joints.header.stamp),
                    'control_period_s': period or None,
                    'clock_start_s': self._now_s(),
                }
                # Row 0 of the chunk is due at the observation's time, or with RTC where it
                # joins the chunk being played (core/rtc.py).
                observation['chunk_stamp_s'] = observation['stamp_s']
                if self._rtc_on():
                    st = self._status
                    playing = int(st.last_chunk_sequence) if st.queue_depth > 0 else -1
                    cont = self.continuity.continuation(observation['clock_start_s'], revision,
                                                        playing, period)
                    observation['rtc'] = cont
                    if cont is not None:
                        observation['chunk_stamp_s'] = cont.stamp_s
                        self.rtc_guided += 1
                        self._rtc_delay = cont.inference_delay
            self._infer_and_publish(observation, instruction, revision, flush, context_wall)

    def _log_inference(self, start: float, end: float, outcome: str,
                       observation: dict[str, Any], revision: int, flush: int | None,
                       context_wall: float | None, sequence: int | None = None) -> None:
        if self._inference_log is not None:
            self._inference_log.write(
                revision=revision, flush_revision=revision if flush is None else flush,
                context_wall=context_wall, start=start, end=end,
                stamp=observation['chunk_stamp_s'], outcome=outcome, sequence=sequence,
                rtc_delay=(observation['rtc'].inference_delay
                           if observation.get('rtc') is not None else None))

    def _infer_and_publish(self, observation: dict[str, Any], instruction: str,
                           revision: int, flush: int | None = None,
                           context_wall: float | None = None) -> None:
        start = time.monotonic()
        with self._lock:
            self._infer_started = start
        try:
            if self.cfg.added_latency_s > 0:
                time.sleep(self.cfg.added_latency_s)  # an emulated slower model
            values = np.asarray(self.backend.infer(observation), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - a failed inference is logged, the loop goes on
            end = time.monotonic()
            with self._lock:
                self._infer_started = None
                self.failures += 1
                self._last_outcome = 'failed'
                self.last_error = f'{type(exc).__name__}: {exc}'
                self._log_inference(start, end, 'failed', observation, revision, flush,
                                    context_wall)
            self.get_logger().error(f'inference failed ({self.failures} so far): '
                                    f'{self.last_error}', throttle_duration_sec=2.0)
            return
        # The backend's end: the log's latency_s is the latency /diagnostics reports.
        end = time.monotonic()
        elapsed = end - start
        timeout = self.cfg.inference_timeout_s
        with self._lock:
            self._infer_started = None
            self.inferences += 1
            self._latencies.append(elapsed)
            # On the executor's clock (sim time in simulation): RTC's delay is in its steps.
            self.continuity.record_latency(self._now_s() - observation['clock_start_s'])
            if timeout > 0 and elapsed > timeout:
                self.timeouts += 1
                self._last_outcome = 'timeout'
                self._log_inference(start, end, 'timeout', observation, revision, flush,
                                    context_wall)
                self.get_logger().warning(f'inference took {elapsed:.2f} s > inference_timeout_s '
                                          f'{timeout} s: chunk discarded ({self.timeouts} so '
                                          'far)', throttle_duration_sec=2.0)
                return
            if self._expired(observation, values, elapsed):
                self._log_inference(start, end, 'expired', observation, revision, flush,
                                    context_wall)
                return
            self._last_outcome = 'ok'
            flush = revision if flush is None else flush
            current = self._flush_revision()
            if current > flush:  # an operator change came during inference
                self.discarded_in_flight += 1
                self._log_inference(start, end, 'discarded', observation, revision, flush,
                                    context_wall)
                self.get_logger().info(f'discarded a chunk computed for revision {revision}; '
                                       f'an operator change came at revision {current}')
                return
            self._sequence += 1
            msg = convert.chunk_to_msg(values, self.action_names, revision=revision,
                                       sequence=self._sequence,
                                       stamp_s=observation['chunk_stamp_s'],
                                       period_s=observation['control_period_s'] or 0.0,
                                       instruction=instruction, backend=self.cfg.backend,
                                       flush_revision=flush)
            self.gate.published(self._sequence, time.monotonic())
            model_actions = getattr(self.backend, 'last_model_actions', None)
            if self._rtc_on() and model_actions is not None:
                self.continuity.published(model_actions, observation['chunk_stamp_s'],
                                          observation['control_period_s'] or 0.0, revision,
                                          self._sequence)
            self._log_inference(start, end, 'published', observation, revision, flush,
                                context_wall, self._sequence)
        try:
            self._pub.publish(msg)
            with self._lock:
                self.chunks_published += 1
        except _rclpy.RCLError as exc:  # DDS refused the write: the next refill retries
            if not self.context.ok():
                return
            with self._lock:
                self.failures += 1
                self.gate.publish_failed()
            self.get_logger().error(f'publishing chunk {msg.sequence} failed: {exc}',
                                    throttle_duration_sec=2.0)

    def _expired(self, observation: dict[str, Any], values: np.ndarray, elapsed: float) -> bool:
        """Drop a chunk whose every action is already in the past (call with the lock held).

        The executor would discard it as expired, and the gate would then wait for an ack
        that never comes (ACK_TIMEOUT_S) while the arm holds: a one-off slow inference (a
        model's first call, a busy CPU) cost the arm a second. Dropped here, the next
        inference starts at once on a fresh observation. Two in a row are published anyway,
        so that a clock that disagrees with the executor's never silences the policy (the
        executor judges, and says a slower device is the cause).
        """
        period = float(observation.get('control_period_s') or 0.0)
        age = self._now_s() - float(observation['chunk_stamp_s'])
        if period <= 0.0 or values.ndim != 2 or age < values.shape[0] * period \
                or self._expired_last:
            self._expired_last = False
            return False
        self._expired_last = True
        self.expired += 1
        self._last_outcome = 'expired'
        self.get_logger().warning(
            f'inference took {elapsed:.3f} s: every action of the chunk was in the past '
            f'(observation {age:.3f} s old >= {values.shape[0]} x {period:.4f} s); dropped, '
            f'inferring again on a fresh observation ({self.expired} so far)',
            throttle_duration_sec=2.0)
        return True

    def close(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        close = getattr(self.backend, 'close', None)
        if callable(close):
            close()
        if self._inference_log is not None and not (self._thread and self._thread.is_alive()):
            self._inference_log.close()  # else a stuck inference still writes its line


def main(args: list[str] | None = None) -> int:
    return runner.run(PolicyNode, args, name='policy')


if __name__ == '__main__':
    raise SystemExit(main())
