"""The export's resampling rule and language rows, without bags or ROS."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobot_lang_nodes.recording import timeline
from lerobot_lang_nodes.recording.language import LanguageLog, episode_rows


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=40),
       st.floats(0.01, 2.0), st.integers(1, 60))
def test_sample_is_the_last_value_at_or_before_each_tick_within_max_age(raw, max_age, fps):
    times = np.sort(np.asarray(raw))
    ticks = timeline.frame_ticks(0.0, 10.0, fps)
    idx = timeline.sample_indices(times, ticks, max_age)
    for tick, i in zip(ticks, idx):
        before = np.nonzero(times <= tick)[0]
        if i < 0:
            assert len(before) == 0 or tick - times[before[-1]] > max_age - 1e-9
        else:
            assert i == before[-1] and tick - times[i] <= max_age + 1e-9


def test_ticks_are_exactly_one_over_fps_apart_and_end_at_or_before_the_end():
    ticks = timeline.frame_ticks(5.0, 6.0, 30)
    assert len(ticks) == 31 and ticks[-1] <= 6.0 + 1e-9
    assert np.allclose(np.diff(ticks), 1 / 30)


def test_action_is_the_running_step_of_the_newest_chunk_held_at_its_end():
    values = np.arange(3.0)[:, None]  # steps 0, 1, 2
    chunks = [timeline.ChunkRecord(received=0.05, start=0.0, period=0.1, values=values),
              timeline.ChunkRecord(received=0.45, start=0.4, period=0.1, values=values + 10)]
    ticks = np.array([0.0, 0.05, 0.1, 0.25, 0.35, 0.45, 0.55, 1.0])
    got = timeline.chunk_actions(chunks, ticks, 1)[:, 0]
    # Before the first chunk arrived nothing was commanded; then its running step; the first
    # chunk is held at its last step until the second replaces it.
    assert np.isnan(got[0])
    assert list(got[1:]) == [0.0, 1.0, 2.0, 2.0, 10.0, 11.0, 12.0]


def test_episodes_are_gap_free_runs_cut_at_boundaries_and_short_ones_dropped():
    valid = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1], dtype=bool)
    assert timeline.segments(valid, cuts=[6], min_frames=2) == [(0, 3), (4, 6), (6, 9)]
    ticks = np.arange(10) * 0.1
    assert timeline.cut_indices(ticks, [0.25, -1.0, 0.3, 5.0]) == [3]


def _ts(n: int, fps: int = 10) -> list[float]:
    return [float(np.float32(i / fps)) for i in range(n)]


def test_language_rows_follow_lerobot_rules():
    frames = 1000.0 + np.arange(30) * 0.1  # one episode of 3 s at 10 fps
    log = LanguageLog()
    log.add_state(999.0, 'subtask', 'reach the red cube')      # active before the episode
    log.add_state(999.0, 'plan', 'put the red cube in the bowl')
    log.add_state(1000.95, 'subtask', 'grasp the red cube')   # between frames 9 and 10
    log.add_state(1000.95, 'memory', 'reached the red cube')
    log.interjections.append((1001.52, 'use the blue cube instead'))
    log.speech.append((1001.7, 'OK, I will use the blue cube.'))  # the reply, 0.18 s later
    log.add_state(1001.7, 'plan', 'put the blue cube in the bowl')
    log.vqa += [(1002.0, 'observation.images.wrist', 'what is held?', 'nothing'),
                (1002.01, 'observation.images.wrist', 'and now?', 'still nothing'),
                (1002.0, 'observation.images.front', 'where is the bowl?', 'left')]
    (rows,), warnings = episode_rows(log, frames, [(0, 30)], [_ts(30)])
    assert warnings == []
    persistent = [(r['style'], r['content'], r['timestamp']) for r in rows['plan']]
    assert ('subtask', 'reach the red cube', 0.0) in persistent
    assert ('plan', 'put the red cube in the bowl', 0.0) in persistent
    assert ('subtask', 'grasp the red cube', _ts(30)[10]) in persistent  # snapped forward
    # The reply's plan sits on the interjection's frame (16), with its speech.
    assert ('plan', 'put the blue cube in the bowl', _ts(30)[16]) in persistent
    events = rows['interjections']
    inter = [r for r in events if r['style'] == 'interjection']
    speech = [r for r in events if r['style'] is None]
    assert inter[0]['timestamp'] == speech[0]['timestamp'] == _ts(30)[16]
    assert inter[0]['role'] == 'user' and speech[0]['role'] == 'assistant'
    assert speech[0]['content'] is None
    assert speech[0]['tool_calls'][0]['function'] == {
        'name': 'say', 'arguments': {'text': 'OK, I will use the blue cube.'}}
    assert all(r['camera'] is None for r in rows['plan'] + events)
    # One VQA exchange per (frame, camera, role): the second wrist question moves on a frame.
    vqa = {(r['timestamp'], r['camera'], r['role']) for r in rows['vqa']}
    assert len(vqa) == len(rows['vqa']) == 6
    assert (_ts(30)[21], 'observation.images.wrist', 'user') in vqa
    assert (_ts(30)[20], 'observation.images.front', 'assistant') in vqa


def test_an_interjection_without_a_new_plan_repeats_the_active_plan_at_its_frame():
    frames = np.arange(20) * 0.1
    log = LanguageLog()
    log.add_state(0.0, 'plan', 'put the red cube in the bowl')
    log.interjections.append((1.0, 'sing a song'))
    log.speech.append((1.1, 'Sorry, I can only change which cube to use.'))
    (rows,), _ = episode_rows(log, frames, [(0, 20)], [_ts(20)])
    plans = [(r['content'], r['timestamp']) for r in rows['plan'] if r['style'] == 'plan']
    assert plans == [('put the red cube in the bowl', 0.0),
                     ('put the red cube in the bowl', _ts(20)[10])]


def test_events_go_to_the_episode_holding_their_frame():
    frames = np.concatenate([np.arange(10) * 0.1, 5.0 + np.arange(10) * 0.1])
    log = LanguageLog()
    log.interjections += [(0.35, 'first'), (3.0, 'in the gap'), (5.5, 'second')]
    rows, _ = episode_rows(log, frames, [(0, 10), (10, 20)], [_ts(10), _ts(10)])
    first = [(r['content'], r['timestamp']) for r in rows[0]['interjections']]
    second = [(r['content'], r['timestamp']) for r in rows[1]['interjections']]
    assert first == [('first', _ts(10)[4])]
    assert second == [('in the gap', 0.0), ('second', _ts(10)[5])]
