"""Real-time chunking bookkeeping (core/rtc.py): left-over, delay and the new chunk's stamp."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, ExecutorConfig
from lerobot_lang_nodes.core.rtc import ChunkContinuity

P = 0.1  # control period (s)
NAMES = ('a', 'b')


def rows(n: int, start: float = 0.0) -> np.ndarray:
    return np.stack([start + np.arange(n, dtype=float)] * 2, axis=1)


def test_left_over_is_what_the_executor_has_not_played_and_the_stamp_follows_it():
    c = ChunkContinuity()
    c.published(rows(10), stamp_s=5.0, period_s=P, revision=3, sequence=7)
    # At 5.42 s the executor plays row 4 (due 5.4..5.5): rows 5.. are left.
    cont = c.continuation(5.42, revision=3, playing_sequence=7, period_s=P)
    assert cont is not None and cont.sequence == 7
    np.testing.assert_array_equal(cont.left_over, rows(10)[5:])
    assert cont.stamp_s == pytest.approx(5.5)  # the new chunk's row 0 stands for row 5
    assert cont.inference_delay == 0  # no latency measured yet
    before = c.continuation(4.9, revision=3, playing_sequence=7, period_s=P)
    assert before.stamp_s == 5.0 and len(before.left_over) == 10


def test_delay_is_the_largest_recent_latency_in_steps_capped_by_the_left_over():
    c = ChunkContinuity(window=3)
    for latency in (0.12, 0.31, 0.05):
        c.record_latency(latency)
    assert c.delay_steps(P) == 4  # ceil(0.31 / 0.1)
    c.record_latency(0.05)
    c.record_latency(0.05)  # 0.31 left the window
    assert c.delay_steps(P) == 1
    c.record_latency(2.0)
    c.published(rows(10), stamp_s=0.0, period_s=P, revision=1, sequence=1)
    cont = c.continuation(0.75, 1, 1, P)
    assert len(cont.left_over) == 2 and cont.inference_delay == 2


@pytest.mark.parametrize('revision, playing, period, now', [
    (2, 7, P, 5.2),     # another revision: the instruction changed
    (3, 6, P, 5.2),     # the executor plays another chunk (the last one was not accepted)
    (3, 7, 0.05, 5.2),  # the executor's period changed
    (3, 7, P, 6.5),     # every row was played
])
def test_no_continuation_when_the_executor_is_not_playing_that_chunk(revision, playing, period,
                                                                     now):
    c = ChunkContinuity()
    c.published(rows(10), stamp_s=5.0, period_s=P, revision=3, sequence=7)
    assert c.continuation(now, revision, playing, period) is None
    c.forget()
    assert c.continuation(5.2, 3, 7, P) is None


def test_the_executor_splices_the_continuation_by_stamps_without_repeat_or_skip():
    """A chunk stamped at the continuation's stamp and arriving `delay` periods late is
    joined by the executor at the row due then: the played sequence has no repeated and no
    missing time slot."""
    ex = ChunkExecutor(ExecutorConfig(action_names=NAMES, ctrl_hz=1 / P))
    c = ChunkContinuity()
    old = rows(10)  # row i = i: its value names its time slot
    ex.submit(Chunk(values=old, action_names=NAMES, revision=1, sequence=1, stamp_s=0.0), 0.0)
    c.published(old, stamp_s=0.0, period_s=P, revision=1, sequence=1)
    played = [ex.tick(k * P)[0] for k in range(5)]  # slots 0..4
    c.record_latency(0.3)
    cont = c.continuation(4 * P + 0.01, revision=1, playing_sequence=1, period_s=P)
    assert cont.inference_delay == 3
    k0 = round(cont.stamp_s / P)
    new = rows(10, start=k0)  # a guided chunk: row j continues old row k0 + j
    for k in range(5, 8):  # the inference runs three periods, the old chunk goes on
        played.append(ex.tick(k * P)[0])
    ex.submit(Chunk(values=new, action_names=NAMES, revision=1, sequence=2,
                    stamp_s=cont.stamp_s), 8 * P)
    for k in range(8, 12):
        played.append(ex.tick(k * P)[0])
    assert played == list(range(12))
