"""Task parsing, decomposition, subtask completion and success detection on ground truth."""

from __future__ import annotations

import copy

import pytest

from lerobot_lang_nodes.sim import tasks
from lerobot_lang_nodes.sim.tasks import Subtask, TaskSpec


@pytest.mark.parametrize('text,kind,colour', [
    ('put the red cube in the bowl', 'place', 'red'),
    ('Put the RED cube into the bowl.', 'place', 'red'),
    ('place the blue block inside the bowl please', 'place', 'blue'),
    ('drop green cube in bowl', 'place', 'green'),
    ('pick up the green cube and put it in the bowl', 'place', 'green'),
    ('could you move the blue one to the bowl?', 'place', 'blue'),
    ('pick up the red cube', 'pick', 'red'),
    ('lift the blue cube', 'pick', 'blue'),
    ('grab the green block', 'pick', 'green'),
])
def test_parse_task_tolerant(text, kind, colour):
    spec = tasks.parse_task(text)
    assert spec == TaskSpec(kind, colour, 'bowl' if kind == 'place' else None)
    assert tasks.parse_task(spec.text) == spec  # canonical text round-trips


@pytest.mark.parametrize('text,fragment', [
    ('', 'empty'),
    ('put the cube in the bowl', 'no cube colour'),
    ('put the red cube on the blue cube', 'several colours'),
    ('paint the red cube', 'unsupported task'),
    ('put the yellow cube in the bowl', 'no cube colour'),
])
def test_parse_task_unknown_gives_reason(text, fragment):
    assert tasks.parse_task(text) is None
    spec, reason = tasks.explain_task(text)
    assert spec is None and fragment in reason


def test_decompose_and_subtask_text_round_trip():
    plan = tasks.decompose(TaskSpec('place', 'red', 'bowl'))
    assert [s.text for s in plan] == [
        'reach the red cube', 'grasp the red cube', 'lift the red cube',
        'move the red cube over the bowl', 'release the red cube']
    assert [tasks.parse_subtask(s.text) for s in plan] == plan
    assert [s.action for s in tasks.decompose(TaskSpec('pick', 'blue'))] == [
        'reach', 'grasp', 'lift']
    assert tasks.parse_subtask('now grasp the blue block') == Subtask('grasp', 'blue')
    assert tasks.parse_subtask('put the red cube in the bowl') is None  # a task, not a step


def _truth(**cube_over) -> dict:
    cube = {'kind': 'cube', 'colour': 'red', 'position': [0.2, 0.0, 0.014], 'yaw': 0.0,
            'size': 0.028, 'in_gripper': False, 'in_bowl': False, 'on_table': True}
    cube.update(cube_over)
    return {
        'table_height': 0.0,
        'objects': {'red_cube': cube,
                    'blue_cube': {**cube, 'colour': 'blue', 'position': [0.2, 0.1, 0.014],
                                  'in_gripper': False, 'in_bowl': False}},
        'bowl': {'position': [0.25, -0.1, 0.0], 'inner_radius': 0.055, 'rim_height': 0.038,
                 'floor_z': 0.008},
        'gripper': {'position': [0.2, 0.0, 0.1], 'grasp_point': [0.2, 0.0, 0.1],
                    'opening_rad': 0.6, 'opening_speed': 0.0, 'holding': None},
    }


def test_success_detection():
    place = TaskSpec('place', 'red', 'bowl')
    pick = TaskSpec('pick', 'red')
    on_table = _truth()
    assert not tasks.check_success(place, on_table) and not tasks.check_success(pick, on_table)
    in_bowl = _truth(position=[0.25, -0.1, 0.022], in_bowl=True, on_table=False)
    assert tasks.check_success(place, in_bowl)
    assert not tasks.check_success(TaskSpec('place', 'blue', 'bowl'), in_bowl)
    lifted = _truth(position=[0.2, 0.0, 0.08], in_gripper=True, on_table=False)
    assert tasks.check_success(pick, lifted) and not tasks.check_success(place, lifted)
    low = _truth(position=[0.2, 0.0, 0.03], in_gripper=True, on_table=False)
    assert not tasks.check_success(pick, low)


def test_subtask_completion_and_advance():
    plan = tasks.decompose(TaskSpec('place', 'red', 'bowl'))
    reach, grasp, lift, move, release = plan
    far = _truth()
    assert not tasks.subtask_done(reach, far)
    at_cube = copy.deepcopy(far)
    at_cube['gripper']['grasp_point'] = [0.203, 0.002, 0.016]
    assert tasks.subtask_done(reach, at_cube)
    assert tasks.advance(plan, 0, at_cube) == 1
    held = _truth(in_gripper=True)
    held['gripper'].update(opening_rad=0.2, holding='red')
    assert tasks.subtask_done(grasp, held) and not tasks.subtask_done(lift, held)
    assert tasks.infer_subtask_index(plan, held) == 2
    up = _truth(position=[0.2, 0.0, 0.08], in_gripper=True, on_table=False)
    assert tasks.subtask_done(lift, up) and not tasks.subtask_done(move, up)
    over = _truth(position=[0.25, -0.09, 0.08], in_gripper=True, on_table=False)
    assert tasks.subtask_done(move, over)
    assert tasks.infer_subtask_index(plan, over) == 4
    dropped = _truth(position=[0.22, 0.0, 0.014])
    assert tasks.advance(plan, 3, dropped) == 0  # lost the cube while carrying: start over
    missed = copy.deepcopy(far)
    missed['gripper']['opening_rad'] = 0.05
    assert tasks.advance(plan, 1, missed) == 0  # closed on nothing: reach again
    in_bowl = _truth(position=[0.25, -0.1, 0.022], in_bowl=True, on_table=False)
    assert tasks.subtask_done(release, in_bowl)
    assert tasks.infer_subtask_index(plan, in_bowl) == len(plan)


def test_unknown_colour_in_truth_names_scene_colours():
    with pytest.raises(KeyError, match='no green cube'):
        tasks.subtask_done(Subtask('reach', 'green'), _truth() | {
            'objects': {'red_cube': _truth()['objects']['red_cube']}})


def test_a_finished_plan_restarts_when_the_world_undoes_it():
    plan = tasks.decompose(TaskSpec('place', 'red', 'bowl'))
    in_bowl = _truth(position=[0.25, -0.1, 0.022], in_bowl=True, on_table=False)
    assert tasks.advance(plan, len(plan), in_bowl) == len(plan)  # done stays done
    # A reset (or a cube knocked out of the bowl) puts it back on the table: start over.
    assert tasks.advance(plan, len(plan), _truth()) == 0
