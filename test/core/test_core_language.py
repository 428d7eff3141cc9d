"""Language state revisions and counters, the <say> splitter, and the regeneration throttle."""

from __future__ import annotations

import math
import threading

import pytest

from lerobot_lang_nodes.core.errors import ConfigError
from lerobot_lang_nodes.core.language import (
    LanguageSnapshot, LanguageState, RegenThrottle, split_say,
)

# ------------------------------------------------------------------ split_say


@pytest.mark.parametrize('text,expected', [
    ('turn left <say>heading left</say>', ('turn left', 'heading left')),
    ('turn left <SAY>Heading left</Say>', ('turn left', 'Heading left')),
    ('turn left < say >ok</ say >', ('turn left', 'ok')),
    ('turn left <say> "ok then" </say>', ('turn left', 'ok then')),
    ("turn left <say>'ok'</say>", ('turn left', 'ok')),
    ('<say>only speech</say>', ('', 'only speech')),
    ('first <say>hi</say> then this', ('first then this', 'hi')),
    ('plan <say>multi\nline</say>', ('plan', 'multi\nline')),
    ('  just a plan  ', ('just a plan', '')),
    ('unterminated <say>speech', ('unterminated <say>speech', '')),
    ('plan <say></say>', ('plan', '')),
    ('', ('', '')),
    (None, ('', '')),
])
def test_split_say(text, expected):
    assert split_say(text) == expected


def test_split_say_only_first_block_is_speech():
    plan, speech = split_say('a <say>one</say> b <say>two</say>')
    assert speech == 'one' and plan == 'a b <say>two</say>'


# ------------------------------------------------------------------ LanguageState


def test_initial_state():
    s = LanguageState()
    assert (s.task, s.subtask, s.revision, s.mode, s.source) == ('', '', 0, 'action', 'operator')
    assert (s.repeats, s.total_repeats, s.empty) == (0, 0, {})


def test_set_task_bumps_revision_and_resets_context():
    s = LanguageState()
    assert s.set_task('clean the table')
    s.set_subtask('pick cup')
    s.set_subtask('place cup')
    s.set_memory('cup done')
    rev = s.revision
    assert not s.set_task('  clean the table ')  # same after stripping
    assert s.revision == rev
    s.set_plan('then plates')
    assert s.set_task('make coffee', source='operator')
    snap = s.snapshot()
    assert snap == LanguageSnapshot('make coffee', '', '', '', '', rev + 1, 'action', 'operator',
                                    flush_revision=rev + 1)


def test_set_subtask_changed_repeat_empty():
    s = LanguageState()
    s.set_task('t')
    assert s.set_subtask('a') == 'changed'
    assert (s.subtask, s.prior_subtask, s.revision, s.source) == ('a', '', 2, 'planner')
    assert s.set_subtask('a ') == 'repeat'
    assert s.set_subtask('a') == 'repeat'
    assert (s.repeats, s.total_repeats, s.revision) == (2, 2, 2)
    assert s.set_subtask('   ') == 'empty'
    assert s.empty == {'subtask': 1} and s.subtask == 'a' and s.repeats == 2
    assert s.set_subtask('b') == 'changed'
    assert (s.prior_subtask, s.repeats, s.total_repeats, s.revision) == ('a', 0, 2, 3)
    assert s.set_subtask('b') == 'repeat'
    assert (s.repeats, s.total_repeats) == (1, 3)


def test_set_subtask_expected_revision_guards_stale_generations():
    s = LanguageState()
    s.set_task('t')
    rev = s.revision
    s.set_task('u')
    assert s.set_subtask('for t', expected_revision=rev) == 'stale'
    assert s.subtask == '' and s.revision == rev + 1
    assert s.set_subtask('for u', expected_revision=s.revision) == 'changed'


def test_memory_and_plan_do_not_bump_revision():
    s = LanguageState()
    s.set_task('t')
    rev = s.revision
    assert s.set_memory('m1') and not s.set_memory('m1')
    assert s.set_plan('p1')
    assert not s.set_memory('') and not s.set_plan('  ')
    assert s.revision == rev and (s.memory, s.plan) == ('m1', 'p1')
    assert s.empty == {'memory': 1, 'plan': 1}
    assert not s.set_memory('m2', expected_revision=rev - 1) and s.memory == 'm1'


def test_mode_change_bumps_revision():
    s = LanguageState()
    assert s.set_mode('paused') and s.revision == 1
    assert not s.set_mode('paused') and s.revision == 1
    assert s.set_mode('action') and s.revision == 2
    with pytest.raises(ConfigError, match="mode: got 'run'"):
        s.set_mode('run')


def test_record_empty_and_validation():
    s = LanguageState()
    s.record_empty('vqa')
    s.record_empty('vqa')
    assert s.empty == {'vqa': 2}
    with pytest.raises(ConfigError, match='source'):
        s.set_task('x', source='robot')
    with pytest.raises(ConfigError, match='mode'):
        LanguageState(mode='idle')


def test_revision_is_monotone_under_concurrency():
    s = LanguageState()

    def worker(k: int) -> None:
        for i in range(200):
            s.set_subtask(f'{k}-{i}')

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.revision == 800


# ------------------------------------------------------------------ RegenThrottle


def test_throttle_first_boundary_is_due():
    th = RegenThrottle(chunks_per_regen=3, high_level_hz=1.0)
    assert not th.due(0.0)
    th.note_chunk()
    assert th.due(0.0)
    assert th.due(0.0, force=True)


def test_throttle_by_chunks():
    th = RegenThrottle(chunks_per_regen=3, high_level_hz=math.inf)
    th.note_chunk()
    th.mark(0.0)
    due = []
    for k in range(7):
        th.note_chunk()
        due.append(th.due(float(k)))
        if due[-1]:
            th.mark(float(k))
    assert due == [False, False, True, False, False, True, False]


def test_throttle_by_hz():
    th = RegenThrottle(chunks_per_regen=1, high_level_hz=2.0)
    th.note_chunk()
    th.mark(10.0)
    th.note_chunk()
    assert not th.due(10.49)
    assert th.due(10.5)
    assert th.boundaries == 1 and th.last_regen_s == 10.0


def test_throttle_needs_both_conditions():
    th = RegenThrottle(chunks_per_regen=2, high_level_hz=1.0)
    th.note_chunk()
    th.mark(0.0)
    th.note_chunk()
    assert not th.due(5.0)  # time ok, one chunk only
    th.note_chunk()
    assert not th.due(0.5)  # chunks ok, too soon
    assert th.due(1.0)


def test_throttle_backwards_clock_and_reset():
    th = RegenThrottle(1, 1.0)
    th.note_chunk()
    th.mark(100.0)
    th.note_chunk()
    assert th.due(3.0)  # clock went backwards: never stall
    th.reset()
    assert not th.due(200.0)
    th.note_chunk()
    assert th.due(100.0)


@pytest.mark.parametrize('args,field', [((0, 1.0), 'chunks_per_regen'),
                                        ((1.5, 1.0), 'chunks_per_regen'),
                                        ((1, 0.0), 'high_level_hz'),
                                        ((1, math.nan), 'high_level_hz')])
def test_throttle_validation(args, field):
    with pytest.raises(ConfigError) as err:
        RegenThrottle(*args)
    assert err.value.field == field


def test_restating_the_task_after_an_interjection_drops_its_plan():
    s = LanguageState()
    s.set_task('put the red cube in the bowl')
    assert s.set_plan('put the blue cube in the bowl')
    before = s.revision
    assert s.set_task('put the red cube in the bowl')  # the operator takes the re-plan back
    assert s.plan == '' and s.revision == before + 1 and s.flush_revision == s.revision
    assert not s.set_task('put the red cube in the bowl')  # now it is a plain repeat
    s.set_plan('put the green cube in the bowl')
    # A mode change (direct subtask) restates the task without dropping the re-plan.
    assert not s.set_task('put the red cube in the bowl', restate=False)
    assert s.plan == 'put the green cube in the bowl'
