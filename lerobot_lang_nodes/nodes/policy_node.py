"""`policy` node: active instruction + images + joint states -> ActionChunk, refilled early.

Inference runs on its own thread. It starts when the executor's RuntimeStatus reports that
the queue fell below its refill threshold (not only when empty), and a result computed for a
language revision that changed meanwhile is discarded instead of published.
"""

from __future__ import annotations

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
from lerobot_lang_nodes.backends.registry import load_backend
from lerobot_lang_nodes.core.inference_gate import ExecutorView, InferenceGate
from lerobot_lang_nodes.core.prompts import action_instruction
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.observations import LatestObservations
from lerobot_lang_nodes.nodes.params import declare_config, reject_unknown_parameters

# A chunk that the executor has not acknowledged after this long was lost or rejected.
ACK_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class PolicyConfig:
    """Parameters of the policy node."""

    backend: str = field(default='scripted', metadata={
        'doc': 'Action policy backend; see backends/registry.py.', 'read_only': True})
    model_path: str = field(default='', metadata={
        'doc': 'Checkpoint directory for model backends; unused by `scripted`.',
        'read_only': True})
    condition_on: str = field(default='context', metadata={
        'doc': '"context": the planner\'s subtask (else task) from language_context; '
               '"task": the task only (flat policies, e.g. SmolVLA, PI0.5, ACT).',
        'choices': ('context', 'task')})
    chunk_horizon: int = field(default=15, metadata={
        'doc': 'Actions per chunk (H).', 'range': (1, 1000)})
    ctrl_hz: float = field(default=30.0, metadata={
        'doc': 'Control rate the chunk is meant for; sets control_period_s.',
        'range': (1.0, 500.0)})
    max_inference_hz: float = field(default=20.0, metadata={
        'doc': 'Upper bound on inference starts per second (chunk_hz).', 'range': (0.1, 200.0)})
    cameras: tuple[str, ...] = field(default=('front', 'wrist'), metadata={
        'doc': 'Cameras whose latest frames are given to the policy.'})
    image_topic_pattern: str = field(default='cameras/{name}/image_raw', metadata={
        'doc': 'Image topic of each camera; {name} is replaced by the camera name.'})
    ground_truth_topic: str = field(default='sim/ground_truth', metadata={
        'doc': 'Simulator ground truth (JSON) for privileged sim experts; empty disables.'})
    status_timeout_s: float = field(default=2.0, metadata={
        'doc': 'Infer only while a runtime_status newer than this was received (s).',
        'range': (0.1, 60.0)})


class PolicyNode(Node):
    """ROS adapter for a policy backend, with refill-driven inference on a worker thread."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._running = False
        super().__init__('policy')
        self.cfg = declare_config(self, PolicyConfig)
        reject_unknown_parameters(self)
        self.backend = load_backend('policy', self.cfg.backend)(self.cfg)
        self.action_names = tuple(self.backend.action_names)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._joints: JointState | None = None
        self._lang_ctx: LanguageContext | None = None
        self._task_revision = 0
        self._task = ''
        self._status: RuntimeStatus | None = None
        self._status_wall = 0.0
        self._sequence = 0
        self.gate = InferenceGate(self.cfg.max_inference_hz, ACK_TIMEOUT_S)
        self.discarded_in_flight = 0
        self.failures = 0

        self._pub = self.create_publisher(ActionChunk, 'action_chunk', qos.COMMAND)
        self.create_subscription(JointState, 'joint_states', self._on_joints, qos.SENSOR)
        self.create_subscription(RuntimeStatus, 'runtime_status', self._on_status, qos.STATUS)
        if self.cfg.condition_on == 'context':
            self.create_subscription(LanguageContext, 'language_context', self._on_context,
                                     qos.LATCHED)
        else:
            self.create_subscription(String, 'task', self._on_task, qos.LATCHED)
        self.observations = LatestObservations(self, self.cfg.cameras,
                                               self.cfg.image_topic_pattern,
                                               self.cfg.ground_truth_topic)
        self._running = True
        self._thread = threading.Thread(target=self._work, name='policy-inference',
                                        daemon=True)
        self._thread.start()
        self.get_logger().info(f'policy ready: backend={self.cfg.backend!r}, horizon='
                               f'{self.cfg.chunk_horizon}, conditioned on '
                               f'{self.cfg.condition_on}, actions {list(self.action_names)}')

    # --- inputs -------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        with self._lock:
            self._joints = msg

    def _on_context(self, msg: LanguageContext) -> None:
        with self._lock:
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

    def _should_infer(self) -> bool:
        st = self._status
        if st is None or self._joints is None:
            return False
        instruction, revision = self._instruction()
        if not instruction:
            return False
        now = time.monotonic()
        return self.gate.should_start(now, ExecutorView(
            acting=st.mode == RuntimeStatus.MODE_ACTION, needs_refill=st.needs_refill,
            revision=st.context_revision,
            fresh=now - self._status_wall <= self.cfg.status_timeout_s), revision)

    def _work(self) -> None:
        while self._running:
            self._wake.wait(timeout=0.1)
            self._wake.clear()
            with self._lock:
                if not self._running or not self._should_infer():
                    continue
                instruction, revision = self._instruction()
                self.gate.started(time.monotonic(), revision)
                joints = self._joints
                observation = {
                    'instruction': instruction,
                    'joint_names': list(joints.name),
                    'joint_positions': np.asarray(joints.position, dtype=np.float64),
                    'images': self.observations.images(),
                    'ground_truth': self.observations.ground_truth(),
                    'stamp_s': convert.stamp_to_s(joints.header.stamp),
                }
            self._infer_and_publish(observation, instruction, revision)

    def _infer_and_publish(self, observation: dict[str, Any], instruction: str,
                           revision: int) -> None:
        try:
            values = np.asarray(self.backend.infer(observation), dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - a failed inference is logged, the loop goes on
            self.failures += 1
            self.get_logger().error(f'inference failed ({self.failures} so far): '
                                    f'{type(exc).__name__}: {exc}', throttle_duration_sec=2.0)
            return
        with self._lock:
            current = self._instruction()
            if current[1] != revision:
                self.discarded_in_flight += 1
                self.get_logger().info(f'discarded a chunk computed for revision {revision}; '
                                       f'the context is now at {current[1]}')
                return
            self._sequence += 1
            msg = convert.chunk_to_msg(values, self.action_names, revision=revision,
                                       sequence=self._sequence,
                                       stamp_s=observation['stamp_s'],
                                       period_s=1.0 / self.cfg.ctrl_hz,
                                       instruction=instruction, backend=self.cfg.backend)
            self.gate.published(self._sequence, time.monotonic())
        try:
            self._pub.publish(msg)
        except _rclpy.RCLError as exc:  # DDS refused the write: the next refill retries
            if not self.context.ok():
                return
            with self._lock:
                self.failures += 1
                self.gate.publish_failed()
            self.get_logger().error(f'publishing chunk {msg.sequence} failed: {exc}',
                                    throttle_duration_sec=2.0)

    def close(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        close = getattr(self.backend, 'close', None)
        if callable(close):
            close()


def main(args: list[str] | None = None) -> int:
    return runner.run(PolicyNode, args, name='policy')


if __name__ == '__main__':
    raise SystemExit(main())
