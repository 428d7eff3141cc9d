"""Operator text limits, the planner's state file and the revision floor; no DDS."""

from __future__ import annotations

import json

import pytest

from lerobot_lang_nodes.core import planner_state
from lerobot_lang_nodes.core.inputs import text_problem
from lerobot_lang_nodes.core.language import LanguageState


@pytest.mark.parametrize('text', ['put the red cube in the bowl', 'line one\nline two\t!',
                                  'le cube rouge, s\u2019il te pla\u00eet \U0001f916', ''])
def test_plain_text_passes(text):
    assert text_problem(text, 100) == ''


@pytest.mark.parametrize('bad, needle', [
    ('x' * 101, '101 characters, the limit is 100'),
    ('red\x1b[2Jcube', 'U+001B at position 3'),
    ('nul\x00', 'U+0000'),
    ('del\x7f', 'U+007F'),
    ('c1\x85', 'U+0085'),
    ('lone \ud800 surrogate', 'U+D800'),
])
def test_long_text_and_control_characters_are_refused_with_the_reason(bad, needle):
    problem = text_problem(bad, 100, 'question')
    assert problem.startswith('question refused') and needle in problem


def test_state_file_round_trip_and_atomic_replace(tmp_path):
    state = LanguageState()
    state.set_task('put the red cube in the bowl')
    state.set_subtask('grasp the red cube')
    path = tmp_path / 'planner_state.json'
    planner_state.save(path, state.snapshot(), {'seen_tasks': ['ab:1:2']})
    snap, extra = planner_state.load(path)
    assert snap == state.snapshot() and extra == {'seen_tasks': ['ab:1:2']}
    assert [p.name for p in tmp_path.iterdir()] == ['planner_state.json']  # no temp left
    resumed = LanguageState()
    resumed.restore(snap)
    assert resumed.snapshot() == state.snapshot()


def test_missing_state_file_is_a_fresh_start_and_a_broken_one_says_why(tmp_path):
    assert planner_state.load(tmp_path / 'none.json') is None
    bad = tmp_path / 'bad.json'
    bad.write_text('{not json')
    with pytest.raises(planner_state.StateFileError, match='not readable JSON'):
        planner_state.load(bad)
    snap = LanguageState().snapshot()
    planner_state.save(bad, snap)
    data = json.loads(bad.read_text())
    data['context']['revision'] = -1
    data['context']['flush_revision'] = 3
    bad.write_text(json.dumps(data))
    with pytest.raises(planner_state.StateFileError, match='flush'):
        planner_state.load(bad)
    data['context'].pop('revision')
    bad.write_text(json.dumps(data))
    with pytest.raises(planner_state.StateFileError, match='exactly the keys'):
        planner_state.load(bad)


def test_revision_never_goes_backwards():
    state = LanguageState()
    state.set_task('a')  # rev 1
    assert not state.advance_past(0)  # the executor is behind: nothing to do
    assert state.advance_past(7)  # the executor saw 7 (a planner before a restart)
    assert (state.revision, state.flush_revision) == (8, 8)
    state.restore(LanguageState().snapshot())  # an older file cannot pull it back
    assert state.revision == 8
