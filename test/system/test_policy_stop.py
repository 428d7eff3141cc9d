"""Ctrl-C while the policy is in the middle of a long inference (a VLA on a CPU: minutes a
chunk): the node stops at once and cleanly, instead of waiting for the inference until its
supervisor kills it (and torch, still running on a thread of a finalising interpreter,
aborts the process)."""

from __future__ import annotations

import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import String

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.cli.bringup import STOP_TIMEOUT_S
from lerobot_lang_nodes.nodes import qos

pytestmark = pytest.mark.slow


def test_the_policy_stops_at_once_during_a_long_inference(launch_node, probe) -> None:
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:])
    # An inference of a minute (the emulated slow model), with no timeout cutting it short.
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__node:=policy',
                         '--params-file', str(params), '-p', 'condition_on:=task',
                         '-p', 'added_latency_s:=60.0', '-p', 'inference_timeout_s:=0.0',
                         '-p', 'diagnostics_period_s:=0.2')
    diagnostics = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    for name in ('sim_bridge', 'policy'):
        probe.wait_for_node(name, timeout_s=60.0, processes=[sim, policy])
    probe.publisher(String, 'task', qos.LATCHED).publish(String(data='put the red cube in '
                                                                      'the bowl'))

    def running_s(arr: DiagnosticArray) -> float:
        for st in arr.status:
            if st.name == 'policy: policy':
                return float({kv.key: kv.value for kv in st.values}['inference_running_s'])
        return 0.0

    diagnostics.wait_for(lambda a: running_s(a) > 0.5, timeout_s=60.0,
                         what='an inference in flight on the policy')
    start = time.monotonic()
    code = policy.stop(timeout_s=2 * STOP_TIMEOUT_S)
    took = time.monotonic() - start
    log = policy.log_text()
    # Within the supervisor's patience (it kills after STOP_TIMEOUT_S), with exit code 0.
    assert code == 0 and took < STOP_TIMEOUT_S, (code, took, log[-3000:])
    assert 'not waiting for it' in log, log[-3000:]
    assert 'terminate called' not in log and 'Traceback' not in log, log[-3000:]
    assert sim.alive
