"""One owner of the control rate: the executor announces its period and the policy follows it.

sim_bridge runs at 50 Hz (not the 30 Hz default) and the scripted policy is given no rate at
all: its chunks must carry the executor's period and be accepted, while a chunk computed for
another rate (a policy configured on its own) is refused with a reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from std_msgs.msg import String

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

pytestmark = pytest.mark.slow
HZ = 50.0
TASK = 'put the red cube in the bowl'


def test_the_policy_computes_chunks_for_the_executors_rate(launch_node, probe) -> None:
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:], '-p', f'ctrl_hz:={HZ}')
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__node:=policy',
                         '--params-file', str(params), '-p', 'condition_on:=task')
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    for name in ('sim_bridge', 'policy'):
        probe.wait_for_node(name, timeout_s=60.0, processes=[sim, policy])
    first_status = status.wait_for(timeout_s=30.0, what='a runtime_status')
    assert first_status.control_period_s == pytest.approx(1.0 / HZ)
    probe.publisher(String, 'task', qos.LATCHED).publish(String(data=TASK))
    first = chunks.wait_for(timeout_s=60.0, what='a chunk from the scripted policy')
    assert first.control_period_s == pytest.approx(1.0 / HZ)
    st = status.wait_for(lambda s: s.last_accepted_sequence >= 3 and s.dispatched >= 30,
                         timeout_s=60.0, what='three chunks accepted and dispatched')
    assert st.rejected_invalid == 0, st.last_reject_reason

    # A chunk made for 30 Hz would play 1.7x too fast here: refused, with the reason.
    rogue = probe.publisher(ActionChunk, 'action_chunk', qos.COMMAND, wait_subscribers=1)
    values = np.tile(np.zeros(len(JOINT_NAMES)), (10, 1))
    rogue.publish(convert.chunk_to_msg(values, tuple(JOINT_NAMES), revision=st.context_revision,
                                       sequence=10_000, stamp_s=st.header.stamp.sec
                                       + st.header.stamp.nanosec * 1e-9,
                                       period_s=1.0 / 30.0, instruction=TASK, backend='rogue'))
    refused = status.wait_for(lambda s: s.rejected_invalid >= 1, timeout_s=30.0,
                              since=len(status), what='the 30 Hz chunk refused')
    assert 'control period' in refused.last_reject_reason
    assert '0.02 s' in refused.last_reject_reason
    assert sim.alive and policy.alive


def _set_parameter(probe, node: str, name: str, value: float):
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import GetParameters, SetParameters
    req = SetParameters.Request(parameters=[Parameter(name=name, value=ParameterValue(
        type=ParameterType.PARAMETER_DOUBLE, double_value=value))])
    (result,) = probe.call(SetParameters, f'/{node}/set_parameters', req, timeout_s=20.0).results
    got = probe.call(GetParameters, f'/{node}/get_parameters',
                     GetParameters.Request(names=[name]), timeout_s=20.0).values[0]
    return result, got.double_value


def test_safety_limits_tighten_at_run_time_and_loosen_only_when_paused(launch_node, probe):
    # Before, `ros2 param set /sim_bridge max_relative_target_rad 3.0` succeeded and the loop
    # went on with the old limit.
    from std_srvs.srv import Trigger
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:])
    probe.wait_for_node('sim_bridge', timeout_s=60.0, processes=[sim])
    name = 'max_relative_target_rad'
    result, value = _set_parameter(probe, 'sim_bridge', name, 0.2)  # tighter: at once
    assert result.successful and value == pytest.approx(0.2)
    assert 'safety limits changed at run time' in sim.log_text(5000)
    result, value = _set_parameter(probe, 'sim_bridge', name, 3.0)  # looser while acting
    assert not result.successful and 'pause it first' in result.reason
    assert value == pytest.approx(0.2)
    assert probe.call(Trigger, 'pause', Trigger.Request(), timeout_s=20.0).success
    result, value = _set_parameter(probe, 'sim_bridge', name, 3.0)
    assert result.successful and value == pytest.approx(3.0)
    # Parameters the node reads once are read-only.
    result, _ = _set_parameter(probe, 'sim_bridge', 'ctrl_hz', 50.0)
    assert not result.successful and 'read-only' in result.reason
    assert sim.alive


def test_a_chunk_that_expired_during_inference_is_dropped_not_published(launch_node, probe):
    # Inference slower than a chunk lasts (0.6 s against 15 x 33 ms): each chunk is in the
    # past when it is ready. The policy drops it and infers again at once instead of
    # publishing it and waiting a second for an ack the executor never sends; two in a row
    # are published anyway, so a clock that disagrees with the executor's never silences it.
    from diagnostic_msgs.msg import DiagnosticArray
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:])
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__node:=policy',
                         '--params-file', str(params), '-p', 'condition_on:=task',
                         '-p', 'added_latency_s:=0.6', '-p', 'diagnostics_period_s:=0.5')
    diagnostics = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    for name in ('sim_bridge', 'policy'):
        probe.wait_for_node(name, timeout_s=60.0, processes=[sim, policy])
    probe.publisher(String, 'task', qos.LATCHED).publish(String(data=TASK))

    def policy_values(arr):
        for s in arr.status:
            if s.name == 'policy: policy':
                return {kv.key: kv.value for kv in s.values}
        return None

    def dropped_and_published(arr):
        v = policy_values(arr)
        return v is not None and int(v['expired_chunks']) >= 2 \
            and int(v['chunks_published']) >= 2

    last = diagnostics.wait_for(dropped_and_published, timeout_s=60.0,
                                what='two chunks dropped as expired and two published')
    values = policy_values(last)
    # Every other chunk is dropped: never two drops in a row.
    assert int(values['expired_chunks']) <= int(values['chunks_published']) + 1
    # The published ones were expired too, and the executor said so.
    st = status.wait_for(lambda s: s.discarded_stale >= 1, timeout_s=30.0,
                         what='the executor discarding an expired chunk')
    assert st.dispatched == 0
    assert sim.alive and policy.alive
