"""Property tests: random chunks, revisions, pauses, bursts and clock jumps vs. the executor."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, ExecutorConfig

NAMES = ('a', 'b', 'c')
LOWER = np.array([-1.0, -2.0, -math.inf])
UPPER = np.array([1.0, 2.0, 0.5])
MAX_HORIZON = 10
COUNTERS = ('dispatched', 'discarded_stale', 'rejected_invalid', 'starved_ticks',
            'accepted_chunks', 'dropped_actions', 'catchup_skipped', 'context_revision')

configs = st.builds(
    dict,
    replace=st.sampled_from(['tail', 'blend', 'append']),
    max_queue=st.integers(1, 25),
    time_align=st.booleans(),
    start_paused=st.booleans(),
    refill_fraction=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
    blend_new_weight=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    limits=st.booleans(),
)

chunk_specs = st.fixed_dictionaries({
    'horizon': st.integers(0, MAX_HORIZON + 2),
    'names': st.sampled_from(['ok', 'ok', 'ok', 'permuted', 'wrong', 'short']),
    'corrupt': st.sampled_from([None, None, None, 'nan', 'inf', 'limit']),
    'rev_delta': st.integers(-2, 2),
    'stamp_offset': st.sampled_from([0.0, -0.05, -0.15, -0.5, -3.0, 0.2]),
    'period': st.sampled_from([0.0, 0.05, 0.1]),
    'seed': st.integers(0, 2**16),
})

clock_steps = st.one_of(
    st.sampled_from([0.1, 0.1, 0.1, 0.099, 0.101, 0.0, 0.25, 0.5]),
    st.floats(-5.0, 5.0),
    st.sampled_from([-1e4, 1e6, 1e9]),
)

ops = st.one_of(
    st.tuples(st.just('submit'), chunk_specs),
    st.tuples(st.just('submit'), chunk_specs),
    st.tuples(st.just('tick'), clock_steps),
    st.tuples(st.just('tick'), clock_steps),
    st.tuples(st.just('tick'), clock_steps),
    st.tuples(st.just('set_revision'), st.integers(-1, 2)),
    st.tuples(st.just('pause'), st.booleans()),
    st.tuples(st.just('resume'), st.none()),
    st.tuples(st.just('burst'), st.sampled_from([0.05, 0.3, 1.0, 5.0])),
    st.tuples(st.just('clear'), st.none()),
)


@dataclass
class Model:
    """What the test knows independently of the executor."""

    limits: bool
    chunks: dict[int, Chunk] = field(default_factory=dict)
    valid: dict[int, bool] = field(default_factory=dict)
    accepted_order: dict[int, int] = field(default_factory=dict)  # seq -> acceptance index
    submit_op: dict[int, int] = field(default_factory=dict)  # seq -> op index of submission
    last_flush_op: int = -1  # op index of the last pause / clear (queue emptied)
    last_step: dict[int, int] = field(default_factory=dict)
    deadline: float | None = None  # burst deadline while the clock stayed monotone
    pause_time: float = -math.inf  # chunks observed before this were computed before a pause
    clock_seen: bool = False  # whether the executor was given any time yet
    queued_total: int = 0


def build_chunk(spec: dict, seq: int, revision: int, now: float) -> Chunk:
    rng = np.random.default_rng(spec['seed'])
    h = spec['horizon']
    names = {'ok': NAMES, 'permuted': ('b', 'a', 'c'), 'wrong': ('a', 'b', 'x'),
             'short': ('a', 'b')}[spec['names']]
    values = rng.uniform(-0.9, 0.45, size=(h, len(names)))
    if h and spec['corrupt']:
        i, j = int(rng.integers(h)), int(rng.integers(len(names)))
        values[i, j] = {'nan': math.nan, 'inf': -math.inf, 'limit': 2.5}[spec['corrupt']]
    return Chunk(values=values, action_names=names, revision=max(0, revision + spec['rev_delta']),
                 sequence=seq, stamp_s=now + spec['stamp_offset'], period_s=spec['period'])


def oracle_valid(c: Chunk, limits: bool) -> bool:
    if c.action_names != NAMES or not 1 <= c.horizon <= MAX_HORIZON:
        return False
    if not np.isfinite(c.values).all():
        return False
    if c.period_s and abs(c.period_s - 0.1) > 0.002:  # made for another rate than 10 Hz
        return False
    return not limits or bool(((c.values >= LOWER) & (c.values <= UPPER)).all())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conf=configs, program=st.lists(ops, min_size=20, max_size=80))
def test_executor_invariants(conf, program):
    limits = conf.pop('limits')
    cfg = ExecutorConfig(action_names=NAMES, ctrl_hz=10.0, max_horizon=MAX_HORIZON,
                         lower_limits=LOWER.tolist() if limits else None,
                         upper_limits=UPPER.tolist() if limits else None, **conf)
    model = Model(limits=limits)
    dispatches: list[tuple] = []
    ex = ChunkExecutor(cfg, on_dispatch=lambda *rec: dispatches.append(rec))
    now = 1000.0
    seq = 0
    prev = ex.status()

    for op_index, (op, arg) in enumerate(program):
        model.clock_seen |= op in ('submit', 'tick', 'burst') or (op == 'pause' and arg)
        if op == 'submit':
            seq += 1
            c = build_chunk(arg, seq, ex.revision, now)
            model.chunks[seq], model.valid[seq] = c, oracle_valid(c, limits)
            model.submit_op[seq] = op_index
            res = ex.submit(c, now)
            assert res.kind == ('ok' if res.accepted else res.kind)
            if model.valid[seq]:
                assert res.kind in ('ok', 'stale'), res.reason
            else:
                assert res.kind == 'invalid' and res.reason
            if res.accepted:
                model.accepted_order[seq] = len(model.accepted_order)
                model.queued_total += c.horizon - res.skipped
                assert 0 <= res.skipped < c.horizon
        elif op == 'tick':
            if now + arg < now:
                model.deadline = None  # clock regression: the executor rescales, we stop judging
                model.pause_time = min(model.pause_time, now + arg)
            now += arg
            mode_before = ex.mode
            n_before = len(dispatches)
            action = ex.tick(now)
            if mode_before == 'paused':
                assert action is None, 'dispatched while paused'
            if action is None:
                assert len(dispatches) == n_before
            else:
                assert len(dispatches) == n_before + 1
                assert ex.mode == 'action'
                if model.deadline is not None:
                    assert now < model.deadline, 'dispatched after the burst deadline'
                check_dispatch(model, cfg, ex, dispatches[-1], action)
            if mode_before == 'action' and ex.mode == 'paused':
                model.last_flush_op = op_index  # burst auto-pause
                model.deadline = None
                model.pause_time = max(model.pause_time, now)
        elif op == 'set_revision':
            ex.set_revision(ex.revision + arg)
        elif op == 'pause':
            # Without a time the executor uses the last clock reading (``now`` here), if any.
            ex.pause(now if arg else None)
            model.last_flush_op = op_index
            if arg or model.clock_seen:
                model.pause_time = max(model.pause_time, now)
            model.deadline = None
        elif op == 'resume':
            ex.resume()
            model.deadline = None
        elif op == 'burst':
            ex.burst(arg, now)
            model.deadline = now + arg
        elif op == 'clear':
            ex.clear()
            model.last_flush_op = op_index

        status = ex.status()
        assert status.queue_depth <= cfg.max_queue
        assert status.queue_depth == len(ex)
        for name in COUNTERS:
            assert getattr(status, name) >= getattr(prev, name), name
        if status.mode == 'paused':
            assert status.queue_depth == 0 and not status.needs_refill
        elif status.queue_depth == 0:
            assert status.needs_refill
        if cfg.replace != 'blend':
            # Every queued action is dispatched, dropped (with a count) or still queued.
            assert model.queued_total == (status.dispatched + status.dropped_actions
                                          + status.queue_depth)
        prev = status


def check_dispatch(model: Model, cfg: ExecutorConfig, ex: ChunkExecutor, rec: tuple,
                   action: np.ndarray) -> None:
    seq, rev, step, logged = rec
    assert seq in model.accepted_order, 'dispatched a chunk that was never accepted'
    assert model.valid[seq], 'dispatched an invalid chunk'
    c = model.chunks[seq]
    assert rev == c.revision == ex.revision, 'dispatched a stale chunk'
    assert model.submit_op[seq] > model.last_flush_op, 'dispatched across a pause/clear'
    assert c.stamp_s >= model.pause_time, 'dispatched a chunk observed before a pause'
    latest = max(model.accepted_order.values())
    order = model.accepted_order[seq]
    if cfg.replace != 'append':
        assert order == latest, 'dispatched a replaced chunk'
    assert step > model.last_step.get(seq, -1), 'step replayed or out of order'
    model.last_step[seq] = step
    newer = [o for o in model.last_step if model.accepted_order[o] > order]
    assert not newer, f'chunk {seq} dispatched after newer chunks {newer}'
    np.testing.assert_array_equal(action, logged)
    assert action.dtype == np.float64 and action.shape == (len(NAMES),)
    assert np.isfinite(action).all()
    if model.limits:
        assert ((action >= LOWER) & (action <= UPPER)).all()
    if cfg.replace != 'blend':
        np.testing.assert_array_equal(action, c.values[step])


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64),
                       min_size=0, max_size=12),
       horizon=st.integers(-1, 5), dim=st.integers(-1, 4))
def test_from_flat_accepts_exactly_consistent_sizes(values, horizon, dim):
    from lerobot_lang_nodes.core.errors import InvalidChunk
    try:
        c = Chunk.from_flat(values, horizon, dim, action_names=NAMES[:max(dim, 0)],
                            revision=0, sequence=0, stamp_s=0.0)
    except InvalidChunk:
        assert horizon < 1 or dim < 1 or len(values) != horizon * dim
    else:
        assert c.values.shape == (horizon, dim)
        np.testing.assert_array_equal(c.values.reshape(-1), np.asarray(values, dtype=float))
