"""Every interface of lerobot_lang_msgs crosses a process boundary over DDS."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from lerobot_lang_msgs.action import RunTask
from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import WaitTimeout, action_client, wait_until

PEER = Path(__file__).with_name('interface_peer.py')


@pytest.fixture
def peer(launch_node, probe):
    proc = launch_node.command([sys.executable, str(PEER)], name='interface_peer')
    probe.wait_for_node('interface_peer', processes=[proc])
    return proc


def test_language_context_is_latched_across_processes(peer, probe):
    ctx = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
    msg = ctx.wait_for(timeout_s=10.0, what='latched LanguageContext')
    assert (msg.task, msg.subtask, msg.revision) == (
        'put the red cube in the bowl', 'reach the red cube', 7)
    assert msg.source == LanguageContext.SOURCE_PLANNER


def test_action_chunk_received_in_another_process(peer, probe):
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    msg = chunks.wait_for(timeout_s=10.0, what='ActionChunk')
    assert msg.horizon * msg.action_dim == len(msg.values) == 18
    assert list(msg.action_names)[0] == 'shoulder_pan' and msg.context_revision == 7
    later = chunks.wait_for(lambda m: m.sequence > msg.sequence, what='a later chunk')
    assert later.sequence > msg.sequence


def test_action_chunk_round_trip_keeps_values(peer, probe):
    echoes = probe.subscribe(ActionChunk, 'action_chunk_echo', qos.COMMAND)
    pub = probe.publisher(ActionChunk, 'action_chunk_in', qos.COMMAND, wait_subscribers=1)
    values = [float(v) / 7.0 for v in range(24)]  # a RoboCasa-shaped 2 x 12 chunk
    sent = ActionChunk(context_revision=3, instruction='open the drawer',
                       action_names=[f'a{i}' for i in range(12)], horizon=2, action_dim=12,
                       values=values, control_period_s=0.05, sequence=41, backend='test')
    pub.publish(sent)
    got = echoes.wait_for(lambda m: m.sequence == 41, what='echoed chunk')
    assert list(got.values) == values and got.action_dim == 12 and got.horizon == 2


def test_ask_vqa_service(peer, probe):
    reply = probe.call(AskVqa, 'vqa', AskVqa.Request(question='what is red?', camera='wrist'))
    assert reply.success and reply.answer == 'you asked about wrist: what is red?'
    bad = probe.call(AskVqa, 'vqa', AskVqa.Request(question='  '))
    assert not bad.success and 'empty' in bad.message


def test_run_task_action_feedback_and_result(peer, probe):
    from rclpy.qos import QoSProfile
    # rclpy's ActionClient forgets a goal's feedback callback once the result arrives, and
    # the result (a service reply) may overtake the last feedback (a topic). The feedback
    # stream is therefore checked on the action's feedback topic itself.
    feedback = probe.subscribe(RunTask.Impl.FeedbackMessage, 'run_task/_action/feedback',
                               QoSProfile(depth=10))
    client = action_client(probe.node, RunTask, 'run_task')
    assert client.wait_for_server(timeout_sec=10.0), 'run_task action server not found'
    done = threading.Event()
    box = {}

    def on_goal(fut):
        handle = fut.result()
        box['goal_id'] = bytes(handle.goal_id.uuid)
        assert handle.accepted
        handle.get_result_async().add_done_callback(
            lambda r: (box.update(result=r.result().result), done.set()))

    send = client.send_goal_async(RunTask.Goal(task='stack', time_limit_s=5.0))
    send.add_done_callback(on_goal)
    if not done.wait(10.0):
        raise WaitTimeout('RunTask result not received within 10 s')
    result = box['result']
    assert result.success and list(result.subtasks) == [f'step {i} of stack' for i in range(3)]
    wait_until(lambda: len(feedback) == 3, 5.0, 'three RunTask feedback messages')
    msgs = feedback.snapshot()
    assert all(bytes(m.goal_id.uuid) == box['goal_id'] for m in msgs)
    assert [m.feedback.subtask for m in msgs] == list(result.subtasks)
    assert [m.feedback.progress for m in msgs] == ['1/3', '2/3', '3/3']
    client.destroy()


def test_runtime_status_fields_exist():
    status = RuntimeStatus(mode=RuntimeStatus.MODE_PAUSED, queue_depth=3, dispatched=5)
    assert status.mode == 'paused' and RuntimeStatus.MODE_ACTION == 'action'


def test_runtime_status_carries_teleop_and_control_source():
    """The dataset contract: the mode teleop and who commanded the arm, appended last."""
    status = RuntimeStatus(mode=RuntimeStatus.MODE_TELEOP,
                           control_source=RuntimeStatus.CONTROL_HUMAN)
    assert (status.mode, status.control_source) == ('teleop', 'human')
    assert (RuntimeStatus.CONTROL_POLICY, RuntimeStatus.CONTROL_NONE) == ('policy', 'none')
    fields = list(RuntimeStatus.get_fields_and_field_types())
    assert fields[-1] == 'control_source' and fields.index('mode') == 1


def test_status_message_says_who_commands():
    """The executor's status reaches the message: policy in action mode, none when paused."""
    from lerobot_lang_nodes.core.executor import ChunkExecutor, ExecutorConfig
    from lerobot_lang_nodes.nodes.convert import status_to_msg

    executor = ChunkExecutor(ExecutorConfig(action_names=('a',)))
    assert status_to_msg(executor.status(), 1.0).control_source == RuntimeStatus.CONTROL_POLICY
    executor.pause(1.0)
    assert status_to_msg(executor.status(), 1.0).control_source == RuntimeStatus.CONTROL_NONE
