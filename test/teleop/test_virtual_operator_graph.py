"""DAgger in simulation over DDS: the sim graph as `ros2 launch ... sim.launch.py
virtual_operator:=true record:=true` starts it (MuJoCo, scripted planner and policy, the
virtual operator and the recorder, each its own process). The policy does the first subtasks,
then dies mid-task (a policy that stops making progress); the virtual operator takes the arm
through /takeover, drives it with the expert's plan on leader/joint_states, hands back after
each subtask it corrected, and the task still succeeds. The runtime status says a human
commanded the arm during the takeovers and the policy after the hand-back, and the recording
exports with intervention frames."""

from __future__ import annotations

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import String

from lerobot_lang_msgs.msg import RuntimeStatus
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import SimGraph, wait_until

pq = pytest.importorskip('pyarrow.parquet')

pytestmark = pytest.mark.slow
TASK = 'put the red cube in the bowl'
RULES = {'stall_s': 2.0, 'min_takeover_s': 0.5, 'cooldown_s': 1.0}


def node_values(diagnostics, node: str) -> dict[str, str]:
    """A node's newest diagnostics values ({} before the first)."""
    for msg in reversed(diagnostics.snapshot()):
        for status in msg.status:
            if status.name.startswith(f'{node}:'):
                return {kv.key: kv.value for kv in status.values}
    return {}


def operator_counts(diagnostics) -> dict[str, str]:
    return node_values(diagnostics, 'virtual_operator')


def test_the_virtual_operator_corrects_a_stalled_policy_and_the_task_succeeds(tmp_path):
    from lerobot_lang_nodes.recording.dataset import ExportOptions, export
    bags = tmp_path / 'bags'
    g = SimGraph(tmp_path, {'virtual_operator': RULES, 'recorder': {'flush_period_s': 0.5}},
                 viewer=False, launch={'virtual_operator': 'true', 'record': 'true',
                                       'record_dir': str(bags)})
    procs = list(g.procs.values())
    try:
        diagnostics = g.probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
        g.wait_ready()
        for name in ('virtual_operator', 'recorder'):
            g.probe.wait_for_node(name, timeout_s=60.0, processes=procs)
        # Both load the expert's MuJoCo model (tens of seconds on a busy machine): the task
        # starts once the policy can act and the operator watches.
        wait_until(lambda: node_values(diagnostics, 'policy').get('load_state') == 'loaded'
                   and operator_counts(diagnostics), 180.0,
                   'the policy loaded and the operator watching', procs)
        task = g.probe.publisher(String, 'task', qos.LATCHED)
        wait_until(lambda: task.get_subscription_count() >= 3, 30.0,
                   'planner, sim_bridge and recorder on /task', procs)
        task.publish(String(data=TASK))
        g.context.wait_for(lambda m: m.subtask == 'grasp the red cube', timeout_s=120.0,
                           what='the policy reaching the red cube')
        # The policy made progress on its own so far: the operator left it alone.
        assert operator_counts(diagnostics).get('takeovers', '0') == '0'
        assert g.procs['policy'].stop() == 0  # from now on the policy's arm stands still
        g.outcome.wait_for(lambda m: m.goal == TASK and m.success, timeout_s=150.0,
                           what='the task done')
        statuses = g.status.snapshot()
        human = [i for i, m in enumerate(statuses)
                 if m.mode == RuntimeStatus.MODE_TELEOP and m.control_source == 'human']
        assert human, 'no status with a human (the virtual operator) commanding the arm'
        g.status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_ACTION
                          and m.control_source == 'policy', timeout_s=30.0,
                          since=human[-1], what='the policy back in control after hand-back')
        diagnostics.wait_for(lambda _m: int(operator_counts(diagnostics).get(
            'handbacks', '0')) >= 1 and operator_counts(diagnostics)['holding'] == 'false',
            timeout_s=30.0, what='the hand-back in the operator\'s diagnostics')
        counts = operator_counts(diagnostics)
        print('virtual operator:', counts)  # pytest -s shows what it did
        assert int(counts['takeovers_stall']) >= 1, counts
        assert float(counts['intervention_s']) > 0.0, counts
        assert g.procs['recorder'].stop() == 0, g.procs['recorder'].log_text(3000)
    except BaseException:
        print(g.logs())
        raise
    finally:
        g.close()
    (bag,) = [p for p in bags.iterdir() if p.is_dir()]
    result = export([bag], tmp_path / 'dataset',
                    ExportOptions(fps=10, repo_id='test/dagger', episodes_by='whole'))
    rows = pq.read_table(result.root / 'data/chunk-000/file-000.parquet').to_pylist()
    sources = [r['control_source'] for r in rows]
    assert any(r['intervention'] for r in rows), sorted(set(sources))
    assert 'policy' in sources and 'human' in sources
    assert all(r['intervention'] is (r['control_source'] == 'human') for r in rows)
