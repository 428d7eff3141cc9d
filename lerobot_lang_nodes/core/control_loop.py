"""Fixed-rate loop cadence shared by the control loops: overruns skip slots, never sprint.

After a stall the chunk executor already skips the actions that are late (its catch-up pops
``round(elapsed * ctrl_hz)`` of them). If the loop then also ran the missed cycles back to
back, the stall would be counted twice: the actions after the skipped ones would be played
early, compressing the motion. ``Cadence`` keeps the slot grid ``start + k * period`` and,
after an overrun, waits for the next slot after ``now``: missed slots are skipped and counted,
and no two cycles run closer than the time left to the next slot.
"""

from __future__ import annotations

import math

from .errors import config_error


class Cadence:
    """Slot timing of a loop at ``hz``; the caller supplies its monotonic clock readings."""

    def __init__(self, hz: float, start_s: float) -> None:
        if not (isinstance(hz, (int, float)) and math.isfinite(hz) and hz > 0):
            raise config_error('hz', hz, 'a finite rate > 0 Hz')
        self.period_s = 1.0 / float(hz)
        self._next_s = float(start_s)
        self.cycles = 0
        self.overruns = 0  # cycles that ended after their next slot had begun
        self.skipped_slots = 0  # slots missed because of overruns (never run late)
        self.max_late_s = 0.0

    @property
    def next_s(self) -> float:
        """Start time of the next slot."""
        return self._next_s

    def delay(self, now_s: float) -> float:
        """Call at the end of a cycle: seconds to sleep until the next slot (>= 0).

        On time: the next slot of the grid. Late: the missed slots are skipped and the loop
        waits for the first slot after ``now_s`` (a clock that went backwards restarts the
        grid at ``now_s``).
        """
        self.cycles += 1
        target = self._next_s + self.period_s
        if now_s < self._next_s - self.period_s:  # clock regression: restart the grid
            target = now_s + self.period_s
        elif now_s >= target:
            late = now_s - target
            missed = int(math.floor(late / self.period_s)) + 1
            self.overruns += 1
            self.skipped_slots += missed
            self.max_late_s = max(self.max_late_s, late)
            target += missed * self.period_s
        self._next_s = target
        return max(0.0, target - now_s)


__all__ = ['Cadence']
