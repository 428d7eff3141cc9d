"""The ROS-free kitchen host on the stand-in environment: persistence, seeds, actions, images."""

import numpy as np
import pytest

from lerobot_lang_nodes.robocasa import envs, layout
from lerobot_lang_nodes.robocasa.host import KitchenHost, KitchenSpec
from lerobot_lang_nodes.robocasa.standin import EEF_STEP_M


def make_host(**kw):
    spec = KitchenSpec(simulator='standin', image_size=64, **kw)
    return KitchenHost(spec, envs.factory('standin'), envs.reseed_rng)


def command(order='robocasa', **values):
    action = np.zeros(12)
    names = layout.action_names(order)
    for name, value in values.items():
        action[names.index(name.replace('__', '.'))] = value
    return action


def test_reset_seeds_follow_the_stride_and_reroll_the_scene():
    host = make_host(seed=7)
    first = (host.language, host._obs['object_pos'].copy())
    assert host.seed == 7
    assert host.reset() == 1007 and host.reset() == 2007
    again = make_host(seed=2007)
    np.testing.assert_allclose(host._obs['object_pos'], again._obs['object_pos'])
    assert host.language == again.language
    other = make_host(seed=7)
    np.testing.assert_allclose(other._obs['object_pos'], first[1])


def test_arm_command_moves_the_end_effector_in_the_policy_order():
    for order in layout.ACTION_ORDERS:
        host = make_host(action_order=order)
        before = host.state()[:3].copy()
        host.step(command(order, eef_pos__x=1.0))
        after = host.state()[:3]
        assert after[0] - before[0] == pytest.approx(EEF_STEP_M)
        assert after[1:] == pytest.approx(before[1:])


def test_holding_keeps_the_gripper_command_and_stops_motion():
    host = make_host()
    host.step(command(gripper=1.0, eef_pos__z=-1.0))
    z = host.state()[2]
    fingers = host.state()[-2]
    for _ in range(3):
        host.step(None)
    assert host.state()[2] == pytest.approx(z)  # no more motion
    assert host.state()[-2] < fingers  # the fingers keep closing: the grip is held
    hold = host.hold_action()
    env = layout.action_names('env')
    assert hold[env.index('gripper')] == 1.0 and hold[env.index('eef_pos.z')] == 0.0


def test_success_does_not_end_the_scene_and_the_horizon_resets_it():
    host = make_host(horizon=5)
    for _ in range(4):
        assert host.step(None) is False
    assert host.step(None) is True  # the environment ended the episode: reset, same seed
    assert host.terminations == 1 and host.seed == 0
    assert host.step(None) is False


def test_images_are_turned_upright_and_actions_show_in_the_next_frame():
    host = make_host()
    images = host.images()
    assert list(images) == list(layout.DEFAULT_CAMERAS)
    for img in images.values():
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8
        assert (img[0] == 255).all()  # the stand-in's top marker is on top
    before = host.images()['robot0_agentview_left']
    host.step(command(eef_pos__y=1.0))
    assert not np.array_equal(before, host.images()['robot0_agentview_left'])


def test_out_of_bound_actions_are_clipped_and_wrong_sizes_refused():
    host = make_host()
    host.step(command(eef_pos__x=50.0))
    assert host._last_env_action.max() <= 1.0
    with pytest.raises(ValueError, match='12'):
        host.step(np.zeros(7))
    np.testing.assert_array_equal(host.lower, -np.ones(12))


def test_bad_spec_values_are_refused():
    with pytest.raises(ValueError, match='split'):
        make_host(split='train')
    with pytest.raises(ValueError, match='simulator'):
        envs.factory('isaac')
    with pytest.raises(ValueError, match='PandaOmron'):
        make_host(robot='GR1')
