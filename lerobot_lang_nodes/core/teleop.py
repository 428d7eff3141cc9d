"""The leader arm as the follower's command source (run mode ``teleop``), without ROS.

``LeaderTracker`` keeps the leader's latest joint positions in the follower's action order,
stamped with the executor's clock at arrival (the leader reads on the wall clock, a simulator
runs on its own: only the arrival time on the executor's clock is comparable), and answers
what the follower should do now:

* Watchdog: a leader silent for longer than ``timeout_s`` (or never heard) gives no target,
  so the follower holds its last safe goal; the leader's next sample resumes tracking.
* Garbage is refused, never tracked: a sample without every joint, with a non-finite value,
  or further outside the joint limits than the executor's reject margin.
* Handover: ``start(now_s, follower)`` begins from the follower's pose and slides toward the
  leader at no more than ``align_speed_rad_s`` per joint, until every joint is within
  ``align_tolerance_rad``; from then on the target is the leader's pose itself. When the
  leader was first driven to the follower's pose (its hold_pose service), the slide is over at
  once. The node's safety limits (joint limits, max relative target) apply to every target.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

logger = logging.getLogger(__name__)


class LeaderTracker:
    """The leader's pose as a follower target, with the silence watchdog and the handover."""

    def __init__(self, action_names: Sequence[str], timeout_s: float = 0.25,
                 align_speed_rad_s: float = 0.5, align_tolerance_rad: float = 0.02,
                 lower: Sequence[float] | None = None,
                 upper: Sequence[float] | None = None) -> None:
        for name, value in (('timeout_s', timeout_s), ('align_speed_rad_s', align_speed_rad_s),
                            ('align_tolerance_rad', align_tolerance_rad)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f'{name}: got {value!r}, expected a finite number > 0')
        self.action_names = tuple(action_names)
        self.timeout_s = float(timeout_s)
        self.align_speed_rad_s = float(align_speed_rad_s)
        self.align_tolerance_rad = float(align_tolerance_rad)
        self._lower = None if lower is None else np.asarray(lower, dtype=np.float64)
        self._upper = None if upper is None else np.asarray(upper, dtype=np.float64)
        self._pose: np.ndarray | None = None
        self._pose_at: float | None = None
        self._output: np.ndarray | None = None  # the handover's current target
        self._output_at: float | None = None
        self.aligned = True
        self.received = 0
        self.refused = 0
        self.last_problem = ''
        self.silent_ticks = 0
        self._was_silent = True

    # ------------------------------------------------------------------ input
    def update(self, names: Sequence[str], positions: Sequence[float], now_s: float) -> str:
        """Take one leader sample (joint names and radians); '' when taken, else why not."""
        problem = self._problem(names, positions)
        if problem:
            self.refused += 1
            if problem != self.last_problem:
                logger.warning('leader sample refused: %s', problem)
            self.last_problem = problem
            return problem
        index = {str(n): i for i, n in enumerate(names)}
        self._pose = np.array([float(positions[index[n]]) for n in self.action_names])
        self._pose_at = float(now_s)
        self.received += 1
        return ''

    def _problem(self, names: Sequence[str], positions: Sequence[float]) -> str:
        if len(names) != len(positions):
            return f'{len(names)} joint names but {len(positions)} positions'
        index = {str(n): i for i, n in enumerate(names)}
        missing = [n for n in self.action_names if n not in index]
        if missing:
            return (f'joints {missing} missing (got {list(names)}): is the leader calibrated '
                    'for this arm?')
        pose = np.array([float(positions[index[n]]) for n in self.action_names])
        bad = ~np.isfinite(pose)
        if bad.any():
            return f'non-finite position of {self.action_names[int(np.argmax(bad))]!r}'
        for limits, side, cmp in ((self._lower, 'below lower', np.less),
                                  (self._upper, 'above upper', np.greater)):
            if limits is not None and cmp(pose, limits).any():
                j = int(np.argmax(cmp(pose, limits)))
                return (f'{self.action_names[j]!r} at {pose[j]:.3f} rad is {side} limit '
                        f'{limits[j]:.3f} (beyond the reject margin): check the leader\'s '
                        'calibration')
        return ''

    # ------------------------------------------------------------------ state
    def fresh(self, now_s: float) -> bool:
        """Whether the leader spoke within ``timeout_s`` (never heard: False). A sample from
        ahead of ``now_s`` (the clock went back, e.g. a simulator reset) counts as fresh."""
        return self._pose_at is not None and now_s - self._pose_at <= self.timeout_s

    def start(self, now_s: float, follower: Sequence[float] | None = None) -> None:
        """Begin a handover at the follower's pose (None: track the leader at once)."""
        if follower is None:
            self._output = None
            self.aligned = True
        else:
            self._output = np.asarray(follower, dtype=np.float64).copy()
            self.aligned = False
        self._output_at = float(now_s)

    def target(self, now_s: float) -> np.ndarray | None:
        """The follower's target now, or None (silent leader: hold)."""
        if not self.fresh(now_s):
            self.silent_ticks += 1
            if not self._was_silent:
                age = 'never heard' if self._pose_at is None else \
                    f'silent for {now_s - self._pose_at:.3f} s'
                logger.warning('leader %s (timeout %.3f s): the follower holds', age,
                               self.timeout_s)
            self._was_silent = True
            self._output_at = float(now_s)  # no slide over a silence
            return None
        if self._was_silent:
            logger.info('leader tracked')
            self._was_silent = False
        pose = self._pose
        if self.aligned or self._output is None:
            return pose.copy()
        dt = max(0.0, now_s - (self._output_at if self._output_at is not None else now_s))
        self._output_at = float(now_s)
        step = self.align_speed_rad_s * dt
        self._output = self._output + np.clip(pose - self._output, -step, step)
        if float(np.max(np.abs(pose - self._output))) <= self.align_tolerance_rad:
            self.aligned = True
            logger.info('handover done: the follower tracks the leader')
            return pose.copy()
        return self._output.copy()
