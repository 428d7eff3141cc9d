"""The arm's joint state in the learned planner's subtask prompt, rendered the same at training,
evaluation and deployment (config/prompts_joints.yaml, core/prompts.py render_joints).

The dataset is made the way a user makes one: a synthetic session written as a real rosbag2 bag
and exported by `lerobot-lang export --units lerobot` (degrees, the gripper 0..100, names
'<joint>.pos'). The arm holds pose REACH while the planner's subtask is "reach the red cube" and
pose GRASP from just before "grasp the red cube" on. Every subtask example the trainer and the
evaluation build must quote the pose in radians exactly as the planner node renders the
JointState it receives for that pose.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from lerobot_lang_nodes import paths
from lerobot_lang_nodes.core import prompts
from lerobot_lang_nodes.testing import require_ml
from lerobot_lang_nodes.training import planner as planner_training
from lerobot_lang_nodes.training.data import (STATE_KEY, DatasetError, DatasetInfo,
                                              state_in_radians)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'recording'))
from synthetic import JOINTS, T0, Session  # noqa: E402

TASK = 'put the red cube in the bowl'
REACH_TEXT, GRASP_TEXT = 'reach the red cube', 'grasp the red cube'
# Radians in JOINTS order (shoulder_pan ... gripper), inside the simulated arm's joint ranges.
REACH = [0.4, -1.2, 1.05, 0.3, -0.01, 0.52]
GRASP = [-0.35, -0.8, 0.9, 0.6, 0.25, 0.05]
POSE_SWITCH_S = 0.45  # between the 10 fps frames at 0.4 and 0.5 s
SUBTASK_SWITCH_S = 0.5
FPS = 10


def _info(names: list[str]) -> DatasetInfo:
    return DatasetInfo(root=Path('dataset'), fps=FPS, total_frames=1, total_episodes=1,
                       features={STATE_KEY: {'names': names}}, cameras=(),
                       has_language=True)


def test_the_state_units_come_from_the_feature_names_and_unknown_ones_are_refused():
    names, to_radians = state_in_radians(_info(list(JOINTS)))  # ROS units: as recorded
    assert names == list(JOINTS) and list(to_radians([0.5] * 6)) == [0.5] * 6
    names, to_radians = state_in_radians(_info([f'{j}.pos' for j in JOINTS]))
    assert names == list(JOINTS)  # the names joint_states gives them
    assert to_radians(np.full(6, 90.0))[0] == pytest.approx(np.pi / 2)  # degrees
    for names in ([], ['shoulder_pan.pos', 'gripper'], ['x.pos'] * 6):
        with pytest.raises(DatasetError, match='units of observation.state .* are unknown'):
            state_in_radians(_info(names))


@pytest.fixture(scope='module')
def dataset(tmp_path_factory) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('HF_HUB_OFFLINE', '1')
        require_ml('torch', 'lerobot', 'transformers')
        from lerobot_lang_nodes.recording.dataset import ExportOptions, export
        s = Session()
        for i in range(31):  # 1 s of joint states at 30 Hz, 2 ms before the frame grid
            t = i / 30 - (0.002 if i else 0.0)
            s.joints(T0 + t, np.array(REACH if t < POSE_SWITCH_S else GRASP))
        for k in range(11):
            s.image(T0 + k / FPS - (0.003 if k else 0.0), 'front', 40 + 10 * k)
        for c in range(4):
            s.chunk(T0 + c * 0.25 + 0.005, np.zeros((10, len(JOINTS))), revision=1,
                    period=1 / 30)
        s.context(T0, TASK, REACH_TEXT, '', TASK, 1)
        s.context(T0 + SUBTASK_SWITCH_S, TASK, GRASP_TEXT, 'reached the red cube', TASK, 2)
        tmp = tmp_path_factory.mktemp('joints')
        result = export([s.write(tmp / 'bags')], tmp / 'dataset', ExportOptions(
            fps=FPS, repo_id='test/joints', units='lerobot', episodes_by='task',
            cameras=('front',)))
        yield result.root


def _pose_line(target: str) -> str:
    """The joints line the planner node renders from the JointState of the arm's pose while
    ``target`` is the subtask."""
    pose = REACH if target == REACH_TEXT else GRASP
    return 'Joints: ' + prompts.render_joints(list(JOINTS), pose)


@pytest.fixture(scope='module')
def trained(dataset, tmp_path_factory) -> tuple[dict, list]:
    """The trainer's summary and the examples it trained on (one step: only the prompts
    matter here)."""
    from lerobot_lang_nodes.tiny_models import vlm
    examples: list = []
    real_train = vlm.train

    def train(model_dir, batch, **kwargs):  # the real training, its examples kept
        examples.extend(batch)
        return real_train(model_dir, batch, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vlm, 'train', train)
        summary = planner_training.train_planner(
            dataset, tmp_path_factory.mktemp('planner') / 'model', steps=1,
            cameras=('front',), frames_per_segment=2, change_frames=2, kinds=('subtask',),
            check_examples=0, prompts_file=paths.config_path('prompts_joints.yaml'))
    return summary, examples


def test_training_examples_quote_the_joint_state_in_radians_as_the_node_renders_it(trained):
    summary, examples = trained
    # Radians (not the dataset's degrees), sorted by joint name.
    assert _pose_line(REACH_TEXT) == 'Joints: 1.05 0.52 -1.20 0.40 0.30 -0.01'
    assert summary['joints'] == {'names': list(JOINTS), 'calibration': ''}
    texts = [next(p['text'] for p in messages[0]['content'] if p['type'] == 'text')
             for messages, _target in examples]
    targets = [target for _messages, target in examples]
    assert len(texts) >= 4 and set(targets) == {REACH_TEXT, GRASP_TEXT}
    for text, target in zip(texts, targets):
        assert text.splitlines()[-1] == _pose_line(target), (text, target)
    # The change frames quote the old subtask with the joint state of their own frame.
    moving = [t for t, target in zip(texts, targets)
              if target == GRASP_TEXT and f'Current subtask: {REACH_TEXT}' in t]
    assert len(moving) >= 2 and all(t.endswith(_pose_line(GRASP_TEXT)) for t in moving)
    prompts_file = Path(summary['planner_parameters']['prompts_file'])
    assert prompts.load_templates(prompts_file).uses('joints')  # what the node will load


def test_the_evaluation_scores_on_the_same_prompts(dataset, trained, monkeypatch):
    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersPlanner
    from lerobot_lang_nodes.training.evaluation import score_planner
    summary, _examples = trained
    asked: list = []
    real_generate = TransformersPlanner.generate

    def generate(self, kind, messages, observation):  # the real backend, its prompts kept
        asked.append(messages[0]['content'])
        return real_generate(self, kind, messages, observation)

    monkeypatch.setattr(TransformersPlanner, 'generate', generate)
    result = score_planner(Path(summary['output_dir']), summary['planner_parameters'], dataset,
                           max_frames=4, repo_id='test/joints')
    assert result['frames_scored'] == 4 and result['change_frames'] == 1
    lines = {text.splitlines()[-1] for text in asked}
    assert lines == {_pose_line(REACH_TEXT), _pose_line(GRASP_TEXT)}
