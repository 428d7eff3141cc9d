"""`so101_leader` node: the SO-101 leader arm on ROS, read with torque off (human in the loop).

The leader's Feetech bus goes through the project's own bus and calibration code (LeRobot's
leader calibration JSON); what the leader does (health, reconnect, the handover hold, the
loop's error policy, diagnostics) is decided by the ROS-free `so101.leader_host.LeaderHost`.
This node maps parameters, services and topics onto it and publishes what it returns.

One read thread (not an executor callback, so a slow callback cannot delay the bus) runs the
host's cycle at ``read_hz``: one SYNC_READ of the six positions (with velocity, load, voltage
and temperature every ``aux_every_n``-th cycle), published as sensor_msgs/JointState in
radians on ``joint_states_topic`` (default /leader/joint_states). Until the port answers the
thread retries the configure every ``reconnect_period_s``; a lost port is retried as well.

Handover: ``~/hold_pose`` (std_srvs/Trigger) drives the leader to the follower's latest pose
(``follower_joint_states_topic``), a sensor_msgs/JointState on ``~/hold_pose_target`` to that
pose; the servos then hold it until ``~/release`` turns torque off again. ``~/reset_fault``
clears an overload latch or a post-reconnect mismatch once the servos are right.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from lerobot_lang_nodes.core.control_loop import (ControlLoop, Outputs, hold_or_give_up,
                                                  scheduling_label, set_realtime)
from lerobot_lang_nodes.nodes import convert, qos, runner
from lerobot_lang_nodes.nodes.diagnostics import make_status
from lerobot_lang_nodes.nodes.params import (declare_config, ParameterError,
                                             reject_unknown_parameters)
from lerobot_lang_nodes.nodes.publishing import PublishError, PublishGuard
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, LEADER_TYPE, load_calibration
from lerobot_lang_nodes.so101.robot import RobotState, So101Config
from lerobot_lang_nodes.so101.leader_host import (LeaderHost, LeaderHostConfig,
                                                  pose_from_joint_state, So101Leader)

LOOP_FAILURE_EXIT = 70  # EX_SOFTWARE, as so101_driver


@dataclass(frozen=True)
class So101LeaderConfig:
    """Parameters of the so101_leader node."""

    port: str = field(default='', metadata={
        'doc': 'Serial device of the leader arm, e.g. /dev/serial/by-id/usb-... or the emulator '
               '--link path.'})
    calibration_id: str = field(default='', metadata={
        'doc': 'LeRobot teleoperator id: reads <calibration root>/teleoperators/so_leader/'
               '<id>.json (LeRobot 0.4: so101_leader/<id>.json).'})
    calibration_path: str = field(default='', metadata={
        'doc': 'Explicit leader calibration JSON path (wins over calibration_id).'})
    baudrate: int = field(default=1_000_000, metadata={'doc': 'Bus baud rate.',
                                                      'range': (9600, 1_000_000)})
    read_hz: float = field(default=60.0, metadata={
        'doc': 'Rate of the position reads and joint_states (Hz); during a hold each cycle also '
               'writes one goal. The default is LeRobot teleoperation\'s 60 fps, twice the '
               "follower's ctrl_hz.", 'range': (1.0, 500.0)})
    aux_every_n: int = field(default=10, metadata={
        'doc': 'Read velocity/load/voltage/temperature every n-th cycle.', 'range': (1, 1000)})
    joint_states_topic: str = field(default='/leader/joint_states', metadata={
        'doc': 'Where the leader\'s positions (rad) are published.'})
    follower_joint_states_topic: str = field(default='/joint_states', metadata={
        'doc': "The follower's joint states: ~/hold_pose drives the leader to their latest "
               'pose.'})
    follower_pose_max_age_s: float = field(default=1.0, metadata={
        'doc': '~/hold_pose refuses a follower pose received longer ago than this (s).',
        'range': (0.01, 60.0)})
    max_relative_target_rad: float = field(default=0.15, metadata={
        'doc': 'During a hold, every goal lies within this of the freshly read present '
               'position (rad): a hand in the way meets a bounded push.',
        'range': (0.01, 3.2)})
    hold_speed_rad_s: float = field(default=0.5, metadata={
        'doc': 'Speed of the ramp toward a hold pose (rad/s, the joint with the furthest '
               'to go).', 'range': (0.01, 5.0)})
    hold_tolerance_rad: float = field(default=0.05, metadata={
        'doc': "Every joint this close to the pose: the handover state becomes 'holding'.",
        'range': (0.001, 1.0)})
    reconnect_period_s: float = field(default=1.0, metadata={
        'doc': 'Period of reconnection (and configure) attempts (s).', 'range': (0.05, 60.0)})
    diagnostics_hz: float = field(default=2.0, metadata={'doc': 'diagnostics rate (Hz).',
                                                         'range': (0.1, 50.0)})
    timeout_margin_ms: float = field(default=20.0, metadata={
        'doc': 'Added to the computed reply timeout (USB latency; raise on loaded hosts).',
        'range': (0.0, 1000.0)})
    retries: int = field(default=2, metadata={'doc': 'Bus retries after a failed transaction.',
                                              'range': (0, 10)})
    thread_priority: int = field(default=50, metadata={
        'doc': 'SCHED_FIFO priority of the read thread (1..99; 0: normal scheduling), as '
               "so101_driver's thread_priority; refused without an rtprio limit or "
               'CAP_SYS_NICE: the thread then runs normally and says so.', 'range': (0, 99)})


class So101LeaderNode(Node):
    """The SO-101 leader through the ROS-free LeaderHost."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._control: ControlLoop | None = None
        self._scheduling_refused = ''
        self._state: RobotState | None = None  # the last cycle's reading, when it succeeded
        self._next_configure = 0.0
        super().__init__('so101_leader')
        self.cfg = declare_config(self, So101LeaderConfig)
        reject_unknown_parameters(self)
        cfg = self.cfg
        if not cfg.port:
            raise ParameterError("parameter 'port' is empty; set it to the leader's serial "
                                 'device (e.g. /dev/ttyACM1) or the emulator --link path')
        # A missing or malformed calibration is a configuration error: exit 2 with the field.
        self.calibration = load_calibration(cfg.calibration_id or None,
                                            cfg.calibration_path or None, LEADER_TYPE)
        self.host = LeaderHost(self._make_leader, LeaderHostConfig(
            reconnect_period_s=cfg.reconnect_period_s, hold_speed_rad_s=cfg.hold_speed_rad_s,
            hold_tolerance_rad=cfg.hold_tolerance_rad, port=cfg.port),
            emit=runner.log_emitter(self))
        self._follower: tuple[float, JointState] | None = None  # (received, msg)
        self._joint_pub = self.create_publisher(JointState, cfg.joint_states_topic, qos.SENSOR)
        self._diag_pub = self.create_publisher(DiagnosticArray, 'diagnostics', qos.STATUS)
        self.create_subscription(JointState, cfg.follower_joint_states_topic,
                                 self._on_follower, qos.SENSOR)
        self.create_subscription(JointState, '~/hold_pose_target', self._on_hold_target,
                                 qos.COMMAND)
        self.create_service(Trigger, '~/hold_pose', self._on_hold_pose)
        self.create_service(Trigger, '~/release', self._on_release)
        self.create_service(Trigger, '~/reset_fault', self._on_reset_fault)
        self.get_logger().info(
            f'so101_leader on {cfg.port} at {cfg.baudrate} baud, read_hz={cfg.read_hz}, '
            f'publishing {cfg.joint_states_topic}; torque off (moved by hand)')
        # A failed publish (DDS refused a write) costs one cycle's outputs, never the loop.
        self._outputs = PublishGuard(self, 'publish', 'the read loop goes on',
                                     on_failed=self._count_publish_error)
        self._control = ControlLoop(
            ctrl_hz=cfg.read_hz, rates_hz={'diagnostics': cfg.diagnostics_hz},
            pace_hz=cfg.read_hz, cycle=self._cycle, publish=self._publish_outputs,
            on_error=self._on_loop_error, on_ok=self.host.loop_ok, outputs_after_error=False,
            publish_failed=self._outputs.failed, publish_error=PublishError, ok=self.context.ok)
        self._thread = threading.Thread(target=self._loop, name='so101-leader', daemon=True)
        self._thread.start()

    def _make_leader(self) -> So101Leader:
        cfg = self.cfg
        return So101Leader(So101Config(
            port=cfg.port, calibration=self.calibration, baudrate=cfg.baudrate,
            max_relative_target_rad=cfg.max_relative_target_rad, aux_every_n=cfg.aux_every_n,
            disable_torque_on_disconnect=True, retries=cfg.retries,
            timeout_margin_ms=cfg.timeout_margin_ms))

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    # --- inputs ---------------------------------------------------------------------------
    def _on_follower(self, msg: JointState) -> None:
        self._follower = (time.monotonic(), msg)

    def _on_hold_target(self, msg: JointState) -> None:
        pose, problem = pose_from_joint_state(msg.name, msg.position)
        if pose is None:
            self.host.refuse(f'~/hold_pose_target refused: {problem}')
            return
        self.host.hold_pose(pose)  # logged and counted by the host either way

    def _on_hold_pose(self, _req, response: Trigger.Response) -> Trigger.Response:
        cfg = self.cfg
        follower = self._follower
        if follower is None:
            problem = (f'no follower pose received on {cfg.follower_joint_states_topic}; is '
                       'so101_driver running?')
        elif time.monotonic() - follower[0] > cfg.follower_pose_max_age_s:
            problem = (f'the follower pose on {cfg.follower_joint_states_topic} is '
                       f'{time.monotonic() - follower[0]:.1f} s old (limit '
                       f'{cfg.follower_pose_max_age_s} s)')
        else:
            pose, problem = pose_from_joint_state(follower[1].name, follower[1].position)
        if problem:
            response.success, response.message = self.host.refuse(f'hold refused: {problem}')
            return response
        response.success, response.message = self.host.hold_pose(pose)
        return response

    def _on_release(self, _req, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.host.release()
        return response

    def _on_reset_fault(self, _req, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.host.reset_fault()
        return response

    # --- the read thread ------------------------------------------------------------------
    def _configure(self) -> bool:
        problem = self.host.configure()
        if problem:
            self.get_logger().error(f'configure failed: {problem}; retrying every '
                                    f'{self.cfg.reconnect_period_s} s',
                                    throttle_duration_sec=10.0)
            return False
        return True  # the host has said so

    def _loop(self) -> None:
        self._scheduling_refused = set_realtime(self.cfg.thread_priority)
        if self._scheduling_refused:
            self.get_logger().warning(f'read thread: {self._scheduling_refused}')
        self._control.run()

    def _cycle(self) -> None:
        """Read the leader once (LeaderHost.cycle), or try to configure it while it is away."""
        self._state = None
        if self.host.leader is None:
            if time.monotonic() >= self._next_configure:
                self._next_configure = time.monotonic() + self.cfg.reconnect_period_s
                if self._configure():  # the slot grid starts once the servos answer
                    self._control.restart_cadence()
        else:
            self._state = self.host.cycle().state

    def _publish_outputs(self, due: Outputs) -> None:
        if self._state is not None:
            self._publish_joints(self._state)
        if 'diagnostics' in due:
            self._publish_diagnostics()

    def _on_loop_error(self, exc: Exception) -> bool:
        return hold_or_give_up(exc, hold=self.host.loop_error, report=self._report_loop_error,
                               ok=self.context.ok, give_up=self._fail_hard)

    def _report_loop_error(self) -> None:
        with self._outputs:
            self._publish_diagnostics()

    def _count_publish_error(self) -> None:
        self.host.publish_errors += 1

    def _fail_hard(self, exc: BaseException) -> None:
        """The loop cannot go on: torque off and exit non-zero for the bring-up."""
        self.get_logger().fatal(f'read loop cannot continue ({type(exc).__name__}: {exc}; '
                                f'{self.host.detail}); disabling torque and exiting')
        try:
            self.host.fail_safe()
        finally:
            os._exit(LOOP_FAILURE_EXIT)

    # --- outputs --------------------------------------------------------------------------
    def _publish_joints(self, state: RobotState) -> None:
        msg = JointState(name=list(JOINT_NAMES), position=state.position_rad.tolist())
        if state.velocity_rad_s is not None:
            msg.velocity = state.velocity_rad_s.tolist()
        if state.effort_nm is not None:
            msg.effort = state.effort_nm.tolist()
        convert.s_to_stamp(self._now(), msg.header.stamp)
        self._joint_pub.publish(msg)

    def _publish_diagnostics(self) -> None:
        arr = DiagnosticArray()
        convert.s_to_stamp(self._now(), arr.header.stamp)
        cadence = self._control.cadence if self._control is not None else None
        loop = {f'loop.{k}': v for k, v in cadence.stats().items()} if cadence else {}
        loop['loop.scheduling'] = scheduling_label(self.cfg.thread_priority,
                                                   self._scheduling_refused)
        for st in self.host.diagnostics(loop):
            arr.status.append(make_status(f'so101_leader: {st.name}', self.cfg.port, st.level,
                                          st.message, st.values))
        self._diag_pub.publish(arr)

    def close(self) -> None:
        """Process exit: stop the thread, torque off, close the port."""
        if self._control is not None:
            self._control.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None
        self.host.close()


def main(args: list[str] | None = None) -> int:
    return runner.run(So101LeaderNode, args, name='so101_leader')


if __name__ == '__main__':
    raise SystemExit(main())
