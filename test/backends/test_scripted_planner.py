"""The scripted planner answers the core's prompts from simulator ground truth."""

from __future__ import annotations

import copy
import math
import os

import pytest

from lerobot_lang_nodes.backends.planners.scripted import ScriptedPlanner
from lerobot_lang_nodes.core import prompts
from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.language import LanguageState, split_say


@pytest.fixture(scope='module')
def base_truth():
    """Ground truth of the real MuJoCo scene (seed 0); tests edit copies of it."""
    os.environ.setdefault('MUJOCO_GL', 'egl')
    from lerobot_lang_nodes.sim.scene import So101Scene
    scene = So101Scene(seed=0)
    try:
        return scene.ground_truth()
    finally:
        scene.close()


@pytest.fixture
def truth(base_truth):
    def make(**red) -> dict:
        t = copy.deepcopy(base_truth)
        t['objects']['red_cube'].update(red)
        return t
    return make


@pytest.fixture
def planner():
    state = LanguageState()
    gen = ScriptedPlanner()
    hl = HighLevelPlanner(gen, state, HighLevelConfig(chunks_per_regen=1, high_level_hz=100.0))
    return hl, state


def _obs(state, truth):
    return {'ground_truth': truth, 'language': state.snapshot()}


def test_subtasks_follow_the_world_and_memory_changes_only_on_change(planner, truth):
    hl, state = planner
    _truth = truth
    hl.set_task('put the red cube in the bowl')
    truth = _truth()
    assert hl.regenerate(0.0, _obs(state, truth)) == 'changed'
    assert state.subtask == 'reach the red cube' and state.memory == ''
    assert hl.regenerate(1.0, _obs(state, truth)) == 'repeat'
    assert state.repeats == 1
    table = truth['table_height']
    pos = truth['objects']['red_cube']['position']
    held = _truth(in_gripper=True, position=[pos[0], pos[1], table + 0.02])
    assert hl.regenerate(2.0, _obs(state, held)) == 'changed'
    assert state.subtask == 'lift the red cube'
    assert state.prior_subtask == 'reach the red cube'
    assert state.memory == 'reached the red cube'
    lifted = _truth(in_gripper=True, position=[pos[0], pos[1], table + 0.08])
    hl.regenerate(3.0, _obs(state, lifted))
    assert state.subtask == 'move the red cube over the bowl'
    assert state.memory == 'reached the red cube; the red cube is lifted'


def test_interjection_changes_the_target_with_speech(planner, truth):
    hl, state = planner
    _truth = truth
    hl.set_task('put the red cube in the bowl')
    hl.regenerate(0.0, _obs(state, _truth()))
    plan, speech = hl.interject('use the blue cube instead', _obs(state, _truth()))
    assert plan == 'put the blue cube in the bowl'
    assert speech == 'OK, I will put the blue cube in the bowl instead.'
    hl.regenerate(1.0, _obs(state, _truth()))
    assert state.subtask == 'reach the blue cube'
    nonsense = ScriptedPlanner().generate(
        'interjection', prompts.interjection_messages(state.task, 'sing a song'), {})
    assert split_say(nonsense)[0] == '' and 'Sorry' in split_say(nonsense)[1]


def test_unknown_task_is_an_empty_generation(planner, truth):
    hl, state = planner
    _truth = truth
    hl.set_task('make me a sandwich')
    assert hl.regenerate(0.0, _obs(state, _truth())) == 'empty'
    assert state.empty.get('subtask') == 1 and state.subtask == ''


@pytest.mark.parametrize('question,answer', [
    ('what is in the gripper?', 'nothing'),
    ('Is the red cube in the bowl?', 'no'),
    ('how many cubes are there?', '3'),
    ('which colours do you see?', 'blue, green and red'),
])
def test_vqa_from_ground_truth(question, answer, truth):
    gen = ScriptedPlanner()
    out = gen.generate('vqa', prompts.vqa_messages(question, image=None), {'ground_truth':
                                                                             truth()})
    assert out == answer


def test_vqa_where_reports_the_true_distance(base_truth):
    green = base_truth['objects']['green_cube']['position']
    bowl = base_truth['bowl']['position']
    cm = math.hypot(green[0] - bowl[0], green[1] - bowl[1]) * 100
    out = ScriptedPlanner().generate('vqa', prompts.vqa_messages('where is the green cube?',
                                                                 None),
                                     {'ground_truth': base_truth})
    assert out == f'the green cube is on the table, {cm:.0f} cm from the bowl'


def test_vqa_sees_what_is_held(truth):
    truth = truth(in_gripper=True)
    gen = ScriptedPlanner()
    assert gen.generate('vqa', prompts.vqa_messages('what are you holding?', None),
                        {'ground_truth': copy.deepcopy(truth)}) == 'the red cube'
    assert gen.generate('vqa', prompts.vqa_messages('where is the red cube?', None),
                        {'ground_truth': truth}) == 'the red cube is in the gripper'


def test_interjection_naming_a_cube_already_in_the_bowl_keeps_the_plan(planner, truth):
    hl, state = planner
    hl.set_task('put the blue cube in the bowl')
    hl.regenerate(0.0, _obs(state, truth()))
    assert state.subtask == 'reach the blue cube'
    done = truth(in_bowl=True)  # the red cube already lies in the bowl
    plan, speech = hl.interject('use the red cube instead', _obs(state, done))
    assert plan == ''
    assert speech == 'The red cube is already in the bowl; I will carry on as before.'
    hl.regenerate(1.0, _obs(state, done))
    assert state.subtask == 'reach the blue cube' and state.plan == ''
