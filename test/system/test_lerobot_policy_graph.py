"""The `lerobot` policy node over DDS: a tiny ACT checkpoint drives the simulator, and its
faults (inference errors, timeouts, a missing checkpoint) are counted on /diagnostics while the
node keeps serving and publishes no chunk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES
from lerobot_lang_nodes.testing import require_ml, wait_until

require_ml('torch', 'lerobot')

from lerobot_lang_nodes.tiny_models.policies import build_tiny_act  # noqa: E402

pytestmark = pytest.mark.slow
# One second of actions: a chunk is executed from its observation's time, so it must outlast
# the inference latency of torch on two loaded cores (a 10-action chunk, 0.33 s, expired
# before it arrived on a busy CI machine, every time).
CHUNK = 30
CTRL_HZ = 30.0
LOAD_S = 120.0  # several processes importing torch and LeRobot on two loaded cores
TASK = 'put the red cube in the bowl'


@pytest.fixture(scope='module')
def act_checkpoint(tmp_path_factory) -> Path:
    return build_tiny_act(tmp_path_factory.mktemp('ckpt') / 'act', chunk_size=CHUNK)


def policy_args(params: Path, ckpt: Path | str, *extra: str) -> list[str]:
    return ['-r', '__node:=policy', '--params-file', str(params), '-p', 'backend:=lerobot',
            '-p', f'model_path:={ckpt}', '-p', 'condition_on:=task',
            '-p', 'diagnostics_period_s:=0.25', *extra]


def policy_status(diag) -> DiagnosticStatus | None:
    """The latest 'policy: policy' status on one diagnostics collector."""
    for arr in reversed(diag.snapshot()):
        for st in arr.status:
            if st.name == 'policy: policy':
                return st
    return None


def values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_tiny_act_drives_the_simulator(launch_node, probe, act_checkpoint) -> None:
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:])
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node',
                         *policy_args(params, act_checkpoint, '-p', 'use_sim_time:=true'))
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    diag = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    for name in ('sim_bridge', 'policy'):
        probe.wait_for_node(name, timeout_s=LOAD_S, processes=[sim, policy])
    probe.publisher(String, 'task', qos.LATCHED).publish(String(data=TASK))
    first = chunks.wait_for(timeout_s=LOAD_S, what='a chunk from the lerobot policy')
    assert first.backend == 'lerobot' and first.instruction == TASK
    assert list(first.action_names) == list(JOINT_NAMES)
    assert (first.horizon, first.action_dim) == (CHUNK, 6)
    assert first.control_period_s == pytest.approx(1.0 / CTRL_HZ)
    values_rad = np.asarray(first.values).reshape(CHUNK, 6)
    assert np.all(np.isfinite(values_rad)) and np.all(np.abs(values_rad) < np.pi)
    # The executor accepts the chunks and dispatches them, refilled before it runs dry.
    st = status.wait_for(lambda s: s.last_accepted_sequence >= 3 and s.dispatched >= 3 * CHUNK,
                         timeout_s=60.0, what='three lerobot chunks accepted and dispatched')
    assert st.rejected_invalid == 0, st.last_reject_reason
    assert st.active_instruction == TASK
    later = [c for c in chunks.snapshot() if c.sequence > 1]
    assert later and all(c.horizon == CHUNK and c.context_revision == 1 for c in later)
    ok = wait_until(lambda: (s := policy_status(diag)) and s.level == DiagnosticStatus.OK
                    and int(values(s)['chunks_published']) >= 3 and s, 10.0,
                    'policy diagnostics OK with chunks published', [sim, policy])
    v = values(ok)
    assert v['backend'] == 'lerobot' and v['load_state'] == 'loaded'
    assert v['policy_type'] == 'act' and v['chunk_length'] == str(CHUNK)
    assert float(v['latency_p50_ms']) > 0 and v['failures'] == '0' and v['timeouts'] == '0'


class FakeExecutor:
    """The probe plays the executor's side of one namespaced policy: status, joints, images."""

    def __init__(self, probe, ns: str) -> None:
        self.ns = ns
        self.status = probe.publisher(RuntimeStatus, f'{ns}/runtime_status', qos.STATUS)
        self.joints = probe.publisher(JointState, f'{ns}/joint_states', qos.SENSOR)
        self.images = {c: probe.publisher(Image, f'{ns}/cameras/{c}/image_raw', qos.SENSOR)
                       for c in ('front', 'wrist')}
        self.chunks = probe.subscribe(ActionChunk, f'{ns}/action_chunk', qos.COMMAND)
        self.diag = probe.subscribe(DiagnosticArray, f'{ns}/diagnostics', qos.STATUS)
        probe.publisher(String, f'{ns}/task', qos.LATCHED).publish(String(data=TASK))
        self.send_images = True
        self.joint_names = list(JOINT_NAMES)

    def tick(self) -> None:
        self.status.publish(RuntimeStatus(mode=RuntimeStatus.MODE_ACTION, needs_refill=True,
                                          context_revision=1))
        self.joints.publish(JointState(name=self.joint_names,
                                       position=[0.0] * len(self.joint_names)))
        if self.send_images:
            rgb = np.full((240, 320, 3), 90, dtype=np.uint8)
            for c, pub in self.images.items():
                pub.publish(convert.rgb_to_image(rgb, 0.0, f'{c}_camera_optical_frame'))


def test_faults_are_counted_on_diagnostics_and_the_node_keeps_serving(
        launch_node, probe, act_checkpoint, tmp_path, fault_report) -> None:
    row = fault_report.row('policy model faults (missing checkpoint, inference error, '
                           'timeout)', note='counted on /diagnostics, nodes up; unsafe: a chunk '
                                            'published from a failed or timed-out inference')
    params = graph.default_params_file('sim')
    # Three policy nodes in their own namespaces: inputs that make inference raise (joint
    # states without the gripper), an inference timeout, and a checkpoint that does not exist.
    nodes = {
        'failing': launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__ns:=/failing',
                               *policy_args(params, act_checkpoint), name='failing'),
        'slow': launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__ns:=/slow',
                            *policy_args(params, act_checkpoint,
                                         '-p', 'inference_timeout_s:=0.001'), name='slow'),
        'missing': launch_node('lerobot_lang_nodes.nodes.policy_node', '-r', '__ns:=/missing',
                               *policy_args(params, tmp_path / 'no_checkpoint'),
                               name='missing'),
    }
    procs = list(nodes.values())
    fakes = {ns: FakeExecutor(probe, f'/{ns}') for ns in nodes}
    fakes['failing'].joint_names = list(JOINT_NAMES[:5])

    def tick_all() -> None:
        for fake in fakes.values():
            fake.tick()

    def diag_where(ns: str, pred) -> DiagnosticStatus:
        def check():
            tick_all()
            st = policy_status(fakes[ns].diag)
            return st if st is not None and pred(st, values(st)) else None
        return wait_until(check, LOAD_S, f'{ns} policy diagnostics', procs, poll_s=0.2)

    with row.injection():  # a checkpoint that does not exist
        missing = diag_where('missing', lambda s, v: s.level == DiagnosticStatus.ERROR)
        v = values(missing)
        assert v['load_state'] == 'failed' and 'no_checkpoint does not exist' in v['load_error']
        assert 'policy not loaded' in missing.message
    with row.injection():  # inputs that make inference raise
        failing = diag_where('failing', lambda s, v: int(v['failures']) >= 2)
        assert failing.level == DiagnosticStatus.WARN
        assert "joint_states lacks ['gripper']" in values(failing)['last_error']
    with row.injection():  # an inference timeout
        slow = diag_where('slow', lambda s, v: int(v['timeouts']) >= 2)
        assert slow.level == DiagnosticStatus.WARN
    # The failing node serves again once its inputs are complete; the others stay silent.
    fakes['failing'].joint_names = list(JOINT_NAMES)
    diag_where('failing', lambda s, v: s.level == DiagnosticStatus.OK
               and int(v['chunks_published']) >= 1)
    chunk = fakes['failing'].chunks.wait_for(timeout_s=5.0,
                                             what='a chunk once the joints are complete')
    missing_again = diag_where('missing', lambda s, v: True)  # still up, still reporting
    row.record(unsafe=len(fakes['slow'].chunks) + len(fakes['missing'].chunks))
    assert chunk.horizon == CHUNK and list(chunk.action_names) == list(JOINT_NAMES)
    assert len(fakes['slow'].chunks) == 0 and len(fakes['missing'].chunks) == 0
    assert values(slow)['chunks_published'] == '0'
    assert missing_again.level == DiagnosticStatus.ERROR
    assert all(p.alive for p in procs)


def build_flat(kind: str, out: Path) -> Path:
    if kind == 'diffusion':
        from lerobot_lang_nodes.tiny_models.policies import build_tiny_diffusion
        # The U-Net halves the horizon twice: 32 covers n_obs_steps (2) - 1 + the chunk.
        return build_tiny_diffusion(out, horizon=32, n_action_steps=CHUNK)
    from lerobot_lang_nodes.tiny_models.vla import build_smolvla
    # LeRobot's default 50-action chunk, of which lerobot-rollout executes n_action_steps.
    return build_smolvla(out, chunk_size=50, n_action_steps=CHUNK)


@pytest.mark.parametrize('kind', ['diffusion', 'smolvla'])
def test_a_flat_checkpoint_drives_the_simulator(launch_node, probe, tmp_path, kind) -> None:
    """Diffusion (an observation history) and SmolVLA (a VLA: the instruction through its
    own tokenizer) from stock LeRobot checkpoints, chunks dispatched by the simulator."""
    if kind == 'smolvla':
        require_ml('num2words')
    ckpt = build_flat(kind, tmp_path / kind)
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:])
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node',
                         *policy_args(params, ckpt, '-p', 'use_sim_time:=true'))
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    diag = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    for name in ('sim_bridge', 'policy'):
        probe.wait_for_node(name, timeout_s=LOAD_S, processes=[sim, policy])
    task = probe.publisher(String, 'task', qos.LATCHED)
    task.publish(String(data=TASK))
    first = chunks.wait_for(timeout_s=LOAD_S, what=f'a chunk from the {kind} policy')
    assert first.backend == 'lerobot' and list(first.action_names) == list(JOINT_NAMES)
    assert first.instruction == TASK
    assert (first.horizon, first.action_dim) == (CHUNK, 6)
    assert first.control_period_s == pytest.approx(1.0 / CTRL_HZ)
    assert np.all(np.isfinite(first.values))
    st = status.wait_for(lambda s: s.last_accepted_sequence >= 2 and s.dispatched >= 2 * CHUNK,
                         timeout_s=90.0, what=f'two {kind} chunks accepted and dispatched')
    assert st.rejected_invalid == 0, st.last_reject_reason
    # A new task reaches the model: the next chunks are inferred for it.
    other = 'pick up the blue cube'
    task.publish(String(data=other))
    chunks.wait_for(lambda c: c.instruction == other, timeout_s=LOAD_S,
                    what=f'a {kind} chunk for the new task')
    # SmolVLA runs with real-time chunking (LeRobot's guidance, on by default for the types
    # that have it): refills are given the executing chunk's left-over; Diffusion has none.
    rtc = kind == 'smolvla'
    ok = wait_until(lambda: (s := policy_status(diag)) and int(values(s)['chunks_published'])
                    >= 3 and (not rtc or int(values(s)['rtc_guided']) >= 1) and s, 60.0,
                    'policy diagnostics with chunks published', [sim, policy])
    v = values(ok)
    assert v['policy_type'] == kind and v['chunk_length'] == str(CHUNK)
    assert float(v['latency_p50_ms']) > 0 and v['failures'] == '0', v
    assert v['rtc'] == ('on' if rtc else 'off'), v
    if rtc:  # a guided chunk is stamped where it joins the one being played
        st = status.wait_for(lambda s: s.last_accepted_sequence >= 4, timeout_s=LOAD_S,
                             what='more chunks accepted')
        assert st.rejected_invalid == 0, st.last_reject_reason
        by_seq = {c.sequence: c for c in chunks.snapshot()}
        joins = [(by_seq[n + 1].header.stamp, by_seq[n].header.stamp) for n in by_seq
                 if n + 1 in by_seq and by_seq[n].instruction == by_seq[n + 1].instruction]
        steps = [(convert.stamp_to_s(a) - convert.stamp_to_s(b)) * CTRL_HZ for a, b in joins]
        assert any(0 < k <= CHUNK and abs(k - round(k)) < 1e-3 for k in steps), steps
