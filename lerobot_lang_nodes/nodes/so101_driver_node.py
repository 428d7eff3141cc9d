"""`so101_driver` lifecycle node: the real SO-101 follower arm on ROS, through the core executor.

configure = open the port, ping, verify models, apply LeRobot's configuration (torque off);
activate = goal := present, torque on; deactivate = hold, torque off; cleanup / shutdown /
error = torque off when ``disable_torque_on_shutdown``. With ``auto_configure`` and
``auto_activate`` (defaults, for the pip-only bring-up that has no lifecycle tooling) the node
walks itself to active; a failed automatic configure is retried every ``reconnect_period_s``.

One control thread (not an executor callback, so a slow callback cannot delay the bus) owns
the bus while configured: read_state -> executor.tick -> clamp (calibrated limits and
max_relative_target against the fresh present position) -> write_goal. No action means no
write (the last safe goal stays; stale actions are never replayed). The arm always starts
paused on real hardware: call `resume`. A lost port is reported (log + diagnostics ERROR),
the executor is paused, and the thread retries the port every ``reconnect_period_s``; the
lifecycle state stays where it was so the node comes back healthy without tooling.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.lifecycle import State, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
from lerobot_lang_nodes.core.control_loop import Cadence
from lerobot_lang_nodes.core.executor import ChunkExecutor
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.execution import (ExecutionParams, change_limits, make_executor,
                                                submit_chunk_msg)
from lerobot_lang_nodes.nodes.params import (declare_config, ParameterError,
                                             watch_runtime_parameters,
                                             reject_unknown_parameters)
from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, load_calibration
from lerobot_lang_nodes.so101.driver_core import RobotState, So101Config, So101Robot
from lerobot_lang_nodes.so101.errors import (BusError, CalibrationError, FaultLatched,
                                             MotionRefused, NotConnected, PortDisconnected)

_OK, _WARN, _ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
# Error bits that are worth a WARN but do not latch (voltage, angle, checksum, instruction).
# Unexpected errors in this many consecutive cycles: the arm cannot be held reliably.
MAX_LOOP_ERRORS_IN_ROW = 50
LOOP_FAILURE_EXIT = 70  # EX_SOFTWARE: the bring-up reports the driver as failed
_WARN_BITS = int(protocol.ErrorBit.VOLTAGE | protocol.ErrorBit.ANGLE)


@dataclass(frozen=True)
class So101DriverConfig(ExecutionParams):
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


class So101DriverNode(LifecycleNode):
    """Lifecycle node driving the SO-101 through So101Robot and the core ChunkExecutor."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._running = False
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
        self.robot: So101Robot | None = None
        self._bus_lock = threading.RLock()  # the control thread and services share the bus
        self._active = False
        self._health = 'unconfigured'  # unconfigured | ok | disconnected | fault | error
        self.loop_errors = 0  # unexpected exceptions caught in the control loop
        self._loop_errors_in_row = 0
        self._health_detail = ''
        self._last_aux: RobotState | None = None
        self._hold_request = threading.Event()
        self._last_action_s = time.monotonic()
        self._watchdog_holding = False
        self.watchdog_holds = 0
        self.reconnects = 0
        self.publish_errors = 0  # writes DDS refused (each costs one tick of outputs)

        self.chunk_executor = self._make_executor()
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
        self._auto_timer = None
        self.get_logger().info(
            f'so101_driver on {cfg.port} at {cfg.baudrate} baud, ctrl_hz={cfg.ctrl_hz}, '
            f'max_relative_target={self._max_relative()}, watchdog={cfg.command_timeout_s} s, '
            f'start_paused={cfg.start_paused}')
        if cfg.auto_configure and not self._auto_bring_up():
            self._auto_timer = self.create_timer(cfg.reconnect_period_s, self._auto_bring_up)

    def _apply_parameters(self, changes: dict) -> str:
        """`ros2 param set` on a safety limit: tighten any time, loosen only while paused."""
        problem = change_limits(self, changes)
        if problem:
            return problem
        robot = self.robot
        if robot is not None and 'max_relative_target_rad' in changes:
            robot.set_max_relative_target(self._max_relative())
        return ''

    # --- construction helpers -------------------------------------------------------------
    def _max_relative(self) -> float | dict[str, float] | None:
        cfg = self.cfg
        per = {j: v for j, v in zip(JOINT_NAMES, cfg.max_relative_target_per_joint_rad) if v > 0}
        if per:
            glob = cfg.max_relative_target_rad
            return {j: per.get(j, glob) for j in JOINT_NAMES if per.get(j, glob) > 0}
        return cfg.max_relative_target_rad or None

    def _make_executor(self) -> ChunkExecutor:
        from lerobot_lang_nodes.so101.units import JointConverter
        units = JointConverter(self.calibration)
        return make_executor(self.cfg, self.joint_names, self.cfg.ctrl_hz, units.lower_rad,
                             units.upper_rad)

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _auto_bring_up(self) -> bool:
        """One automatic configure (+ activate) attempt; True when nothing is left to do."""
        if self.robot is None and self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            return False  # logged by on_configure; the timer retries
        if self.cfg.auto_activate and not self._active and self._health == 'ok':
            # A bus hiccup during activate is retried as well (the node stays inactive).
            if self.trigger_activate() != TransitionCallbackReturn.SUCCESS:
                return False
        if self._auto_timer is not None:
            self._auto_timer.cancel()
            self._auto_timer = None
        return True

    # --- lifecycle ------------------------------------------------------------------------
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        cfg = self.cfg
        robot = So101Robot(So101Config(
            port=cfg.port, calibration=self.calibration, baudrate=cfg.baudrate,
            max_relative_target_rad=self._max_relative(), aux_every_n=cfg.aux_every_n,
            disable_torque_on_disconnect=cfg.disable_torque_on_shutdown,
            retries=cfg.retries, timeout_margin_ms=cfg.timeout_margin_ms))
        try:
            robot.connect()
        except (BusError, CalibrationError) as exc:
            robot.bus.close()
            self.get_logger().error(f'configure failed: {exc}', throttle_duration_sec=10.0)
            self._health, self._health_detail = 'unconfigured', str(exc)
            self._publish_diagnostics(None)
            return TransitionCallbackReturn.FAILURE
        self.robot = robot
        self._health, self._health_detail = 'ok', ''
        self._running = True
        self._thread = threading.Thread(target=self._loop, name='so101-control', daemon=True)
        self._thread.start()
        self.get_logger().info('configured: servos answer, LeRobot settings applied, torque off')
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        try:
            with self._bus_lock:
                assert self.robot is not None
                self.robot.enable_torque()  # goal := present first, so nothing jerks
        except (BusError, NotConnected) as exc:
            self.get_logger().error(f'activate failed: {exc}')
            return TransitionCallbackReturn.FAILURE
        self._last_action_s = time.monotonic()
        self._active = True
        self.get_logger().info(f'active: torque on, holding; mode '
                               f'{self.chunk_executor.mode} (call resume to move)')
        return super().on_activate(state)

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        self._active = False
        self.chunk_executor.pause(self._now())
        with self._bus_lock:
            try:
                if self.robot is not None:
                    self.robot.hold_present_position()
                    self.robot.disable_torque()
            except (BusError, NotConnected) as exc:
                self.get_logger().warning(f'deactivate: {exc}')
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
        self._active = False
        self._running = False
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None
        with self._bus_lock:
            if self.robot is not None:
                self.robot.close()  # disables torque when disable_torque_on_shutdown
                self.robot = None
        self._health = 'unconfigured'

    # --- inputs ---------------------------------------------------------------------------
    def _on_chunk(self, msg: ActionChunk) -> None:
        # While faulted, disconnected or inactive the executor is paused, so submit() counts
        # the chunk as stale ('paused'): motion is refused without a special case here.
        submit_chunk_msg(self.chunk_executor, msg, self._now())

    def _on_context(self, msg: LanguageContext) -> None:
        self.chunk_executor.set_revision(int(msg.revision), int(msg.flush_revision) or None)

    def _on_pause(self, _req, response: Trigger.Response) -> Trigger.Response:
        self.chunk_executor.pause(self._now())
        self._hold_request.set()  # the control thread stops any motion toward the last goal
        response.success, response.message = True, 'paused; queue cleared, holding position'
        self.get_logger().info('paused')
        return response

    def _on_resume(self, _req, response: Trigger.Response) -> Trigger.Response:
        refusal = self._refusal()
        if refusal:
            response.success, response.message = False, refusal
            return response
        self._last_action_s = time.monotonic()
        self._watchdog_holding = False
        if self._health == 'error':  # the operator saw the loop error and resumes
            self._health, self._health_detail = 'ok', ''
        self.chunk_executor.resume()
        response.success, response.message = True, 'resumed'
        self.get_logger().info('resumed')
        return response

    def _on_burst(self, msg: Float64) -> None:
        """Timed burst: act for msg.data seconds, then pause (refused as resume would be)."""
        refusal = self._refusal()
        if refusal:
            self.get_logger().error(f'burst refused: {refusal}')
            return
        try:
            self.chunk_executor.burst(msg.data, self._now())
        except ValueError as exc:
            self.get_logger().error(f'burst refused: {exc}')
            return
        self._last_action_s = time.monotonic()
        self._watchdog_holding = False
        self.get_logger().info(f'burst: acting for {msg.data:.2f} s, then pausing')

    def _refusal(self) -> str:
        if not self._active:
            return (f'not active (health {self._health}); configure and activate the node '
                    'first')
        if self._health == 'fault':
            return f'fault latched: {self._health_detail}; call ~/reset_fault first'
        if self._health == 'disconnected':
            return f'port disconnected: {self._health_detail}; wait for the reconnect'
        return ''

    def _on_reset_fault(self, _req, response: Trigger.Response) -> Trigger.Response:
        with self._bus_lock:
            if self.robot is None or not self.robot.connected:
                response.success = False
                response.message = 'not connected; nothing to reset (wait for the reconnect)'
                return response
            try:
                self.robot.reset()
            except (FaultLatched, BusError) as exc:
                response.success, response.message = False, str(exc)
                return response
            self._health, self._health_detail = 'ok', ''
        response.success = True
        response.message = 'fault cleared; still paused: call resume to move'
        self.get_logger().info('fault reset; paused until resume')
        return response

    # --- the control thread ---------------------------------------------------------------
    def _loop(self) -> None:
        cfg = self.cfg
        status_every = max(1, int(round(cfg.ctrl_hz / cfg.status_hz)))
        diag_every = max(1, int(round(cfg.ctrl_hz / cfg.diagnostics_hz)))
        cadence = Cadence(cfg.ctrl_hz, time.monotonic())
        self._cadence = cadence
        next_reconnect = 0.0
        tick = 0
        last_refill = False
        while self._running and self.context.ok():
            # A failed publish (DDS refused a write) costs one tick's outputs, never the loop:
            # the servos must keep being read, clamped and watched.
            try:
                state = None
                if self._health == 'disconnected':
                    if time.monotonic() >= next_reconnect:
                        next_reconnect = time.monotonic() + cfg.reconnect_period_s
                        self._try_reconnect()
                else:
                    state = self._cycle()
                now = self._now()
                if state is not None:
                    self._publish_joints(state, now)
                refill = self.chunk_executor.needs_refill()
                if tick % status_every == 0 or (refill and not last_refill):
                    self._status_pub.publish(convert.status_to_msg(
                        self.chunk_executor.status(), now))
                last_refill = refill
                if tick % diag_every == 0:
                    self._publish_diagnostics(now)
            except _rclpy.RCLError as exc:
                if not self.context.ok():
                    break  # Ctrl-C shut the context down between the check and a publish
                self.publish_errors += 1
                self.get_logger().error(f'publish failed ({self.publish_errors} so far; the '
                                        f'control loop goes on): {exc}',
                                        throttle_duration_sec=5.0)
            except Exception as exc:  # noqa: BLE001 - a dead control thread leaves torque on
                self._on_loop_error(exc)
            else:
                self._loop_errors_in_row = 0
            tick += 1
            # Missed slots are skipped, never run back to back: the executor's catch-up has
            # already skipped the late actions, so sprinting would play the rest early.
            time.sleep(cadence.delay(time.monotonic()))

    def _on_loop_error(self, exc: Exception) -> None:
        """An unexpected exception in a cycle: pause, hold, report ERROR, keep the loop."""
        self.loop_errors += 1
        self._loop_errors_in_row += 1
        self._health = 'error'
        self._health_detail = f'control loop error: {type(exc).__name__}: {exc}'
        self.get_logger().error(f'{self._health_detail} ({self.loop_errors} so far); paused '
                                'and holding, the loop goes on', throttle_duration_sec=2.0)
        if self.loop_errors == 1:
            self.get_logger().error(traceback.format_exc())
        try:
            self.chunk_executor.pause(self._now())
            with self._bus_lock:
                if self.robot is not None and self._active:
                    self.robot.hold_present_position()
            self._publish_diagnostics(None)
        except Exception as again:  # noqa: BLE001 - the arm cannot be held: torque off, exit
            self._fail_hard(again)
            return
        if self._loop_errors_in_row >= MAX_LOOP_ERRORS_IN_ROW:
            self._fail_hard(exc)

    def _fail_hard(self, exc: BaseException) -> None:
        """The loop cannot go on safely: torque off and exit non-zero for the bring-up."""
        self.get_logger().fatal(f'control loop cannot continue ({type(exc).__name__}: {exc});'
                                ' disabling torque and exiting')
        try:
            with self._bus_lock:
                if self.robot is not None:
                    self.robot.disable_torque()
        finally:
            os._exit(LOOP_FAILURE_EXIT)

    def _cycle(self) -> RobotState | None:
        """One control period; returns the state read, None when the bus failed."""
        with self._bus_lock:
            robot = self.robot
            if robot is None:
                return None
            try:
                state = robot.read_state()
                if state.velocity_rad_s is not None:
                    self._last_aux = state
                if robot.fault is not None:
                    self._on_fault(robot)
                    return state  # read_state already held the arm; nothing is commanded
                if self._hold_request.is_set() or not self._active:
                    self._hold_request.clear()
                    if self._active:
                        robot.hold_present_position()
                    return state
                action = self.chunk_executor.tick(self._now())
                if action is not None:
                    robot.write_goal(action)  # clamps: calibrated range + max_relative_target
                    self._last_action_s = time.monotonic()
                    self._watchdog_holding = False
                elif self.chunk_executor.mode == 'action':
                    self._watchdog(robot)
                return state
            except PortDisconnected as exc:
                self._on_disconnect(exc)
            except FaultLatched:
                self._on_fault(robot)
            except (MotionRefused, NotConnected) as exc:
                self.get_logger().error(f'goal refused: {exc}', throttle_duration_sec=2.0)
            except BusError as exc:  # retries exhausted: skip this cycle, counted in stats
                self.get_logger().warning(f'bus error (cycle skipped): {exc}',
                                          throttle_duration_sec=2.0)
        return None

    def _watchdog(self, robot: So101Robot) -> None:
        timeout = self.cfg.command_timeout_s
        if timeout <= 0 or self._watchdog_holding:
            return
        if time.monotonic() - self._last_action_s < timeout:
            return
        robot.hold_present_position()
        self._watchdog_holding = True
        self.watchdog_holds += 1
        self.get_logger().warning(f'command watchdog: no valid action for {timeout:.2f} s; '
                                  'holding the present position',
                                  throttle_duration_sec=5.0)

    def _on_fault(self, robot: So101Robot) -> None:
        if self._health == 'fault':
            return
        detail = robot.fault.describe() if robot.fault else 'unknown fault'
        self._health, self._health_detail = 'fault', detail
        self.chunk_executor.pause(self._now())  # queued actions must not run after the reset
        self.get_logger().error(f'FAULT LATCHED: {detail}; holding, motion refused until '
                                '~/reset_fault (then resume)')

    def _on_disconnect(self, exc: BaseException) -> None:
        self._health, self._health_detail = 'disconnected', str(exc)
        self.chunk_executor.pause(self._now())
        self.get_logger().error(f'PORT DISCONNECTED: {exc}; paused, retrying every '
                                f'{self.cfg.reconnect_period_s:.1f} s (check the USB cable '
                                'and the arm power)')

    def _try_reconnect(self) -> None:
        with self._bus_lock:
            robot = self.robot
            if robot is None or not robot.try_reconnect():
                return
            try:
                if self._active and not robot.torque_enabled:
                    robot.enable_torque()
                elif not self._active and robot.torque_enabled:
                    robot.disable_torque()
            except (BusError, NotConnected) as exc:  # lost again at once: next attempt
                self.get_logger().warning(f'reconnect: {exc}')
                return
            self.reconnects += 1
            self._health = 'fault' if robot.fault is not None else 'ok'
            self._health_detail = robot.fault.describe() if robot.fault else ''
        self.get_logger().info('port back: reconnected, holding position; paused until resume')

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
        now = self._now() if now is None else now
        arr = DiagnosticArray()
        convert.s_to_stamp(now, arr.header.stamp)
        robot = self.robot
        diag = robot.diagnostics() if robot is not None else {}
        level = {'ok': _OK, 'fault': _ERROR, 'disconnected': _ERROR,
                 'error': _ERROR}.get(self._health, _WARN)
        values = {'health': self._health, 'detail': self._health_detail,
                  'active': str(self._active).lower(), 'mode': self.chunk_executor.mode,
                  'port': self.cfg.port, 'watchdog_holds': str(self.watchdog_holds),
                  'reconnects': str(self.reconnects),
                  'publish_errors': str(self.publish_errors),
                  'loop_errors': str(self.loop_errors)}
        for group in ('bus', 'safety'):
            for key, value in diag.get(group, {}).items():
                values[f'{group}.{key}'] = str(value)
        if diag:
            values['torque_enabled'] = str(diag['torque_enabled']).lower()
            values['fault'] = diag['fault']
        message = self._health if not self._health_detail else \
            f'{self._health}: {self._health_detail}'
        arr.status.append(DiagnosticStatus(
            level=level, name='so101_driver: arm', message=message[:500],
            hardware_id=self.cfg.port,
            values=[KeyValue(key=k, value=v) for k, v in values.items()]))
        bits = diag.get('error_bits', {})
        aux = self._last_aux
        for i, joint in enumerate(self.joint_names):
            b = int(bits.get(joint, 0))
            lvl = _ERROR if b & (~_WARN_BITS) else _WARN if b else _OK
            kv = {'id': str(self.calibration[joint].id), 'error_bits': str(b),
                  'errors': protocol.describe_error_bits(b) if b else ''}
            if aux is not None:
                kv.update(voltage_v=f'{aux.voltage_v[i]:.1f}',
                          temperature_c=f'{aux.temperature_c[i]:.0f}',
                          load_nm=f'{aux.effort_nm[i]:.3f}')
            arr.status.append(DiagnosticStatus(
                level=lvl, name=f'so101_driver: {joint}', hardware_id=self.cfg.port,
                message=kv['errors'] or 'ok',
                values=[KeyValue(key=k, value=v) for k, v in kv.items()]))
        self._diag_pub.publish(arr)

    def close(self) -> None:
        """Process exit: stop the thread, torque off (when configured), close the port."""
        self._release()


def main(args: list[str] | None = None) -> int:
    return runner.run(So101DriverNode, args, name='so101_driver')


if __name__ == '__main__':
    raise SystemExit(main())
