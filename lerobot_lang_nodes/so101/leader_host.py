"""ROS-free host of the SO-101 leader arm: reads, health, reconnect, handover hold, diagnostics.

The leader is the arm a person moves by hand. Its six STS3215 servos speak the follower's
protocol (same model number, other gear ratios), so the leader is the follower's bus code
(`robot.So101Robot`) with LeRobot's leader settings (`So101Leader`): torque off, return
delay 0, acceleration 254, position mode; nothing else is written to the servos, as LeRobot's
`so_leader` does. Its calibration is LeRobot's leader JSON
(<root>/teleoperators/so_leader/<id>.json).

The `so101_leader` node is a thin shell around ``LeaderHost``: it calls ``cycle()`` from its
read thread and publishes the positions it returns, calls ``hold_pose()`` / ``release()`` /
``reset_fault()`` from its services and publishes ``diagnostics()``. Everything that decides
what the leader does lives here, so it is tested against the emulator without DDS, with the
test's clock.

Health (``control_host.HEALTH``):

* ``unconfigured``: no port open (the first configure failed or was not tried yet);
* ``ok``: connected, positions read every cycle;
* ``disconnected``: the port vanished; a hold is cancelled and a reconnect tried every
  ``reconnect_period_s``. After it the leader is passive again (torque off);
* ``fault``: a servo latched overload/overheat (a hold is released at once), or after a
  reconnect the servos differ from the calibration / start-up settings. With a mismatch no
  positions are published (a swapped motor's angles would be wrong); ``reset_fault()`` clears
  it once the servos are right again (and no servo reports the error);
* ``error``: an unexpected exception in a cycle (a hold is released); the next good cycle
  clears it (``loop_errors`` keeps the count).

Handover (``HANDOVER``), where the leader's servos drive it (they have motors, as LeRobot's
``send_feedback`` uses):

* ``idle``: torque off; the arm is moved by hand;
* ``moving``: torque on (goal := present first, so nothing jerks); each cycle's goal ramps from
  where the arm was toward the pose at ``hold_speed_rad_s``, clamped to the leader's calibrated
  range and to ``max_relative_target_rad`` around the present position, so a hand in the way
  meets a bounded push, never the whole step;
* ``holding``: every joint within ``hold_tolerance_rad`` of the pose; the servos hold it until
  ``release()`` turns torque off again.

One re-entrant lock serialises the bus between the read thread and the service calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
import logging
import math
import threading
import time
import traceback
from typing import Any

import numpy as np

from lerobot_lang_nodes.core.control_loop import LoopErrors, ThrottledLog, python_logger_emit
from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES
from lerobot_lang_nodes.so101.control_host import HEALTH, WARN_BITS, DiagStatus
from lerobot_lang_nodes.so101.robot import RobotState, So101Robot
from lerobot_lang_nodes.so101.errors import (BusError, CalibrationError, FaultLatched,
                                             MotionRefused, NotConnected, PortDisconnected)
from lerobot_lang_nodes.so101.registers import (MODE_POSITION, PHASE_ANGLE_FEEDBACK_BIT,
                                                RETURN_DELAY_UNIT_US)

logger = logging.getLogger(__name__)

HANDOVER = ('idle', 'moving', 'holding')
_LEVEL_OF_HEALTH = {'ok': 'ok', 'fault': 'error', 'disconnected': 'error', 'error': 'error'}


class So101Leader(So101Robot):
    """The SO-101 leader arm: the follower's bus code with LeRobot's leader settings.

    LeRobot's ``so_leader.configure()`` turns torque off and writes Return_Delay_Time,
    Maximum_Acceleration, Acceleration (``configure_motors``, which also clears the Phase
    angle-feedback bit) and Operating_Mode; the PID gains and the gripper's torque limits keep
    the servos' own values. The same registers are checked after a reconnect.
    """

    def _expected_settings(self, joint: str) -> dict[str, int]:
        cfg = self.config
        return {'Return_Delay_Time': cfg.return_delay,
                'Maximum_Acceleration': cfg.maximum_acceleration,
                'Acceleration': cfg.acceleration, 'Operating_Mode': MODE_POSITION}

    def _write_settings(self) -> None:
        cfg = self.config
        self.disable_torque()  # also Lock 0: the EEPROM writes below need it
        for joint in JOINT_NAMES:
            i = self.calibration[joint].id
            self.bus.write(i, 'Return_Delay_Time', cfg.return_delay, check_errors=False)
            self.bus.write(i, 'Maximum_Acceleration', cfg.maximum_acceleration,
                           check_errors=False)
            self.bus.write(i, 'Acceleration', cfg.acceleration, check_errors=False)
            phase = self.bus.read(i, 'Phase', check_errors=False)
            if phase & PHASE_ANGLE_FEEDBACK_BIT:  # keeps positions within 0..4095
                self.bus.write(i, 'Phase', phase & ~PHASE_ANGLE_FEEDBACK_BIT, check_errors=False)
            self.bus.write(i, 'Operating_Mode', MODE_POSITION, check_errors=False)
        self.bus.return_delay_us = cfg.return_delay * RETURN_DELAY_UNIT_US


def pose_from_joint_state(names: Sequence[str], positions: Sequence[float]
                          ) -> tuple[np.ndarray | None, str]:
    """A sensor_msgs/JointState's positions (any order, by name) -> radians in JOINT_NAMES
    order; (None, why) when a joint is missing, a name repeats or the sizes differ."""
    names, positions = list(names), list(positions)
    if len(names) != len(positions):
        return None, (f'{len(names)} names but {len(positions)} positions; expected one '
                      'position per name')
    if len(set(names)) != len(names):
        return None, f'joint names repeat: {names}'
    by_name = dict(zip(names, positions))
    missing = [j for j in JOINT_NAMES if j not in by_name]
    if missing:
        return None, f'joints {missing} missing (got {names}); expected {list(JOINT_NAMES)}'
    return np.array([float(by_name[j]) for j in JOINT_NAMES]), ''


@dataclass(frozen=True)
class LeaderHostConfig:
    reconnect_period_s: float = 1.0
    hold_speed_rad_s: float = 0.5  # ramp speed of the joint furthest from the pose
    hold_tolerance_rad: float = 0.05  # every joint this close: 'holding'
    max_loop_errors_in_row: int = 50  # then torque off and give up
    port: str = ''  # for diagnostics only

    def __post_init__(self) -> None:
        for name in ('reconnect_period_s', 'hold_speed_rad_s', 'hold_tolerance_rad'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f'{name}={value!r}; expected a finite value > 0')


@dataclass
class LeaderCycle:
    state: RobotState | None = None  # what was read this cycle (None: nothing to publish)
    goal: np.ndarray | None = None  # the clamped goal written this cycle (a hold only)


class LeaderHost:
    """Owns the leader while configured; every bus access goes through ``self.lock``."""

    def __init__(self, make_leader: Callable[[], So101Robot], config: LeaderHostConfig, *,
                 monotonic: Callable[[], float] = time.monotonic,
                 emit: Callable[[int, str], None] | None = None) -> None:
        self._make_leader = make_leader
        self.config = config
        self._mono = monotonic  # reconnect, ramp and rate timing
        self.log = ThrottledLog(emit or python_logger_emit(logger), monotonic)
        self.lock = threading.RLock()
        self.leader: So101Robot | None = None
        self.joint_ids: dict[str, int] = {}
        self.health = 'unconfigured'
        self.detail = ''
        self.handover = 'idle'
        self.errors = LoopErrors(config.max_loop_errors_in_row)
        self.last_aux: RobotState | None = None
        self.reads = 0  # successful position reads
        self.reconnects = 0
        self.publish_errors = 0
        self.holds = 0  # hold_pose calls that started a hold
        self.holds_refused = 0
        self.last_refusal = ''
        self.hold_target: np.ndarray | None = None
        self._hold_from = np.zeros(len(JOINT_NAMES))
        self._hold_start_s = 0.0
        self._hold_duration_s = 0.0
        self._next_reconnect_s = 0.0
        self._rate_mark: tuple[float, int] | None = None  # (time, reads) at the last diagnostics
        self._read_rate_hz = 0.0

    # --- lifecycle --------------------------------------------------------------------------
    def configure(self) -> str:
        """Open the port, check the servos, apply the leader settings (torque off); '' or why
        it failed (the caller retries)."""
        leader = self._make_leader()
        try:
            leader.connect()
        except (BusError, CalibrationError) as exc:
            leader.bus.close()
            self._set_health('unconfigured', str(exc))
            return str(exc)
        with self.lock:
            self.leader = leader
            self.joint_ids = {j: leader.calibration[j].id for j in JOINT_NAMES}
            self._set_health('ok')
        self.log(logging.INFO, f'leader configured on {self.config.port}: servos answer, '
                 "LeRobot's leader settings applied, torque off")
        return ''

    def close(self) -> None:
        """Torque off and close the port (a lost port is only logged)."""
        with self.lock:
            self.handover = 'idle'
            if self.leader is not None:
                self.leader.close()  # torque off first (disable_torque_on_disconnect)
                self.leader = None
            self._set_health('unconfigured')

    # --- handover ---------------------------------------------------------------------------
    def hold_refusal(self) -> str:
        """Why the leader cannot be driven now ('' when it can)."""
        leader = self.leader
        if leader is None or self.health == 'unconfigured':
            return f'not configured ({self.detail or "no port open"}); wait for the leader'
        if self.health == 'disconnected':
            return f'port disconnected: {self.detail}; wait for the reconnect'
        if self.health == 'fault':
            return f'fault: {self.detail}; call ~/reset_fault first'
        return ''

    def hold_pose(self, target_rad: Sequence[float]) -> tuple[bool, str]:
        """Drive the leader to ``target_rad`` (JOINT_NAMES order) and hold it there.

        Torque goes on with goal := present; the ramp runs in ``cycle()``. Returns (started,
        what happens or why not). A pose outside the leader's calibrated range is clipped to it
        (and said so).
        """
        target = np.asarray(target_rad, dtype=float)
        if target.shape != (len(JOINT_NAMES),) or not np.all(np.isfinite(target)):
            return self.refuse(f'pose {target.tolist()} refused: expected {len(JOINT_NAMES)} '
                               f'finite radians in the order {list(JOINT_NAMES)}')
        with self.lock:
            refusal = self.hold_refusal()
            if refusal:
                return self.refuse(f'hold refused: {refusal}')
            leader = self.leader
            assert leader is not None
            try:
                if not leader.torque_enabled:
                    leader.enable_torque()  # goal := present, then torque on
                present = leader.read_state(full=False).position_rad
                if leader.fault is not None:  # that read latched an overload / overheat
                    raise FaultLatched(leader.fault.describe())
            except (BusError, MotionRefused, NotConnected) as exc:
                self._torque_off_quietly(leader)
                return self.refuse(f'hold refused: {exc}')
            units = leader.units
            goal = np.clip(target, units.lower_rad, units.upper_rad)
            clipped = [j for j, a, b in zip(JOINT_NAMES, goal, target) if a != b]
            distance = float(np.max(np.abs(goal - present)))
            duration = distance / self.config.hold_speed_rad_s
            self._hold_from = present
            self.hold_target = goal
            self._hold_duration_s = duration
            self._hold_start_s = self._mono()
            self.handover = 'moving'
            self.holds += 1
        note = f'; clipped to the leader\'s range: {clipped}' if clipped else ''
        text = (f'driving to the pose: {distance:.3f} rad at most, {duration:.1f} s at '
                f'{self.config.hold_speed_rad_s} rad/s, then holding until ~/release{note}')
        self.log(logging.INFO, text)
        return True, text

    def release(self) -> tuple[bool, str]:
        """Torque off: the arm is moved by hand again. (released, message)."""
        with self.lock:
            was = self.handover
            self.handover = 'idle'
            self.hold_target = None
            leader = self.leader
            if leader is None or not leader.connected or self.health == 'disconnected':
                return False, (f'not connected ({self.health}): the servos could not be told; '
                               'torque goes off at the reconnect')
            try:
                leader.disable_torque()
            except (BusError, NotConnected) as exc:
                return False, f'torque off failed: {exc}; call ~/release again'
        if was != 'idle':
            self.log(logging.INFO, f'released ({was}): torque off')
        return True, f'released: torque off (was {was})'

    def reset_fault(self) -> tuple[bool, str]:
        """Clear an overload/overheat latch or a post-reconnect mismatch once the servos are
        right; the leader stays passive (torque off)."""
        with self.lock:
            leader = self.leader
            if leader is None or not leader.connected or self.health == 'disconnected':
                return False, 'not connected; nothing to reset (wait for the reconnect)'
            if self.health != 'fault' and leader.fault is None and not leader.mismatch:
                return True, f'no fault latched (health {self.health}): nothing to reset'
            try:
                leader.reset()  # re-checks a mismatch, pings, clears the latch
                leader.disable_torque()
            except (MotionRefused, BusError, NotConnected) as exc:
                return False, str(exc)
            self._set_health('ok')
        self.log(logging.INFO, 'fault cleared: positions published again')
        return True, 'fault cleared; torque off'

    def refuse(self, text: str) -> tuple[bool, str]:
        """Count and log a refused hold; (False, text)."""
        self.holds_refused += 1
        self.last_refusal = text
        self.log(logging.WARNING, text, key='hold_refused')
        return False, text

    def _torque_off_quietly(self, leader: So101Robot) -> None:
        try:
            leader.disable_torque()
        except (BusError, NotConnected) as exc:
            self.log(logging.WARNING, f'torque off: {exc}', key='torque_off')

    # --- the read cycle ---------------------------------------------------------------------
    def cycle(self) -> LeaderCycle:
        """One period: a reconnect attempt, or read the positions (and during a hold write the
        ramp's next goal)."""
        if self.health == 'disconnected':
            if self._mono() >= self._next_reconnect_s:
                self._next_reconnect_s = self._mono() + self.config.reconnect_period_s
                self._try_reconnect()
            return LeaderCycle()
        with self.lock:
            leader = self.leader
            if leader is None or leader.mismatch:  # a wrong motor's angles are not published
                return LeaderCycle()
            out = LeaderCycle()
            try:
                state = leader.read_state()
                self.reads += 1
                if self.health == 'error':
                    self._set_health('ok')
                if state.velocity_rad_s is not None:
                    self.last_aux = state
                out.state = state
                if leader.fault is not None:
                    self._on_fault(leader, leader.fault.describe())
                elif self.handover != 'idle':
                    out.goal = self._drive(leader, state)
            except PortDisconnected as exc:
                self._on_disconnect(exc)
            except FaultLatched:
                self._on_fault(leader, leader.fault.describe() if leader.fault else 'fault')
            except (MotionRefused, NotConnected) as exc:
                self.log(logging.ERROR, f'goal refused: {exc}', key='refused')
            except BusError as exc:  # retries exhausted: skip this cycle, counted in stats
                self.log(logging.WARNING, f'bus error (cycle skipped): {exc}', key='bus')
            return out

    def _drive(self, leader: So101Robot, state: RobotState) -> np.ndarray:
        target = self.hold_target
        assert target is not None
        elapsed = self._mono() - self._hold_start_s
        frac = 1.0 if self._hold_duration_s <= 0 else min(1.0, elapsed / self._hold_duration_s)
        setpoint = self._hold_from + frac * (target - self._hold_from)
        goal = leader.write_goal(setpoint)  # calibrated range, max_relative_target
        if (self.handover == 'moving' and frac >= 1.0 and float(np.max(np.abs(
                state.position_rad - target))) <= self.config.hold_tolerance_rad):
            self.handover = 'holding'
            self.log(logging.INFO, 'pose reached: holding until ~/release')
        return goal

    def loop_error(self, exc: BaseException) -> bool:
        """An unexpected exception in a cycle: health ERROR, a hold is released.

        Returns False when the loop must not go on (too many failing cycles in a row); the
        caller then calls ``fail_safe()`` and exits non-zero.
        """
        give_up = self.errors.failed(exc)
        self._set_health('error', f'read loop error: {self.errors.last}')
        self.log(logging.ERROR, f'{self.detail} ({self.errors.count} so far); the loop goes '
                 'on', key='loop_error')
        if self.errors.count == 1:
            self.log(logging.ERROR, traceback.format_exc(), key='traceback')
        with self.lock:
            if self.handover != 'idle' and self.leader is not None:
                self.handover = 'idle'
                self.hold_target = None
                self._torque_off_quietly(self.leader)
        return not give_up

    def loop_ok(self) -> None:
        self.errors.succeeded()

    def fail_safe(self) -> None:
        """The loop cannot go on: torque off (best effort); the caller exits non-zero."""
        with self.lock:
            if self.leader is not None:
                try:
                    self.leader.disable_torque()
                except Exception as exc:  # noqa: BLE001 - the process exits anyway
                    self.log(logging.ERROR, f'torque off failed: {exc}')

    def _on_fault(self, leader: So101Robot, detail: str) -> None:
        if self.health == 'fault':
            return
        self._set_health('fault', detail)
        if self.handover != 'idle':
            self.handover = 'idle'
            self.hold_target = None
            self._torque_off_quietly(leader)
        self.log(logging.ERROR, f'FAULT LATCHED: {detail}; torque off, holds refused until '
                 '~/reset_fault', key='fault')

    def _on_disconnect(self, exc: BaseException) -> None:
        self._set_health('disconnected', str(exc))
        cancelled = self.handover != 'idle'
        self.handover = 'idle'
        self.hold_target = None
        self._next_reconnect_s = self._mono() + self.config.reconnect_period_s
        hold = ('; the hold is cancelled (powered servos keep their last goal until the '
                'reconnect turns torque off)' if cancelled else '')
        self.log(logging.ERROR, f'PORT DISCONNECTED: {exc}{hold}; retrying every '
                 f'{self.config.reconnect_period_s:.1f} s (check the USB cable and the leader '
                 'power)', key='disconnect')

    def _try_reconnect(self) -> None:
        with self.lock:
            leader = self.leader
            if leader is None or not leader.try_reconnect():
                return
            try:
                if leader.torque_enabled:
                    leader.disable_torque()  # passive again after an unplug, hold or not
            except (BusError, NotConnected) as exc:  # lost again at once: next attempt
                self.log(logging.WARNING, f'reconnect: {exc}', key='reconnect')
                return
            self.reconnects += 1
            if leader.mismatch:
                self._set_health('fault', 'servos differ from the calibration/start-up '
                                 f"settings after a reconnect: {'; '.join(leader.mismatch)}")
                self.log(logging.ERROR, f'port back but {self.detail}; no positions published '
                         '(reconnect the right motor or re-run the calibration, then '
                         '~/reset_fault)', key='mismatch')
                return
            if leader.fault is not None:
                self._set_health('fault', leader.fault.describe())
            else:
                self._set_health('ok')
        self.log(logging.INFO, 'port back: reconnected, torque off, reading')

    def _set_health(self, health: str, detail: str = '') -> None:
        assert health in HEALTH, health
        self.health, self.detail = health, detail

    # --- diagnostics as data ----------------------------------------------------------------
    def read_rate_hz(self) -> float:
        """Positions read per second since the previous call (0 on the first)."""
        now = self._mono()
        mark = self._rate_mark
        self._rate_mark = (now, self.reads)
        if mark is not None and now > mark[0]:
            self._read_rate_hz = (self.reads - mark[1]) / (now - mark[0])
        return self._read_rate_hz

    def diagnostics(self, extra: Mapping[str, Any] | None = None) -> list[DiagStatus]:
        """The leader's status (plus ``extra`` values), then one per joint (error bits,
        voltage, temperature, load)."""
        leader = self.leader
        diag: dict[str, Any] = leader.diagnostics() if leader is not None else {}
        target = self.hold_target
        values = {'health': self.health, 'detail': self.detail, 'handover': self.handover,
                  'port': self.config.port, 'reads': str(self.reads),
                  'read_rate_hz': f'{self.read_rate_hz():.1f}',
                  'holds': str(self.holds), 'holds_refused': str(self.holds_refused),
                  'last_refusal': self.last_refusal,
                  'hold_target_rad': ('' if target is None else
                                      ' '.join(f'{v:.4f}' for v in target)),
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
        if self.health == 'ok' and self.handover != 'idle':
            message = f'ok: {self.handover} (torque on)'
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


__all__ = ['HANDOVER', 'LeaderCycle', 'LeaderHost', 'LeaderHostConfig', 'So101Leader',
           'pose_from_joint_state']
