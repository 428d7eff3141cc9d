"""A PI0 checkpoint (stock LeRobot 0.6.1, full-size gemma_2b with random weights, see
lerobot_lang_nodes/tiny_models/pi.py) drives the simulator through the policy node, offline:
the PaliGemma tokenizer comes from a test HF_HOME's cache (HF_HUB_OFFLINE=1).

A PI0 chunk takes 5-20 s on a small CPU, far longer than a chunk lasts at real time: the
simulator runs at a few percent of real time (real_time_factor), so that a 50-action chunk
(1.7 s of simulated time) outlasts the inference that refills it. PI0.5 is covered by
test/backends/test_lerobot_pi.py (the same backend; one ~10 GB model at a time here)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from std_msgs.msg import String

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES
from lerobot_lang_nodes.testing import require_ml, wait_until

require_ml('torch', 'lerobot', 'transformers', 'scipy')

from lerobot_lang_nodes.tiny_models.pi import install_paligemma_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow
CHUNK = 50  # LeRobot's default PI0 chunk, all of it executed
CTRL_HZ = 30.0
# Simulated seconds per wall second: a chunk lasts 1.7 / 0.03 = 56 s of wall time.
REAL_TIME_FACTOR = 0.03
LOAD_S = 300.0  # the node loads ~10 GB (about a minute alone; more beside the simulator)
INFER_S = 120.0
TASK = 'put the red cube in the bowl'


@pytest.fixture(scope='module')
def offline_hf(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp('hf_home')
    install_paligemma_tokenizer(home)
    return home


@pytest.fixture(scope='module')
def pi0_checkpoint(tmp_path_factory, offline_hf):
    """Built in a child process (the build's memory is gone before the node loads it)."""
    path = tmp_path_factory.mktemp('pi0') / 'pretrained_model'
    script = textwrap.dedent('''
        import sys
        from lerobot_lang_nodes.tiny_models.pi import build_pi
        build_pi(sys.argv[1], 'pi0', chunk_size=int(sys.argv[2]))
        ''')
    env = {**os.environ, 'HF_HOME': str(offline_hf), 'HF_HUB_OFFLINE': '1',
           'OMP_NUM_THREADS': '2'}
    out = subprocess.run([sys.executable, '-c', script, str(path), str(CHUNK)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    yield path
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def test_pi0_drives_the_slowed_simulator(launch_node, probe, pi0_checkpoint, offline_hf,
                                         monkeypatch) -> None:
    # Both nodes inherit the environment: the policy's processors find the tokenizer offline.
    monkeypatch.setenv('HF_HOME', str(offline_hf))
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    monkeypatch.setenv('OMP_NUM_THREADS', '2')
    params = graph.default_params_file('sim')
    # The bridge's status goes out on simulated time: at every control tick (~1 s of wall
    # time here), and the policy accepts a status that old.
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:],
                      '-p', f'real_time_factor:={REAL_TIME_FACTOR}',
                      '-p', f'status_hz:={CTRL_HZ}')
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node',
                         '-r', '__node:=policy', '--params-file', str(params),
                         '-p', 'backend:=lerobot', '-p', f'model_path:={pi0_checkpoint}',
                         '-p', 'condition_on:=task', '-p', 'use_sim_time:=true',
                         '-p', f'inference_timeout_s:={INFER_S}',
                         '-p', 'status_timeout_s:=20.0')
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    for name in ('sim_bridge', 'policy'):
        probe.wait_for_node(name, timeout_s=LOAD_S, processes=[sim, policy])
    probe.publisher(String, 'task', qos.LATCHED).publish(String(data=TASK))
    # wait_until: a node that dies (out of memory) fails the wait at once, with its log.
    wait_until(lambda: len(chunks.snapshot()) > 0, LOAD_S + INFER_S, 'a chunk from the PI0 policy',
               [sim, policy], poll_s=0.5)
    first = chunks.snapshot()[0]
    assert first.backend == 'lerobot' and first.instruction == TASK
    assert list(first.action_names) == list(JOINT_NAMES)
    assert (first.horizon, first.action_dim) == (CHUNK, 6)
    assert first.control_period_s == pytest.approx(1.0 / CTRL_HZ)
    values = np.asarray(first.values).reshape(CHUNK, 6)
    assert np.all(np.isfinite(values)) and np.all(np.abs(values) < 1.5), values
    # The executor accepts it and dispatches its actions to the simulated arm.
    st = wait_until(lambda: next((s for s in reversed(status.snapshot())
                                  if s.last_accepted_sequence >= 1 and s.dispatched >= 10), None),
                    INFER_S, 'a PI0 chunk accepted and dispatched', [sim, policy], poll_s=0.5)
    assert st.rejected_invalid == 0, st.last_reject_reason
    assert st.active_instruction == TASK
    assert sim.alive and policy.alive
