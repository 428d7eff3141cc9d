"""A simulator reset clears the commands sent before it and keeps those sent after it."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.core.scene_reset import Command, ResetOrdering


def test_reset_keeps_only_commands_sent_after_it_in_order():
    order = ResetOrdering()
    order.note('task', 'put the red cube in the bowl', sent_ns=100)
    order.note('direct', 'open the gripper', True, sent_ns=200)
    order.note('task', 'put the blue cube in the bowl', sent_ns=300)
    order.note('direct', 'close the gripper', True, sent_ns=400)
    kept = order.reset(250)
    assert kept == [Command('task', 'put the blue cube in the bowl', False, 300),
                    Command('direct', 'close the gripper', True, 400)]
    assert order.kept == 2
    # What a reset kept is forgotten with it: a second reset clears everything.
    assert order.reset(50) == []


def test_a_command_sent_at_the_reset_instant_survives_and_one_before_does_not():
    order = ResetOrdering()
    order.note('task', 'before', sent_ns=999)
    order.note('task', 'same instant', sent_ns=1000)
    assert [c.text for c in order.reset(1000)] == ['same instant']


def test_a_reset_without_a_time_clears_all():
    order = ResetOrdering()
    order.note('task', 'put the red cube in the bowl', sent_ns=10**18)
    assert order.reset(None) == [] and order.reset(0) == []


def test_unknown_time_means_now_and_unknown_kind_is_refused():
    order = ResetOrdering()
    command = order.note('task', 'put the red cube in the bowl')
    assert command.sent_ns > 1_600_000_000 * 10**9  # wall clock, ns since the epoch
    with pytest.raises(ValueError, match="'task' or 'direct'"):
        order.note('interjection', 'use the blue cube')


def test_only_the_most_recent_commands_are_kept():
    order = ResetOrdering(keep=3)
    for i in range(5):
        order.note('task', f'task {i}', sent_ns=100 + i)
    assert [c.text for c in order.reset(1)] == ['task 2', 'task 3', 'task 4']
