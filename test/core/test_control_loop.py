"""Loop cadence and executor catch-up after a stall: late actions skipped, none played early."""

from __future__ import annotations

import logging
import os
import sys
import threading

import numpy as np
import pytest

from lerobot_lang_nodes.core.control_loop import (Cadence, LoopErrors, LoopTicks, ThrottledLog,
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
