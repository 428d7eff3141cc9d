"""The planner keeps working while a human commands the arm (issue 32): on the sim graph as
`lerobot-lang sim` starts it (scripted planner and policy, each node its own process), a
takeover switches to teleop; the planner still regenerates its subtask on the live scene, and a
question is answered without pausing the human's arm."""

from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import SimGraph

pytestmark = pytest.mark.slow


def planner_repeats(diagnostics) -> int | None:
    """total_repeats of the planner's newest diagnostics (regenerations that kept the
    subtask: the planner looked again at an unchanged scene)."""
    for msg in reversed(diagnostics.snapshot()):
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if 'total_repeats' in values:
                return int(values['total_repeats'])
    return None


def test_subtasks_and_vqa_go_on_in_teleop(tmp_path):
    g = SimGraph(tmp_path, viewer=False)
    try:
        diagnostics = g.probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
        g.wait_ready()
        task = g.probe.publisher(String, 'task', qos.LATCHED)
        task.publish(String(data='put the red cube in the bowl'))
        g.context.wait_for(lambda m: m.subtask, timeout_s=60.0, what='a first subtask')
        reply = g.probe.call(Trigger, 'takeover', Trigger.Request(), timeout_s=30.0)
        assert reply.success, reply.message
        g.status.wait_for(lambda m: m.mode == 'teleop', timeout_s=20.0, what='teleop')
        # No leader in this graph: the arm holds, the scene stays, and the planner keeps
        # looking at it (each look repeats the subtask).
        start = len(diagnostics)
        diagnostics.wait_for(lambda _m: planner_repeats(diagnostics) is not None, timeout_s=20.0,
                             what='planner diagnostics', since=start)
        before = planner_repeats(diagnostics)
        diagnostics.wait_for(lambda _m: planner_repeats(diagnostics) > before + 1,
                             timeout_s=30.0, what='the planner regenerating in teleop',
                             since=len(diagnostics))
        answer = g.probe.call(AskVqa, 'vqa', AskVqa.Request(question='what is in the gripper?',
                                                             camera='wrist'), timeout_s=60.0)
        assert answer.success and answer.answer, answer
        after = g.status.wait_for(what='a status after the answer', since=len(g.status))
        assert after.mode == 'teleop'  # a question never pauses a human-commanded arm
    except BaseException:
        print(g.procs['planner'].log_text(3000), g.procs['sim_bridge'].log_text(2000))
        raise
    finally:
        g.close()
