"""The three PandaOmron action orders and the 16-D state: one mapping, by name."""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from lerobot_lang_nodes.robocasa import layout

ORDERS = sorted(layout.ACTION_ORDERS)


def test_each_order_is_a_permutation_of_the_same_twelve_names():
    reference = sorted(layout.ACTION_ORDERS['env'])
    assert len(reference) == len(set(reference)) == layout.ACTION_DIM
    for order in ORDERS:
        assert sorted(layout.action_names(order)) == reference


def test_documented_slices_of_each_order():
    # ENVIRONMENT facts: raw env.step (arm 0:6, torso 6, base 7:10, gripper 10, base_mode 11);
    # convert_action (ee_pos 0:3, ee_rot 3:6, gripper 6, base_motion 7:11, control_mode 11);
    # LeRobot datasets (base_motion 0:4, control_mode 4, ee_pos 5:8, ee_rot 8:11, gripper 11).
    env, rc, lr = (layout.action_names(o) for o in ('env', 'robocasa', 'lerobot'))
    assert env[0:6] == layout.EEF_POS + layout.EEF_ROT and env[6] == 'torso.z'
    assert env[7:10] == layout.BASE and env[10] == 'gripper' and env[11] == 'base_mode'
    assert rc[0:3] == layout.EEF_POS and rc[3:6] == layout.EEF_ROT and rc[6] == 'gripper'
    assert rc[7:11] == layout.BASE + layout.TORSO and rc[11] == 'base_mode'
    assert lr[0:4] == layout.BASE + layout.TORSO and lr[4] == 'base_mode'
    assert lr[5:8] == layout.EEF_POS and lr[8:11] == layout.EEF_ROT and lr[11] == 'gripper'


def test_a_named_action_lands_in_the_right_env_slot():
    action = np.zeros(12)
    rc = layout.action_names('robocasa')
    action[rc.index('gripper')] = 1.0
    action[rc.index('base.yaw')] = -0.5
    env = layout.reorder(action, 'robocasa', 'env')
    names = layout.action_names('env')
    assert env[names.index('gripper')] == 1.0 and env[10] == 1.0
    assert env[names.index('base.yaw')] == -0.5 and env[9] == -0.5
    assert np.count_nonzero(env) == 2


@given(arrays(np.float64, (5, 12), elements=st.floats(-1, 1)),
       st.sampled_from(ORDERS), st.sampled_from(ORDERS), st.sampled_from(ORDERS))
def test_round_trips_through_any_orders_are_identity(chunk, a, b, c):
    there = layout.reorder(layout.reorder(chunk, a, b), b, c)
    np.testing.assert_array_equal(layout.reorder(there, c, a), chunk)
    np.testing.assert_array_equal(layout.reorder(chunk, a, c), layout.reorder(
        layout.reorder(chunk, a, b), b, c))


def test_wrong_sizes_and_unknown_orders_are_refused():
    with pytest.raises(ValueError, match='12 values'):
        layout.reorder(np.zeros(7), 'env', 'robocasa')
    with pytest.raises(ValueError, match='known'):
        layout.action_names('openpi')
    assert layout.order_of(layout.action_names('lerobot')) == 'lerobot'
    assert layout.order_of(reversed(layout.action_names('lerobot'))) is None


def test_state_vector_order_and_errors():
    obs = {'robot0_base_to_eef_pos': [1, 2, 3], 'robot0_base_to_eef_quat': [4, 5, 6, 7],
           'robot0_base_pos': [8, 9, 10], 'robot0_base_quat': [11, 12, 13, 14],
           'robot0_gripper_qpos': [15, 16]}
    np.testing.assert_array_equal(layout.state_vector(obs), np.arange(1, 17))
    assert len(layout.STATE_NAMES) == layout.STATE_DIM == 16
    assert layout.STATE_NAMES[7] == 'base_pos.x' and layout.STATE_NAMES[-1] == 'gripper_qpos.right'
    with pytest.raises(KeyError, match='robot0_base_pos'):
        layout.state_vector({k: v for k, v in obs.items() if k != 'robot0_base_pos'})
    with pytest.raises(ValueError, match='expected 2'):
        layout.state_vector({**obs, 'robot0_gripper_qpos': [0.0]})


def test_view_labels():
    assert [layout.view_label(c) for c in layout.DEFAULT_CAMERAS] == ['left', 'wrist', 'right']
    assert layout.view_label('robot0_robotview') == 'robotview'


def test_order_read_from_the_controller_split():
    # stock robosuite 1.5.2 PandaOmron, and RoboCasa's kitchens (body_part_ordering forced)
    stock = {'right': (0, 6), 'torso': (6, 7), 'base': (7, 10), 'right_gripper': (10, 11)}
    kitchen = {'right': (0, 6), 'right_gripper': (6, 7), 'base': (7, 10), 'torso': (10, 11)}
    assert layout.order_from_split(stock) == 'env'
    assert layout.order_from_split(kitchen) == 'robocasa'
    with pytest.raises(ValueError, match='left'):
        layout.order_from_split({**stock, 'left': (11, 17)})
    with pytest.raises(ValueError, match='none of the known orders'):
        layout.order_from_split({'torso': (0, 1), 'right': (1, 7), 'base': (7, 10),
                                 'right_gripper': (10, 11)})


def test_gripper_and_base_mode_are_binarised_at_one_half():
    names = layout.action_names('robocasa')
    row = np.full(12, 0.3)
    row[names.index('gripper')] = 0.49
    row[names.index('base_mode')] = 0.5
    out = layout.binarise(row, 'robocasa')
    assert out[names.index('gripper')] == -1.0 and out[names.index('base_mode')] == 1.0
    assert np.count_nonzero(out == 0.3) == 10  # motion entries untouched
