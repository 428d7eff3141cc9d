"""Exact message structure of the prompt builders."""

from __future__ import annotations

from lerobot_lang_nodes.core import prompts
from lerobot_lang_nodes.core.language import LanguageSnapshot, LanguageState


def test_subtask_messages():
    assert prompts.subtask_messages('clean the table') == [
        {'role': 'user', 'content': 'clean the table'}]


def test_memory_messages_full():
    assert prompts.memory_messages('clean', 'cup moved', 'pick up the cup') == [
        {'role': 'user', 'content': 'clean'},
        {'role': 'assistant', 'content': 'Previous memory: cup moved'},
        {'role': 'user', 'content': 'Completed subtask: pick up the cup'},
    ]


def test_memory_messages_skip_absent_turns_like_the_training_recipe():
    assert prompts.memory_messages('clean', '', 'pick up the cup') == [
        {'role': 'user', 'content': 'clean'},
        {'role': 'user', 'content': 'Completed subtask: pick up the cup'},
    ]
    assert prompts.memory_messages('clean', '', '') == [{'role': 'user', 'content': 'clean'}]


def test_interjection_messages():
    assert prompts.interjection_messages('clean', 'skip the plate') == [
        {'role': 'user', 'content': 'clean'},
        {'role': 'user', 'content': 'skip the plate'},
    ]


def test_vqa_messages_keep_the_image_object():
    image = object()
    msgs = prompts.vqa_messages('what is on the table?', image, camera='wrist')
    assert msgs == [{'role': 'user', 'content': [
        {'type': 'image', 'image': image, 'camera': 'wrist'},
        {'type': 'text', 'text': 'what is on the table?'},
    ]}]
    assert msgs[0]['content'][0]['image'] is image
    assert prompts.vqa_messages('q', image)[0]['content'][0]['camera'] == ''


def test_action_instruction_prefers_subtask():
    assert prompts.action_instruction(('task', 'sub')) == 'sub'
    assert prompts.action_instruction(('task', '')) == 'task'
    assert prompts.action_instruction(('task', '  ')) == 'task'
    assert prompts.action_instruction('task', 'sub') == 'sub'
    assert prompts.action_instruction('task') == 'task'
    snap = LanguageSnapshot('t', 's', '', '', '', 3, 'action', 'planner')
    assert prompts.action_instruction(snap) == 's'
    state = LanguageState(task='t')
    assert prompts.action_instruction(state) == 't'


def test_templates_drop_lines_whose_placeholders_are_empty():
    t = prompts.PromptTemplates(subtask='{task}\nPlan: {plan}\nNow: {subtask}\nNext?')
    assert prompts.subtask_messages('clean', templates=t) == [
        {'role': 'user', 'content': 'clean\nNext?'}]
    assert prompts.subtask_messages('clean', plan='wipe first', subtask='grab cloth',
                                    templates=t)[0]['content'] == \
        'clean\nPlan: wipe first\nNow: grab cloth\nNext?'
    assert prompts.PromptTemplates(subtask='{task} {{literal}}').render(
        'subtask', task='x') == 'x {literal}'


def test_templates_refuse_unknown_placeholders_and_bad_files(tmp_path):
    import pytest
    from lerobot_lang_nodes.core.errors import ConfigError
    with pytest.raises(ConfigError, match=r"unknown placeholder\(s\) \['goal'\]"):
        prompts.PromptTemplates(subtask='{goal}')
    bad = tmp_path / 'p.yaml'
    bad.write_text('subtask: "{task}"\nsubtasks: x\n')
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['subtasks'\]"):
        prompts.load_templates(bad)
    with pytest.raises(ConfigError, match='cannot be read'):
        prompts.load_templates(tmp_path / 'missing.yaml')


def test_shipped_prompts_file_adds_the_plan_line():
    from lerobot_lang_nodes import paths
    t = prompts.load_templates(paths.config_path('prompts.yaml'), system_prompt='Be brief.')
    assert t.system_prompt == 'Be brief.'
    assert prompts.subtask_messages('put the red cube in the bowl', templates=t) == \
        prompts.subtask_messages('put the red cube in the bowl')  # no plan: the spec's turn
    assert prompts.subtask_messages('put the red cube in the bowl', 'put the blue cube in the '
                                    'bowl', templates=t)[0]['content'] == \
        'put the red cube in the bowl\nPlan: put the blue cube in the bowl'


def test_the_stateful_prompts_file_quotes_where_the_task_stands():
    """config/prompts_stateful.yaml (the closed loop's planner wording) asks "is the active
    subtask done?": task first (the scripted planner reads the first line), then plan, memory
    and the active subtask, each left out while empty."""
    from lerobot_lang_nodes import paths
    t = prompts.load_templates(paths.config_path('prompts_stateful.yaml'))
    task = 'put the red cube in the bowl'
    assert prompts.subtask_messages(task, templates=t) == prompts.subtask_messages(task)
    text = prompts.subtask_messages(task, task, 'red cube found', 'reach the red cube',
                                    templates=t)[0]['content']
    assert text.splitlines() == [task, f'Plan: {task}', 'Memory: red cube found',
                                 'Current subtask: reach the red cube']


def test_joints_render_in_radians_sorted_by_name_with_two_decimals():
    # A JointState in any order renders the same: the text depends on the names, not the order.
    names = ['shoulder_pan', 'gripper', 'elbow_flex']
    assert prompts.render_joints(names, [0.4, 1.2345, -1.005]) == '-1.00 1.23 0.40'
    assert prompts.render_joints(names[::-1], [-1.005, 1.2345, 0.4]) == '-1.00 1.23 0.40'
    assert prompts.render_joints(['a'], [-0.001]) == '0.00'  # no negative zero
    # Unknown state: nothing (the joints line is left out).
    assert prompts.render_joints([], []) == ''
    assert prompts.render_joints(['a', 'b'], [0.1]) == ''
    assert prompts.render_joints(['a'], [float('nan')]) == ''
    assert prompts.observed_joints(None) == ''
    assert prompts.observed_joints({'images': {}}) == ''
    import numpy as np
    assert prompts.observed_joints({'joint_names': ['b', 'a'],
                                    'joint_positions': np.array([0.5, -0.25])}) == '-0.25 0.50'


def test_the_subtask_template_quotes_the_joints_and_drops_the_line_without_them():
    t = prompts.PromptTemplates(subtask='{task}\nJoints: {joints}\nNow: {subtask}')
    assert t.uses('joints') and not prompts.DEFAULT_TEMPLATES.uses('joints')
    assert prompts.subtask_messages('clean', subtask='wipe', templates=t,
                                    joints='0.10 -0.20')[0]['content'] == \
        'clean\nJoints: 0.10 -0.20\nNow: wipe'
    assert prompts.subtask_messages('clean', subtask='wipe', templates=t)[0]['content'] == \
        'clean\nNow: wipe'
    from lerobot_lang_nodes.core.errors import ConfigError
    import pytest
    with pytest.raises(ConfigError, match=r"unknown placeholder\(s\) \['joints'\]"):
        prompts.PromptTemplates(memory_previous='{joints}')  # only the subtask turn has them


def test_the_joints_prompts_file_is_the_stateful_one_plus_the_joint_state():
    """config/prompts_joints.yaml (the closed loop's planner wording): the stateful prompt,
    then the arm's joint state."""
    from lerobot_lang_nodes import paths
    stateful = prompts.load_templates(paths.config_path('prompts_stateful.yaml'))
    t = prompts.load_templates(paths.config_path('prompts_joints.yaml'))
    assert t.uses('joints')
    task = 'put the red cube in the bowl'
    args = (task, task, 'red cube found', 'reach the red cube')
    assert prompts.subtask_messages(*args, templates=t) == \
        prompts.subtask_messages(*args, templates=stateful)  # no joint state: no line
    text = prompts.subtask_messages(*args, templates=t, joints='0.10 0.20')[0]['content']
    assert text.splitlines() == [task, f'Plan: {task}', 'Memory: red cube found',
                                 'Current subtask: reach the red cube', 'Joints: 0.10 0.20']
