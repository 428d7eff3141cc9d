"""A flat policy (no planner): the action policy is conditioned on /task directly."""

from __future__ import annotations

import pytest
from std_msgs.msg import String

from lerobot_lang_msgs.msg import ActionChunk, TaskOutcome
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import qos

pytestmark = pytest.mark.slow


def test_flat_policy_executes_the_task_text(launch_node, probe):
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:])
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__node:=policy',
                         '--params-file', str(params), '-p', 'use_sim_time:=true',
                         '-p', 'condition_on:=task')
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    outcome = probe.subscribe(TaskOutcome, 'task_outcome', qos.LATCHED)
    for name in ('sim_bridge', 'policy'):
        probe.wait_for_node(name, timeout_s=60.0, processes=[sim, policy])
    task = probe.publisher(String, 'task', qos.LATCHED)
    task.publish(String(data='put the red cube in the bowl'))
    first = chunks.wait_for(timeout_s=60.0, what='a chunk from the flat policy')
    assert first.instruction == 'put the red cube in the bowl'
    assert first.context_revision == 1 and first.backend == 'scripted'
    # Without a planner the simulator judges the operator's task itself.
    done = outcome.wait_for(lambda m: m.success, timeout_s=120.0, what='the red cube in the bowl')
    assert done.goal == 'put the red cube in the bowl' and done.known_goal
    task.publish(String(data='pick up the green cube'))
    changed = chunks.wait_for(lambda m: m.instruction == 'pick up the green cube',
                              what='chunks for the new task')
    assert changed.context_revision == 2
    outcome.wait_for(lambda m: m.goal == 'pick up the green cube' and m.success,
                     timeout_s=120.0, what='the green cube picked up')
