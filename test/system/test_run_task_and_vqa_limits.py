"""RunTask and /vqa where they cannot do their usual job: a paused robot, no success judge, no
answer possible. The goal or question must say so instead of sitting, and never pause the
arm for nothing."""

from __future__ import annotations

import threading

import pytest
from std_srvs.srv import Trigger

from lerobot_lang_msgs.action import RunTask
from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus, TaskOutcome
from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import action_client, wait_until

pytestmark = pytest.mark.slow
TASK = 'put the red cube in the bowl'


class Goal:
    """A RunTask goal in flight: its progress lines and, once it ends, its result."""

    def __init__(self, probe, task: str, time_limit_s: float) -> None:
        self.client = action_client(probe.node, RunTask, 'run_task')
        assert self.client.wait_for_server(timeout_sec=30.0), 'run_task server not found'
        self.progress: list[str] = []
        self.result = None
        self.handle = None
        self.done = threading.Event()

        def on_goal(fut) -> None:
            self.handle = fut.result()
            assert self.handle.accepted
            self.handle.get_result_async().add_done_callback(
                lambda r: (setattr(self, 'result', r.result().result), self.done.set()))

        self.client.send_goal_async(
            RunTask.Goal(task=task, time_limit_s=time_limit_s),
            feedback_callback=lambda f: self.progress.append(f.feedback.progress)
        ).add_done_callback(on_goal)

    def wait(self, timeout_s: float = 30.0):
        assert self.done.wait(timeout_s), f'no RunTask result within {timeout_s} s'
        return self.result


def _start(launch_node, names, **planner_params):
    plan = graph.launch_plan('sim', {'viewer': 'false'})
    specs = {s.name: s for s in plan.specs}
    extra = [a for k, v in planner_params.items() for a in ('-p', f'{k}:={v}')]
    return {name: launch_node(specs[name].module, '-r', f'__node:={name}', '--params-file',
                              str(plan.params_file), *(extra if name == 'planner' else []),
                              name=name)
            for name in names}


def _ask(probe, question: str, procs) -> AskVqa.Response:
    """/vqa, asked again while the planner has no camera frame yet (it refuses unpaused)."""
    def asked():
        reply = probe.call(AskVqa, 'vqa', AskVqa.Request(question=question), timeout_s=60.0)
        return None if reply.message.startswith('no image received yet') else reply
    return wait_until(asked, 30.0, f'an answer to {question!r}', list(procs.values()))


def test_feedback_says_paused_why_and_how_to_resume(launch_node, probe):
    procs = _start(launch_node, ('sim_bridge', 'planner'))
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    for name in procs:
        probe.wait_for_node(name, timeout_s=60.0, processes=list(procs.values()))
    status.wait_for(lambda m: m.mode == 'action', timeout_s=60.0, what='the executor')
    # A question the scripted planner cannot answer is refused without pausing the arm.
    reply = _ask(probe, 'what is the weather like?', procs)
    assert not reply.success and 'cannot answer that' in reply.message, reply.message
    status.wait_for(lambda m: True, timeout_s=10.0, since=len(status), what='a later status')
    assert all(m.mode == 'action' for m in status.snapshot()), 'the question paused the arm'
    reply = _ask(probe, 'what is in the gripper?', procs)
    assert reply.success, reply.message
    status.wait_for(lambda m: m.mode == 'paused', timeout_s=30.0, since=len(status) - 1,
                    what='paused by the question')
    goal = Goal(probe, TASK, time_limit_s=600.0)
    wait_until(lambda: any(p.startswith('paused') for p in goal.progress), 30.0,
               'feedback that says paused', list(procs.values()))
    line = next(p for p in goal.progress if p.startswith('paused'))
    assert "the question 'what is in the gripper?'" in line, line
    assert 'ros2 service call /resume std_srvs/srv/Trigger' in line, line
    assert probe.call(Trigger, 'resume', Trigger.Request()).success
    seen = len(goal.progress)
    wait_until(lambda: any(p.startswith('subtask') for p in goal.progress[seen:]), 30.0,
               'subtask feedback once resumed', list(procs.values()))
    goal.handle.cancel_goal_async()
    assert goal.wait().message == 'canceled'


def test_without_a_success_judge_a_goal_needs_a_limit_or_the_operator(launch_node, probe):
    # The real arm's graph: no simulator, so nothing publishes /task_outcome.
    procs = _start(launch_node, ('planner',), revision_wait_s=0.0)
    probe.wait_for_node('planner', timeout_s=60.0, processes=list(procs.values()))
    result = Goal(probe, TASK, time_limit_s=0.0).wait()
    assert not result.success
    assert 'nothing judges success' in result.message and '/task_outcome' in result.message
    # With a limit it runs, and the operator's outcome for this task (revision 0) ends it.
    goal = Goal(probe, TASK, time_limit_s=600.0)
    context = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
    context.wait_for(lambda m: m.task == TASK, timeout_s=30.0, what='the goal as the task')
    judge = probe.publisher(TaskOutcome, 'task_outcome', qos.COMMAND, wait_subscribers=1)
    judge.publish(TaskOutcome(goal=TASK, success=True, detail='the operator saw it done'))
    result = goal.wait()
    assert result.success and 'the operator saw it done' in result.message, result.message


def test_vqa_without_ground_truth_refuses_at_once_and_does_not_pause(launch_node, probe):
    # The real arm with the default (scripted) planner: no simulator ground truth.
    procs = _start(launch_node, ('sim_bridge', 'planner'), ground_truth_topic="''")
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    for name in procs:
        probe.wait_for_node(name, timeout_s=60.0, processes=list(procs.values()))
    status.wait_for(lambda m: m.mode == 'action', timeout_s=60.0, what='the executor')
    reply = _ask(probe, 'what is in the gripper?', procs)
    assert not reply.success
    assert 'ground truth' in reply.message and 'VLM planner' in reply.message, reply.message
    since = len(status)
    status.wait_for(lambda m: True, timeout_s=10.0, since=since, what='a later status')
    assert all(m.mode == 'action' for m in status.snapshot()), 'the question paused the arm'
