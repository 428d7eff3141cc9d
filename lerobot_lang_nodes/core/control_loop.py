"""The control loops' host (sim_bridge, robocasa_bridge, so101_driver, so101_leader).

``ControlLoop`` runs a node's loop: the node passes what one cycle does, what it publishes,
its error policy and a clock and sleep (injected, so the loop is unit-tested on a stepped
clock without ROS), and the host owns the rest: cadence, which outputs are due, the refill
edge, the split between a failed publish and an unexpected exception, the real-time factor
report and the stop flag. The pieces it is built from:

Cadence: overruns skip slots, never sprint.

After a stall the chunk executor already skips the actions that are late (its catch-up pops
``round(elapsed * ctrl_hz)`` of them). If the loop then also ran the missed cycles back to
back, the stall would be counted twice: the actions after the skipped ones would be played
early, compressing the motion. ``Cadence`` keeps the slot grid ``start + k * period`` and,
after an overrun, waits for the next slot after ``now``: missed slots are skipped and counted,
and no two cycles run closer than the time left to the next slot. A simulator, whose time is
its own, may instead replay up to ``catch_up_s`` of missed slots back to back: its physics
advance one period per cycle whatever the wall clock says, so catching up keeps the real-time
factor at 1 without playing anything early in simulated time.

``LoopTicks`` says which outputs a cycle owes (every-n slots, and the runtime status also on
the refill rising edge so the policy starts its next inference at once). ``LoopErrors`` is the
error policy: an unexpected exception pauses and holds, the loop goes on, and only
``max_in_row`` failing cycles in a row mean the loop cannot hold the robot any more.
``ThrottledLog`` keeps a failing 50 Hz loop from writing 50 lines a second.
``set_realtime`` gives the loop's thread a real-time priority (``thread_priority``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import logging
import math
import os
import sys
import time

from .errors import config_error


class Cadence:
    """Slot timing of a loop at ``hz``; the caller supplies its monotonic clock readings."""

    def __init__(self, hz: float, start_s: float, catch_up_s: float = 0.0) -> None:
        if not (isinstance(hz, (int, float)) and math.isfinite(hz) and hz > 0):
            raise config_error('hz', hz, 'a finite rate > 0 Hz')
        if not (math.isfinite(catch_up_s) and catch_up_s >= 0):
            raise config_error('catch_up_s', catch_up_s, 'finite seconds >= 0')
        self.period_s = 1.0 / float(hz)
        self.catch_up_s = float(catch_up_s)
        self._next_s = float(start_s)
        self.cycles = 0
        self.overruns = 0  # cycles that ended after their next slot had begun
        self.skipped_slots = 0  # slots missed because of overruns (never run late)
        self.max_late_s = 0.0

    @property
    def next_s(self) -> float:
        """Start time of the next slot."""
        return self._next_s

    def delay(self, now_s: float) -> float:
        """Call at the end of a cycle: seconds to sleep until the next slot (>= 0).

        On time: the next slot of the grid. Late by less than ``catch_up_s``: the next slot at
        once (0 s). Later: the missed slots are skipped and the loop waits for the first slot
        after ``now_s`` (a clock that went backwards restarts the grid at ``now_s``).
        """
        self.cycles += 1
        target = self._next_s + self.period_s
        if now_s < self._next_s - self.period_s:  # clock regression: restart the grid
            target = now_s + self.period_s
        elif now_s >= target:
            late = now_s - target
            self.max_late_s = max(self.max_late_s, late)
            if late < self.catch_up_s:
                self.overruns += 1
                self._next_s = target
                return 0.0
            missed = int(math.floor(late / self.period_s)) + 1
            self.overruns += 1
            self.skipped_slots += missed
            target += missed * self.period_s
        self._next_s = target
        return max(0.0, target - now_s)


    def stats(self) -> dict[str, float]:
        return {'cycles': self.cycles, 'overruns': self.overruns,
                'skipped_slots': self.skipped_slots, 'max_late_ms': self.max_late_s * 1e3}


class LoopTicks:
    """Which periodic outputs a cycle owes; rates are rounded to whole cycles (>= 1)."""

    def __init__(self, ctrl_hz: float, **rates_hz: float) -> None:
        self.every = {name: max(1, int(round(ctrl_hz / hz))) for name, hz in rates_hz.items()}
        self.tick = 0
        self._last_refill = False

    def due(self, name: str) -> bool:
        return self.tick % self.every[name] == 0

    def refill_edge(self, refill: bool) -> bool:
        """True once when the queue crosses the refill threshold (call once per cycle)."""
        edge = refill and not self._last_refill
        self._last_refill = refill
        return edge

    def advance(self) -> None:
        self.tick += 1


class LoopErrors:
    """Error policy of a control loop: count, hold, and give up only after many in a row."""

    def __init__(self, max_in_row: int = 50) -> None:
        if not (isinstance(max_in_row, int) and max_in_row >= 1):
            raise config_error('max_in_row', max_in_row, 'an integer >= 1')
        self.max_in_row = max_in_row
        self.count = 0
        self.in_row = 0
        self.last = ''

    def failed(self, exc: BaseException) -> bool:
        """Record an unexpected exception; True when the loop must give up."""
        self.count += 1
        self.in_row += 1
        self.last = f'{type(exc).__name__}: {exc}'
        return self.in_row >= self.max_in_row

    def succeeded(self) -> None:
        self.in_row = 0


@dataclass(frozen=True)
class Outputs:
    """What one cycle owes: the periodic outputs due now, and the refill rising edge."""

    due: frozenset[str] = frozenset()
    refill: bool = False  # the queue just crossed the refill threshold

    def __contains__(self, name: object) -> bool:
        return name in self.due


class ControlLoop:
    """One control loop: cycle, outputs, errors, pacing, real-time factor and stop.

    Each pass of ``run()``: ``cycle()`` (the robot's or simulator's work of one period);
    on success ``on_ok()``, on an unexpected exception ``on_error(exc)`` (the node's
    pause-and-hold policy, usually through a ``LoopErrors``; False stops the loop); then
    ``publish(outputs)`` with the ``Outputs`` due (skipped after a failed cycle unless
    ``outputs_after_error``); then the sleep the cadence says. An exception of type
    ``publish_error`` (rclpy's RCLError: DDS refused a write) in either step goes to
    ``publish_failed(exc)``: it costs this tick's outputs (raised by the cycle: all of them;
    by ``publish``: those not yet written), never the loop. While ``ok()`` is
    false (ROS shut down between the loop check and a publish, e.g. by Ctrl-C) the loop
    stops quietly instead. Anything raised by ``publish`` that is not a publish error, or by
    ``on_error``, ends ``run()``.

    ``pace_hz`` None runs cycles back to back (a simulator at full speed). With
    ``sim_time`` the loop reports its real-time factor every ``report_period_s`` through
    ``report(rtf)``.
    """

    def __init__(self, *, ctrl_hz: float, cycle: Callable[[], object],
                 publish: Callable[[Outputs], None],
                 on_error: Callable[[Exception], bool],
                 publish_failed: Callable[[Exception], None],
                 on_ok: Callable[[], None] = lambda: None,
                 rates_hz: dict[str, float] | None = None,
                 needs_refill: Callable[[], bool] = lambda: False,
                 pace_hz: float | None = None, catch_up_s: float = 0.0,
                 outputs_after_error: bool = True,
                 publish_error: type[BaseException] | tuple[type[BaseException], ...] = (),
                 ok: Callable[[], bool] = lambda: True,
                 sim_time: Callable[[], float] | None = None,
                 report: Callable[[float], None] | None = None,
                 report_period_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.ticks = LoopTicks(ctrl_hz, **(rates_hz or {}))
        if pace_hz is not None:
            Cadence(pace_hz, 0.0, catch_up_s)  # a bad rate fails at construction
        self._cycle, self._publish = cycle, publish
        self._on_error, self._on_ok, self._publish_failed = on_error, on_ok, publish_failed
        self._needs_refill = needs_refill
        self._pace_hz, self._catch_up_s = pace_hz, catch_up_s
        self._outputs_after_error = outputs_after_error
        self._publish_error = publish_error
        self._ok, self._sim_time, self._report = ok, sim_time, report
        self._report_period_s = report_period_s
        self._clock, self._sleep = clock, sleep
        self.cadence: Cadence | None = None
        self._stopped = False
        self._wall_start: float | None = None
        self._sim_start = 0.0

    def stop(self) -> None:
        """Ask ``run()`` to return after the cycle in progress (any thread)."""
        self._stopped = True

    @property
    def running(self) -> bool:
        return not self._stopped and self._ok()

    def restart_cadence(self) -> None:
        """Start the slot grid again now (e.g. once the servos answer after a reconnect)."""
        if self._pace_hz is not None:
            self.cadence = Cadence(self._pace_hz, self._clock(), self._catch_up_s)

    def real_time_factor(self) -> float:
        """Simulated seconds per wall second since ``run()`` started (0 before it has)."""
        if self._wall_start is None or self._sim_time is None:
            return 0.0
        wall = self._clock() - self._wall_start
        return (self._sim_time() - self._sim_start) / wall if wall > 0 else 0.0

    def run(self) -> None:
        """Run cycles until ``stop()``, ``ok()`` false or ``on_error`` says give up."""
        self.restart_cadence()
        self._wall_start = self._clock()
        self._sim_start = self._sim_time() if self._sim_time is not None else 0.0
        report_at = self._wall_start + self._report_period_s
        while self.running:
            if not self._step():
                return
            if self.cadence is not None:
                self._sleep(self.cadence.delay(self._clock()))
            if self._report is not None and self._clock() > report_at:
                self._report(self.real_time_factor())
                report_at = self._clock() + self._report_period_s

    def _step(self) -> bool:
        """One cycle and its outputs; False when the loop must stop."""
        outputs_owed = True
        try:
            self._cycle()
        except self._publish_error as exc:
            if not self._ok():
                return False  # ROS shut down between the loop check and a publish
            self._publish_failed(exc)
            outputs_owed = False  # a write the cycle made failed: this tick's outputs too
        except Exception as exc:  # noqa: BLE001 - a dead loop would freeze the robot
            if not self._on_error(exc):
                return False
            outputs_owed = self._outputs_after_error
        else:
            self._on_ok()
        if outputs_owed:
            outputs = Outputs(frozenset(n for n in self.ticks.every if self.ticks.due(n)),
                              self.ticks.refill_edge(self._needs_refill()))
            # A failed publish (DDS refused a write) costs this tick's outputs, never the loop.
            try:
                self._publish(outputs)
            except self._publish_error as exc:
                if not self._ok():
                    return False
                self._publish_failed(exc)
        self.ticks.advance()
        return True


def hold_or_give_up(exc: Exception, *, hold: Callable[[Exception], bool],
                    report: Callable[[], None], ok: Callable[[], bool],
                    give_up: Callable[[Exception], None]) -> bool:
    """The arm nodes' ``on_error``: ``hold(exc)`` (the host's pause-and-hold; False when it
    gives up) and ``report()``. If the host gives up or the error path itself fails,
    ``give_up(exc)`` ends the node's control, unless ROS is shutting down (``ok()`` false:
    the exit path releases the arm and the loop stops). Otherwise the loop goes on: a dead
    control thread would leave torque or a hold on."""
    try:
        keep_going = hold(exc)
        report()
    except Exception:  # noqa: BLE001 - the error path itself failed
        keep_going = False
    if not keep_going:
        if not ok():
            return False
        give_up(exc)
    return True


class ThrottledLog:
    """``emit(level, text)`` at most once per ``period_s`` per key, with the suppressed count."""

    def __init__(self, emit: Callable[[int, str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._emit = emit
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def __call__(self, level: int, text: str, key: str = '', period_s: float = 2.0) -> None:
        key = key or text
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < period_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._last[key] = now
        n = self._suppressed.pop(key, 0)
        text += f' ({n} similar suppressed)' if n else ''
        try:
            self._emit(level, text)
        except Exception:  # noqa: BLE001 - a log sink must never stop a control loop
            logging.getLogger(__name__).log(level, text)


# Python threads also queue for the GIL: one that asks for it waits up to the switch interval
# (5 ms by default) before the holder is told to let go, whatever its scheduling priority.
REALTIME_SWITCH_INTERVAL_S = 0.0005


def set_realtime(priority: int) -> str:
    """Run the calling thread under SCHED_FIFO at ``priority`` (1..99); 0 leaves it as it is.

    Why: on a loaded host the fair scheduler wakes a sleeping loop thread milliseconds late
    (bench/jitter.py); a real-time thread preempts normal ones as soon as its sleep ends. The
    process's GIL switch interval is shortened too, or the woken thread would still wait for
    whichever thread holds the interpreter. Call it in the loop's thread after any helper
    threads that must not inherit the priority (a software renderer's) have been started.
    Returns '' when applied, else why not: the loop then runs with normal scheduling.
    """
    if isinstance(priority, bool) or not (isinstance(priority, int) and 0 <= priority <= 99):
        raise config_error('thread_priority', priority, 'an integer 0..99 (0: normal scheduling)')
    if priority == 0:
        return ''
    if not hasattr(os, 'sched_setscheduler'):
        return 'real-time scheduling is not available on this platform'
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        return (f'SCHED_FIFO priority {priority} refused ({exc.strerror or exc}); grant an '
                'rtprio limit (e.g. "@realtime - rtprio 99" in /etc/security/limits.conf with '
                'the user in group realtime) or CAP_SYS_NICE, or set thread_priority: 0')
    sys.setswitchinterval(min(sys.getswitchinterval(), REALTIME_SWITCH_INTERVAL_S))
    return ''


def scheduling_label(priority: int, refused: str) -> str:
    """What the loop runs under, for diagnostics."""
    return f'SCHED_FIFO {priority}' if priority and not refused else 'normal'


def python_logger_emit(log: logging.Logger) -> Callable[[int, str], None]:
    """An ``emit`` for ThrottledLog writing to a standard-library logger."""
    return lambda level, text: log.log(level, text)


__all__ = ['Cadence', 'ControlLoop', 'LoopErrors', 'LoopTicks', 'Outputs', 'ThrottledLog',
           'python_logger_emit', 'scheduling_label', 'set_realtime']
