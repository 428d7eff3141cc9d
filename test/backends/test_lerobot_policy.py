"""The `lerobot` policy backend on tiny ACT / Diffusion checkpoints built offline."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lerobot_lang_nodes.testing import policy_config
from lerobot_lang_nodes.so101 import units
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.testing import require_ml

require_ml('torch', 'lerobot', 'diffusers')

from lerobot_lang_nodes.backends.policies import lerobot_policy as lp  # noqa: E402
from lerobot_lang_nodes.tiny_models.policies import (  # noqa: E402
    build_tiny_act,
    build_tiny_diffusion,
)

ACT_CHUNK = 10
DIFFUSION_STEPS = 8
CALIBRATION = {j: MotorCalibration(i + 1, 1 if j == 'elbow_flex' else 0, 0,
                                   0 if j == 'wrist_roll' else 900 + 20 * i,
                                   4095 if j == 'wrist_roll' else 3100 - 10 * i)
               for i, j in enumerate(JOINT_NAMES)}


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp('ckpt')
    return {'act': build_tiny_act(root / 'act', chunk_size=ACT_CHUNK),
            'diffusion': build_tiny_diffusion(root / 'diffusion', horizon=16,
                                              n_action_steps=DIFFUSION_STEPS)}


@pytest.fixture(scope='module')
def calibration_file(tmp_path_factory) -> Path:
    return save_calibration(CALIBRATION, path=tmp_path_factory.mktemp('cal') / 'arm.json')


def cfg(path: Path | str, **kw) -> SimpleNamespace:
    base = dict(model_path=str(path), cameras=('front', 'wrist'), device='cpu', dtype='auto')
    return policy_config(**{**base, **kw})


def observation(q: np.ndarray, names=JOINT_NAMES, cameras=('front', 'wrist'),
                instruction: str = 'put the red cube in the bowl') -> dict:
    rng = np.random.default_rng(0)
    return {'instruction': instruction, 'joint_names': list(names),
            'joint_positions': np.asarray(q, dtype=float),
            'images': {c: rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) for c in cameras}}


Q = np.array([0.1, -0.4, 0.5, 0.7, -0.2, 0.3])


@pytest.mark.parametrize('state_units', ['degrees', 'range_m100_100'])
def test_state_units_round_trip_radians_with_a_calibration(state_units) -> None:
    conv = lp.StateUnits(CALIBRATION, state_units)
    values = conv.to_lerobot(Q)
    assert np.allclose(conv.to_radians(values), Q, atol=1e-9)
    if state_units == 'degrees':
        assert np.allclose(values[:5], np.degrees(Q[:5]))
    else:
        # elbow_flex has drive_mode 1: LeRobot's -100..100 inverts it.
        mid = CALIBRATION['elbow_flex']
        raw = units.radians_to_raw(Q[2], mid)
        expect = -((raw - mid.range_min) / (mid.range_max - mid.range_min) * 200 - 100)
        assert values[2] == pytest.approx(expect)
    grip = CALIBRATION['gripper']
    assert values[5] == pytest.approx((units.radians_to_raw(Q[5], grip) - grip.range_min)
                                      / (grip.range_max - grip.range_min) * 100)
    # Another joint order (a checkpoint declaring its names) permutes both ways.
    order = tuple(reversed(JOINT_NAMES))
    conv_rev = lp.StateUnits(CALIBRATION, state_units, order)
    assert np.allclose(conv_rev.to_lerobot(Q[::-1]), values[::-1])
    assert np.allclose(conv_rev.to_radians(values[::-1]), Q[::-1], atol=1e-9)


@pytest.mark.parametrize('state_units', ['degrees', 'range_m100_100'])
def test_a_chunk_converts_to_radians_as_each_value_does(state_units) -> None:
    """The whole-chunk conversion equals LeRobot's per-value unnormalisation, bounds
    included (values past -100..100 / 0..100 are held at the range's end), in any order."""
    rng = np.random.default_rng(0)
    for order in (JOINT_NAMES, tuple(reversed(JOINT_NAMES))):
        conv = lp.StateUnits(CALIBRATION, state_units, order, zero_rad=rng.normal(0, 0.1, 6))
        chunk = rng.uniform(-150.0, 150.0, (50, 6))
        expect = np.array([[units.lerobot_to_radians(v, CALIBRATION[j],
                                                     conv._conv.modes[j])
                            + conv._zero[JOINT_NAMES.index(j)] for j, v in zip(order, row)]
                           for row in chunk])
        np.testing.assert_allclose(conv.to_radians(chunk), expect, rtol=0, atol=1e-12)
        assert conv.to_radians(chunk[0]).shape == (6,)


def test_act_chunk_names_length_and_units_path(checkpoints, calibration_file) -> None:
    policy = lp.LeRobotPolicy(cfg(checkpoints['act'], calibration_path=str(calibration_file)))
    assert policy.policy_type == 'act' and policy.action_names == JOINT_NAMES
    obs = observation(Q)
    native = policy.infer_lerobot_units(obs)
    chunk = policy.infer(obs)
    assert chunk.shape == native.shape == (ACT_CHUNK, 6)
    assert np.all(np.isfinite(chunk))
    # ACT is deterministic at inference: the radians are exactly the checkpoint units converted
    # back through the inverse of the state path (the gripper bounded to 0..100 as LeRobot's).
    back = np.array([policy.units.to_lerobot(row) for row in chunk])
    expect = native.copy()
    expect[:, 5] = np.clip(expect[:, 5], 0.0, 100.0)
    assert np.allclose(back, expect, atol=1e-6)
    # The state the model sees is the calibrated conversion of the joint states.
    frame = policy.frame(obs)
    assert np.allclose(frame['observation.state'], policy.units.to_lerobot(Q), atol=1e-5)
    assert frame['observation.images.front'].shape == (240, 320, 3)  # resized in the batch
    # joint_states in another order are matched by name.
    shuffled = observation(Q[::-1], names=JOINT_NAMES[::-1])
    assert np.allclose(policy.infer(shuffled), chunk)
    policy.close()


def test_diffusion_chunk_from_its_observation_history(checkpoints) -> None:
    policy = lp.LeRobotPolicy(cfg(checkpoints['diffusion']))  # nominal sim calibration
    assert policy.policy_type == 'diffusion' and policy.n_obs_steps == 2
    first = policy.infer(observation(Q))
    second = policy.infer(observation(Q + 0.05))
    assert first.shape == second.shape == (DIFFUSION_STEPS, 6)
    assert np.all(np.isfinite(first)) and np.all(np.isfinite(second))
    policy.close()


def test_camera_map_feeds_differently_named_cameras(checkpoints) -> None:
    policy = lp.LeRobotPolicy(cfg(checkpoints['act'], cameras=('left', 'hand'),
                                  camera_map=('left:front', 'hand:observation.images.wrist')))
    assert policy.camera_keys == {'left': 'observation.images.front',
                                  'hand': 'observation.images.wrist'}
    assert policy.infer(observation(Q, cameras=('left', 'hand'))).shape == (ACT_CHUNK, 6)


def test_unmappable_checkpoint_is_refused_with_what_it_expects(checkpoints) -> None:
    with pytest.raises(lp.PolicyLoadError) as err:
        lp.LeRobotPolicy(cfg(checkpoints['act'], cameras=('front', 'top')))
    text = str(err.value)
    assert "image 'observation.images.wrist' is fed by no camera" in text
    assert "'observation.images.wrist': 'VISUAL [3, 96, 128]'" in text
    assert 'top -> observation.images.top' in text and 'camera_map' in text


def test_state_and_action_dimensions_are_checked() -> None:
    ft = SimpleNamespace
    inputs = {'observation.state': ft(type='STATE', shape=(7,)),
              'observation.environment_state': ft(type='ENV', shape=(3,))}
    outputs = {'action': ft(type='ACTION', shape=(14,))}
    with pytest.raises(lp.PolicyLoadError) as err:
        lp.check_features(Path('/ckpt'), 'act', inputs, outputs, {})
    text = str(err.value)
    assert 'observation.state has shape [7], the arm has 6 joints' in text
    assert "input 'observation.environment_state' of type ENV has no ROS source" in text
    assert 'action has shape [14], the arm has 6 joint targets' in text


def test_declared_action_names_set_the_joint_order() -> None:
    names = [f'{j}.pos' for j in reversed(JOINT_NAMES)]
    assert lp.joint_order(names) == tuple(reversed(JOINT_NAMES))
    assert lp.joint_order(None) == JOINT_NAMES
    with pytest.raises(lp.PolicyLoadError, match='expected the six SO-101 joints'):
        lp.joint_order(['x', 'y'])


def test_missing_and_corrupt_directories_name_the_problem(checkpoints, tmp_path) -> None:
    with pytest.raises(lp.PolicyLoadError, match=r'no-such-dir does not exist'):
        lp.LeRobotPolicy(cfg(tmp_path / 'no-such-dir'))
    with pytest.raises(lp.PolicyLoadError, match='no policy checkpoint set'):
        lp.LeRobotPolicy(cfg(''))
    partial = tmp_path / 'partial'
    shutil.copytree(checkpoints['act'], partial)
    (partial / 'model.safetensors').unlink()
    (partial / 'policy_postprocessor.json').unlink()
    with pytest.raises(lp.PolicyLoadError,
                       match=r"lacks \['model.safetensors', 'policy_postprocessor.json'\]"):
        lp.LeRobotPolicy(cfg(partial))
    bad_config = tmp_path / 'bad_config'
    shutil.copytree(checkpoints['act'], bad_config)
    (bad_config / 'config.json').write_text('{"type": "act", "chunk_size": ')
    with pytest.raises(lp.PolicyLoadError, match='config.json is not a LeRobot policy config'):
        lp.LeRobotPolicy(cfg(bad_config))
    truncated = tmp_path / 'truncated'
    shutil.copytree(checkpoints['act'], truncated)
    weights = truncated / 'model.safetensors'
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(lp.PolicyLoadError, match='loading the act checkpoint .* failed'):
        lp.LeRobotPolicy(cfg(truncated))


def test_bad_settings_are_refused(checkpoints) -> None:
    # The node's config refuses these first; the backend checks them for any other caller.
    def unchecked(**bad) -> SimpleNamespace:
        given = vars(cfg(checkpoints['act']))
        if 'camera_map' in bad:
            given['lerobot'] = SimpleNamespace(**{**vars(given['lerobot']), **bad})
        else:
            given.update(bad)
        return SimpleNamespace(**given)
    with pytest.raises(lp.PolicyLoadError, match="camera_map entry 'front' is not"):
        lp.LeRobotPolicy(unchecked(camera_map=('front',)))
    with pytest.raises(lp.PolicyLoadError, match="device 'gpu' is not one of"):
        lp.LeRobotPolicy(unchecked(device='gpu'))


def test_sim_nominal_calibration_maps_the_model_ranges_to_lerobot_units() -> None:
    from lerobot_lang_nodes.sim.scene import build_model, SceneConfig
    model = build_model(SceneConfig())
    lo, hi = model.jnt_range[[model.joint(n).id for n in JOINT_NAMES]].T
    calibration, zero = lp.nominal_sim_calibration()
    conv = lp.StateUnits(calibration, 'range_m100_100', JOINT_NAMES, zero)
    assert np.allclose(conv.to_lerobot(lo), [-100] * 5 + [0], atol=0.1)
    assert np.allclose(conv.to_lerobot(hi), [100] * 5 + [100], atol=0.1)
    degrees = lp.StateUnits(calibration, 'degrees', JOINT_NAMES, zero)
    q = (lo + hi) / 2 + 0.2
    assert np.allclose(degrees.to_radians(degrees.to_lerobot(q)), q, atol=1e-9)


def test_reduced_precision_runs_under_autocast(checkpoints) -> None:
    obs = observation(Q)
    full = lp.LeRobotPolicy(cfg(checkpoints['act'])).infer(obs)
    half = lp.LeRobotPolicy(cfg(checkpoints['act'], dtype='bfloat16')).infer(obs)
    assert half.shape == full.shape and np.allclose(half, full, atol=0.05)


def test_action_names_parameter_sets_the_so101_joint_order(checkpoints) -> None:
    order = tuple(reversed(JOINT_NAMES))
    policy = lp.LeRobotPolicy(cfg(checkpoints['act'], action_names=order, robot_type='so101'))
    assert policy.action_names == policy.order == order and policy.robot_type == 'so101'
    assert np.allclose(policy.frame(observation(Q))['observation.state'],
                       policy.units.to_lerobot(Q[::-1]), atol=1e-5)
    with pytest.raises(lp.PolicyLoadError, match='expected the six SO-101 joints'):
        lp.LeRobotPolicy(cfg(checkpoints['act'], action_names=('x', 'y')))


def test_loading_skips_the_random_init_and_equals_lerobots_own_load(checkpoints, tmp_path):
    """load_pretrained_policy gives LeRobot's from_pretrained weights, and a checkpoint that
    lacks a parameter is loaded the ordinary way (initialised, never uninitialised memory)."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class
    from safetensors.torch import load_file, save_file
    path = checkpoints['act']
    config = PreTrainedConfig.from_pretrained(path)
    cls = get_policy_class('act')
    fast = lp.load_pretrained_policy(cls, path, config).state_dict()
    ref = cls.from_pretrained(path, config=config).state_dict()
    assert fast.keys() == ref.keys()
    assert all(torch.equal(fast[k], ref[k]) for k in ref)
    partial = tmp_path / 'partial'
    shutil.copytree(path, partial)
    tensors = load_file(str(partial / 'model.safetensors'))
    dropped = next(k for k in tensors if k.endswith('action_head.weight'))
    del tensors[dropped]
    save_file(tensors, str(partial / 'model.safetensors'))
    weights = lp.load_pretrained_policy(cls, partial, config).state_dict()[dropped]
    assert torch.isfinite(weights).all() and weights.abs().max() < 10.0
    assert weights.abs().max() > 0  # LeRobot's (random) initialisation, not left empty
