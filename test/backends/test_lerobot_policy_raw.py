"""The `lerobot` policy backend with ``state_units: raw``: a tiny ACT checkpoint in RoboCasa's
layout (16-D state, three views, 12-D action in [-1, 1]) runs without SO-101 units."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lerobot_lang_nodes.testing import policy_config
from lerobot_lang_nodes.robocasa import layout
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES
from lerobot_lang_nodes.testing import require_ml

require_ml('torch', 'lerobot')

from lerobot_lang_nodes.backends.policies import lerobot_policy as lp  # noqa: E402
from lerobot_lang_nodes.tiny_models.policies import (  # noqa: E402
    ROBOCASA_ACTION_ORDER,
    ROBOCASA_CAMERAS,
    build_tiny_robocasa_act,
)

CHUNK = 8
ROBOCASA = layout.action_names('robocasa')


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory) -> Path:
    return build_tiny_robocasa_act(tmp_path_factory.mktemp('ckpt') / 'robocasa_act',
                                   chunk_size=CHUNK)


def cfg(path: Path | str, **kw) -> SimpleNamespace:
    base = dict(model_path=str(path), cameras=ROBOCASA_CAMERAS, device='cpu', dtype='auto',
                state_units='raw', action_names=ROBOCASA, robot_type='',
                state_topic='robot_state')
    return policy_config(**{**base, **kw})


def observation(state: np.ndarray, names=layout.STATE_NAMES, size: int = 128) -> dict:
    rng = np.random.default_rng(0)
    return {'instruction': 'open the fridge', 'joint_names': list(names),
            'joint_positions': np.asarray(state, dtype=float),
            'images': {c: rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                       for c in ROBOCASA_CAMERAS}}


STATE = np.linspace(-0.5, 0.5, layout.STATE_DIM)


def test_the_tiny_checkpoint_has_robocasas_features(checkpoint) -> None:
    config = json.loads((checkpoint / 'config.json').read_text())
    assert config['type'] == 'act' and ROBOCASA_ACTION_ORDER == 'robocasa'
    assert config['input_features']['observation.state']['shape'] == [16]
    assert config['output_features']['action']['shape'] == [12]
    assert sorted(k.removeprefix('observation.images.') for k in config['input_features']
                  if k.startswith('observation.images.')) == sorted(layout.DEFAULT_CAMERAS)


def test_raw_chunk_has_the_action_names_and_robocasa_bounds(checkpoint) -> None:
    policy = lp.LeRobotPolicy(cfg(checkpoint, state_names=layout.STATE_NAMES,
                                  robot_type='panda_omron'))
    assert policy.raw and policy.units is None and policy.robot_type == 'panda_omron'
    assert policy.action_names == ROBOCASA and policy.state_names == layout.STATE_NAMES
    assert policy.required_cameras == ROBOCASA_CAMERAS
    obs = observation(STATE)
    chunk = policy.infer(obs)
    assert chunk.shape == (CHUNK, 12) and chunk.dtype == np.float64
    assert np.all(np.isfinite(chunk)) and np.all(np.abs(chunk) <= 1.0)
    # No conversion: the actions are the postprocessor's output as it is.
    assert np.allclose(chunk, policy.infer_lerobot_units(obs), atol=1e-6)
    # The state is the incoming values picked by name, without any unit change.
    frame = policy.frame(obs)
    assert np.allclose(frame['observation.state'], STATE, atol=1e-6)
    shuffled = observation(STATE[::-1], names=layout.STATE_NAMES[::-1])
    assert np.allclose(policy.frame(shuffled)['observation.state'], STATE, atol=1e-6)
    assert np.allclose(policy.infer(shuffled), chunk, atol=1e-6)
    # Extra entries on the state topic are ignored; a missing one names the topic.
    extra = observation(np.r_[STATE, 7.0], names=(*layout.STATE_NAMES, 'odometer'))
    assert np.allclose(policy.frame(extra)['observation.state'], STATE, atol=1e-6)
    with pytest.raises(ValueError, match=r"robot_state lacks \['gripper_qpos.right'\]"):
        policy.frame(observation(STATE[:15], names=layout.STATE_NAMES[:15]))
    policy.close()


def test_without_state_names_the_incoming_order_is_used(checkpoint) -> None:
    policy = lp.LeRobotPolicy(cfg(checkpoint))
    assert policy.state_names == ()
    frame = policy.frame(observation(STATE[::-1], names=layout.STATE_NAMES[::-1]))
    assert np.allclose(frame['observation.state'], STATE[::-1], atol=1e-6)
    with pytest.raises(ValueError, match=r"robot_state has 15 values, the checkpoint's "
                                         r'observation.state 16; set state_names'):
        policy.frame(observation(STATE[:15], names=layout.STATE_NAMES[:15]))


def test_mismatched_state_and_action_names_are_refused(checkpoint) -> None:
    with pytest.raises(lp.PolicyLoadError) as err:
        lp.LeRobotPolicy(cfg(checkpoint, state_names=layout.STATE_NAMES[:14]))
    text = str(err.value)
    assert 'state_units raw' in text
    assert 'observation.state has 16 values but there are 14 state names' in text
    assert 'set state_names' in text
    with pytest.raises(lp.PolicyLoadError) as err:
        lp.LeRobotPolicy(cfg(checkpoint, action_names=ROBOCASA[:11]))
    assert 'action has shape [12] but there are 11 action names' in str(err.value)
    assert 'set action_names' in str(err.value)
    # No action names and none in the checkpoint: the six SO-101 joints, which do not fit.
    with pytest.raises(lp.PolicyLoadError, match=r'action has shape \[12\] but there are 6 '
                                                 r'action names \[.shoulder_pan'):
        lp.LeRobotPolicy(cfg(checkpoint, action_names=('',)))


def test_raw_feature_check_accepts_any_dimension_that_the_names_count() -> None:
    ft = SimpleNamespace
    inputs = {'observation.state': ft(type='STATE', shape=(7,)),
              'observation.images.top': ft(type='VISUAL', shape=(3, 32, 32))}
    outputs = {'action': ft(type='ACTION', shape=(14,))}
    cams = {'top': 'observation.images.top'}
    names14 = tuple(f'a{i}' for i in range(14))
    lp.check_features(Path('/ckpt'), 'act', inputs, outputs, cams, raw=True,
                      state_names=tuple(f's{i}' for i in range(7)), action_names=names14)
    lp.check_features(Path('/ckpt'), 'act', inputs, outputs, cams, raw=True, state_names=(),
                      action_names=names14)  # state in the incoming order: checked later
    with pytest.raises(lp.PolicyLoadError, match='has 7 values but there are 2 state names'):
        lp.check_features(Path('/ckpt'), 'act', inputs, outputs, cams, raw=True,
                          state_names=('x', 'y'), action_names=names14)
    # SO-101 units keep the six-joint rule.
    with pytest.raises(lp.PolicyLoadError, match='the arm has 6 joints'):
        lp.check_features(Path('/ckpt'), 'act', inputs, outputs, cams)


def test_names_from_a_checkpoint_that_declares_them() -> None:
    names = [f'{j}.pos' for j in JOINT_NAMES]
    config = SimpleNamespace(action_feature_names=names)
    assert lp.checkpoint_state_names(config, 6) == tuple(names)  # joint space: same names
    assert lp.checkpoint_state_names(config, 16) == ()
    declared = SimpleNamespace(state_feature_names=list(layout.STATE_NAMES),
                               action_feature_names=list(ROBOCASA))
    assert lp.checkpoint_state_names(declared, 16) == layout.STATE_NAMES
    assert lp.names_param(('',)) == () and lp.names_param(None) == ()


def test_state_names_are_refused_with_so101_units(checkpoint) -> None:
    with pytest.raises(lp.PolicyLoadError, match="state_names .* is for state_units raw"):
        lp.LeRobotPolicy(cfg(checkpoint, state_units='degrees', state_names=('a',)))
    with pytest.raises(lp.PolicyLoadError, match="state_units 'kelvin' is not one of"):
        lp.LeRobotPolicy(cfg(checkpoint, state_units='kelvin'))
