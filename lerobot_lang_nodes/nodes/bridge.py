"""What the two simulator bridges share (sim_bridge: the MuJoCo SO-101 tabletop;
robocasa_bridge: RoboCasa kitchens): the operator's inputs and services, the reset handshake
with the simulation thread, clock and status publishing, the loop's error report and its
diagnostics.

A bridge node mixes SimulatorBridge into its rclpy Node, sets ``chunk_executor``, ``cfg``
(with ``ctrl_hz`` and ``real_time_factor``), ``loop_errors``, ``diagnostics`` and
``_control`` (from ``_make_control_loop``), and implements ``_sim_time()``,
``_reset_reply()``, ``_on_task()``, ``_on_context()`` (what a goal is differs per simulator),
and the loop's ``_cycle()``, ``_publish_outputs(due)`` and ``_hold_step()``.
"""

from __future__ import annotations

from collections.abc import Callable
import threading
import time
import traceback
from typing import Any

from rosgraph_msgs.msg import Clock
from std_msgs.msg import Float64, String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
from lerobot_lang_nodes.core.control_loop import ControlLoop
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.nodes.commands import CommandSubscription
from lerobot_lang_nodes.nodes.execution import submit_chunk_msg
from lerobot_lang_nodes.nodes.publishing import PublishError, PublishGuard

# A stall shorter than this is caught up back to back; a longer one restarts the pacing.
CATCH_UP_S = 1.0


class SimulatorBridge:
    """Mixin for an rclpy Node that runs a simulator thread and a core ChunkExecutor."""

    RESET_TIMEOUT_S = 30.0
    chunk_executor: Any
    cfg: Any

    def _init_bridge(self) -> None:
        """State and interfaces every bridge has; call once in __init__."""
        self._lock = threading.Lock()
        self._reset_request: threading.Event | None = None
        self._loop_error = ''
        # A failed publish (DDS refused a write) costs this tick's outputs, never the
        # simulation loop.
        self._outputs = PublishGuard(self, 'publish', 'the simulation goes on')
        self._clock_pub = self.create_publisher(Clock, '/clock', qos.CLOCK)
        self._status_pub = self.create_publisher(RuntimeStatus, 'runtime_status', qos.STATUS)
        self.create_subscription(ActionChunk, 'action_chunk', self._on_chunk, qos.COMMAND)
        self.create_subscription(LanguageContext, 'language_context', self._on_context,
                                 qos.LATCHED)
        # Without a planner (flat policies) the operator's task is the goal to judge; latched
        # and default-QoS publishers both reach it.
        CommandSubscription(self, String, 'task', lambda msg, _sent_ns: self._on_task(msg))
        self.create_service(Trigger, 'pause', self._on_pause)
        self.create_service(Trigger, 'resume', self._on_resume)
        self.create_service(Trigger, 'sim/reset', self._on_reset)
        self.create_subscription(Float64, 'burst', self._on_burst, qos.COMMAND)

    # --- what each bridge provides ------------------------------------------------------
    def _sim_time(self) -> float:
        raise NotImplementedError

    def _reset_reply(self) -> str:
        raise NotImplementedError

    def _on_task(self, msg: String) -> None:
        raise NotImplementedError

    def _on_context(self, msg: LanguageContext) -> None:
        raise NotImplementedError

    def _cycle(self) -> None:
        raise NotImplementedError

    def _publish_outputs(self, due) -> None:
        raise NotImplementedError

    def _hold_step(self) -> None:
        """One period of simulated time holding the last safe target (after a loop error)."""
        raise NotImplementedError

    # --- the simulation loop ------------------------------------------------------------
    def _make_control_loop(self, rates_hz: dict[str, float],
                           report: Callable[[float], None],
                           report_period_s: float = 30.0) -> ControlLoop:
        cfg = self.cfg
        # Paced on the wall clock at ctrl_hz * real_time_factor. Simulated time is the
        # bridge's own (one period per cycle whatever the wall clock says), so a short stall
        # is caught up back to back; a long one (CPU starved) restarts the pacing instead.
        return ControlLoop(
            ctrl_hz=cfg.ctrl_hz, rates_hz=rates_hz,
            pace_hz=cfg.ctrl_hz * cfg.real_time_factor if cfg.real_time_factor > 0 else None,
            catch_up_s=CATCH_UP_S, cycle=self._cycle, publish=self._publish_outputs,
            on_error=self._on_loop_error, on_ok=self.loop_errors.succeeded,
            publish_failed=self._outputs.failed, publish_error=PublishError,
            needs_refill=self.chunk_executor.needs_refill, ok=self.context.ok,
            sim_time=self._sim_time, report=report, report_period_s=report_period_s)

    def _on_loop_error(self, exc: Exception) -> bool:
        """An unexpected exception in a cycle: pause (queue cleared), hold, report ERROR.

        The simulation goes on holding the last safe target, so its clock keeps advancing.
        """
        self._report_loop_error(exc)
        try:
            self._hold_step()
        except Exception as step_exc:  # noqa: BLE001 - reported; the loop still goes on
            self.get_logger().error(f'holding step failed too: {step_exc}',
                                    throttle_duration_sec=2.0)
        self.diagnostics.publish_now()
        return True

    # --- operator inputs ----------------------------------------------------------------
    def _on_chunk(self, msg: ActionChunk) -> None:
        submit_chunk_msg(self.chunk_executor, msg, self._sim_time())

    def _on_pause(self, _req, response: Trigger.Response) -> Trigger.Response:
        self.chunk_executor.pause(self._sim_time())
        response.success, response.message = True, 'paused; queue cleared'
        self.get_logger().info('paused')
        return response

    def _on_resume(self, _req, response: Trigger.Response) -> Trigger.Response:
        self._loop_error = ''
        self.chunk_executor.resume()
        response.success, response.message = True, 'resumed'
        self.get_logger().info('resumed')
        return response

    def _on_burst(self, msg: Float64) -> None:
        """Timed burst: act for msg.data seconds of sim time, then pause."""
        try:
            self.chunk_executor.burst(msg.data, self._sim_time())
        except ValueError as exc:
            self.get_logger().error(f'burst refused: {exc}')
            return
        self.get_logger().info(f'burst: acting for {msg.data:.2f} s, then pausing')

    def _on_reset(self, _req, response: Trigger.Response) -> Trigger.Response:
        """Hand the reset to the simulation thread and answer once it is done."""
        done = threading.Event()
        with self._lock:
            self._reset_request = done
        if not done.wait(self.RESET_TIMEOUT_S):
            response.success = False
            response.message = f'reset did not finish within {self.RESET_TIMEOUT_S:.0f} s'
            return response
        response.success, response.message = True, self._reset_reply()
        return response

    def _take_reset_request(self) -> threading.Event | None:
        """The pending reset (the simulation thread sets it when done), if any."""
        with self._lock:
            request, self._reset_request = self._reset_request, None
        return request

    # --- outputs ------------------------------------------------------------------------
    def _publish_clock(self, now: float) -> None:
        msg = Clock()
        convert.s_to_stamp(now, msg.clock)
        self._clock_pub.publish(msg)

    def _publish_status(self, now: float) -> None:
        self._status_pub.publish(convert.status_to_msg(self.chunk_executor.status(), now))

    @property
    def publish_errors(self) -> int:
        """Writes DDS refused (each costs that tick's outputs)."""
        return self._outputs.count

    def _report_loop_error(self, exc: Exception) -> None:
        """An unexpected exception in a cycle: pause (queue cleared), report ERROR.

        The simulated robot holds its last target whatever happens, so the error policy never
        gives up here: the loop keeps the simulation and its clock alive.
        """
        self.loop_errors.failed(exc)
        self._loop_error = self.loop_errors.last
        self.chunk_executor.pause(self._sim_time())
        self.get_logger().error(f'simulation loop error ({self.loop_errors.count} so far): '
                                f'{self._loop_error}; paused and holding, the loop goes on '
                                '(resume to move again)', throttle_duration_sec=2.0)
        if self.loop_errors.count == 1:
            self.get_logger().error(traceback.format_exc())

    def _loop_diagnostics(self, extra: dict[str, Any]) -> tuple[str, str, dict]:
        """The simulation loop's /diagnostics status: executor, errors, cadence, ``extra``."""
        st = self.chunk_executor.status()
        values = {**extra, 'loop_errors': self.loop_errors.count,
                  'last_loop_error': self._loop_error,
                  'publish_errors': self.publish_errors, 'mode': st.mode,
                  'dispatched': st.dispatched, 'starved_ticks': st.starved_ticks,
                  'discarded_stale': st.discarded_stale,
                  'discarded_old_observation': st.discarded_old_observation,
                  'rejected_invalid': st.rejected_invalid, 'ctrl_hz': self.cfg.ctrl_hz}
        cadence = self._control.cadence if self._control is not None else None
        if cadence is not None:
            values.update({f'loop.{k}': v for k, v in cadence.stats().items()})
        if self._loop_error and st.mode == 'paused':
            return 'error', f'simulation loop error: {self._loop_error}; paused', values
        # Say why the arm stands still: a policy on another computer may be cut off.
        now = time.monotonic()
        if st.dispatched != getattr(self, '_diag_dispatched', None):
            self._diag_dispatched, self._diag_moved = st.dispatched, now
        idle = now - self._diag_moved
        values['idle_s'] = idle
        if st.mode == 'action' and st.queue_depth == 0 and st.dispatched and idle >= 1.0:
            return 'ok', (f'holding: no action to play for {idle:.1f} s (no chunk from the '
                          'policy: silent, or unreachable over the network)'), values
        return 'ok', f'{st.mode}, {st.dispatched} actions dispatched', values
