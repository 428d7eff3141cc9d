"""ROS-free control host of the SO-101: health, watchdog, fault latch, reconnect, diagnostics.

The `so101_driver` node is a thin shell around this class: it calls the lifecycle methods
from its transitions, ``cycle()`` from its control thread and the operator methods from its
services, and publishes what ``cycle()`` and ``diagnostics()`` return. Everything that decides
what the arm does lives here, so it is tested against the emulator without DDS.

Health (one of ``HEALTH``):

* ``unconfigured``: no port open (configure failed or not tried yet);
* ``ok``: connected; moves when active and resumed;
* ``disconnected``: the port vanished: paused, reconnect attempts every
  ``reconnect_period_s``; a reconnect holds the present position and stays paused;
* ``fault``: a servo latched overload/overheat, or after a reconnect the servos differ from
  the calibration/start-up settings; motion refused until ``reset_fault()``;
* ``error``: an unexpected exception in a cycle: paused and holding; ``resume()`` clears it.

One re-entrant lock serialises the bus between the control thread and the service calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
import logging
import threading
import time
import traceback
from typing import Any

import numpy as np

from lerobot_lang_nodes.core.control_loop import LoopErrors, ThrottledLog, python_logger_emit
from lerobot_lang_nodes.core.executor import MODE_ACTION, MODE_TELEOP, ChunkExecutor
from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.robot import RobotState, So101Robot
from lerobot_lang_nodes.so101.errors import (BusError, CalibrationError, FaultLatched,
                                             MotionRefused, NotConnected, PortDisconnected)

logger = logging.getLogger(__name__)

HEALTH = ('unconfigured', 'ok', 'disconnected', 'fault', 'error')
# Error bits that are worth a WARN but do not latch (voltage, angle).
WARN_BITS = int(protocol.ErrorBit.VOLTAGE | protocol.ErrorBit.ANGLE)
_LEVEL_OF_HEALTH = {'ok': 'ok', 'fault': 'error', 'disconnected': 'error', 'error': 'error'}


@dataclass(frozen=True)
class HostConfig:
    command_timeout_s: float = 0.5  # action mode without a valid action this long: hold
    reconnect_period_s: float = 1.0
    max_loop_errors_in_row: int = 50  # then the arm cannot be held: torque off, give up
    port: str = ''  # for diagnostics only


@dataclass(frozen=True)
class DiagStatus:
    """One diagnostic status as data; the node turns it into diagnostic_msgs/DiagnosticStatus."""

    level: str  # 'ok' | 'warn' | 'error'
    name: str
    message: str
    values: Mapping[str, str] = field(default_factory=dict)


@dataclass
class CycleResult:
    state: RobotState | None = None  # what was read this cycle (None: nothing read)
    goal: np.ndarray | None = None  # the clamped goal written this cycle (None: no write)
    written_at: float | None = None  # time.monotonic() right after that write

    @property
    def wrote_goal(self) -> bool:
        return self.goal is not None


class So101ControlHost:
    """Owns the robot while configured; every bus access goes through ``self.lock``."""

    def __init__(self, make_robot: Callable[[], So101Robot], executor: ChunkExecutor,
                 config: HostConfig, *, now: Callable[[], float] = time.monotonic,
                 monotonic: Callable[[], float] = time.monotonic,
                 emit: Callable[[int, str], None] | None = None,
                 joint_ids: Mapping[str, int] | None = None) -> None:
        self._make_robot = make_robot
        self.executor = executor
        self.config = config
        self._now = now  # the executor's clock (ROS time)
        self._mono = monotonic  # watchdog and reconnect timing
        self.log = ThrottledLog(emit or python_logger_emit(logger), monotonic)
        self.joint_ids = dict(joint_ids or {})
        self.lock = threading.RLock()
        self.robot: So101Robot | None = None
        self.active = False
        self.health = 'unconfigured'
        self.detail = ''
        self.errors = LoopErrors(config.max_loop_errors_in_row)
        self.last_aux: RobotState | None = None
        self.watchdog_holds = 0
        self.reconnects = 0
        self.publish_errors = 0
        self._hold_request = threading.Event()
        self._last_action_s = monotonic()
        self._watchdog_holding = False
        self._next_reconnect_s = 0.0

    # --- lifecycle --------------------------------------------------------------------------
    def configure(self) -> str:
        """Open the port and configure the servos (torque off); '' or why it failed."""
        robot = self._make_robot()
        try:
            robot.connect()
        except (BusError, CalibrationError) as exc:
            robot.bus.close()
            self._set_health('unconfigured', str(exc))
            return str(exc)
        with self.lock:
            self.robot = robot
            self._set_health('ok')
        return ''

    def activate(self) -> str:
        """Torque on, holding the present position; '' or why it failed."""
        with self.lock:
            try:
                if self.robot is None:
                    raise NotConnected('not configured')
                self.robot.enable_torque()  # goal := present first, so nothing jerks
            except (BusError, NotConnected, MotionRefused) as exc:
                return str(exc)
            self._last_action_s = self._mono()
            self.active = True
        return ''

    def deactivate(self) -> None:
        """Pause, hold and torque off (a lost port is only logged)."""
        self.active = False
        self.executor.pause(self._now())
        with self.lock:
            try:
                if self.robot is not None:
                    self.robot.hold_present_position()
                    self.robot.disable_torque()
            except (BusError, NotConnected) as exc:
                self.log(logging.WARNING, f'deactivate: {exc}')

    def release(self) -> None:
        """Torque off (when configured to) and close the port."""
        self.active = False
        with self.lock:
            if self.robot is not None:
                self.robot.close()
                self.robot = None
            self._set_health('unconfigured')

    # --- operator ---------------------------------------------------------------------------
    def refusal(self) -> str:
        """Why motion cannot be resumed now ('' when it can)."""
        if not self.active:
            return (f'not active (health {self.health}); configure and activate the node '
                    'first')
        if self.health == 'fault':
            return f'fault latched: {self.detail}; call ~/reset_fault first'
        if self.health == 'disconnected':
            return f'port disconnected: {self.detail}; wait for the reconnect'
        return ''

    def pause(self) -> None:
        self.executor.pause(self._now())
        self._hold_request.set()  # the next cycle stops any motion toward the last goal

    def resume(self) -> str:
        """Resume motion; '' or the refusal."""
        refusal = self.refusal()
        if refusal:
            return refusal
        self._last_action_s = self._mono()
        self._watchdog_holding = False
        if self.health == 'error':  # the operator saw the loop error and resumes
            self._set_health('ok')
        self.executor.resume()
        return ''

    def teleop(self, follower: np.ndarray | None = None) -> str:
        """Take over: the leader arm commands from ``follower`` (the present pose, the
        handover's start; None: at once); '' or the refusal (as resume's)."""
        refusal = self.refusal()
        if refusal:
            return refusal
        self._last_action_s = self._mono()
        self._watchdog_holding = False
        self.executor.teleop(self._now(), follower)
        return ''

    def handback(self) -> str:
        """Human -> policy: resume, refusing every chunk observed before now; '' or why not."""
        refusal = self.refusal()
        if refusal:
            return refusal
        self._last_action_s = self._mono()
        self._watchdog_holding = False
        self.executor.resume(self._now())
        return ''

    def burst(self, duration_s: float) -> str:
        """Act for ``duration_s`` then pause; '' or the refusal."""
        refusal = self.refusal()
        if refusal:
            return refusal
        try:
            self.executor.burst(duration_s, self._now())
        except ValueError as exc:
            return str(exc)
        self._last_action_s = self._mono()
        self._watchdog_holding = False
        return ''

    def reset_fault(self) -> tuple[bool, str]:
        with self.lock:
            robot = self.robot
            if robot is None or not robot.connected:
                return False, 'not connected; nothing to reset (wait for the reconnect)'
            if self.health != 'fault' and robot.fault is None and not robot.mismatch:
                # Nothing latched: the caller's goal (no fault) already holds, so succeed, say
                # so, and leave the servos alone (a reset would ping them and re-hold).
                hint = '; resume clears the loop error' if self.health == 'error' else ''
                return True, f'no fault latched (health {self.health}): nothing to reset{hint}'
            try:
                robot.reset()
                if self.active and not robot.torque_enabled:  # off after a refused reconnect
                    robot.enable_torque()
            except (MotionRefused, BusError, NotConnected) as exc:
                return False, str(exc)
            self._set_health('ok')
        return True, 'fault cleared; still paused: call resume to move'

    def set_max_relative_target(self, limit: float | Mapping[str, float] | None) -> None:
        with self.lock:
            if self.robot is not None:
                self.robot.set_max_relative_target(limit)

    def set_command_timeout(self, timeout_s: float) -> None:
        self.config = replace(self.config, command_timeout_s=float(timeout_s))

    # --- the control cycle ------------------------------------------------------------------
    def cycle(self) -> CycleResult:
        """One control period: reconnect attempt, or tick -> clamped write -> read / hold.

        The goal goes out first, so it leaves at the slot's instant: the read's round trip
        (the servos' replies, the serial adapter's latency) varies under load by milliseconds
        and would otherwise shift every write (bench/README.md, "Dispatch jitter"). The
        max_relative_target clamp uses the previous cycle's read when it is at most
        present_max_age_s old, and reads first otherwise (a slow rate, after a stall).
        """
        if self.health == 'disconnected':
            if self._mono() >= self._next_reconnect_s:
                self._next_reconnect_s = self._mono() + self.config.reconnect_period_s
                self._try_reconnect()
            return CycleResult()
        with self.lock:
            robot = self.robot
            if robot is None:
                return CycleResult()
            result = CycleResult()
            try:
                action = None
                # A fault latched by the last read, or a hold asked for: nothing is ticked.
                if robot.fault is None and self.active and not self._hold_request.is_set():
                    action = self.executor.tick(self._now())
                    if action is not None:
                        # Clamped to the calibrated range and max_relative_target.
                        result.goal = robot.write_goal(action)
                        result.written_at = time.monotonic()
                        self._last_action_s = self._mono()
                        self._watchdog_holding = False
                state = result.state = robot.read_state()
                if state.velocity_rad_s is not None:
                    self.last_aux = state
                if robot.fault is not None:
                    self._on_fault(robot.fault.describe())
                    return result  # read_state already held the arm; nothing is commanded
                if self._hold_request.is_set() or not self.active:
                    self._hold_request.clear()
                    if self.active:
                        robot.hold_present_position()
                    return result
                # A dry run never sends an action by design: nothing for the watchdog to miss.
                # A silent leader in teleop is caught by the same watchdog as a silent policy.
                if (action is None and self.executor.mode in (MODE_ACTION, MODE_TELEOP)
                        and not self.executor.cfg.dry_run):
                    self._watchdog(robot)
            except PortDisconnected as exc:
                self._on_disconnect(exc)
            except FaultLatched:
                self._on_fault(robot.fault.describe() if robot.fault else 'unknown fault')
            except (MotionRefused, NotConnected) as exc:
                self.log(logging.ERROR, f'goal refused: {exc}', key='refused')
            except BusError as exc:  # retries exhausted: skip this cycle, counted in stats
                self.log(logging.WARNING, f'bus error (cycle skipped): {exc}', key='bus')
            return result

    def loop_error(self, exc: BaseException) -> bool:
        """An unexpected exception in a cycle: pause, hold, health ERROR.

        Returns False when the loop must not go on (holding failed, or too many failing
        cycles in a row); the caller then calls ``fail_safe()`` and exits non-zero.
        """
        give_up = self.errors.failed(exc)
        self._set_health('error', f'control loop error: {self.errors.last}')
        self.log(logging.ERROR, f'{self.detail} ({self.errors.count} so far); paused and '
                 'holding, the loop goes on', key='loop_error')
        if self.errors.count == 1:
            self.log(logging.ERROR, traceback.format_exc(), key='traceback')
        try:
            self.executor.pause(self._now())
            with self.lock:
                if self.robot is not None and self.active:
                    self.robot.hold_present_position()
        except Exception as again:  # noqa: BLE001 - the arm cannot be held
            self.detail = f'{self.detail}; holding failed: {type(again).__name__}: {again}'
            return False
        return not give_up

    def loop_ok(self) -> None:
        self.errors.succeeded()

    def fail_safe(self) -> None:
        """The loop cannot go on: torque off (best effort); the caller exits non-zero."""
        with self.lock:
            if self.robot is not None:
                try:
                    self.robot.disable_torque()
                except Exception as exc:  # noqa: BLE001 - the process exits anyway
                    self.log(logging.ERROR, f'torque off failed: {exc}')

    def _watchdog(self, robot: So101Robot) -> None:
        timeout = self.config.command_timeout_s
        if timeout <= 0 or self._watchdog_holding:
            return
        if self._mono() - self._last_action_s < timeout:
            return
        robot.hold_present_position()
        self._watchdog_holding = True
        self.watchdog_holds += 1
        self.log(logging.WARNING, f'command watchdog: no valid action for {timeout:.2f} s; '
                 'holding the present position', key='watchdog', period_s=5.0)

    def _on_fault(self, detail: str) -> None:
        if self.health == 'fault':
            return
        self._set_health('fault', detail)
        self.executor.pause(self._now())  # queued actions must not run after the reset
        self.log(logging.ERROR, f'FAULT LATCHED: {detail}; holding, motion refused until '
                 '~/reset_fault (then resume)', key='fault')

    def _on_disconnect(self, exc: BaseException) -> None:
        self._set_health('disconnected', str(exc))
        self.executor.pause(self._now())
        self._next_reconnect_s = self._mono() + self.config.reconnect_period_s
        self.log(logging.ERROR, f'PORT DISCONNECTED: {exc}; paused, retrying every '
                 f'{self.config.reconnect_period_s:.1f} s (check the USB cable and the arm '
                 'power)', key='disconnect')

    def _try_reconnect(self) -> None:
        with self.lock:
            robot = self.robot
            if robot is None or not robot.try_reconnect():
                return
            try:
                if robot.mismatch:
                    if robot.torque_enabled:
                        robot.disable_torque()  # a wrong motor must not hold a wrong target
                elif self.active and not robot.torque_enabled:
                    robot.enable_torque()
                elif not self.active and robot.torque_enabled:
                    robot.disable_torque()
            except (BusError, NotConnected) as exc:  # lost again at once: next attempt
                self.log(logging.WARNING, f'reconnect: {exc}', key='reconnect')
                return
            self.reconnects += 1
            if robot.mismatch:
                self._set_health('fault', 'servos differ from the calibration/start-up '
                                 f"settings after a reconnect: {'; '.join(robot.mismatch)}")
                self.log(logging.ERROR, f'port back but {self.detail}; torque off, motion '
                         'refused (reconnect the right motor or re-run the calibration, then '
                         '~/reset_fault)', key='mismatch')
                return
            if robot.fault is not None:
                self._set_health('fault', robot.fault.describe())
            else:
                self._set_health('ok')
        self.log(logging.INFO, 'port back: reconnected, holding position; paused until resume')

    def _set_health(self, health: str, detail: str = '') -> None:
        assert health in HEALTH, health
        self.health, self.detail = health, detail

    # --- diagnostics as data ----------------------------------------------------------------
    def diagnostics(self, extra: Mapping[str, Any] | None = None) -> list[DiagStatus]:
        """The arm's status (plus ``extra`` values), then one per joint (error bits, voltage,
        temperature, load)."""
        robot = self.robot
        diag: dict[str, Any] = robot.diagnostics() if robot is not None else {}
        values = {'health': self.health, 'detail': self.detail,
                  'active': str(self.active).lower(), 'mode': self.executor.mode,
                  'port': self.config.port, 'watchdog_holds': str(self.watchdog_holds),
                  'reconnects': str(self.reconnects),
                  'publish_errors': str(self.publish_errors),
                  'loop_errors': str(self.errors.count),
                  **{k: str(v) for k, v in (extra or {}).items()}}
        for group in ('bus', 'safety'):
            for key, value in diag.get(group, {}).items():
                values[f'{group}.{key}'] = str(value)
        if diag:
            values['torque_enabled'] = str(diag['torque_enabled']).lower()
            values['fault'] = diag['fault']
            values['mismatch'] = diag.get('mismatch', '')
        message = self.health if not self.detail else f'{self.health}: {self.detail}'
        out = [DiagStatus(_LEVEL_OF_HEALTH.get(self.health, 'warn'), 'arm', message, values)]
        bits = diag.get('error_bits', {})
        aux = self.last_aux
        for i, (joint, servo_id) in enumerate(self.joint_ids.items()):
            b = int(bits.get(joint, 0))
            level = 'error' if b & ~WARN_BITS else 'warn' if b else 'ok'
            kv = {'id': str(servo_id), 'error_bits': str(b),
                  'errors': protocol.describe_error_bits(b) if b else ''}
            if aux is not None and aux.voltage_v is not None:
                kv.update(voltage_v=f'{aux.voltage_v[i]:.1f}',
                          temperature_c=f'{aux.temperature_c[i]:.0f}',
                          load_nm=f'{aux.effort_nm[i]:.3f}')
            out.append(DiagStatus(level, joint, kv['errors'] or 'ok', kv))
        return out


__all__ = ['CycleResult', 'DiagStatus', 'HEALTH', 'HostConfig', 'So101ControlHost']
