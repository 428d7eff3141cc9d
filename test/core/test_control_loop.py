"""Loop cadence and executor catch-up after a stall: late actions skipped, none played early."""

from __future__ import annotations

import logging
import os
import sys
import threading

import numpy as np
import pytest

from lerobot_lang_nodes.core.control_loop import (Cadence, ControlLoop, LoopErrors, LoopTicks,
                                                  Outputs, ThrottledLog, hold_or_give_up,
                                                  scheduling_label, set_realtime)
from lerobot_lang_nodes.core.errors import ConfigError
from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, DispatchLog, ExecutorConfig

HZ = 50.0
PERIOD = 1.0 / HZ


def test_cadence_on_time_follows_the_grid():
    c = Cadence(HZ, 0.0)
    assert c.delay(0.005) == pytest.approx(PERIOD - 0.005)
    assert c.delay(PERIOD + 0.001) == pytest.approx(PERIOD - 0.001)
    assert (c.overruns, c.skipped_slots) == (0, 0)


def test_cadence_skips_missed_slots_instead_of_running_them_back_to_back():
    c = Cadence(HZ, 0.0)
    delay = c.delay(0.2)  # a 0.2 s stall in the first cycle: slots 1..10 are gone
    assert c.next_s == pytest.approx(11 * PERIOD)
    assert delay == pytest.approx(11 * PERIOD - 0.2)
    assert (c.overruns, c.skipped_slots) == (1, 10)


def test_cadence_restarts_after_a_clock_regression_and_validates_its_rate():
    c = Cadence(HZ, 100.0)
    assert c.delay(1.0) == pytest.approx(PERIOD)
    with pytest.raises(ConfigError, match='hz'):
        Cadence(0.0, 0.0)


def run_loop(stall_at: int, stall_s: float, cycles: int = 60) -> list[tuple[float, int]]:
    """The driver's loop shape on a virtual clock: tick, work, sleep what the cadence says."""
    log = DispatchLog()
    ex = ChunkExecutor(ExecutorConfig(action_names=('a',), ctrl_hz=HZ, max_horizon=100,
                                      time_align=True), on_dispatch=log)
    horizon = 50
    ex.submit(Chunk(np.arange(horizon, dtype=float).reshape(-1, 1), ('a',), revision=0,
                    sequence=1, stamp_s=0.0), 0.0)
    now = 0.0
    cadence = Cadence(HZ, now)
    out = []
    for k in range(cycles):
        n = len(log)
        if ex.tick(now) is not None:
            out.append((now, log.records[n].step_index))
        now += 0.001  # the cycle's own work
        if k == stall_at:
            now += stall_s  # the CPU was busy
        now += cadence.delay(now)
    return out


@pytest.mark.parametrize('stall_s', [0.05, 0.13, 0.36])
def test_after_a_stall_late_actions_are_skipped_and_none_is_played_early(stall_s):
    dispatched = run_loop(stall_at=5, stall_s=stall_s)
    for t, step in dispatched:
        # Action i is due during [i * period, (i + 1) * period): never before its slot.
        assert t >= step * PERIOD - 1e-9, f'step {step} dispatched {step * PERIOD - t:.3f} s early'
        assert t < (step + 1) * PERIOD + 1e-9, f'step {step} dispatched late at {t:.3f}'
    steps = [s for _, s in dispatched]
    assert steps == sorted(steps) and steps[-1] == 49  # the chunk still reaches its target


def test_cadence_catch_up_runs_a_short_stall_back_to_back_but_not_a_long_one():
    c = Cadence(HZ, 0.0, catch_up_s=0.1)
    assert c.delay(0.05) == 0.0  # 30 ms late: the next slot at once
    assert c.next_s == pytest.approx(PERIOD)
    assert (c.overruns, c.skipped_slots) == (1, 0)
    c = Cadence(HZ, 0.0, catch_up_s=0.1)
    assert c.delay(0.5) > 0  # far behind: slots skipped, the pacing restarts
    assert c.skipped_slots >= 24 and c.next_s > 0.5


def test_loop_ticks_periodic_slots_and_the_refill_edge():
    ticks = LoopTicks(30.0, status=5.0, camera=30.0)
    seen = []
    for refill in [False, True, True, False, True, False, False]:
        seen.append((ticks.due('status'), ticks.due('camera'), ticks.refill_edge(refill)))
        ticks.advance()
    assert [s for s, _, _ in seen] == [True] + [False] * 5 + [True]
    assert all(c for _, c, _ in seen)
    assert [e for _, _, e in seen] == [False, True, False, False, True, False, False]


def test_loop_errors_give_up_only_after_max_in_a_row():
    errors = LoopErrors(max_in_row=3)
    assert not errors.failed(KeyError('a')) and not errors.failed(KeyError('b'))
    errors.succeeded()
    assert not errors.failed(ValueError('c')) and not errors.failed(ValueError('d'))
    assert errors.failed(ValueError('e'))
    assert errors.count == 5 and errors.last == 'ValueError: e'
    with pytest.raises(ConfigError):
        LoopErrors(0)


@pytest.mark.parametrize('host, report, ros_ok, goes_on, gave_up', [
    ('holds', 'ok', True, True, False),          # paused and holding: the loop goes on
    ('gives up', 'ok', True, True, True),        # too many in a row: control ends, loop lives
    ('holds', 'fails', True, True, True),        # the error path itself failed: same
    ('gives up', 'ok', False, False, False),     # ROS shutting down: stop, the exit releases
])
def test_the_arm_error_policy_holds_gives_up_or_stops_on_shutdown(host, report, ros_ok, goes_on,
                                                                  gave_up):
    seen = {'held': [], 'reported': 0, 'gave_up': []}

    def hold(exc):
        seen['held'].append(exc)
        return host == 'holds'

    def report_now():
        seen['reported'] += 1
        if report == 'fails':
            raise RuntimeError('diagnostics refused')

    exc = ValueError('servo 3 answered garbage')
    assert hold_or_give_up(exc, hold=hold, report=report_now, ok=lambda: ros_ok,
                           give_up=seen['gave_up'].append) is goes_on
    assert seen['held'] == [exc] and seen['reported'] == 1
    assert seen['gave_up'] == ([exc] if gave_up else [])


def test_throttled_log_counts_what_it_suppressed_and_survives_a_broken_sink():
    t = [0.0]
    out = []
    log = ThrottledLog(lambda level, text: out.append(text), clock=lambda: t[0])
    for _ in range(5):
        log(logging.ERROR, 'bad', key='k', period_s=1.0)
    t[0] = 1.5
    log(logging.ERROR, 'bad', key='k', period_s=1.0)
    assert out == ['bad', 'bad (4 similar suppressed)']

    def broken(level, text):
        raise ValueError('sink gone')
    ThrottledLog(broken)(logging.ERROR, 'still fine')  # must not raise


def _in_thread(fn):
    """Run fn in a fresh thread (scheduling is per thread) and return its result."""
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()))
    t.start()
    t.join(10.0)
    return out['r']


@pytest.mark.skipif(not hasattr(os, 'sched_setscheduler'),
                    reason='platform: needs the Linux scheduling API')
def test_set_realtime_applies_sched_fifo_to_its_thread_or_says_why_not():
    switch = sys.getswitchinterval()
    try:
        def attempt():
            refused = set_realtime(20)
            return refused, os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
        refused, policy, priority = _in_thread(attempt)
        if refused:  # no rtprio limit / CAP_SYS_NICE here: normal scheduling and the fix
            assert (policy, sys.getswitchinterval()) == (os.SCHED_OTHER, switch)
            assert 'rtprio' in refused and 'thread_priority: 0' in refused
            assert scheduling_label(20, refused) == 'normal'
        else:
            assert (policy, priority) == (os.SCHED_FIFO, 20)
            assert sys.getswitchinterval() < switch  # a woken loop waits less for the GIL
            assert scheduling_label(20, refused) == 'SCHED_FIFO 20'
        # Only the calling thread changed; 0 leaves a thread as it is.
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
        assert _in_thread(lambda: (set_realtime(0), os.sched_getscheduler(0))) == (
            '', os.SCHED_OTHER)
    finally:
        sys.setswitchinterval(switch)


@pytest.mark.parametrize('bad', [-1, 100, 1.5, True])
def test_set_realtime_rejects_a_priority_outside_0_to_99(bad):
    with pytest.raises(ConfigError, match='thread_priority'):
        set_realtime(bad)


class Refused(Exception):
    """Stands for rclpy's RCLError: DDS refused a write."""


class SteppedClock:
    """A clock that moves only when the loop sleeps or a cycle says it worked."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


class Node:
    """What a node gives the host: records every call; ``faults`` maps cycle -> exception."""

    def __init__(self, cycles: int, *, faults=None, publish_faults=None, refill=None,
                 work_s: float = 0.0, clock: SteppedClock | None = None) -> None:
        self.clock = clock or SteppedClock()
        self.cycles, self.faults, self.publish_faults = cycles, faults or {}, publish_faults or {}
        self.refill = refill or []
        self.work_s = work_s
        self.n = 0
        self.events: list[tuple] = []
        self.ok = True
        self.keep_going = True
        self.loop: ControlLoop | None = None

    def cycle(self) -> None:
        self.n += 1
        if self.n >= self.cycles:
            self.loop.stop()
        self.clock.now += self.work_s
        if self.n in self.faults:
            raise self.faults[self.n]

    def publish(self, outputs: Outputs) -> None:
        if self.n in self.publish_faults:
            raise self.publish_faults[self.n]
        self.events.append(('publish', self.n, tuple(sorted(outputs.due)), outputs.refill))

    def needs_refill(self) -> bool:
        return self.refill[self.n - 1] if self.n - 1 < len(self.refill) else False

    def on_error(self, exc: Exception) -> bool:
        self.events.append(('error', self.n, repr(exc)))
        return self.keep_going

    def make(self, **kw) -> ControlLoop:
        kw.setdefault('ctrl_hz', HZ)
        self.loop = ControlLoop(
            cycle=self.cycle, publish=self.publish, on_error=self.on_error,
            publish_failed=lambda exc: self.events.append(('publish_failed', self.n, str(exc))),
            on_ok=lambda: self.events.append(('ok', self.n)), needs_refill=self.needs_refill,
            publish_error=Refused, ok=lambda: self.ok, clock=self.clock,
            sleep=self.clock.sleep, **kw)
        return self.loop

    def of(self, kind: str) -> list[tuple]:
        return [e for e in self.events if e[0] == kind]


def test_control_loop_owes_periodic_outputs_and_the_status_on_the_refill_edge():
    node = Node(7, refill=[False, True, True, False, True, False, False])
    node.make(rates_hz={'status': HZ / 3, 'camera': HZ}).run()
    assert node.of('publish') == [
        ('publish', 1, ('camera', 'status'), False), ('publish', 2, ('camera',), True),
        ('publish', 3, ('camera',), False), ('publish', 4, ('camera', 'status'), False),
        ('publish', 5, ('camera',), True), ('publish', 6, ('camera',), False),
        ('publish', 7, ('camera', 'status'), False)]
    assert len(node.of('ok')) == 7


def test_a_failed_publish_costs_that_tick_only_and_an_exception_goes_to_the_error_policy():
    node = Node(6, faults={2: KeyError('boom'), 4: Refused('cycle write')},
                publish_faults={3: Refused('dds'), 5: Refused('dds again')})
    node.make().run()
    # After an exception the simulator still publishes; after a refused write it does not.
    assert [e[1] for e in node.of('publish')] == [1, 2, 6]
    assert node.of('error') == [('error', 2, "KeyError('boom')")]
    assert node.of('publish_failed') == [('publish_failed', 3, 'dds'),
                                         ('publish_failed', 4, 'cycle write'),
                                         ('publish_failed', 5, 'dds again')]
    assert [e[1] for e in node.of('ok')] == [1, 3, 5, 6]  # a cycle that raised is not ok
    assert node.loop.ticks.tick == 6  # every cycle advanced the schedule


def test_a_robot_loop_publishes_nothing_after_a_failed_cycle_and_stops_when_told_to_give_up():
    node = Node(10, faults={2: KeyError('once'), 3: KeyError('give up')})
    original = node.on_error

    def on_error(exc):
        original(exc)
        return 'give up' not in str(exc)
    node.on_error = on_error
    node.make(outputs_after_error=False).run()
    assert [e[1] for e in node.of('publish')] == [1]
    assert [e[1] for e in node.of('error')] == [2, 3]
    assert node.n == 3  # stopped at once: no further cycle


def test_a_publish_refused_because_ros_shut_down_stops_the_loop_quietly():
    node = Node(100, publish_faults={4: Refused('context invalid')})
    original = node.publish

    def publish(outputs):
        if node.n == 4:
            node.ok = False  # Ctrl-C between the loop check and the publish
        original(outputs)
    node.publish = publish
    node.make().run()
    assert node.n == 4 and node.of('publish_failed') == []
    # The same in the cycle (a reset publishes there): stopping, nothing counted.
    node = Node(100, faults={3: Refused('context invalid')})
    original_cycle = node.cycle

    def cycle():
        if node.n == 2:
            node.ok = False  # shut down during the third cycle, before its write
        original_cycle()
    node.cycle = cycle
    node.make().run()
    assert node.n == 3 and node.of('publish_failed') == [] and len(node.of('publish')) == 2
    # An exception that is neither a publish error nor in the cycle ends run() loudly.
    node = Node(100, publish_faults={2: RuntimeError('bug in an output')})
    with pytest.raises(RuntimeError, match='bug in an output'):
        node.make().run()


def stalled_node(stall_s: float) -> Node:
    """Six cycles of 1 ms; the second one stalls ``stall_s``."""
    node = Node(6, work_s=0.001)
    original = node.cycle

    def cycle():
        original()
        if node.n == 2:
            node.clock.now += stall_s
    node.cycle = cycle
    return node


def test_control_loop_paces_on_the_slot_grid_and_a_simulator_catches_up_a_short_stall():
    node = Node(5, work_s=0.004)
    node.make(pace_hz=HZ).run()
    assert node.clock.sleeps == pytest.approx([PERIOD - 0.004] * 5)
    # A simulator 0.05 s late (under catch_up_s) runs the missed slots back to back.
    node = stalled_node(stall_s=0.05)
    node.make(pace_hz=HZ, catch_up_s=1.0).run()
    assert node.clock.sleeps[1:3] == [0.0, 0.0] and node.clock.sleeps[3] > 0
    assert (node.loop.cadence.overruns, node.loop.cadence.skipped_slots) == (2, 0)
    # A robot (no catch-up) skips them instead and never runs two cycles back to back.
    node = stalled_node(stall_s=0.05)
    node.make(pace_hz=HZ).run()
    assert node.loop.cadence.skipped_slots == 2 and min(node.clock.sleeps) > 0
    # Unpaced: no sleep at all.
    node = Node(3)
    node.make().run()
    assert node.clock.sleeps == [] and node.loop.cadence is None
    with pytest.raises(ConfigError, match='hz'):
        Node(1).make(pace_hz=0.0)


def test_control_loop_reports_its_real_time_factor_every_report_period():
    sim = [0.0]
    node = Node(200)
    original = node.cycle

    def cycle():
        original()
        sim[0] += 1.0 / HZ  # one simulated period per cycle
    node.cycle = cycle
    reports: list[float] = []
    # Paced at half the control rate: half a simulated second per wall second.
    node.make(pace_hz=HZ / 2, sim_time=lambda: sim[0], report=reports.append,
              report_period_s=1.0).run()
    # 200 cycles at 25 Hz: 8 s of wall time, one report once each second has passed.
    assert len(reports) == 7
    assert reports == pytest.approx([0.5] * 7, rel=0.05)
    assert node.loop.real_time_factor() == pytest.approx(0.5, rel=0.05)
