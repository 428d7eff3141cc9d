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

Those decisions are ``core/policy_session.py``'s; this node converts messages, runs the
backend on its thread and publishes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
from lerobot_lang_nodes.core.images import SO101_CAMERAS
from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotConfig
from lerobot_lang_nodes.backends.registry import BackendNotFound, load_backend
from lerobot_lang_nodes.core.inference_file import InferenceFile
from lerobot_lang_nodes.core.policy_session import (Inference, Joints, PolicySession,
                                                    SessionConfig, StatusReport)
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.commands import CommandSubscription
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.observations import LatestObservations
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters
from lerobot_lang_nodes.nodes.publishing import PublishError


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
    lerobot: LeRobotConfig = field(default_factory=LeRobotConfig, metadata={
        'doc': 'Parameters of LeRobot checkpoints (backends lerobot and hierarchical): '
               'lerobot.*.'})
    added_latency_s: float = field(default=0.0, metadata={
        'doc': 'Benchmarks: wait this long in every inference before the backend runs, as a '
               'slower model would (counted in the latency); 0 disables.',
        'range': (0.0, 600.0)})
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
    cameras: tuple[str, ...] = field(default=SO101_CAMERAS, metadata={
        'doc': 'Cameras whose latest frames are given to the policy.'})
    image_topic_pattern: str = field(default='cameras/{name}/image_raw', metadata={
        'doc': 'Image topic of each camera; {name} is replaced by the camera name.'})
    image_transport: str = field(default='raw', metadata={
        'doc': '"raw": sensor_msgs/Image on image_topic_pattern (one computer: shared '
               'memory); "compressed": sensor_msgs/CompressedImage (JPEG) on '
               '<image topic>/compressed, decoded here into the same RGB arrays (a policy on '
               'another computer than the cameras; the robot side publishes them with '
               'publish_compressed).', 'choices': ('raw', 'compressed')})
    ground_truth_topic: str = field(default='sim/ground_truth', metadata={
        'doc': 'Simulator ground truth (JSON) for privileged sim experts; empty disables.'})
    status_timeout_s: float = field(default=2.0, metadata={
        'doc': 'Infer only while a runtime_status newer than this was received (s).',
        'range': (0.1, 60.0)})
    max_observation_age_s: float = field(default=0.2, metadata={
        'doc': 'Do not infer on an observation (joint state) older than this (s), its age '
               'measured on the robot side\'s clock: the newest stamp the robot issued '
               '(joint states, runtime_status) advanced by the time since it arrived, so a '
               'policy computer whose clock disagrees with the robot\'s judges the same '
               '(core/freshness.py). Counted as stale_observations on /diagnostics. '
               '0 disables.', 'range': (0.0, 60.0)})
    max_image_age_s: float = field(default=1.0, metadata={
        'doc': 'Do not infer on frames of the cameras the model needs older than this (s, on '
               'the robot\'s clock as max_observation_age_s): a slow or congested link to a '
               'policy on another computer. Counted as stale_observations. 0 disables.',
        'range': (0.0, 60.0)})
    clock_offset_s: float = field(default=0.0, metadata={
        'doc': 'Tests: add this to every reading of the node\'s clock, as on a computer whose '
               'clock disagrees with the robot\'s by that much. 0 in use.',
        'range': (-1.0e6, 1.0e6)})
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
        for entry in self.lerobot.camera_map:
            camera, sep, key = entry.partition(':')
            if entry and not (sep and camera and key):
                raise ValueError(f'lerobot.camera_map entry {entry!r} is not "<camera>:<image '
                                 "key>\", e.g. 'front:observation.images.top'")
            if entry and camera not in self.cameras:
                raise ValueError(f'lerobot.camera_map entry {entry!r} names camera {camera!r}, '
                                 f'not one of cameras {list(self.cameras)}')


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
        self._wake = threading.Event()
        self._inference_log = (InferenceFile(self.cfg.inference_log_path)
                               if self.cfg.inference_log_path else None)
        self.session = PolicySession(
            SessionConfig(condition_on=self.cfg.condition_on,
                          max_inference_hz=self.cfg.max_inference_hz,
                          status_timeout_s=self.cfg.status_timeout_s,
                          inference_timeout_s=self.cfg.inference_timeout_s,
                          max_observation_age_s=self.cfg.max_observation_age_s,
                          max_image_age_s=self.cfg.max_image_age_s,
                          rtc=bool(getattr(self.backend, 'rtc', False))),
            clock=self._now_s, emit=runner.log_emitter(self), inference_log=self._inference_log)

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
                                               self.cfg.ground_truth_topic,
                                               transport=self.cfg.image_transport)
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
        level, message, session_values = self.session.diagnostics()
        values: dict[str, Any] = {
            'backend': self.cfg.backend, 'model_path': self.cfg.model_path,
            'load_state': 'failed' if self.backend is None else 'loaded',
            'load_error': self.load_error, 'load_time_s': self.load_time_s,
            **session_values, 'actions': ','.join(self.action_names),
            'rtc': 'on' if self.session.config.rtc else 'off',
        }
        # Each camera's newest frame, aged on the robot's clock: a slow link shows here first.
        robot_now = self.session.robot_clock.now()
        for camera, stamp in self.observations.stamps().items():
            values[f'image_age_ms.{camera}'] = (robot_now - stamp) * 1000.0
        for attr in ('policy_type', 'device', 'chunk_length'):
            if hasattr(self.backend, attr):
                values[attr] = getattr(self.backend, attr)
        if self.backend is None:
            return 'error', f'policy not loaded: {self.load_error}', values
        return level, message, values

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9 + self.cfg.clock_offset_s

    # --- inputs -------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        self.session.on_joints(Joints(tuple(msg.name), np.asarray(msg.position, np.float64),
                                      convert.stamp_to_s(msg.header.stamp)))

    def _on_context(self, msg: LanguageContext) -> None:
        self.session.on_context(msg.task, msg.subtask, int(msg.revision),
                                int(msg.flush_revision))
        self._wake.set()

    def _on_task(self, msg: String) -> None:
        self.session.on_task(msg.data)
        self._wake.set()

    def _on_status(self, msg: RuntimeStatus) -> None:
        self.session.on_status(StatusReport(
            acting=msg.mode == RuntimeStatus.MODE_ACTION, needs_refill=msg.needs_refill,
            revision=int(msg.context_revision), flush_revision=int(msg.flush_revision),
            last_accepted_sequence=int(msg.last_accepted_sequence),
            last_chunk_sequence=int(msg.last_chunk_sequence),
            queue_depth=int(msg.queue_depth), control_period_s=float(msg.control_period_s),
            stamp_s=convert.stamp_to_s(msg.header.stamp) or None))
        self._wake.set()

    # --- inference ----------------------------------------------------------------------
    def _ready(self) -> bool:
        if self.backend is None:
            return False
        # Cameras the model cannot run without: wait for their first frames instead of
        # counting start-up as failed inferences.
        needed = getattr(self.backend, 'required_cameras', ())
        return all(self.observations.image(c) is not None for c in needed)

    def _observe(self) -> dict[str, Any]:
        # The frames the model needs are aged too (the scripted expert needs none).
        needed = getattr(self.backend, 'required_cameras', ())
        stamps = self.observations.stamps()
        return {'images': self.observations.images(),
                'ground_truth': self.observations.ground_truth(),
                'image_stamps': {c: stamps[c] for c in needed if c in stamps}}

    def _work(self) -> None:
        while self._running:
            # Inputs wake the loop; so does the end of the rate limit (a newer subtask that
            # came just after a refill started must not wait for the next input).
            self._wake.wait(timeout=self.session.wait_s(0.1))
            self._wake.clear()
            if not self._running:
                continue
            job = self.session.start(self._ready(), self._observe)
            if job is not None:
                self._infer_and_publish(job)

    def _infer_and_publish(self, job: Inference) -> None:
        try:
            if self.cfg.added_latency_s > 0:
                time.sleep(self.cfg.added_latency_s)  # an emulated slower model
            values = np.asarray(self.backend.infer(job.observation), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - a failed inference is logged, the loop goes on
            self.session.failed(job, exc)
            return
        chunk = self.session.finished(job, values,
                                      getattr(self.backend, 'last_model_actions', None))
        if chunk is None:
            return
        msg = convert.chunk_to_msg(chunk.values, self.action_names, revision=chunk.revision,
                                   sequence=chunk.sequence, stamp_s=chunk.stamp_s,
                                   period_s=chunk.period_s, instruction=chunk.instruction,
                                   backend=self.cfg.backend,
                                   flush_revision=chunk.flush_revision)
        try:
            self._pub.publish(msg)
            self.session.sent()
        except PublishError as exc:
            # Not only counted: the session accounts the chunk as never sent (the next refill
            # retries), which the publish guard cannot do.
            if self.context.ok():
                self.session.send_failed(chunk, str(exc))

    # How long a stop waits for an inference in flight: a VLA on a CPU takes minutes a chunk,
    # and the supervisor kills a node that has not stopped 10 s after Ctrl-C.
    STOP_WAIT_S = 2.0

    def close(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.STOP_WAIT_S)
            if self._thread.is_alive():
                # Its chunk would be for a stopped graph: leave it (runner exits without
                # waiting for it; the inference log is line-buffered, nothing written is lost).
                running = self.session.diagnostics()[2]['inference_running_s']
                self.get_logger().info(f'stopping during an inference ({running:.1f} s so far): '
                                       'not waiting for it')
                self.abandoned_threads = (self._thread,)
        close = getattr(self.backend, 'close', None)
        if callable(close):
            close()
        if self._inference_log is not None and not (self._thread and self._thread.is_alive()):
            self._inference_log.close()  # else a stuck inference still writes its line


def main(args: list[str] | None = None) -> int:
    return runner.run(PolicyNode, args, name='policy')


if __name__ == '__main__':
    raise SystemExit(main())
