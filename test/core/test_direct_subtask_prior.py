"""A `direct:` subtask under a task: the previous subtask, not the task, becomes its prior."""

from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.language import LanguageState


class OneSubtask:
    def generate(self, kind, messages, observation):
        return 'reach the red cube' if kind == 'subtask' else ''


def test_direct_subtask_keeps_the_task_and_the_previous_subtask_as_prior():
    planner = HighLevelPlanner(OneSubtask(), LanguageState(), HighLevelConfig())
    planner.set_task('put the red cube in the bowl')
    planner.regenerate(0.0, None)
    assert planner.state.subtask == 'reach the red cube'
    revision = planner.state.revision
    planner.set_task('put the red cube in the bowl', direct_subtask=True, restate=False,
                     subtask='open the gripper')
    s = planner.state.snapshot()
    assert (s.task, s.subtask, s.prior_subtask) == (
        'put the red cube in the bowl', 'open the gripper', 'reach the red cube')
    assert s.revision == revision + 1 and s.source == 'operator'  # one change, not two
    assert planner.direct
