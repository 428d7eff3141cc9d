"""The scripted IK expert really completes scene tasks through contact physics."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_lang_nodes.sim.episode import run_episode
from lerobot_lang_nodes.sim.expert import ScriptedExpert, UnknownInstructionError

# Sim-time bound per task; the expert typically needs 4-7 s.
MAX_SIM_S = 25.0


@pytest.fixture(scope='module')
def expert(sim_scene):
    return ScriptedExpert(sim_scene.model)


def test_chunk_shape_limits_and_sim_untouched(sim_scene, expert):
    sim_scene.reset(seed=0)
    qpos = sim_scene.data.qpos.copy()
    q = sim_scene.joint_positions()
    chunk = expert.act('reach the red cube', q, sim_scene.ground_truth())
    assert chunk.shape == (expert.config.horizon, 6) and np.all(np.isfinite(chunk))
    lower, upper = sim_scene.ctrl_limits()
    assert np.all(chunk >= lower - 0.05) and np.all(chunk <= upper + 0.05)
    # Smooth: per-tick joint steps bounded (plus the small gravity feed-forward change).
    steps = np.abs(np.diff(np.vstack([q, chunk]), axis=0))[:, :5]
    assert steps.max() <= expert.config.max_joint_step + 0.02
    np.testing.assert_array_equal(sim_scene.data.qpos, qpos)  # IK used its own MjData


def test_unknown_instruction_raises(sim_scene, expert):
    with pytest.raises(UnknownInstructionError, match='cannot execute'):
        expert.act('dance a little', sim_scene.joint_positions(), sim_scene.ground_truth())


@pytest.mark.parametrize('seed', [0, 1])
def test_put_red_cube_in_bowl(sim_scene, expert, seed):
    sim_scene.reset(seed=seed)
    result = run_episode(sim_scene, 'put the red cube in the bowl', MAX_SIM_S, expert)
    assert result.success, result.reason
    assert result.sim_time < MAX_SIM_S
    assert result.subtasks[:4] == ['reach the red cube', 'grasp the red cube',
                                   'lift the red cube', 'move the red cube over the bowl']
    truth = sim_scene.ground_truth()
    assert truth['objects']['red_cube']['in_bowl']
    assert not truth['objects']['green_cube']['in_bowl']


def test_put_blue_cube_in_bowl(sim_scene, expert):
    sim_scene.reset(seed=2)
    result = run_episode(sim_scene, 'put the blue cube in the bowl', MAX_SIM_S, expert)
    assert result.success, result.reason
    assert sim_scene.ground_truth()['objects']['blue_cube']['in_bowl']


def test_pick_up_green_cube_and_keep_holding(sim_scene, expert):
    sim_scene.reset(seed=3)
    result = run_episode(sim_scene, 'pick up the green cube', MAX_SIM_S, expert)
    assert result.success, result.reason
    # After success the whole-task instruction holds the cube (the scene persists).
    t0 = sim_scene.sim_time
    while sim_scene.sim_time - t0 < 1.0:
        chunk = expert.act('pick up the green cube', sim_scene.joint_positions(),
                           sim_scene.ground_truth())
        for row in chunk[:10]:
            sim_scene.apply_action(row)
            sim_scene.step()
    cube = sim_scene.ground_truth()['objects']['green_cube']
    assert cube['in_gripper'] and cube['position'][2] > 0.05


def test_whole_task_instruction_drives_the_expert(sim_scene, expert):
    """Flat mode: the policy gets the task text, not subtasks, and still succeeds."""
    from lerobot_lang_nodes.sim.tasks import check_success, parse_task
    sim_scene.reset(seed=4)
    spec = parse_task('put the green cube in the bowl')
    t0 = sim_scene.sim_time
    while not check_success(spec, sim_scene.ground_truth()):
        assert sim_scene.sim_time - t0 < MAX_SIM_S, 'flat-mode expert timed out'
        chunk = expert.act(spec.text, sim_scene.joint_positions(), sim_scene.ground_truth())
        for row in chunk[:10]:
            sim_scene.apply_action(row)
            sim_scene.step()
