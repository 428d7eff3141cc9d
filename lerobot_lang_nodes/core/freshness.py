"""Ages of observations judged on the robot side's clock only.

A policy may run on another computer whose clock disagrees with the robot's by seconds
(no NTP, a laptop that drifted). Comparing its own clock with the stamps the robot issued
would then call every observation stale, or none. What it can trust is the robot's own
stamps: the newest one it received tells the robot's time when that message left, and its
own clock measures how long ago that was (a duration, right on any clock whose origin is
off). ``RobotClock`` is that estimate; it runs on the local clock's rate, so with
``use_sim_time`` it follows the simulator's time as the robot side does.

The executor, on the robot side, needs none of this: a chunk carries the stamp of the
observation it was computed from, issued by the robot side, and the executor compares it
with its own clock.
"""

from __future__ import annotations

from collections.abc import Callable
import threading


class RobotClock:
    """The robot side's time as a remote computer can know it, from the stamps it issued.

    ``observe(stamp)`` with the stamp of each message the robot side issued (joint states,
    the executor's status); ``now()`` is the newest of them advanced by the local time elapsed
    since it arrived, or the local clock before any (a one-host graph: the same clock). The
    estimate lags the robot's true time by the newest message's delivery delay: an age
    measured with it is at most that much short, never inflated by a clock offset.
    """

    def __init__(self, local: Callable[[], float]) -> None:
        self._local = local
        self._lock = threading.Lock()
        self._stamp: float | None = None
        self._at = 0.0  # local time when the newest stamp arrived

    def observe(self, stamp_s: float) -> None:
        now = self._local()
        with self._lock:
            # A local clock that went back (a simulator reset under use_sim_time) starts over:
            # the stamps before it belong to the old timeline.
            # The newest stamp, not the highest estimate: extrapolating from the last message
            # only keeps the error within one message interval where the two clocks' rates
            # differ (a simulator slower than real time seen on a wall clock).
            if self._stamp is None or now < self._at or stamp_s >= self._stamp:
                self._stamp, self._at = float(stamp_s), now

    def now(self) -> float:
        local_now = self._local()
        with self._lock:
            if self._stamp is None:
                return local_now
            if local_now < self._at:  # the local clock went back: no estimate until a stamp
                return local_now
            return self._stamp + (local_now - self._at)

    @property
    def known(self) -> bool:
        """Whether a robot stamp arrived (else ``now()`` is the local clock)."""
        with self._lock:
            return self._stamp is not None


__all__ = ['RobotClock']
