"""The policy's inference gate: refill-driven, one chunk in flight, new revisions at once."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.core.inference_gate import ExecutorView, InferenceGate

REFILL = ExecutorView(acting=True, needs_refill=True, revision=3)
FULL = ExecutorView(acting=True, needs_refill=False, revision=3)


def started_and_published(gate: InferenceGate, now: float, revision: int, seq: int) -> None:
    gate.started(now, revision)
    gate.published(seq, now + 0.02)


def test_starts_on_refill_only_while_acting_and_fresh():
    gate = InferenceGate(max_hz=20.0)
    assert gate.should_start(0.0, REFILL, 3)
    assert not gate.should_start(0.0, FULL, 3)  # queue above the threshold
    assert not gate.should_start(0.0, ExecutorView(False, True, 3), 3)  # paused
    assert not gate.should_start(0.0, ExecutorView(True, True, 3, fresh=False), 3)


def test_one_chunk_in_flight_until_acknowledged_or_timed_out():
    gate = InferenceGate(max_hz=20.0, ack_timeout_s=1.0)
    started_and_published(gate, 0.0, 3, seq=1)
    assert gate.awaiting == 1
    assert not gate.should_start(0.5, REFILL, 3)  # still awaiting its ack
    gate.acknowledged(0)  # an older chunk: not this one
    assert not gate.should_start(0.5, REFILL, 3)
    gate.acknowledged(1)
    assert gate.awaiting is None and gate.should_start(0.5, REFILL, 3)
    started_and_published(gate, 1.0, 3, seq=2)
    assert not gate.should_start(1.9, REFILL, 3)
    assert gate.should_start(2.1, REFILL, 3)  # lost or rejected: go on after the timeout


def test_refills_are_spaced_by_the_rate_limit():
    gate = InferenceGate(max_hz=10.0)
    gate.started(0.0, 3)
    gate.publish_failed()
    assert not gate.should_start(0.05, REFILL, 3)
    assert gate.should_start(0.1, REFILL, 3)


def test_a_new_revision_starts_at_once_despite_ack_and_rate_limit():
    # A chunk of revision 3 is in flight and was just started; the planner moves to 4. The
    # executor drops its queue on 4 and will reject the revision-3 chunk, so the gate must not
    # wait for that ack (up to a second) nor for the rate limit.
    gate = InferenceGate(max_hz=2.0, ack_timeout_s=1.0)
    started_and_published(gate, 0.0, 3, seq=7)
    assert gate.should_start(0.03, FULL, 4)  # executor still on 3: it does not know yet
    gate.started(0.03, 4)
    assert not gate.should_start(0.04, REFILL, 4)  # that revision's chunk is under way
    gate.published(8, 0.05)
    assert not gate.should_start(0.06, ExecutorView(True, True, 4), 4)


def test_the_executor_already_on_the_revision_waits_for_refill():
    gate = InferenceGate(max_hz=20.0)
    gate.started(0.0, 4)
    assert not gate.should_start(1.0, ExecutorView(True, False, 4), 4)


def test_rate_must_be_positive():
    with pytest.raises(ValueError, match='max_hz'):
        InferenceGate(max_hz=0.0)


def test_wait_s_ends_when_the_rate_limit_lets_a_newer_subtask_start():
    # A refill started at 0.0; the planner's next subtask (same flush epoch) comes 10 ms
    # later: refused for the rate limit only, so the poller sleeps until 0.05, not longer.
    gate = InferenceGate(max_hz=20.0)
    view = ExecutorView(acting=True, needs_refill=True, revision=3, flush_revision=2)
    assert gate.should_start(0.0, view, 3, 2)
    gate.started(0.0, 3, 2)
    gate.published(7, 0.003)
    full = ExecutorView(acting=True, needs_refill=False, revision=3, flush_revision=2)
    assert not gate.should_start(0.01, full, 4, 2)
    assert gate.wait_s(0.01, 0.1) == pytest.approx(0.04)
    assert gate.should_start(0.05, full, 4, 2)
    # Past the limit (or before any start) the poller's own period is kept.
    assert gate.wait_s(0.2, 0.1) == 0.1
    assert InferenceGate(max_hz=20.0).wait_s(0.0, 0.1) == 0.1
