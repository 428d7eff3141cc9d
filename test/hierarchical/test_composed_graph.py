"""One process serves planner and policy from one two-headed checkpoint, over DDS with the sim.

The text head's subtask reaches /language_context, the action head's chunks for that subtask
are dispatched by sim_bridge, an interjection re-plans, and the weights were loaded once.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import String

from lerobot_lang_nodes.testing import require_ml

require_ml()

from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus  # noqa: E402
from lerobot_lang_nodes import graph  # noqa: E402
from lerobot_lang_nodes.nodes import qos  # noqa: E402
from lerobot_lang_nodes.tiny_models import two_head as th  # noqa: E402

pytestmark = pytest.mark.slow


def _params_file(tmp_path, model_dir) -> str:
    params = yaml.safe_load(graph.default_params_file('sim').read_text())
    params.pop('viewer')
    for node in ('planner', 'policy'):
        params[node]['ros__parameters'].update(backend='hierarchical', model_path=str(model_dir))
    # The text head's tokens are bytes: the interjection reply is ~60 of them.
    params['planner']['ros__parameters']['max_new_tokens'] = 96
    path = tmp_path / 'composed.yaml'
    path.write_text(yaml.safe_dump(params))
    return str(path)


def _values(chunk: ActionChunk) -> np.ndarray:
    return np.asarray(chunk.values).reshape(chunk.horizon, chunk.action_dim)


def _shared_models(msg: DiagnosticArray) -> dict[str, str] | None:
    for status in msg.status:
        if status.name == 'planner: shared models':
            return {kv.key: kv.value for kv in status.values}
    return None


def test_one_process_serves_subtasks_and_chunks_from_one_load(two_head_dir, tmp_path,
                                                              launch_node, probe):
    params = _params_file(tmp_path, two_head_dir)
    (composed,) = (s for s in graph.composed(graph.SIM) if s.hosts)
    sim = launch_node.command([sys.executable, '-m', graph.SIM[0].module,
                               *graph.ros_args(graph.SIM[0], params)], name='sim_bridge')
    both = launch_node.command([sys.executable, '-m', composed.module,
                                *graph.ros_args(composed, params)], name=composed.name)
    procs = [sim, both]
    context = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    speech = probe.subscribe(String, 'speech', qos.COMMAND)
    diagnostics = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    for name in ('sim_bridge', 'planner', 'policy'):
        probe.wait_for_node(name, timeout_s=90.0, processes=procs)

    task = probe.publisher(String, 'task', qos.LATCHED)
    task.publish(String(data=th.TASK))
    ctx = context.wait_for(lambda m: m.subtask == th.SUBTASK and m.memory == th.MEMORY,
                           timeout_s=60.0, what='the generated subtask and memory')
    assert ctx.task == th.TASK and ctx.source == 'planner'
    chunk = chunks.wait_for(lambda m: m.instruction == th.SUBTASK, timeout_s=60.0,
                            what='a chunk for the generated subtask')
    assert chunk.backend == 'hierarchical' and chunk.context_revision >= ctx.revision
    assert list(chunk.action_names) == ['shoulder_pan', 'shoulder_lift', 'elbow_flex',
                                        'wrist_flex', 'wrist_roll', 'gripper']
    np.testing.assert_allclose(_values(chunk), np.tile(th.POSES[th.SUBTASK], (chunk.horizon, 1)),
                               atol=0.1)
    status.wait_for(lambda m: m.active_instruction == th.SUBTASK and m.dispatched > 0,
                    timeout_s=30.0, what='sim_bridge dispatching the subtask chunks')

    interjection = probe.publisher(String, 'interjection', qos.COMMAND, wait_subscribers=1)
    interjection.publish(String(data=th.INTERJECTION))
    assert speech.wait_for(timeout_s=60.0, what='the spoken reply').data == th.SPEECH
    replanned = context.wait_for(lambda m: m.subtask == th.NEW_SUBTASK, timeout_s=60.0,
                                 what='the subtask of the new plan')
    assert replanned.plan == th.NEW_PLAN and replanned.prior_subtask == th.SUBTASK
    new_chunk = chunks.wait_for(lambda m: m.instruction == th.NEW_SUBTASK, timeout_s=60.0,
                                what='a chunk for the new subtask')
    np.testing.assert_allclose(_values(new_chunk),
                               np.tile(th.POSES[th.NEW_SUBTASK], (new_chunk.horizon, 1)),
                               atol=0.1)
    seen = len(status)
    status.wait_for(lambda m: m.active_instruction == th.NEW_SUBTASK, since=seen,
                    timeout_s=30.0, what='sim_bridge dispatching the new subtask')

    # Both nodes ran on one model: one load in the process, used by both.
    shared = diagnostics.wait_for(lambda m: _shared_models(m) is not None, timeout_s=10.0,
                                  since=len(diagnostics), what='the shared-model status')
    values = _shared_models(shared)
    assert values['model_loads'] == '1' and values['models'] == '1'
    (entry,) = (v for k, v in values.items() if k.endswith('checkpoint'))
    assert 'loads=1' in entry and 'users=planner,policy' in entry and 'type=two_head' in entry
    assert sim.alive and both.alive
