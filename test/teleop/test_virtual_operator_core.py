"""The virtual operator's rules without ROS, on a stepped clock: it takes the arm from a policy
that stalls, deviates from the expert's plan or drops the cube (saying why), not sooner; it
hands back once the subtask it corrected is done and not before its minimum hold; a cooldown
keeps it from flapping; and the ground-truth measures it is fed (progress, drops)."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.core.virtual_operator import (
    DEVIATION, DROP, HANDBACK, STALL, TAKEOVER, Observation, OperatorRules, VirtualOperator)
from lerobot_lang_nodes.sim.tasks import Subtask, cube_dropped, subtask_progress

RULES = OperatorRules(stall_s=2.0, progress_epsilon=0.01, max_deviation_rad=0.3,
                      deviation_s=1.0, min_takeover_s=1.5, cooldown_s=3.0)
REACH, GRASP = 'reach the red cube', 'grasp the red cube'
DT = 0.1


def watch(op, t0, t1, **obs):
    """Step the policy's ticks from t0 to t1 (exclusive); the first decision and its time."""
    obs = {'subtask': REACH, 'policy_acting': True, **obs}
    n = int(round((t1 - t0) / DT))
    for i in range(n):
        t = round(t0 + i * DT, 6)
        progress = obs['progress'](t) if callable(obs.get('progress')) else obs.get('progress')
        fields = {**obs, 'progress': progress}
        decision = op.step(Observation(now_s=t, **fields))
        if decision is not None:
            return decision, t
    return None, None


def test_a_stalled_policy_is_taken_over_after_stall_s_and_not_before():
    op = VirtualOperator(RULES)
    decision, at = watch(op, 0.0, 10.0, progress=0.2)
    assert decision.action == TAKEOVER and decision.reason == STALL
    assert decision.subtask == REACH
    assert at == pytest.approx(2.0)


def test_a_policy_making_progress_is_left_alone():
    op = VirtualOperator(RULES)
    decision, _ = watch(op, 0.0, 20.0, progress=lambda t: 1.0 - 0.02 * t)  # 2 cm/s closer
    assert decision is None
    # Creeping by less than epsilon per stall_s is a stall.
    op = VirtualOperator(RULES)
    decision, at = watch(op, 0.0, 20.0, progress=lambda t: 1.0 - 0.002 * t)
    assert decision.reason == STALL and at == pytest.approx(2.0)


def test_stall_time_counts_only_while_the_policy_acts_and_restarts_on_a_new_subtask():
    op = VirtualOperator(RULES)
    assert watch(op, 0.0, 1.5, progress=0.2) == (None, None)
    assert watch(op, 1.5, 5.0, progress=0.2, policy_acting=False) == (None, None)  # paused
    decision, at = watch(op, 5.0, 10.0, progress=0.2)
    assert decision.reason == STALL and at == pytest.approx(7.0)
    op = VirtualOperator(RULES)
    assert watch(op, 0.0, 1.5, progress=0.2) == (None, None)
    decision, at = watch(op, 1.5, 10.0, progress=0.2, subtask=GRASP)
    assert decision.subtask == GRASP and at == pytest.approx(3.5)


def test_no_task_or_a_done_task_is_never_taken_over():
    op = VirtualOperator(RULES)
    assert watch(op, 0.0, 10.0, progress=0.2, subtask='') == (None, None)
    assert watch(op, 10.0, 20.0, progress=0.2, subtask=None) == (None, None)


def test_a_deviating_policy_is_taken_over_after_deviation_s_without_a_break():
    op = VirtualOperator(RULES)
    decision, at = watch(op, 0.0, 10.0, progress=lambda t: 1.0 - 0.02 * t,
                         deviation_rad=0.5)
    assert decision.reason == DEVIATION and at == pytest.approx(1.0)
    op = VirtualOperator(RULES)
    for t0 in (0.0, 1.0, 2.0):  # back within the bound every 0.9 s: no takeover
        assert watch(op, t0, t0 + 0.9, progress=lambda t: 1.0 - 0.02 * t,
                     deviation_rad=0.5) == (None, None)
        assert watch(op, t0 + 0.9, t0 + 1.0, progress=lambda t: 1.0 - 0.02 * t,
                     deviation_rad=0.1) == (None, None)
    assert watch(op, 3.0, 3.9, deviation_rad=0.29, progress=lambda t: 1.0 - 0.02 * t) == (
        None, None)


def test_a_drop_is_taken_over_at_once_unless_switched_off():
    op = VirtualOperator(RULES)
    assert watch(op, 0.0, 0.5, progress=0.2) == (None, None)
    decision, at = watch(op, 0.5, 1.0, progress=0.2, dropped=True)
    assert decision.reason == DROP and at == pytest.approx(0.5)
    op = VirtualOperator(OperatorRules(take_over_on_drop=False, stall_s=2.0))
    assert watch(op, 0.0, 1.0, progress=0.2, dropped=True) == (None, None)


def hold(op, t0, t1, subtask):
    """Step the ticks while the operator commands the arm (run mode teleop)."""
    return watch(op, t0, t1, subtask=subtask, policy_acting=False, human_acting=True)


def test_hand_back_once_the_corrected_subtask_is_done_and_not_before_min_takeover_s():
    op = VirtualOperator(RULES)
    op.took_over(10.0, STALL, REACH)
    assert hold(op, 10.0, 15.0, REACH) == (None, None)  # still reaching: keep the arm
    op = VirtualOperator(RULES)
    op.took_over(10.0, STALL, REACH)
    assert hold(op, 10.0, 10.5, REACH) == (None, None)
    decision, at = hold(op, 10.5, 15.0, GRASP)  # reached at 10.5: held until 11.5
    assert decision.action == HANDBACK and at == pytest.approx(11.5)
    assert REACH in decision.reason
    op = VirtualOperator(RULES)
    op.took_over(0.0, STALL, 'release the red cube')
    decision, at = hold(op, 0.0, 5.0, None)  # the task is done
    assert decision.action == HANDBACK and 'task is done' in decision.reason


def test_no_flapping_a_cooldown_follows_each_hand_back():
    op = VirtualOperator(RULES)
    op.took_over(0.0, STALL, REACH)
    op.handed_back(2.0)
    # The policy stalls at once: the cooldown (3 s) and then its own stall_s (2 s).
    decision, at = watch(op, 2.0, 20.0, subtask=GRASP, progress=0.02, dropped=True)
    assert decision.action == TAKEOVER and at == pytest.approx(5.0)  # drop: after cooldown
    op = VirtualOperator(RULES)
    op.took_over(0.0, STALL, REACH)
    op.handed_back(2.0)
    decision, at = watch(op, 2.0, 20.0, subtask=GRASP, progress=0.02)
    assert decision.reason == STALL and at == pytest.approx(7.0)


def test_a_hand_back_by_someone_else_ends_the_operators_hold_and_a_humans_takeover_is_left():
    op = VirtualOperator(RULES)
    op.took_over(0.0, STALL, REACH)
    assert watch(op, 0.0, 3.0, subtask=GRASP, policy_acting=True) == (None, None)
    assert not op.holding and op.counts.handbacks == 1
    op = VirtualOperator(RULES)  # a human holds the arm: the operator neither takes nor gives
    assert hold(op, 0.0, 10.0, GRASP) == (None, None)
    assert not op.holding and op.counts.total_takeovers == 0


def test_counts_takeovers_by_reason_and_seconds_under_intervention():
    op = VirtualOperator(RULES)
    decision, at = watch(op, 0.0, 10.0, progress=0.2)
    op.took_over(at, decision.reason, decision.subtask)
    decision, at = hold(op, at, at + 4.0, GRASP)
    op.handed_back(at)
    assert op.counts.takeovers == {STALL: 1, DEVIATION: 0, DROP: 0}
    assert op.counts.handbacks == 1
    assert op.counts.intervention_s == pytest.approx(1.5)


def test_rules_refuse_nonsense():
    with pytest.raises(ValueError, match='stall_s'):
        OperatorRules(stall_s=0.0)
    with pytest.raises(ValueError, match='cooldown_s'):
        OperatorRules(cooldown_s=float('nan'))


def truth(**cube):
    red = {'position': [0.2, 0.0, 0.0125], 'size': 0.025, 'in_gripper': False,
           'in_bowl': False, 'on_table': True, **cube}
    return {'table_height': 0.0, 'objects': {'red_cube': red},
            'bowl': {'position': [0.2, 0.15, 0.0], 'inner_radius': 0.05, 'rim_height': 0.04},
            'gripper': {'grasp_point': [0.2, 0.0, 0.1125], 'opening_rad': 0.6,
                        'holding': 'red' if red['in_gripper'] else None}}


def test_progress_measures_shrink_toward_each_subtasks_goal():
    assert subtask_progress(Subtask('reach', 'red'), truth()) == pytest.approx(0.1)
    lifted = truth(in_gripper=True, on_table=False, position=[0.2, 0.0, 0.04])
    assert subtask_progress(Subtask('lift', 'red'), lifted) == pytest.approx(0.01)  # to 5 cm
    over = truth(in_gripper=True, on_table=False, position=[0.2, 0.15, 0.08])
    assert subtask_progress(Subtask('move_over', 'red'), over) == pytest.approx(0.0)
    assert subtask_progress(Subtask('grasp', 'red'), truth()) == pytest.approx(0.6)
    assert subtask_progress(Subtask('release', 'red'), truth()) == pytest.approx(-0.6)


def test_a_drop_is_a_held_cube_on_the_table_not_one_in_the_bowl():
    held = truth(in_gripper=True, on_table=False, position=[0.2, 0.0, 0.06])
    assert cube_dropped(held, truth()) == 'red'
    assert cube_dropped(held, truth(on_table=False, position=[0.2, 0.0, 0.03])) == ''  # falling
    assert cube_dropped(held, truth(in_bowl=True, on_table=False)) == ''
    assert cube_dropped(held, held) == ''
    assert cube_dropped(None, truth()) == ''


def test_the_sim_graph_starts_the_operator_on_request_only():
    import argparse

    from lerobot_lang_nodes import graph
    from lerobot_lang_nodes.cli import bringup
    plan = graph.launch_plan('sim', {'viewer': 'false', 'virtual_operator': 'true'})
    plan.params_file.unlink()
    (spec,) = [s for s in plan.specs if s.name == 'virtual_operator']
    assert spec.use_sim_time and not spec.required
    assert plan.params['virtual_operator']['ros__parameters']['use_sim_time'] is True
    plan = graph.launch_plan('sim', {'viewer': 'false'})
    plan.params_file.unlink()
    assert 'virtual_operator' not in [s.name for s in plan.specs]
    with pytest.raises(ValueError, match='MuJoCo'):
        graph.launch_plan('sim', {'simulator': 'standin', 'virtual_operator': 'true'})
    parser = argparse.ArgumentParser()
    bringup.add_arguments('sim', parser)
    specs = bringup.plan('sim', parser.parse_args(['--virtual-operator'])).specs
    assert [s.name for s in specs][-1] == 'virtual_operator'
    assert 'virtual_operator' not in [s.name for s in bringup.plan(
        'sim', parser.parse_args([])).specs]
