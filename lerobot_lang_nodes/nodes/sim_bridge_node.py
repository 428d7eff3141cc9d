"""`sim_bridge` node: the MuJoCo SO-101 scene as a robot on ROS, with /clock in sim time.

One thread owns the scene: each control period it asks the core ChunkExecutor for the action
due now, applies the same safety limits as the real driver, steps physics, and publishes
clock, joint states and status. At each camera tick it hands a copy of the scene's state to a
render thread (its own GL context), which publishes the images stamped with that state's sim
time: drawing two cameras in the loop outlasted a 50 Hz period.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, JointState
from std_msgs.msg import String

from lerobot_lang_msgs.msg import LanguageContext, TaskOutcome
from lerobot_lang_nodes.core.images import SO101_CAMERAS
from lerobot_lang_nodes.core.control_loop import (ControlLoop, LoopErrors, Outputs,
                                                  scheduling_label, set_realtime)
from lerobot_lang_nodes.core.dispatch_file import DispatchFile
from lerobot_lang_nodes.core.safety import SafetyLimits
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.bridge import SimulatorBridge
from lerobot_lang_nodes.nodes.diagnostics import DiagnosticsPublisher
from lerobot_lang_nodes.nodes.execution import (ArmExecutionParams, change_limits,
                                                make_chunk_executor)
from lerobot_lang_nodes.nodes.params import (declare_config, reject_unknown_parameters,
                                             watch_runtime_parameters)
from lerobot_lang_nodes.nodes.publishing import PublishError
from lerobot_lang_nodes.nodes.teleop import TeleopPort
from lerobot_lang_nodes.sim import tasks  # text parsing only: no MuJoCo import

# RoboCasa's convention, kept so seeds mean the same across simulators.
RESET_SEED_STRIDE = 1000


@dataclass(frozen=True)
class SimBridgeConfig(ArmExecutionParams):
    """Parameters of the sim_bridge node (plus the executor's, shared with the driver)."""

    seed: int = field(default=0, metadata={
        'doc': 'Layout seed of the first episode; reset k uses seed + 1000 * k.'})
    ctrl_hz: float = field(default=30.0, metadata={
        'doc': 'Control rate: one action dispatched and one physics period per tick (Hz).',
        'range': (1.0, 500.0)})
    real_time_factor: float = field(default=1.0, metadata={
        'doc': 'Sim seconds per wall second to aim for; 0 runs as fast as the CPU allows.',
        'range': (0.0, 100.0)})
    cameras: tuple[str, ...] = field(default=SO101_CAMERAS, metadata={
        'doc': 'Cameras to render and publish on cameras/<name>/image_raw.'})
    image_width: int = field(default=320, metadata={'doc': 'Rendered image width (px).',
                                                    'range': (16, 1920)})
    image_height: int = field(default=240, metadata={'doc': 'Rendered image height (px).',
                                                     'range': (16, 1080)})
    camera_hz: float = field(default=10.0, metadata={
        'doc': 'Image publish rate (sim Hz). Frames are drawn on a render thread (~10-40 ms '
               'of CPU per camera); a camera tick during a frame is skipped and counted.',
        'range': (0.1, 60.0)})
    publish_compressed: bool = field(default=False, metadata={
        'doc': 'Also publish cameras/<name>/image_raw/compressed (JPEG, image_transport\'s '
               'name) for a policy on another computer (its image_transport compressed).'})
    jpeg_quality: int = field(default=85, metadata={
        'doc': 'JPEG quality of the compressed images.', 'range': (1, 100)})
    truth_hz: float = field(default=10.0, metadata={
        'doc': 'Rate of sim/ground_truth and sim/task_outcome (sim Hz): how often the scripted '
               'planner sees the scene (a learned one sees camera_hz frames) and how soon a met '
               'goal is reported.', 'range': (0.1, 100.0)})
    thread_priority: int = field(default=50, metadata={
        'doc': 'SCHED_FIFO priority of the simulation thread (1..99; 0: normal scheduling), '
               'as so101_driver: steadier wall-clock pacing of dispatches and outputs on a '
               "loaded host (simulated time is the bridge's own either way). Applied only "
               'when paced (real_time_factor > 0): an unpaced loop would hold a core. Refused '
               'without an rtprio limit or CAP_SYS_NICE: the loop then runs normally and says '
               'so (log and /diagnostics).', 'range': (0, 99)})
    render_nice: int = field(default=10, metadata={
        'doc': 'Nice increment of the render thread and of the software-GL threads it starts '
               '(0..19): higher lets the other nodes take the CPU before frames on a small '
               'host (frames may then be skipped: camera.skipped_ticks). Read back as '
               'camera.render_nice on /diagnostics.',
        'range': (0, 19)})
    default_task: str = field(default='put the red cube in the bowl', metadata={
        'doc': 'Task description published on sim/task_description.'})


class SimBridgeNode(SimulatorBridge, Node):
    """ROS adapter for the MuJoCo scene and the core chunk executor."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._camera_worker = None
        self._control: ControlLoop | None = None
        super().__init__('sim_bridge')
        self.cfg = declare_config(self, SimBridgeConfig)
        reject_unknown_parameters(self)
        from lerobot_lang_nodes.sim.scene import So101Scene  # MuJoCo only when this node runs
        self.scene = So101Scene(seed=self.cfg.seed,
                                image_size=(self.cfg.image_height, self.cfg.image_width),
                                cameras=self.cfg.cameras, ctrl_hz=self.cfg.ctrl_hz)
        self.joint_names = tuple(self.scene.joint_names)
        lower, upper = self.scene.joint_limits()
        self.safety = SafetyLimits(lower=lower, upper=upper,
                                   max_relative=self.cfg.max_relative_target_rad or None)
        watch_runtime_parameters(self, SimBridgeConfig, self._apply_parameters)
        self._dispatch_log = (DispatchFile(self.cfg.dispatch_log_path)
                              if self.cfg.dispatch_log_path else None)
        self.chunk_executor = make_chunk_executor(self.cfg, self.joint_names, self.cfg.ctrl_hz,
                                            lower, upper, on_dispatch=self._on_dispatch)
        self._reset_count = 0
        # Wall-clock time of the scene's last reset, in every ground truth (`reset_ns`): a
        # planner orders the reset against operator commands by it. The first sample of a new
        # scene may never reach a busy subscriber (latched depth 1: a later one replaces it),
        # so the sample's own source time cannot stand for the reset's.
        self._reset_ns = time.time_ns()
        self._goal_text = ''
        self._context_revision = 0
        self._goal = None
        self._hold = self.scene.joint_positions()
        self.loop_errors = LoopErrors()  # unexpected exceptions caught in the loop
        self._scheduling_refused = ''  # why thread_priority could not be applied
        self._init_bridge()
        # Run mode teleop: the simulated arm follows a leader arm (/leader/joint_states) as the
        # real one does, through the same executor and safety limits; takeover / handback.
        self._present = self._hold.copy()
        self._control_source = self.chunk_executor.control_source
        self.teleop = TeleopPort(self, self.cfg, self._sim_time, lambda: self._present.copy(),
                                 lambda: self._publish_status(self._sim_time()))
        self._joint_pub = self.create_publisher(JointState, 'joint_states', qos.SENSOR)
        self._image_pubs = {c: self.create_publisher(Image, f'cameras/{c}/image_raw', qos.SENSOR)
                            for c in self.cfg.cameras}
        self._info_pubs = {c: self.create_publisher(CameraInfo, f'cameras/{c}/camera_info',
                                                    qos.SENSOR) for c in self.cfg.cameras}
        self._jpeg_pubs = {c: self.create_publisher(CompressedImage,
                                                    f'cameras/{c}/image_raw/compressed',
                                                    qos.SENSOR)
                           for c in (self.cfg.cameras if self.cfg.publish_compressed else ())}
        self._truth_pub = self.create_publisher(String, 'sim/ground_truth', qos.LATCHED)
        self._outcome_pub = self.create_publisher(TaskOutcome, 'task_outcome', qos.LATCHED)
        self._task_desc_pub = self.create_publisher(String, 'sim/task_description', qos.LATCHED)
        self._have_context = False
        self._task_desc_pub.publish(String(data=self.cfg.default_task))
        if self.cfg.cameras:
            from lerobot_lang_nodes.sim.camera_worker import CameraWorker
            # Started here, on the main thread: with thread_priority the simulation thread
            # runs SCHED_FIFO, which the renderer's threads must not inherit.
            self._camera_worker = CameraWorker(self.scene.model, self.scene.image_size,
                                               self.cfg.cameras, self._publish_frames,
                                               render_stats=self.scene.stats,
                                               nice=self.cfg.render_nice)
        self.diagnostics = DiagnosticsPublisher(self, 'simulation loop', self._diagnostic_status)
        cfg = self.cfg
        self._control = self._make_control_loop(
            {'camera': cfg.camera_hz, 'status': cfg.status_hz, 'truth': cfg.truth_hz},
            self._report_real_time_factor)
        self._thread = threading.Thread(target=self._loop, name='sim-loop', daemon=True)
        self._thread.start()
        self.get_logger().info(
            f'sim_bridge ready: seed={self.scene.seed} ctrl_hz={self.cfg.ctrl_hz} cameras='
            f'{list(self.cfg.cameras)} {self.cfg.image_width}x{self.cfg.image_height}@'
            f'{self.cfg.camera_hz} Hz, real_time_factor={self.cfg.real_time_factor}')

    # --- inputs -------------------------------------------------------------------------
    def _sim_time(self) -> float:
        return self.scene.sim_time

    def _reset_reply(self) -> str:
        return f'scene reset with seed {self.scene.seed}'

    def _on_task(self, msg: String) -> None:
        with self._lock:
            if self._have_context:
                return  # the planner's context (task or re-plan) decides
            self._goal_text = msg.data.strip()
            self._goal = tasks.parse_task(self._goal_text)

    def _on_context(self, msg: LanguageContext) -> None:
        self.chunk_executor.set_revision(int(msg.revision), int(msg.flush_revision) or None)
        plan_goal = tasks.parse_task(msg.plan) if msg.plan else None
        goal_text = msg.plan if plan_goal is not None else msg.task
        with self._lock:
            self._have_context = True
            self._context_revision = int(msg.revision)
            self._goal_text = goal_text
            self._goal = plan_goal or tasks.parse_task(msg.task)

    def _apply_parameters(self, changes: dict) -> str:
        """`ros2 param set` on a safety limit: tighten any time, loosen only while paused."""
        problem = change_limits(self, changes)
        if problem:
            return problem
        # One attribute swap: the loop's next tick sees the whole new rule or the old one.
        self.safety = SafetyLimits(lower=self.safety.lower, upper=self.safety.upper,
                                   max_relative=self.cfg.max_relative_target_rad or None)
        return ''

    def _on_dispatch(self, sequence: int, revision: int, step: int, action: np.ndarray) -> None:
        if self._dispatch_log is not None:
            self._dispatch_log.write(self.scene.sim_time, time.monotonic(), sequence, revision,
                                     step, action)

    # --- the simulation thread ------------------------------------------------------------
    def _loop(self) -> None:
        cfg = self.cfg
        if cfg.thread_priority and cfg.real_time_factor <= 0:
            # Back-to-back cycles under SCHED_FIFO would leave the other nodes one core less.
            self._scheduling_refused = 'not paced (real_time_factor 0): normal scheduling'
            self.get_logger().info(f'simulation thread: {self._scheduling_refused}')
        elif cfg.thread_priority:
            self._scheduling_refused = set_realtime(cfg.thread_priority)
            if self._scheduling_refused:
                self.get_logger().warning(f'simulation thread: {self._scheduling_refused}')
        self._control.run()

    def _cycle(self) -> None:
        """One control period: the action due now, clamped, and one period of physics."""
        self._maybe_reset()
        action = self.chunk_executor.tick(self.scene.sim_time)
        present = self.scene.joint_positions()
        if action is not None:
            self._hold = self.safety.apply(action, present)
        self._hold_step()

    def _hold_step(self) -> None:
        # No action (paused, starved, error): keep the last safe target, never replay.
        self.scene.apply_action(self._hold)
        self.scene.step(1.0 / self.cfg.ctrl_hz)

    def _publish_outputs(self, due: Outputs) -> None:
        now = self.scene.sim_time
        # Who commands the arm changed (e.g. the leader fell silent): say it at once.
        source = self.chunk_executor.control_source
        switched, self._control_source = source != self._control_source, source
        self._publish_clock(now)
        self._publish_joints(now)
        if 'camera' in due and self._camera_worker is not None:
            self._camera_worker.offer(self.scene.data, now)
        # Publish at once when the queue crosses the refill threshold, so the policy starts
        # the next inference without waiting for the periodic status.
        if 'status' in due or due.refill or switched:
            self._publish_status(now)
        if 'truth' in due:
            self._publish_world(now)

    def _report_real_time_factor(self, rtf: float) -> None:
        stats = self.scene.stats
        self.get_logger().info(
            f'real-time factor {rtf:.2f} (physics alone {stats.physics_rtf:.1f}x, render '
            + ', '.join(f'{c} {stats.render_ms(c):.1f} ms' for c in self.cfg.cameras) + ')')

    def _diagnostic_status(self) -> tuple[str, str, dict]:
        extra = {'loop.scheduling': scheduling_label(self.cfg.thread_priority,
                                                     self._scheduling_refused)}
        worker = self._camera_worker
        if worker is not None:
            st = worker.stats
            extra.update({'camera.frames': st.frames, 'camera.skipped_ticks': st.skipped,
                          'camera.render_errors': st.errors,
                          'camera.last_render_error': st.last_error,
                          'camera.render_nice': '' if st.nice is None else st.nice})
        level, message, values = self._loop_diagnostics(extra)
        if level == 'ok' and worker is not None and (st.errors or not worker.alive):
            level = 'warn'
            message += (f'; cameras: {st.errors} frames lost ({st.last_error})' if st.errors
                        else '; cameras: the render thread ended')
        return level, message, values

    def _maybe_reset(self) -> None:
        request = self._take_reset_request()
        if request is None:
            return
        self._reset_count += 1
        self._reset_ns = time.time_ns()
        self.chunk_executor.clear()
        self.scene.reset(self.cfg.seed + RESET_SEED_STRIDE * self._reset_count)
        self._hold = self.scene.joint_positions()
        self.get_logger().info(f'scene reset #{self._reset_count}, seed {self.scene.seed}')
        # Publish the new world before answering, so no planner acts on the old layout (a
        # refused write costs that output only: the reset is answered all the same).
        with self._outputs:
            self._publish_status(self.scene.sim_time)
            self._publish_world(self.scene.sim_time)
        request.set()

    def _publish_joints(self, now: float) -> None:
        self._present = self.scene.joint_positions()
        msg = JointState(name=list(self.joint_names), position=self._present.tolist(),
                         velocity=self.scene.joint_velocities().tolist(),
                         effort=self.scene.joint_efforts().tolist())
        convert.s_to_stamp(now, msg.header.stamp)
        self._joint_pub.publish(msg)

    def _publish_frames(self, now: float, images: dict[str, np.ndarray]) -> None:
        """The render thread's output: one image and camera info per camera, at ``now``."""
        try:
            for cam, image in images.items():
                self._publish_image(cam, image, now)
        except PublishError as exc:
            # Not only a refused write: while ROS shuts down the render thread must stop.
            if not self.context.ok():
                from lerobot_lang_nodes.sim.camera_worker import RenderStopped
                raise RenderStopped from exc
            self._outputs.failed(exc)

    def _publish_image(self, cam: str, image: np.ndarray, now: float) -> None:
        frame = f'{cam}_camera_optical_frame'
        self._image_pubs[cam].publish(convert.rgb_to_image(image, now, frame))
        if cam in self._jpeg_pubs:  # encoded on the render thread, never in the control loop
            self._jpeg_pubs[cam].publish(convert.rgb_to_compressed(image, now, frame,
                                                                   self.cfg.jpeg_quality))
        self._info_pubs[cam].publish(
            convert.intrinsics_to_camera_info(self.scene.camera_info(cam), now, frame))

    def _publish_world(self, now: float) -> None:
        """Ground truth and the goal's outcome (at truth_hz, and after a reset)."""
        truth = {**self.scene.ground_truth(), 'reset_ns': self._reset_ns}
        self._truth_pub.publish(String(data=json.dumps(truth)))
        with self._lock:
            goal, goal_text, revision = self._goal, self._goal_text, self._context_revision
        outcome = TaskOutcome(goal=goal_text, context_revision=revision,
                              known_goal=goal is not None)
        if goal is None:
            outcome.detail = ('no task yet' if not goal_text else
                              tasks.explain_task(goal_text)[1])
        else:
            outcome.success = bool(tasks.check_success(goal, truth))
            outcome.detail = (f'{goal.text}: done' if outcome.success else
                              f'{goal.text}: not yet')
        convert.s_to_stamp(now, outcome.header.stamp)
        self._outcome_pub.publish(outcome)

    def close(self) -> None:
        if self._control is not None:
            self._control.stop()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        if self._camera_worker is not None:
            self._camera_worker.close()
        if self._dispatch_log is not None:
            self._dispatch_log.close()


def main(args: list[str] | None = None) -> int:
    return runner.run(SimBridgeNode, args, name='sim_bridge')


if __name__ == '__main__':
    raise SystemExit(main())
