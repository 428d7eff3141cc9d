"""Goal-position safety clamps: joint limits and LeRobot's ``max_relative_target``.

Order: the goal is first clamped to the joint limits, then to ``present +- max_relative``. The
relative bound wins: when a joint already sits outside its limits (e.g. after a calibration
change) it is walked back towards them at the bounded step instead of jumping.
Non-finite goal entries (NaN, +-inf) mean "no valid target" and hold the present position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, config_error

Bound = float | Sequence[float] | None


def _vector(name: str, value: Bound, dim: int, *, allow_nan: bool = False) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(dim, float(arr))
    arr = arr.reshape(-1)
    if arr.size != dim:
        raise config_error(name, list(arr), f'a scalar or {dim} values (one per joint)',
                           'give one value per joint, a single global value, or None')
    if not allow_nan and np.isnan(arr).any():
        raise config_error(name, list(arr), 'numbers or inf, not NaN',
                           'use inf (or None) to disable a bound')
    return arr


def clamp_goal(goal: Sequence[float] | np.ndarray, present: Sequence[float] | np.ndarray,
               lower: Bound = None, upper: Bound = None,
               max_relative: Bound = None) -> np.ndarray:
    """Return a new goal within [lower, upper] and within present +- max_relative."""
    goal_arr = np.array(goal, dtype=np.float64).reshape(-1)
    present_arr = np.array(present, dtype=np.float64).reshape(-1)
    dim = goal_arr.size
    if present_arr.size != dim:
        raise ConfigError(f'present has {present_arr.size} joints, goal has {dim}; read the '
                          'present position of the same joints as the goal', field='present')
    lo = _vector('lower', lower, dim)
    hi = _vector('upper', upper, dim)
    rel = _vector('max_relative', max_relative, dim)
    if rel is not None and (rel < 0).any():
        raise config_error('max_relative', list(rel), 'values >= 0 (inf or None disables)',
                           'use a positive step bound in the goal units')
    hold = ~np.isfinite(goal_arr)
    out = np.where(hold, present_arr, goal_arr)
    if lo is not None:
        out = np.where(hold, out, np.maximum(out, lo))
    if hi is not None:
        out = np.where(hold, out, np.minimum(out, hi))
    if rel is not None:
        bounded = np.isfinite(rel) & ~hold
        if (bounded & ~np.isfinite(present_arr)).any():
            bad = [int(i) for i in np.flatnonzero(bounded & ~np.isfinite(present_arr))]
            raise ConfigError(f'present position is not finite at joints {bad} '
                              f'({present_arr[bad].tolist()}); max_relative cannot bound the '
                              'goal: re-read the present position before sending',
                              field='present')
        out = np.where(bounded, np.clip(out, present_arr - rel, present_arr + rel), out)
    return out


@dataclass
class SafetyLimits:
    """Joint limits plus a relative-step bound applied to every goal before it is sent."""

    lower: Bound = None
    upper: Bound = None
    max_relative: Bound = None

    def __post_init__(self) -> None:
        for name in ('lower', 'upper', 'max_relative'):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, (int, float)):
                if math.isnan(value):
                    raise config_error(name, value, 'a number or None', 'use inf to disable')
            elif any(math.isnan(float(v)) for v in value):
                raise config_error(name, list(value), 'numbers, not NaN', 'use inf to disable')
        if self.lower is not None and self.upper is not None:
            lo = np.asarray(self.lower, dtype=np.float64)
            hi = np.asarray(self.upper, dtype=np.float64)
            if lo.shape == hi.shape or lo.ndim == 0 or hi.ndim == 0:
                if (lo > hi).any():
                    raise config_error('lower', self.lower, 'lower <= upper for every joint',
                                       'swap or fix the limits')
        if self.max_relative is not None:
            rel = np.asarray(self.max_relative, dtype=np.float64)
            if (rel < 0).any():
                raise config_error('max_relative', self.max_relative, 'values >= 0',
                                   'use a positive step bound, or None / inf to disable')

    def apply(self, goal: Sequence[float] | np.ndarray,
              present: Sequence[float] | np.ndarray) -> np.ndarray:
        """Clamp ``goal`` given the ``present`` position (see clamp_goal)."""
        return clamp_goal(goal, present, self.lower, self.upper, self.max_relative)


def limit_change_problem(name: str, old: float, new: float, paused: bool) -> str:
    """'' when a safety bound may change from ``old`` to ``new`` now, else why it may not.

    The bounds this judges are sizes (a step, a time): smaller is stricter and 0 disables the
    bound, the loosest value of all. Tightening is always allowed; loosening only while the
    robot is paused, so that no motion in progress is suddenly allowed more than it was when
    it started.
    """
    if not (isinstance(new, (int, float)) and math.isfinite(new) and new >= 0):
        return f'{name} must be a finite number >= 0 (0 disables), got {new!r}'

    def size(v: float) -> float:
        return math.inf if v == 0 else float(v)

    if size(new) > size(old) and not paused:
        return (f'{name} {old:g} -> {new:g} loosens a safety limit while the robot acts: '
                'pause it first (the pause service), then set the parameter')
    return ''
