"""`lerobot-lang sim|real` pointed at learned models: the command-line model options.

The end-to-end test is the issue's user story: the sim graph started with a LeRobot checkpoint
for the policy and a vision-language model directory for the planner, both loaded by the real
backends; subtasks come from the model and the model's chunks are dispatched by the executor.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lerobot_lang_nodes import graph, real_config
from lerobot_lang_nodes.cli import bringup


def _args(command: str, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bringup.add_arguments(command, parser)
    return parser.parse_args(list(argv))


def _params(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _shipped(node: str) -> dict:
    return _params(graph.default_params_file('sim'))[node]['ros__parameters']


def test_no_model_option_leaves_the_models_of_the_parameters_file_alone():
    out = bringup.plan('sim', _args('sim')).params
    for node in ('planner', 'policy'):
        block = out[node]['ros__parameters']
        assert block.items() >= _shipped(node).items(), node
        for key in ('backend', 'model_path', 'device'):
            assert block.get(key) == _shipped(node).get(key), (node, key)
    # The first task is the planner's parameter, as task:= of sim.launch.py sets it.
    assert out['planner']['ros__parameters']['task'] == bringup.DEFAULT_SIM_TASK


def test_policy_and_planner_options_select_the_model_backends(tmp_path):
    gguf = tmp_path / 'lm' / 'model.gguf'
    args = _args('sim', '--policy-path', str(tmp_path / 'act'), '--planner-model', str(gguf),
                 '--device', 'cpu')
    out = bringup.plan('sim', args).params
    policy, planner = out['policy']['ros__parameters'], out['planner']['ros__parameters']
    assert policy['backend'] == 'lerobot' and policy['model_path'] == str(tmp_path / 'act')
    assert planner['backend'] == 'transformers' and planner['direct_subtask'] is False
    # A .gguf file is the directory plus gguf_file, as transformers loads it.
    assert planner['model_path'] == str(gguf.parent)
    assert planner['transformers.gguf_file'] == 'model.gguf'
    assert policy['device'] == planner['device'] == 'cpu'
    # Everything else of the shipped file is kept.
    for node in ('sim_bridge', 'viewer'):
        assert out[node]['ros__parameters'].items() >= _shipped(node).items(), node


def test_hierarchical_option_composes_one_process_with_one_model(tmp_path):
    args = _args('sim', '--hierarchical', str(tmp_path / 'two_head'), '--no-viewer')
    made = bringup.plan('sim', args)
    assert [s.name for s in made.specs] == ['sim_bridge', graph.COMPOSED_NAME]
    planner = made.params['planner']['ros__parameters']
    policy = made.params['policy']['ros__parameters']
    assert planner['backend'] == policy['backend'] == 'hierarchical'
    assert planner['model_path'] == policy['model_path'] == str(tmp_path / 'two_head')


@pytest.mark.parametrize('simulator, executor', [('mujoco', 'sim_bridge'),
                                                 ('robocasa', 'robocasa_bridge')])
def test_dry_run_option_sets_the_executors_parameter(simulator, executor):
    def executor_params(*argv: str) -> dict:
        made = bringup.plan('sim', _args('sim', '--simulator', simulator, *argv))
        return made.params[executor]['ros__parameters']
    assert executor_params('--dry-run')['dry_run'] is True
    assert 'dry_run' not in executor_params()


def test_real_command_line_policy_wins_over_a_robot_yaml_without_one(tmp_path):
    (tmp_path / 'ckpt').mkdir()
    (tmp_path / 'ckpt' / 'config.json').write_text(json.dumps({'type': 'act'}))
    robot = tmp_path / 'robot.yaml'
    robot.write_text(yaml.safe_dump({'port': '/dev/null', 'calibration': {'id': 'x'},
                                     'cameras': {'front': {'source': 'synthetic:square'}}}))
    with pytest.raises(real_config.RobotConfigError, match='no policy checkpoint'):
        bringup.plan('real', _args('real', str(robot)))
    out = bringup.plan('real', _args('real', str(robot), '--policy-path',
                                     str(tmp_path / 'ckpt'))).params
    assert out['policy']['ros__parameters']['model_path'] == str(tmp_path / 'ckpt')
    # No planner model: the task conditions the policy directly.
    assert out['planner']['ros__parameters']['direct_subtask'] is True
    assert 'dry_run' not in out['so101_driver']['ros__parameters']
    out = bringup.plan('real', _args('real', str(robot), '--policy-path',
                                     str(tmp_path / 'ckpt'), '--dry-run')).params
    assert out['so101_driver']['ros__parameters']['dry_run'] is True


@pytest.mark.slow
@pytest.mark.parametrize('policy_backend', ['lerobot', 'hierarchical'])
def test_sim_runs_a_lerobot_policy_and_a_vlm_planner_from_the_command_line(tmp_path, probe,
                                                                           policy_backend):
    """ACT through the lerobot backend; a flat VLA (SmolVLA) through the hierarchical backend
    (DirectTaskPolicyAdapter), beside the transformers planner in the README's layout."""
    from lerobot_lang_nodes.testing import require_ml
    require_ml()
    from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, RuntimeStatus
    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.testing import stop_popen
    from lerobot_lang_nodes.tiny_models import policies, vlm

    if policy_backend == 'lerobot':
        checkpoint = policies.build_tiny_act(tmp_path / 'act', chunk_size=30)  # 1 s of actions
    else:
        require_ml('num2words')
        from lerobot_lang_nodes.tiny_models.vla import build_smolvla
        checkpoint = build_smolvla(tmp_path / 'smolvla', chunk_size=50, n_action_steps=30)
    planner_model = vlm.build_trained_vlm(tmp_path / 'vlm', vlm.scene_planner_examples(),
                                          steps=300)
    first_subtask = vlm.scene_steps('red')[0]
    contexts = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
    log = tmp_path / 'sim.log'
    with log.open('w') as out:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim', '--no-viewer',
             '--policy-path', str(checkpoint), '--policy-backend', policy_backend,
             '--planner-model', str(planner_model),
             '--device', 'cpu', '--timeout', '240', '--output-dir', str(tmp_path / 'session')],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env={**os.environ, 'HF_HUB_OFFLINE': '1'})
    try:
        def running() -> None:
            assert proc.poll() is None, log.read_text()[-4000:]

        # The default task is sent by the bring-up; the model answers with its first step.
        ctx = contexts.wait_for(lambda c: c.subtask == first_subtask, timeout_s=180.0,
                                what=f'subtask {first_subtask!r} from the VLM planner')
        running()
        assert ctx.task == bringup.DEFAULT_SIM_TASK
        chunk = chunks.wait_for(lambda c: c.backend == policy_backend, timeout_s=120.0,
                                what=f'a chunk from the {policy_backend} policy')
        assert chunk.horizon == 30 and list(chunk.action_names) == list(policies.JOINT_NAMES)
        st = status.wait_for(lambda s: s.dispatched >= 30, timeout_s=120.0,
                             what='the lerobot chunks dispatched by sim_bridge')
        assert st.rejected_invalid == 0, st.last_reject_reason
        running()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
        text = log.read_text()
        assert 'Traceback' not in text, text[-4000:]
        assert "planner ready: backend='transformers'" in text, text[-4000:]
        assert f"policy ready: backend='{policy_backend}'" in text, text[-4000:]
    finally:
        stop_popen(proc, 30.0)
