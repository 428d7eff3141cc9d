"""The episodic recording's timing (recording/episodes.py), on an injected clock: durations,
the reset between episodes, ending early, re-recording, labels and stopping."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.recording.episodes import EpisodePlan, run_schedule

RED, BLUE = 'put the red cube in the bowl', 'put the blue cube in the bowl'


def _events(plan, commands=()):
    return [(round(t, 3), e) for t, e in run_schedule(plan, commands)]


def test_episodes_and_resets_follow_their_durations_and_stop_after_the_last():
    plan = EpisodePlan((RED, BLUE), num_episodes=2, episode_s=3.0, reset_s=1.0)
    assert _events(plan) == [
        (0.0, {'event': 'episode', 'index': 0, 'task': RED}),
        (3.0, {'event': 'reset', 'index': 0}),
        (4.0, {'event': 'episode', 'index': 1, 'task': BLUE}),
        (7.0, {'event': 'stop'})]  # no reset after the last episode


def test_ending_early_re_recording_and_labels():
    plan = EpisodePlan((RED,), num_episodes=2, episode_s=3.0, reset_s=1.0)
    got = _events(plan, [(1.0, 'n'), (1.2, 's'), (2.5, 'r'), (3.0, ''), (3.1, 'f'),
                         (3.5, '')])
    assert got == [
        (0.0, {'event': 'episode', 'index': 0, 'task': RED}),
        (1.0, {'event': 'reset', 'index': 0}),           # ended early
        (1.2, {'event': 'label', 'index': 0, 'success': True}),
        (2.0, {'event': 'episode', 'index': 1, 'task': RED}),
        (2.5, {'event': 'discard', 'index': 1}),         # re-recorded: episode 2 replaces it
        (2.5, {'event': 'episode', 'index': 2, 'task': RED}),
        (3.0, {'event': 'stop'}),                        # the second kept episode ended
    ]


def test_re_recording_during_the_reset_discards_the_episode_just_finished():
    plan = EpisodePlan((RED,), num_episodes=2, episode_s=2.0, reset_s=5.0)
    got = _events(plan, [(3.0, 'r'), (4.0, 'q')])
    assert got == [
        (0.0, {'event': 'episode', 'index': 0, 'task': RED}),
        (2.0, {'event': 'reset', 'index': 0}),
        (3.0, {'event': 'discard', 'index': 0}),
        (3.0, {'event': 'episode', 'index': 1, 'task': RED}),
        (4.0, {'event': 'stop'})]


def test_a_plan_without_a_task_or_episodes_is_refused():
    with pytest.raises(ValueError, match='task'):
        EpisodePlan(('',))
    with pytest.raises(ValueError, match='num_episodes'):
        EpisodePlan((RED,), num_episodes=0)
