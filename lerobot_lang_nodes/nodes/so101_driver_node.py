"""`so101_driver` lifecycle node: the real SO-101 follower arm on ROS, through the core executor.

configure = open the port, ping, verify models, apply LeRobot's configuration (torque off);
activate = goal := present, torque on; deactivate = hold, torque off; cleanup / shutdown /
error = torque off when ``disable_torque_on_shutdown``. With ``auto_configure`` and
``auto_activate`` (defaults, for the pip-only bring-up that has no lifecycle tooling) the node
walks itself to active; a failed automatic configure is retried every ``reconnect_period_s``.

What the arm does (health, watchdog, fault latch, reconnect, the loop's error policy) is
decided by the ROS-free `so101.control_host.So101ControlHost`; this node maps lifecycle
transitions, services and topics onto it and publishes what it returns. One control thread
(not an executor callback, so a slow callback cannot delay the bus) runs the host's cycle at
``ctrl_hz``: read_state -> executor.tick -> clamp (calibrated limits and max_relative_target
against the fresh present position) -> write_goal. No action means no write (the last safe
goal stays; stale actions are never replayed). The arm always starts paused on real hardware:
call `resume`. A lost port pauses and is retried every ``reconnect_period_s``; the lifecycle
state stays where it was so the node comes back healthy without tooling.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.lifecycle import State, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
from lerobot_lang_nodes.core.control_loop import (ControlLoop, Outputs, hold_or_give_up,
                                                  scheduling_label, set_realtime)
from lerobot_lang_nodes.core.dispatch_file import DispatchFile
from lerobot_lang_nodes.core.executor import ChunkExecutor
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.diagnostics import make_status
from lerobot_lang_nodes.nodes.execution import (ArmExecutionParams, change_limits,
                                                make_chunk_executor, submit_chunk_msg)
from lerobot_lang_nodes.nodes.params import (declare_config, ParameterError,
                                             watch_runtime_parameters,
                                             reject_unknown_parameters)
from lerobot_lang_nodes.nodes.publishing import PublishError, PublishGuard
from lerobot_lang_nodes.nodes.teleop import TeleopPort
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, load_calibration
from lerobot_lang_nodes.so101.control_host import HostConfig, So101ControlHost
from lerobot_lang_nodes.so101.robot import RobotState, So101Config, So101Robot

LOOP_FAILURE_EXIT = 70  # EX_SOFTWARE: the bring-up reports the driver as failed


@dataclass(frozen=True)
class So101DriverConfig(ArmExecutionParams):
    """Parameters of the so101_driver node (plus the executor's, shared with sim_bridge)."""

    port: str = field(default='', metadata={
        'doc': 'Serial device of the arm, e.g. /dev/serial/by-id/usb-... or the emulator '
               '--link path.'})
    calibration_id: str = field(default='', metadata={
        'doc': "LeRobot robot id: reads <calibration root>/robots/so_follower/<id>.json."})
    calibration_path: str = field(default='', metadata={
        'doc': 'Explicit calibration JSON path (wins over calibration_id).'})
    baudrate: int = field(default=1_000_000, metadata={'doc': 'Bus baud rate.',
                                                      'range': (9600, 1_000_000)})
    ctrl_hz: float = field(default=30.0, metadata={
        'doc': 'Control rate: one read, one executor tick and at most one goal write (Hz).',
        'range': (1.0, 200.0)})
    max_relative_target_per_joint_rad: tuple[float, ...] = field(
        default=(0.0,) * len(JOINT_NAMES), metadata={
            'doc': 'Per-joint override of max_relative_target_rad in the order '
                   f'{list(JOINT_NAMES)}; 0 entries use the global value.'})
    command_timeout_s: float = field(default=0.5, metadata={
        'doc': 'Watchdog: in action mode without a valid action for this long, the goal is '
               'set to the present position (0 disables). Settable at run time: shortened at '
               'any time, lengthened only while paused.', 'range': (0.0, 60.0),
        'runtime': True})
    start_paused: bool = field(default=True, metadata={
        'doc': 'Start paused (real hardware: call the resume service before anything moves).'})
    aux_every_n: int = field(default=10, metadata={
        'doc': 'Read velocity/load/voltage/temperature every n-th control cycle.',
        'range': (1, 1000)})
    auto_configure: bool = field(default=True, metadata={
        'doc': 'Configure at start-up (no lifecycle tooling needed); retried on bus errors.'})
    auto_activate: bool = field(default=True, metadata={
        'doc': 'Activate (torque on, holding position) after an automatic configure.'})
    reconnect_period_s: float = field(default=1.0, metadata={
        'doc': 'Period of reconnection (and automatic configure) attempts (s).',
        'range': (0.05, 60.0)})
    disable_torque_on_shutdown: bool = field(default=True, metadata={
        'doc': 'Torque off on cleanup, shutdown, error and process exit (LeRobot default).'})
    diagnostics_hz: float = field(default=2.0, metadata={'doc': 'diagnostics rate (Hz).',
                                                         'range': (0.1, 50.0)})
    timeout_margin_ms: float = field(default=20.0, metadata={
        'doc': 'Added to the computed reply timeout (USB latency; raise on loaded hosts).',
        'range': (0.0, 1000.0)})
    retries: int = field(default=2, metadata={'doc': 'Bus retries after a failed transaction.',
                                              'range': (0, 10)})
    thread_priority: int = field(default=50, metadata={
        'doc': 'SCHED_FIFO priority of the control thread (1..99, as ros2_control; 0: normal '
               'scheduling): the servos are read and written on time although the host is busy '
               'with cameras and models. Refused without an rtprio limit or CAP_SYS_NICE: the '
               'loop then runs normally and says so (log and /diagnostics).', 'range': (0, 99)})


class So101DriverNode(LifecycleNode):
    """Lifecycle node driving the SO-101 through the ROS-free So101ControlHost."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._control: ControlLoop | None = None
        self._scheduling_refused = ''  # why thread_priority could not be applied
        self._state: RobotState | None = None  # the last cycle's reading, when it succeeded
        self._state_s = 0.0
        super().__init__('so101_driver')
        self.cfg = declare_config(self, So101DriverConfig)
        reject_unknown_parameters(self)
        cfg = self.cfg
        if not cfg.port:
            raise ParameterError("parameter 'port' is empty; set it to the arm's serial device "
                                 '(e.g. /dev/ttyACM0) or the emulator --link path')
        if len(cfg.max_relative_target_per_joint_rad) != len(JOINT_NAMES):
            raise ParameterError(
                f'max_relative_target_per_joint_rad has '
                f'{len(cfg.max_relative_target_per_joint_rad)} values; give '
                f'{len(JOINT_NAMES)} (order {list(JOINT_NAMES)}), 0 = use the global value')
        # A missing or malformed calibration is a configuration error: exit 2 with the field.
        self.calibration = load_calibration(cfg.calibration_id or None,
                                            cfg.calibration_path or None)
        self.joint_names = tuple(JOINT_NAMES)
        self._dispatch_log = (DispatchFile(cfg.dispatch_log_path)
                              if cfg.dispatch_log_path else None)
        self._dispatching: tuple[int, int, int] = (0, 0, 0)  # the executor's last action
        self.chunk_executor = self._make_chunk_executor()
        self.host = So101ControlHost(
            self._make_robot, self.chunk_executor,
            HostConfig(command_timeout_s=cfg.command_timeout_s,
                       reconnect_period_s=cfg.reconnect_period_s, port=cfg.port),
            now=self._now, emit=runner.log_emitter(self),
            joint_ids={j: self.calibration[j].id for j in JOINT_NAMES})
        watch_runtime_parameters(self, So101DriverConfig, self._apply_parameters)
        self._joint_pub = self.create_publisher(JointState, 'joint_states', qos.SENSOR)
        self._diag_pub = self.create_publisher(DiagnosticArray, 'diagnostics', qos.STATUS)
        self._status_pub = self.create_publisher(RuntimeStatus, 'runtime_status', qos.STATUS)
        self.create_subscription(ActionChunk, 'action_chunk', self._on_chunk, qos.COMMAND)
        self.create_subscription(Float64, 'burst', self._on_burst, qos.COMMAND)
        self.create_subscription(LanguageContext, 'language_context', self._on_context,
                                 qos.LATCHED)
        self.create_service(Trigger, 'pause', self._on_pause)
        self.create_service(Trigger, 'resume', self._on_resume)
        self.create_service(Trigger, '~/reset_fault', self._on_reset_fault)
        # Teleop: the leader arm (/leader/joint_states) commands through the same host and
        # clamps; takeover / handback are refused as resume is (fault, disconnected, inactive).
        self._present = None
        self._control_source = self.chunk_executor.control_source
        self.teleop = TeleopPort(
            self, cfg, self._now, lambda: self._present,
            lambda: self._status_pub.publish(convert.status_to_msg(
                self.chunk_executor.status(), self._now())),
            refusal=self.host.refusal, on_teleop=self._teleop, on_handback=self.host.handback)
        self._auto_timer = None
        # A failed publish (DDS refused a write) costs one tick's outputs, never the loop:
        # the servos must keep being read, clamped and watched.
        self._outputs = PublishGuard(self, 'publish', 'the control loop goes on',
                                     on_failed=self._count_publish_error)
        self.get_logger().info(
            f'so101_driver on {cfg.port} at {cfg.baudrate} baud, ctrl_hz={cfg.ctrl_hz}, '
            f'max_relative_target={self._max_relative()}, watchdog={cfg.command_timeout_s} s, '
            f'start_paused={cfg.start_paused}')
        if cfg.auto_configure and not self._auto_bring_up():
            self._auto_timer = self.create_timer(cfg.reconnect_period_s, self._auto_bring_up)

    # Read-only views kept for tests and tools that look at the node.
    @property
    def robot(self) -> So101Robot | None:
        return self.host.robot

    @property
    def loop_errors(self) -> int:
        return self.host.errors.count

    def _apply_parameters(self, changes: dict) -> str:
        """`ros2 param set` on a safety limit: tighten any time, loosen only while paused."""
        problem = change_limits(self, changes)
        if problem:
            return problem
        if 'max_relative_target_rad' in changes:
            self.host.set_max_relative_target(self._max_relative())
        if 'command_timeout_s' in changes:
            self.host.set_command_timeout(self.cfg.command_timeout_s)
        return ''

    # --- construction helpers -------------------------------------------------------------
    def _max_relative(self) -> float | dict[str, float] | None:
        cfg = self.cfg
        per = {j: v for j, v in zip(JOINT_NAMES, cfg.max_relative_target_per_joint_rad) if v > 0}
        if per:
            glob = cfg.max_relative_target_rad
            return {j: per.get(j, glob) for j in JOINT_NAMES if per.get(j, glob) > 0}
        return cfg.max_relative_target_rad or None

    def _make_chunk_executor(self) -> ChunkExecutor:
        from lerobot_lang_nodes.so101.units import JointConverter
        units = JointConverter(self.calibration)
        return make_chunk_executor(self.cfg, self.joint_names, self.cfg.ctrl_hz, units.lower_rad,
                             units.upper_rad, on_dispatch=self._on_dispatch)

    def _on_dispatch(self, sequence: int, revision: int, step: int, _action) -> None:
        # Called inside host.cycle() before the write; logged once the write has happened.
        self._dispatching = (sequence, revision, step)

    def _make_robot(self) -> So101Robot:
        cfg = self.cfg
        return So101Robot(So101Config(
            port=cfg.port, calibration=self.calibration, baudrate=cfg.baudrate,
            max_relative_target_rad=self._max_relative(), aux_every_n=cfg.aux_every_n,
            disable_torque_on_disconnect=cfg.disable_torque_on_shutdown,
            retries=cfg.retries, timeout_margin_ms=cfg.timeout_margin_ms))

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _auto_bring_up(self) -> bool:
        """One automatic configure (+ activate) attempt; True when nothing is left to do."""
        if self.host.robot is None and \
                self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            return False  # logged by on_configure; the timer retries
        if self.cfg.auto_activate and not self.host.active and self.host.health == 'ok':
            # A bus hiccup during activate is retried as well (the node stays inactive).
            if self.trigger_activate() != TransitionCallbackReturn.SUCCESS:
                return False
        if self._auto_timer is not None:
            self._auto_timer.cancel()
            self._auto_timer = None
        return True

    # --- lifecycle ------------------------------------------------------------------------
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        problem = self.host.configure()
        if problem:
            self.get_logger().error(f'configure failed: {problem}', throttle_duration_sec=10.0)
            self._publish_diagnostics(None)
            return TransitionCallbackReturn.FAILURE
        cfg = self.cfg
        self._control = ControlLoop(
            ctrl_hz=cfg.ctrl_hz,
            rates_hz={'status': cfg.status_hz, 'diagnostics': cfg.diagnostics_hz},
            # Missed slots are skipped, never run back to back: the executor's catch-up has
            # already skipped the late actions, so sprinting would play the rest early.
            pace_hz=cfg.ctrl_hz, cycle=self._cycle, publish=self._publish_outputs,
            # After a failed cycle the error path has reported; what was read is unknown.
            on_error=self._on_loop_error, on_ok=self.host.loop_ok, outputs_after_error=False,
            publish_failed=self._outputs.failed, publish_error=PublishError,
            needs_refill=self.chunk_executor.needs_refill, ok=self.context.ok)
        self._thread = threading.Thread(target=self._loop, args=(self._control,),
                                        name='so101-control', daemon=True)
        self._thread.start()
        self.get_logger().info('configured: servos answer, LeRobot settings applied, torque off')
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        problem = self.host.activate()
        if problem:
            self.get_logger().error(f'activate failed: {problem}')
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(f'active: torque on, holding; mode '
                               f'{self.chunk_executor.mode} (call resume to move)')
        return super().on_activate(state)

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        self.host.deactivate()
        self.get_logger().info('inactive: torque off')
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: State) -> TransitionCallbackReturn:
        self.get_logger().error('lifecycle error: releasing the arm')
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        """Stop the control thread, torque off (when configured) and close the port."""
        self.host.active = False
        if self._control is not None:
            self._control.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None
        self.host.release()

    # --- inputs ---------------------------------------------------------------------------
    def _on_chunk(self, msg: ActionChunk) -> None:
        # While faulted, disconnected or inactive the executor is paused, so submit() counts
        # the chunk as stale ('paused'): motion is refused without a special case here.
        submit_chunk_msg(self.chunk_executor, msg, self._now())

    def _on_context(self, msg: LanguageContext) -> None:
        self.chunk_executor.set_revision(int(msg.revision), int(msg.flush_revision) or None)

    def _on_pause(self, _req, response: Trigger.Response) -> Trigger.Response:
        self.host.pause()
        response.success, response.message = True, 'paused; queue cleared, holding position'
        self.get_logger().info('paused')
        return response

    def _on_resume(self, _req, response: Trigger.Response) -> Trigger.Response:
        refusal = self.host.resume()
        response.success, response.message = not refusal, refusal or 'resumed'
        if not refusal:
            self.get_logger().info('resumed')
        return response

    def _teleop(self, follower) -> None:
        refusal = self.host.teleop(follower)
        if refusal:  # the arm faulted between the service's check and now
            self.get_logger().error(f'takeover refused: {refusal}')

    def _on_burst(self, msg: Float64) -> None:
        """Timed burst: act for msg.data seconds, then pause (refused as resume would be)."""
        refusal = self.host.burst(msg.data)
        if refusal:
            self.get_logger().error(f'burst refused: {refusal}')
            return
        self.get_logger().info(f'burst: acting for {msg.data:.2f} s, then pausing')

    def _on_reset_fault(self, _req, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.host.reset_fault()
        if response.success:
            self.get_logger().info('fault reset; paused until resume')
        return response

    # --- the control thread ---------------------------------------------------------------
    def _loop(self, control: ControlLoop) -> None:
        self._scheduling_refused = set_realtime(self.cfg.thread_priority)
        if self._scheduling_refused:
            self.get_logger().warning(f'control thread: {self._scheduling_refused}')
        control.run()

    def _cycle(self) -> None:
        """Read, command and watch the servos once (So101ControlHost.cycle)."""
        self._state = None
        cycle = self.host.cycle()
        now = self._now()
        if cycle.goal is not None and self._dispatch_log is not None:
            self._dispatch_log.write(now, cycle.written_at, *self._dispatching, cycle.goal)
        if cycle.state is not None:
            self._present = cycle.state.position_rad.copy()
        self._state, self._state_s = cycle.state, now

    def _publish_outputs(self, due: Outputs) -> None:
        now = self._state_s
        if self._state is not None:
            self._publish_joints(self._state, now)
        # Who commands the arm changed (e.g. the leader fell silent): say it at once.
        source = self.chunk_executor.control_source
        switched, self._control_source = source != self._control_source, source
        if 'status' in due or due.refill or switched:
            self._status_pub.publish(convert.status_to_msg(self.chunk_executor.status(), now))
        if 'diagnostics' in due:
            self._publish_diagnostics(now)

    def _on_loop_error(self, exc: Exception) -> bool:
        return hold_or_give_up(exc, hold=self.host.loop_error, report=self._report_loop_error,
                               ok=self.context.ok, give_up=self._fail_hard)

    def _report_loop_error(self) -> None:
        with self._outputs:
            self._publish_diagnostics(None)

    def _count_publish_error(self) -> None:
        self.host.publish_errors += 1

    def _fail_hard(self, exc: BaseException) -> None:
        """The loop cannot go on safely: torque off and exit non-zero for the bring-up."""
        self.get_logger().fatal(f'control loop cannot continue ({type(exc).__name__}: {exc};'
                                f' {self.host.detail}); disabling torque and exiting')
        try:
            self.host.fail_safe()
        finally:
            os._exit(LOOP_FAILURE_EXIT)

    # --- outputs --------------------------------------------------------------------------
    def _publish_joints(self, state: RobotState, now: float) -> None:
        msg = JointState(name=list(self.joint_names), position=state.position_rad.tolist())
        if state.velocity_rad_s is not None:
            msg.velocity = state.velocity_rad_s.tolist()
        if state.effort_nm is not None:
            msg.effort = state.effort_nm.tolist()
        convert.s_to_stamp(now, msg.header.stamp)
        self._joint_pub.publish(msg)

    def _publish_diagnostics(self, now: float | None) -> None:
        arr = DiagnosticArray()
        convert.s_to_stamp(self._now() if now is None else now, arr.header.stamp)
        cadence = self._control.cadence if self._control is not None else None
        loop = {f'loop.{k}': v for k, v in cadence.stats().items()} if cadence else {}
        loop['loop.scheduling'] = scheduling_label(self.cfg.thread_priority,
                                                   self._scheduling_refused)
        for st in self.host.diagnostics(loop):
            arr.status.append(make_status(f'so101_driver: {st.name}', self.cfg.port, st.level,
                                          st.message, st.values))
        self._diag_pub.publish(arr)

    def close(self) -> None:
        """Process exit: stop the thread, torque off (when configured), close the port."""
        self._release()
        if self._dispatch_log is not None:
            self._dispatch_log.close()


def main(args: list[str] | None = None) -> int:
    return runner.run(So101DriverNode, args, name='so101_driver')


if __name__ == '__main__':
    raise SystemExit(main())
