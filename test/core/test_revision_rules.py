"""Revision rules: operator changes flush the queue, the planner's subtask progression does not."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, DispatchLog, ExecutorConfig
from lerobot_lang_nodes.core.high_level import HighLevelPlanner
from lerobot_lang_nodes.core.inference_gate import ExecutorView, InferenceGate
from lerobot_lang_nodes.core.language import LanguageState

NAMES = ('a', 'b')
HZ = 10.0


def make(replace: str = 'tail', log: DispatchLog | None = None) -> ChunkExecutor:
    return ChunkExecutor(ExecutorConfig(action_names=NAMES, ctrl_hz=HZ, replace=replace,
                                        time_align=False), on_dispatch=log)


def chunk(rev: int, flush: int | None, seq: int, horizon: int = 6, value: float = 0.0) -> Chunk:
    return Chunk(np.full((horizon, 2), value), NAMES, revision=rev, sequence=seq, stamp_s=0.0,
                 flush_revision=flush)


def test_language_state_flushes_on_operator_changes_only():
    s = LanguageState()
    s.set_task('put the red cube in the bowl')
    assert s.flush_revision == s.revision == 1
    assert s.set_subtask('reach the red cube') == 'changed'  # planner progression
    assert (s.revision, s.flush_revision) == (2, 1)
    s.set_subtask('grasp the red cube', source='operator')  # direct subtask
    assert (s.revision, s.flush_revision) == (3, 3)
    s.set_subtask('lift it', flush=True)  # the re-plan answering an interjection
    assert (s.revision, s.flush_revision) == (4, 4)
    s.set_mode('paused')
    assert (s.revision, s.flush_revision) == (5, 5)
    s.set_memory('cube grasped')
    s.set_plan('then the bowl')
    assert (s.revision, s.flush_revision) == (5, 5)
    assert s.snapshot().flush_revision == 5


class Scripted:
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def generate(self, kind, messages, observation):
        return self.texts.pop(0) if kind == 'subtask' else 'note'


def test_planner_regeneration_flushes_only_when_asked():
    planner = HighLevelPlanner(Scripted(['reach', 'grasp']))
    planner.set_task('stack the cubes')
    planner.regenerate(0.0)
    assert (planner.state.revision, planner.state.flush_revision) == (2, 1)
    planner.regenerate(1.0, flush=True)  # after an interjection
    assert (planner.state.revision, planner.state.flush_revision) == (3, 3)


def test_subtask_progression_keeps_the_queue_and_accepts_the_next_chunk():
    ex = make()
    ex.set_revision(1, 1)
    assert ex.submit(chunk(1, 1, seq=1), 0.0).accepted
    ex.set_revision(2, 1)  # the planner moved on: nothing is dropped
    assert len(ex) == 6 and ex.status().dropped_actions == 0
    assert ex.tick(0.0) is not None
    # A chunk still computed for the previous subtask (in flight at the change) may run.
    assert ex.submit(chunk(1, 1, seq=2), 0.1).accepted
    assert ex.submit(chunk(2, 1, seq=3), 0.2).accepted  # the new subtask's chunk
    late = ex.submit(chunk(1, 1, seq=4), 0.3)  # never after a newer subtask's chunk
    assert (late.accepted, late.kind) == (False, 'stale') and 'superseded' in late.reason


def test_operator_change_flushes_the_queue_and_rejects_older_chunks():
    ex = make(replace='append')
    ex.set_revision(2, 1)
    assert ex.submit(chunk(2, 1, seq=1), 0.0).accepted
    ex.set_revision(3, 3)  # interjection re-plan
    assert len(ex) == 0 and ex.flush_revision == 3
    res = ex.submit(chunk(2, 1, seq=2), 0.0)
    assert (res.accepted, res.kind) == (False, 'stale')
    assert 'revision 2 < flush revision 3' in res.reason
    assert ex.submit(chunk(3, 3, seq=3), 0.0).accepted


def test_a_chunk_teaches_the_executor_a_flush_it_has_not_heard_of():
    ex = make(replace='append')
    ex.set_revision(1, 1)
    assert ex.submit(chunk(1, 1, seq=1), 0.0).accepted
    assert ex.submit(chunk(4, 4, seq=2, horizon=2), 0.0).accepted  # context not seen yet
    assert len(ex) == 2 and ex.flush_revision == 4
    assert ex.submit(chunk(5, 4, seq=3, horizon=2), 0.0).accepted  # progression: appended
    assert len(ex) == 4


def test_chunks_without_flush_revision_keep_the_flush_on_every_revision_rule():
    ex = make()
    assert ex.submit(chunk(1, None, seq=1), 0.0).accepted
    ex.set_revision(2)
    assert len(ex) == 0
    assert not ex.submit(chunk(1, None, seq=2), 0.0).accepted


def test_gate_starts_at_once_after_an_operator_change_and_early_for_a_new_subtask():
    gate = InferenceGate(max_hz=20.0)
    full = ExecutorView(acting=True, needs_refill=False, revision=2, flush_revision=1)
    gate.started(0.0, 2, 1)
    gate.published(1, 0.01)
    # The same subtask with a full queue: wait for the refill edge and the ack.
    assert not gate.should_start(0.1, full, 2, 1)
    # The planner's next subtask (rev 3, flush 1): no flush, but the next chunk starts now,
    # within max_hz, even though the queue is full and chunk 1 is not acknowledged yet.
    assert not gate.should_start(0.03, full, 3, 1)  # 30 ms after the last start: too soon
    assert gate.should_start(0.1, full, 3, 1)
    gate.started(0.1, 3, 1)
    gate.published(2, 0.12)
    assert not gate.should_start(0.3, full, 3, 1)  # that subtask has its chunk now
    refill = ExecutorView(acting=True, needs_refill=True, revision=3, flush_revision=1)
    gate.acknowledged(2)
    assert gate.should_start(0.4, refill, 3, 1)
    # An operator change (flush 4): at once, without the refill edge or the pending ack.
    gate.started(0.4, 3, 1)
    gate.published(3, 0.41)
    assert gate.should_start(0.42, full, 4, 4)


# --- property: the guarantee across random interleavings -------------------------------------

events = st.lists(st.one_of(
    st.tuples(st.just('operator'), st.none()),
    st.tuples(st.just('subtask'), st.none()),
    st.tuples(st.just('context'), st.none()),       # the executor hears the latest context
    st.tuples(st.just('chunk'), st.integers(0, 3)),  # computed k revisions ago
    st.tuples(st.just('tick'), st.integers(1, 3)),
), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=events, replace=st.sampled_from(['tail', 'blend', 'append']))
def test_no_action_computed_before_a_known_operator_change_is_ever_dispatched(events, replace):
    log = DispatchLog()
    ex = make(replace=replace, log=log)
    history = [(0, 0)]  # (revision, flush_revision) as the planner published them
    now, seq = 0.0, 0
    for kind, arg in events:
        rev, flush = history[-1]
        if kind == 'operator':
            history.append((rev + 1, rev + 1))
        elif kind == 'subtask':
            history.append((rev + 1, flush))
        elif kind == 'context':
            ex.set_revision(rev, flush)
        elif kind == 'chunk':
            seq += 1
            c_rev, c_flush = history[max(0, len(history) - 1 - arg)]
            before = ex.flush_revision
            res = ex.submit(chunk(c_rev, c_flush, seq, horizon=4, value=c_rev * 0.01), now)
            if c_rev < before:
                assert not res.accepted  # computed before a change the executor knew of
        else:
            for _ in range(arg):
                now += 1.0 / HZ
                known = ex.flush_revision
                n = len(log)
                action = ex.tick(now)
                if action is not None:
                    rec = log.records[n]
                    assert rec.revision >= known
                    # The action's values are those of its own chunk (blend mixes only within
                    # an epoch, never with an action computed before the operator's change).
                    assert np.all(action >= known * 0.01 - 1e-12)
        # Once the executor knows an operator change, nothing older stays queued.
        assert all(e.revision >= ex.flush_revision for e in ex._queue)
    revisions = [r.revision for r in log.records]
    assert revisions == sorted(revisions)  # dispatch never goes back to an older revision
