"""Which frames become the planner's subtask examples (training/planner.py), from the text
columns alone: no video, no model.

One episode at 10 fps, "put the red cube in the bowl": "reach the red cube" from frame 0,
"grasp the red cube" (and the memory "reached the red cube") from frame 10, to frame 19. With
the stateful prompts the prompt quotes the subtask and memory of the frame before, so frame 10
is the only frame whose answer is not the quoted subtask.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobot_lang_nodes.core import prompts
from lerobot_lang_nodes.testing import require_ml
from lerobot_lang_nodes.training.planner import (Candidate, Frame, cap_examples,
                                                  memory_candidates, subtask_candidates)

require_ml('lerobot.datasets.language_render')

ROOT = Path(__file__).resolve().parents[2]
FPS = 10.0
TASK = 'put the red cube in the bowl'
REACH, GRASP = 'reach the red cube', 'grasp the red cube'
CHANGE = 10


def _row(style: str, content: str, t: float) -> dict:
    return {'role': 'assistant', 'content': content, 'style': style, 'timestamp': t,
            'camera': None, 'tool_calls': None}


def _episode(episode: int, first_index: int, n: int = 20) -> list[Frame]:
    rows = [_row('plan', f'1. {REACH}\n2. {GRASP}', 0.0), _row('subtask', REACH, 0.0),
            _row('subtask', GRASP, CHANGE / FPS), _row('memory', 'reached the red cube',
                                                       CHANGE / FPS)]
    return [Frame(index=first_index + i, episode=episode, timestamp=i / FPS, task=TASK,
                  persistent=rows) for i in range(n)]


@pytest.fixture(scope='module')
def templates():
    return prompts.load_templates(ROOT / 'config/prompts_stateful.yaml', None)


def _quoted(messages: list[dict]) -> str:
    """The subtask the prompt quotes ('' at a task's first frame: the line is left out)."""
    _, _, quoted = messages[0]['content'].partition('Current subtask:')
    return quoted.strip()


def test_without_change_frames_the_change_is_one_example(templates):
    out = subtask_candidates(_episode(0, 0), templates, frames_per_segment=4)
    moving = [c for c in out if c.moves_on]
    assert [(c.frame, c.target) for c in moving] == [(CHANGE, GRASP)]
    assert _quoted(moving[0].messages) == REACH
    # Every other example answers the subtask it quotes (or starts the task).
    assert all(c.target == (_quoted(c.messages) or REACH) for c in out if not c.moves_on)


def test_change_frames_teach_moving_on_from_the_start_of_the_new_stretch(templates):
    frames = _episode(0, 0)
    plain = subtask_candidates(frames, templates, frames_per_segment=4)
    out = subtask_candidates(frames, templates, frames_per_segment=4, change_frames=3)
    moving = [c for c in out if c.moves_on]
    change = next(c for c in plain if c.moves_on)
    # The change frame and three frames from the first half of the grasp stretch (11..14),
    # all with the change frame's prompt (reach still quoted, the memory before it).
    assert [c.frame for c in moving] == [CHANGE, 11, 13, 14]
    assert all(c.messages == change.messages and c.target == GRASP for c in moving)
    assert 'reached the red cube' not in change.messages[0]['content']
    # The "stay" examples are the same as without them.
    assert [c for c in out if not c.moves_on] == [c for c in plain if not c.moves_on]


def test_change_frames_stay_within_the_episode(templates):
    # The second episode ends at the change: there is no stretch after it to borrow from,
    # and the first episode's frames must not lend theirs across the boundary.
    frames = _episode(0, 0) + _episode(1, 20, n=CHANGE + 1)
    out = subtask_candidates(frames, templates, frames_per_segment=4, change_frames=3)
    second = [c for c in out if c.moves_on and c.frame >= 20]
    assert [c.frame for c in second] == [20 + CHANGE]
    first = [c for c in out if c.moves_on and c.frame < 20]
    assert all(c.frame < 20 for c in first) and len(first) == 4


def test_the_joint_state_of_each_frame_is_quoted_and_does_not_split_the_segments():
    """config/prompts_joints.yaml: each example quotes its own frame's joint state (the change
    frames too, with the change frame's language); the segments are those of the language
    alone, so a moving arm does not make every frame an example."""
    joints = prompts.load_templates(ROOT / 'config/prompts_joints.yaml', None)
    stateful = prompts.load_templates(ROOT / 'config/prompts_stateful.yaml', None)
    frames = _episode(0, 0)
    for f in frames:
        f.joints = f'0.{f.index:02d}'
    out = subtask_candidates(frames, joints, frames_per_segment=4, change_frames=3)
    plain = subtask_candidates(_episode(0, 0), stateful, frames_per_segment=4, change_frames=3)
    assert [(c.frame, c.target, c.moves_on) for c in out] == \
        [(c.frame, c.target, c.moves_on) for c in plain]
    for c, p in zip(out, plain):
        assert c.messages[0]['content'] == \
            f"{p.messages[0]['content']}\nJoints: 0.{c.frame:02d}"


def test_memory_turns_include_the_first_one_where_nothing_is_done_yet(templates):
    # The planner asks for a memory at the task's first subtask too (the task alone); the
    # recording has no memory then, so the answer taught is empty (dropped by the planner).
    out = memory_candidates(_episode(0, 0), templates)
    assert [(c.messages, c.target) for c in out] == [
        ([{'role': 'user', 'content': TASK}], ''),
        ([{'role': 'user', 'content': TASK},
          {'role': 'user', 'content': f'Completed subtask: {REACH}'}], 'reached the red cube')]
    assert all(c.frame == -1 for c in out)  # memory turns are text only


def test_a_memory_written_with_the_first_subtask_answers_the_first_turn(templates):
    frames = _episode(0, 0)
    for f in frames:
        f.persistent = [*f.persistent, _row('memory', 'nothing done yet', 0.0)]
    out = memory_candidates(frames, templates)
    assert [(c.messages, c.target) for c in out] == [
        ([{'role': 'user', 'content': TASK}], 'nothing done yet'),
        ([{'role': 'user', 'content': TASK},
          {'role': 'assistant', 'content': 'Previous memory: nothing done yet'},
          {'role': 'user', 'content': f'Completed subtask: {REACH}'}], 'reached the red cube')]


def test_capping_keeps_the_text_turns_a_share_of_the_budget():
    def make(kind: str, n: int) -> list[Candidate]:
        return [Candidate(kind, [], f'{kind} {i}', i) for i in range(n)]

    subtask, memory = make('subtask', 1000), make('memory', 40)
    kept = cap_examples(subtask + memory + make('interjection', 2), 100)
    kinds = [c.kind for c in kept]
    assert len(kept) == 100 and kinds.count('memory') + kinds.count('interjection') == 25
    # Spread over each kind's own list: the first and the last of each are kept.
    assert {subtask[0].target, subtask[-1].target, memory[0].target} <= {
        c.target for c in kept}
    # Few subtask frames: the text turns fill the rest of the budget.
    kept = cap_examples(make('subtask', 10) + memory, 30)
    assert [c.kind for c in kept].count('subtask') == 10 and len(kept) == 30
    assert cap_examples(memory, 50) == memory
