"""Unit and property tests of the goal-position safety clamps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobot_lang_nodes.core.errors import ConfigError
from lerobot_lang_nodes.core.safety import SafetyLimits, clamp_goal


def test_no_bounds_returns_a_copy():
    goal = np.array([0.5, -0.5])
    out = clamp_goal(goal, [0.0, 0.0])
    np.testing.assert_array_equal(out, goal)
    out[0] = 9.0
    assert goal[0] == 0.5


def test_joint_limits_clamp():
    out = clamp_goal([2.0, -3.0, 0.1], [0, 0, 0], lower=[-1, -1, -1], upper=[1, 1, 1])
    np.testing.assert_array_equal(out, [1.0, -1.0, 0.1])


def test_global_max_relative():
    out = clamp_goal([1.0, -1.0, 0.05], [0.0, 0.0, 0.0], max_relative=0.1)
    np.testing.assert_allclose(out, [0.1, -0.1, 0.05])


def test_per_joint_max_relative_with_inf_and_none():
    out = clamp_goal([1.0, 1.0], [0.0, 0.0], max_relative=[0.2, math.inf])
    np.testing.assert_allclose(out, [0.2, 1.0])
    np.testing.assert_allclose(clamp_goal([1.0], [0.0], max_relative=None), [1.0])
    np.testing.assert_allclose(clamp_goal([1.0], [0.0], max_relative=math.inf), [1.0])


def test_limits_then_relative_walks_back_from_outside_limits():
    # Present beyond the upper limit: the goal moves towards the range by at most one step.
    out = clamp_goal([5.0], [3.5], lower=[-3.0], upper=[3.0], max_relative=0.1)
    np.testing.assert_allclose(out, [3.4])


def test_non_finite_goal_holds_present():
    out = clamp_goal([math.nan, math.inf, 0.3], [0.1, 0.2, 0.0], upper=[1, 1, 1],
                     max_relative=0.5)
    np.testing.assert_allclose(out, [0.1, 0.2, 0.3])


def test_errors_are_typed_and_explain():
    with pytest.raises(ConfigError, match='present has 1 joints, goal has 2'):
        clamp_goal([0, 0], [0])
    with pytest.raises(ConfigError, match='max_relative'):
        clamp_goal([0, 0], [0, 0], max_relative=[0.1])
    with pytest.raises(ConfigError, match='>= 0'):
        clamp_goal([0], [0], max_relative=-1)
    with pytest.raises(ConfigError, match='not finite at joints \\[1\\]'):
        clamp_goal([0, 0], [0, math.nan], max_relative=0.1)


def test_safety_limits_dataclass():
    limits = SafetyLimits(lower=[-1, -1], upper=[1, 1], max_relative=0.25)
    np.testing.assert_allclose(limits.apply([2.0, 0.1], [0.9, 0.0]), [1.0, 0.1])
    np.testing.assert_allclose(limits.apply([-2.0, 0.0], [0.0, 0.0]), [-0.25, 0.0])
    with pytest.raises(ConfigError, match='lower'):
        SafetyLimits(lower=[1.0], upper=[0.0])
    with pytest.raises(ConfigError, match='max_relative'):
        SafetyLimits(max_relative=-0.1)
    with pytest.raises(ConfigError, match='NaN'):
        SafetyLimits(upper=[math.nan])


floats = st.floats(-10, 10, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), dim=st.integers(1, 6))
def test_clamped_goal_respects_bounds(data, dim):
    goal = np.array(data.draw(st.lists(st.one_of(floats, st.just(math.nan)),
                                       min_size=dim, max_size=dim)))
    present = np.array(data.draw(st.lists(st.floats(-3, 3), min_size=dim, max_size=dim)))
    rel = data.draw(st.one_of(st.none(), st.floats(0, 2),
                              st.lists(st.floats(0, 2), min_size=dim, max_size=dim)))
    out = clamp_goal(goal, present, lower=-3.0, upper=3.0, max_relative=rel)
    assert np.isfinite(out).all()
    if rel is not None:
        assert (np.abs(out - present) <= np.asarray(rel) + 1e-12).all()
    assert ((out >= -3.0) & (out <= 3.0)).all()  # present is within limits here
    np.testing.assert_array_equal(out[np.isnan(goal)], present[np.isnan(goal)])


@pytest.mark.parametrize('old,new,paused,ok', [
    (0.35, 0.2, False, True),    # tighter: any time
    (0.2, 0.35, False, False),   # looser while acting: refused
    (0.2, 0.35, True, True),     # looser while paused
    (0.35, 0.0, False, False),   # 0 disables the bound: the loosest of all
    (0.0, 0.5, False, True),     # enabling a bound tightens it
    (0.35, -1.0, True, False),   # not a size
    (0.35, math.inf, True, False),
])
def test_limit_change_rule(old, new, paused, ok):
    from lerobot_lang_nodes.core.safety import limit_change_problem
    problem = limit_change_problem('max_relative_target_rad', old, new, paused)
    assert (problem == '') is ok
    if not ok and new >= 0 and math.isfinite(new):
        assert 'pause' in problem
