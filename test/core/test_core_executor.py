"""Unit tests of the chunk executor rules (validation, staleness, modes, dispatch, merging)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lerobot_lang_nodes.core.errors import ConfigError, CoreError, InvalidChunk
from lerobot_lang_nodes.core.executor import (
    Chunk, ChunkExecutor, DispatchLog, ExecutorConfig, ExecutorStatus,
)

NAMES = ('j0', 'j1', 'j2')
HZ = 10.0
DT = 1.0 / HZ


def make_cfg(**kw) -> ExecutorConfig:
    kw.setdefault('action_names', NAMES)
    kw.setdefault('ctrl_hz', HZ)
    return ExecutorConfig(**kw)


def ramp(horizon: int, start: float = 0.0, dim: int = 3) -> np.ndarray:
    """Row i is filled with start + i, so a dispatched action tells which step it was."""
    return np.repeat((start + np.arange(horizon, dtype=float))[:, None], dim, axis=1)


def chunk(values=None, *, horizon=5, start=0.0, revision=0, sequence=1, stamp=0.0,
          names=NAMES, **kw) -> Chunk:
    if values is None:
        values = ramp(horizon, start, len(names))
    return Chunk(values=values, action_names=names, revision=revision, sequence=sequence,
                 stamp_s=stamp, **kw)


def run(ex: ChunkExecutor, t0: float, n: int, dt: float = DT) -> list:
    return [ex.tick(t0 + k * dt) for k in range(n)]


# ------------------------------------------------------------------ Chunk


def test_from_flat_is_row_major():
    c = Chunk.from_flat([1, 2, 3, 4, 5, 6], 2, 3, action_names=NAMES, revision=2,
                        sequence=7, stamp_s=1.5)
    assert c.values.shape == (2, 3) and c.values.dtype == np.float64
    np.testing.assert_array_equal(c.values[1], [4, 5, 6])
    assert (c.horizon, c.action_dim, c.revision, c.sequence) == (2, 3, 2, 7)


@pytest.mark.parametrize('flat,h,d,needle', [
    ([1, 2, 3, 4, 5], 2, 3, '5 values'),
    ([], 0, 3, 'horizon=0'),
    ([1, 2], 2, 0, 'action_dim=0'),
])
def test_from_flat_rejects_bad_sizes(flat, h, d, needle):
    with pytest.raises(InvalidChunk) as err:
        Chunk.from_flat(flat, h, d, action_names=NAMES, revision=0, sequence=0, stamp_s=0.0)
    assert needle in str(err.value)
    assert isinstance(err.value, CoreError)


def test_chunk_values_are_read_only_copies():
    src = ramp(2)
    c = chunk(src)
    src[0, 0] = 99.0
    assert c.values[0, 0] == 0.0
    with pytest.raises(ValueError):
        c.values[0, 0] = 1.0


def test_chunk_rejects_non_2d_and_non_numeric():
    with pytest.raises(InvalidChunk, match='2-D'):
        chunk(np.zeros(3))
    with pytest.raises(InvalidChunk, match='not numeric'):
        chunk([['a', 'b', 'c']])


# ------------------------------------------------------------------ config


@pytest.mark.parametrize('kw,field', [
    ({'action_names': ()}, 'action_names'),
    ({'action_names': 'j0'}, 'action_names'),
    ({'action_names': ('a', 'a')}, 'action_names'),
    ({'ctrl_hz': 0}, 'ctrl_hz'),
    ({'ctrl_hz': math.inf}, 'ctrl_hz'),
    ({'lower_limits': [0, 0]}, 'lower_limits'),
    ({'upper_limits': [0, math.nan, 0]}, 'upper_limits'),
    ({'lower_limits': [1, 1, 1], 'upper_limits': [0, 2, 2]}, 'lower_limits'),
    ({'max_horizon': 0}, 'max_horizon'),
    ({'max_queue': 2.5}, 'max_queue'),
    ({'refill_fraction': 1.5}, 'refill_fraction'),
    ({'replace': 'merge'}, 'replace'),
    ({'blend_new_weight': -0.1}, 'blend_new_weight'),
    ({'time_align': 'yes'}, 'time_align'),
])
def test_config_validation_names_field_and_choices(kw, field):
    with pytest.raises(ConfigError) as err:
        make_cfg(**kw)
    assert err.value.field == field
    assert str(err.value).startswith(field) and 'expected' in str(err.value)
    assert isinstance(err.value, ValueError)


def test_config_replace_error_lists_choices():
    with pytest.raises(ConfigError, match="'tail', 'blend', 'append'"):
        make_cfg(replace='merge')


def test_config_coerces_names_to_tuple():
    assert make_cfg(action_names=['a', 'b']).action_names == ('a', 'b')


# ------------------------------------------------------------------ validation


def _reject(ex: ChunkExecutor, c: Chunk) -> str:
    res = ex.submit(c, 0.0)
    assert (res.accepted, res.kind) == (False, 'invalid')
    assert ex.status().last_reject_reason == res.reason
    return res.reason


@pytest.mark.parametrize('kw,needle', [
    ({'names': ('j0', 'j2', 'j1')}, 'different order'),
    ({'names': ('j0', 'j1', 'x')}, "missing ['j2'], unexpected ['x']"),
    ({'values': np.zeros((0, 3))}, 'empty chunk'),
    ({'values': np.zeros((2, 2)), 'names': NAMES}, 'action dim 2 != 3'),
    ({'horizon': 11}, 'horizon 11 exceeds max_horizon 10'),
    ({'period_s': -0.1}, 'period_s'),
    ({'stamp': math.nan}, 'stamp_s'),
])
def test_invalid_chunks_have_a_reason(kw, needle):
    ex = ChunkExecutor(make_cfg(max_horizon=10))
    assert needle in _reject(ex, chunk(**kw))


def test_non_finite_reason_names_step_and_dim():
    values = ramp(4)
    values[2, 1] = math.nan
    values[3, 0] = math.inf
    reason = _reject(ChunkExecutor(make_cfg()), chunk(values))
    assert 'step 2' in reason and "'j1'" in reason and 'nan' in reason and '2 non-finite' in reason


def test_limits_reason_names_value_and_limit():
    ex = ChunkExecutor(make_cfg(lower_limits=[-1, -1, -1], upper_limits=[1, 1, 1.5]))
    values = np.zeros((3, 3))
    values[1, 2] = 2.0
    reason = _reject(ex, chunk(values))
    assert 'step 1' in reason and "'j2'" in reason and 'above upper limit 1.5' in reason
    values = np.zeros((3, 3))
    values[0, 0] = -1.25
    assert 'below lower limit -1' in _reject(ex, chunk(values))
    assert ex.status().rejected_invalid == 2
    # On the limit is within the limit.
    assert ex.submit(chunk(np.full((2, 3), 1.0)), 0.0).accepted


def test_invalid_chunk_leaves_queue_untouched():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(horizon=4), 0.0)
    _reject(ex, chunk(names=('a', 'b', 'c')))
    assert ex.status().queue_depth == 4
    np.testing.assert_array_equal(ex.tick(0.0), [0, 0, 0])


# ------------------------------------------------------------------ revisions


def test_stale_chunk_is_discarded():
    ex = ChunkExecutor(make_cfg())
    ex.set_revision(3)
    res = ex.submit(chunk(revision=2), 0.0)
    assert (res.accepted, res.kind) == (False, 'stale')
    assert 'revision 2 < flush revision 3' in res.reason
    st = ex.status()
    assert (st.discarded_stale, st.queue_depth, st.last_reject_reason) == (1, 0, res.reason)
    assert ex.tick(0.0) is None


def test_newer_chunk_advances_revision_and_drops_older_actions():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(revision=0, sequence=1), 0.0)
    res = ex.submit(chunk(revision=2, sequence=2, start=100), 0.0)
    assert res.accepted and res.kind == 'ok'
    st = ex.status()
    assert st.context_revision == 2 and st.discarded_stale == 1
    assert ex.tick(0.0)[0] == 100


def test_set_revision_counts_each_dropped_chunk_once():
    ex = ChunkExecutor(make_cfg(replace='append'))
    ex.submit(chunk(sequence=1, horizon=3), 0.0)
    ex.submit(chunk(sequence=2, horizon=3), 0.0)
    ex.tick(0.0)
    ex.set_revision(1)
    st = ex.status()
    assert (st.queue_depth, st.discarded_stale, st.dropped_actions) == (0, 2, 5)
    ex.set_revision(1)  # equal: ignored
    ex.set_revision(0)  # older: ignored
    assert ex.status().context_revision == 1 and ex.status().discarded_stale == 2


def test_set_revision_with_empty_queue_counts_nothing():
    ex = ChunkExecutor(make_cfg())
    ex.set_revision(5)
    assert ex.status().discarded_stale == 0 and ex.revision == 5


# ------------------------------------------------------------------ modes


def test_start_paused_rejects_and_holds():
    ex = ChunkExecutor(make_cfg(start_paused=True))
    assert ex.mode == 'paused'
    res = ex.submit(chunk(), 0.0)
    assert (res.accepted, res.kind, res.reason) == (False, 'stale', 'paused')
    assert ex.tick(0.0) is None
    st = ex.status()
    assert (st.starved_ticks, st.dispatched, st.needs_refill) == (0, 0, False)


def test_pause_clears_queue_and_resume_starts_empty():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(horizon=5), 0.0)
    ex.tick(0.0)
    ex.pause()
    st = ex.status()
    assert (st.mode, st.queue_depth, st.dropped_actions) == ('paused', 0, 4)
    assert ex.tick(0.1) is None
    ex.resume()
    assert ex.mode == 'action' and ex.tick(0.2) is None
    assert ex.status().starved_ticks == 1 and ex.status().needs_refill


def test_chunk_observed_before_pause_is_rejected_after_resume():
    ex = ChunkExecutor(make_cfg(time_align=False))
    ex.tick(1.0)
    ex.pause(now_s=2.0)
    ex.resume()
    res = ex.submit(chunk(stamp=1.9), 2.5)
    assert res.kind == 'stale' and 'observed before pause' in res.reason
    assert ex.submit(chunk(stamp=2.1), 2.5).accepted


def test_pause_without_time_uses_last_seen_clock():
    ex = ChunkExecutor(make_cfg(time_align=False))
    ex.tick(3.0)
    ex.pause()
    ex.resume()
    assert not ex.submit(chunk(stamp=2.9), 3.1).accepted
    assert ex.submit(chunk(stamp=3.0), 3.1).accepted


def test_burst_runs_then_auto_pauses_at_deadline():
    ex = ChunkExecutor(make_cfg(start_paused=True, time_align=False))
    ex.burst(0.5, now_s=10.0)
    assert ex.status().burst_deadline_s == pytest.approx(10.5)
    ex.submit(chunk(horizon=20, stamp=10.0), 10.0)
    out = run(ex, 10.0, 7)
    assert [o is not None for o in out] == [True] * 5 + [False] * 2
    st = ex.status()
    assert (st.mode, st.dispatched, st.queue_depth, st.burst_deadline_s) == \
        ('paused', 5, 0, None)
    assert st.starved_ticks == 0


def test_resume_cancels_burst_and_pause_cancels_burst():
    ex = ChunkExecutor(make_cfg(time_align=False))
    ex.burst(0.2, 0.0)
    ex.resume()
    ex.submit(chunk(horizon=10), 0.0)
    assert all(a is not None for a in run(ex, 0.0, 5))
    ex.burst(1.0, 1.0)
    ex.pause()
    ex.burst(1.0, 2.0)
    assert ex.status().burst_deadline_s == 3.0


@pytest.mark.parametrize('duration', [0, -1, math.inf, math.nan])
def test_burst_rejects_bad_duration(duration):
    with pytest.raises(ConfigError, match='duration_s'):
        ChunkExecutor(make_cfg()).burst(duration, 0.0)


def test_burst_survives_backwards_clock_without_extending():
    ex = ChunkExecutor(make_cfg(time_align=False))
    ex.burst(1.0, now_s=100.0)
    ex.tick(100.4)
    ex.tick(0.0)  # clock reset: 0.6 s of the burst remain
    assert ex.status().burst_deadline_s == pytest.approx(0.6)
    ex.tick(0.6)
    assert ex.mode == 'paused'


def test_clear_keeps_mode():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(), 0.0)
    ex.clear()
    assert ex.mode == 'action' and len(ex) == 0 and ex.status().dropped_actions == 5


def test_non_finite_now_is_a_config_error():
    with pytest.raises(ConfigError, match='now_s'):
        ChunkExecutor(make_cfg()).tick(math.nan)


# ------------------------------------------------------------------ dispatch


def test_tick_dispatches_in_order_and_returns_copies():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(horizon=3), 0.0)
    out = run(ex, 0.0, 3)
    assert [o[0] for o in out] == [0, 1, 2]
    assert all(o.dtype == np.float64 and o.shape == (3,) for o in out)
    out[0][0] = 42.0  # mutating a returned action must not touch the chunk
    st = ex.status()
    assert (st.dispatched, st.last_chunk_sequence, st.last_chunk_revision) == (3, 1, 0)


def test_catch_up_pops_rounded_elapsed_and_returns_latest():
    log = DispatchLog()
    ex = ChunkExecutor(make_cfg(), on_dispatch=log)
    ex.submit(chunk(horizon=20), 0.0)
    assert ex.tick(0.0)[0] == 0
    assert ex.tick(0.1)[0] == 1  # exactly one period: no catch-up
    assert ex.tick(0.44)[0] == 4  # 0.34 s * 10 Hz -> round(3.4) = 3 popped
    assert ex.tick(0.60)[0] == 6  # round(1.6) = 2
    st = ex.status()
    assert (st.dispatched, st.catchup_skipped, st.queue_depth) == (7, 3, 13)
    assert [r.step_index for r in log.records] == [0, 1, 4, 6]


def test_catch_up_never_pops_more_than_queue():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(horizon=5), 0.0)
    ex.tick(0.0)
    assert ex.tick(1e12)[0] == 4  # huge jump: pop all, execute the last
    assert ex.status().dispatched == 5
    assert ex.tick(1e12 + 0.1) is None


def test_fast_or_backwards_ticks_pop_one():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(horizon=5), 0.0)
    assert [ex.tick(t)[0] for t in (1.0, 1.01, 0.5)] == [0, 1, 2]


def test_starvation_holds_and_counts_and_never_replays():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(horizon=2), 0.0)
    out = run(ex, 0.0, 5)
    assert out[2:] == [None, None, None]
    assert ex.status().starved_ticks == 3
    # After a starvation gap the next chunk starts at its own first action, no catch-up.
    ex.submit(chunk(horizon=5, start=10, sequence=2, stamp=2.0), 2.0)
    assert ex.tick(2.0)[0] == 10


def test_resume_after_long_pause_is_not_catch_up():
    ex = ChunkExecutor(make_cfg(time_align=False))
    ex.submit(chunk(horizon=3), 0.0)
    ex.tick(0.0)
    ex.pause(0.05)
    ex.resume()
    ex.submit(chunk(horizon=5, stamp=50.0, sequence=2), 50.0)
    assert ex.tick(50.0)[0] == 0  # 50 s since the last dispatch, yet only one action popped
    assert ex.status().dispatched == 2


def test_on_dispatch_reports_chunk_revision_step_and_failures_do_not_escape():
    seen = []

    def hook(seq, rev, step, action):
        seen.append((seq, rev, step, float(action[0])))
        raise RuntimeError('logging hook broke')

    ex = ChunkExecutor(make_cfg(), on_dispatch=hook)
    ex.submit(chunk(revision=4, sequence=9, horizon=2), 0.0)
    assert ex.tick(0.0) is not None
    assert seen == [(9, 4, 0, 0.0)]


def test_active_instruction_follows_dispatch():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(instruction='pick the cup'), 0.0)
    assert ex.status().active_instruction == ''
    ex.tick(0.0)
    assert ex.status().active_instruction == 'pick the cup'


# ------------------------------------------------------------------ merging


def test_tail_replace_drops_unexecuted_tail():
    ex = ChunkExecutor(make_cfg(time_align=False))
    ex.submit(chunk(horizon=5, sequence=1), 0.0)
    ex.tick(0.0)
    ex.submit(chunk(horizon=3, start=100, sequence=2), 0.1)
    out = run(ex, 0.1, 4)
    assert [None if a is None else a[0] for a in out] == [100, 101, 102, None]
    assert ex.status().dropped_actions == 4


def test_blend_averages_overlap_and_keeps_new_tail():
    ex = ChunkExecutor(make_cfg(replace='blend', blend_new_weight=0.25, time_align=False))
    ex.submit(chunk(np.zeros((3, 3)), sequence=1), 0.0)
    ex.submit(chunk(np.full((5, 3), 8.0), sequence=2), 0.0)
    out = [a[0] for a in run(ex, 0.0, 5)]
    assert out == [2.0, 2.0, 2.0, 8.0, 8.0]  # 0.75 * 0 + 0.25 * 8 over the 3-step overlap
    assert ex.status().last_chunk_sequence == 2


def test_blend_drops_old_actions_beyond_the_new_chunk():
    ex = ChunkExecutor(make_cfg(replace='blend', time_align=False))
    ex.submit(chunk(np.full((6, 3), 2.0), sequence=1), 0.0)
    ex.submit(chunk(np.full((2, 3), 4.0), sequence=2), 0.0)
    out = run(ex, 0.0, 3)
    assert [None if a is None else a[0] for a in out] == [3.0, 3.0, None]
    assert ex.status().dropped_actions == 4


def test_append_keeps_queue_and_adds_new():
    ex = ChunkExecutor(make_cfg(replace='append', time_align=False))
    ex.submit(chunk(horizon=2, sequence=1), 0.0)
    ex.submit(chunk(horizon=2, start=10, sequence=2), 0.0)
    assert [a[0] for a in run(ex, 0.0, 4)] == [0, 1, 10, 11]


def test_queue_is_bounded_and_truncates_far_future():
    ex = ChunkExecutor(make_cfg(replace='append', max_queue=4, time_align=False))
    ex.submit(chunk(horizon=3, sequence=1), 0.0)
    res = ex.submit(chunk(horizon=3, start=10, sequence=2), 0.0)
    assert res.accepted and res.queued == 1 and 'queue full' in res.reason
    assert ex.status().queue_depth == 4
    assert [a[0] for a in run(ex, 0.0, 4)] == [0, 1, 2, 10]


def test_time_alignment_skips_elapsed_slots_only():
    ex = ChunkExecutor(make_cfg())
    # Observed at t=1.0, arriving at 1.25: slots 0 and 1 elapsed, slot 2 is due now.
    res = ex.submit(chunk(horizon=10, stamp=1.0), 1.25)
    assert (res.skipped, res.queued) == (2, 8)
    assert ex.tick(1.25)[0] == 2
    # On a slot boundary, float error must not keep an elapsed slot.
    res = ex.submit(chunk(horizon=10, stamp=0.0, sequence=2), 0.3)
    assert res.skipped == 3


def test_time_alignment_counts_slots_of_the_control_period():
    ex = ChunkExecutor(make_cfg())
    # period 0 = 1/ctrl_hz: 0.26 s after the stamp, slots 0 and 1 have passed, slot 2 is due.
    res = ex.submit(chunk(horizon=10, stamp=0.0, period_s=0.0), 0.26)
    assert res.skipped == 2 and res.queued == 8


def test_time_alignment_expired_chunk_is_stale():
    ex = ChunkExecutor(make_cfg())
    res = ex.submit(chunk(horizon=3, stamp=0.0), 0.3)
    assert (res.accepted, res.kind) == (False, 'stale') and 'expired' in res.reason
    assert ex.status().discarded_stale == 1


def test_time_alignment_ignores_future_stamps_and_can_be_disabled():
    ex = ChunkExecutor(make_cfg())
    assert ex.submit(chunk(stamp=5.0), 1.0).skipped == 0
    ex = ChunkExecutor(make_cfg(time_align=False))
    assert ex.submit(chunk(horizon=3, stamp=0.0), 100.0).skipped == 0


# ------------------------------------------------------------------ refill and status


def test_refill_threshold_is_fraction_of_last_horizon():
    ex = ChunkExecutor(make_cfg(refill_fraction=0.5, time_align=False))
    assert ex.status().needs_refill  # empty in action mode
    ex.submit(chunk(horizon=6), 0.0)
    flags = []
    for k in range(6):
        ex.tick(k * DT)
        flags.append((ex.status().queue_depth, ex.status().needs_refill))
    assert flags == [(5, False), (4, False), (3, False), (2, True), (1, True), (0, True)]


def test_refill_fraction_zero_only_when_empty():
    ex = ChunkExecutor(make_cfg(refill_fraction=0.0, time_align=False))
    ex.submit(chunk(horizon=2), 0.0)
    ex.tick(0.0)
    assert not ex.needs_refill()
    ex.tick(0.1)
    assert ex.needs_refill()


def test_status_is_a_frozen_snapshot():
    ex = ChunkExecutor(make_cfg())
    st = ex.status()
    assert isinstance(st, ExecutorStatus)
    assert (st.mode, st.queue_depth, st.context_revision, st.last_chunk_sequence,
            st.last_chunk_revision, st.dispatched, st.discarded_stale, st.rejected_invalid,
            st.starved_ticks, st.active_instruction, st.last_reject_reason) == \
        ('action', 0, 0, -1, -1, 0, 0, 0, 0, '', '')
    with pytest.raises(AttributeError):
        st.mode = 'paused'  # type: ignore[misc]


def test_record_invalid_counts_a_malformed_message_without_touching_the_queue():
    ex = ChunkExecutor(ExecutorConfig(action_names=('a', 'b'), ctrl_hz=10.0))
    ex.submit(Chunk(values=np.zeros((3, 2)), action_names=('a', 'b'), revision=0, sequence=1,
                    stamp_s=0.0), 0.0)
    result = ex.record_invalid('chunk 7: 5 values != horizon 2 * dim 2')
    assert not result.accepted and result.kind == 'invalid'
    status = ex.status()
    assert status.rejected_invalid == 1 and status.queue_depth == 3
    assert status.last_reject_reason == 'chunk 7: 5 values != horizon 2 * dim 2'


# ------------------------------------------------------------------ rate, clock, log lines


@pytest.mark.parametrize('period,ok', [(0.0, True), (DT, True), (DT * 1.01, True),
                                       (DT / 3, False), (1e9, False), (DT * 1.5, False)])
def test_a_chunk_made_for_another_rate_is_refused_with_the_executors_period(period, ok):
    ex = ChunkExecutor(make_cfg())
    res = ex.submit(chunk(period_s=period, stamp=1.0), 1.0)
    assert res.accepted is ok
    if not ok:
        assert res.kind == 'invalid' and 'control period' in res.reason
        assert f'{DT:.6g} s' in res.reason  # says what rate the executor runs at
        assert ex.status().rejected_invalid == 1 and ex.tick(1.0) is None


def test_a_chunk_stamped_in_the_future_is_refused():
    ex = ChunkExecutor(make_cfg(max_future_s=1.0))
    eleven_days = 11 * 86400.0
    res = ex.submit(chunk(stamp=100.0 + eleven_days), 100.0)
    assert not res.accepted and res.kind == 'invalid' and 'in the future' in res.reason
    assert ex.submit(chunk(stamp=100.5, sequence=2), 100.0).accepted  # within the bound
    assert ex.status().last_reject_reason.startswith('stamped')


def test_each_refusal_is_logged_once_then_every_nth_with_a_count(caplog):
    import logging
    ex = ChunkExecutor(make_cfg(log_every=10))
    with caplog.at_level(logging.INFO, logger='lerobot_lang_nodes.core.executor'):
        for seq in range(1, 26):
            ex.submit(chunk(values=np.full((2, 3), math.nan), sequence=seq), 0.0)
    lines = [r.getMessage() for r in caplog.records if 'invalid chunk' in r.getMessage()]
    assert len(lines) == 3  # the 1st, 10th and 20th of 25
    assert '(10 invalid chunks so far)' in lines[1] and '(20 invalid' in lines[2]
    assert ex.status().rejected_invalid == 25  # every one is counted


@pytest.mark.parametrize('field,value', [('period_tolerance', -0.1), ('max_future_s', math.nan),
                                         ('log_every', 0)])
def test_rate_and_log_settings_are_validated(field, value):
    with pytest.raises(ConfigError):
        make_cfg(**{field: value})


# ------------------------------------------------------------------ dry run


def test_dry_run_plays_chunks_on_time_but_never_returns_an_action():
    log = DispatchLog()
    ex = ChunkExecutor(make_cfg(dry_run=True, refill_fraction=0.5), on_dispatch=log)
    assert ex.submit(chunk(horizon=4), 0.0).accepted
    assert run(ex, 0.0, 3) == [None, None, None]  # the robot holds
    st = ex.status()
    assert st.dry_run and st.planned == 3 and st.dispatched == 0 and len(log.records) == 0
    assert st.planned_target == (2.0, 2.0, 2.0)  # the third action of the ramp
    assert st.queue_depth == 1 and st.needs_refill  # the policy is asked for the next chunk
    assert st.last_chunk_sequence == 1 and st.active_instruction == chunk().instruction
    assert ex.tick(0.3) is None and ex.status().planned == 4
    assert ex.tick(0.4) is None and ex.status().starved_ticks == 1


def test_without_dry_run_nothing_is_planned():
    ex = ChunkExecutor(make_cfg())
    ex.submit(chunk(horizon=2), 0.0)
    assert ex.tick(0.0) is not None
    st = ex.status()
    assert not st.dry_run and st.planned == 0 and st.planned_target == () and st.dispatched == 1


def test_dry_run_must_be_a_bool():
    with pytest.raises(ConfigError, match='dry_run'):
        make_cfg(dry_run='yes')
