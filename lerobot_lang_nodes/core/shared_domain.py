"""Is a second graph live on our topics? Judged from who publishes the executor status; ROS-free.

Two bring-ups in one ROS domain and namespace each have an executor publishing
/runtime_status at a few Hz, so the status samples alternate between two publishers. Counting
publishers in the ROS graph is not enough: a killed node's endpoints stay in it until their
DDS lease expires (many seconds), so a restarted driver or bridge would look like a second
one. A restart gives one switch from the old publisher to the new; two live executors give a
switch every few samples.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable

WINDOW = 12  # status samples looked at (about 2.4 s at the sim's 5 Hz)
SWITCHES = 3  # changes of publisher within the window that only two live executors make


class LiveSources:
    """The publishers of the last ``window`` samples; two or more interleaved ones = rivals."""

    def __init__(self, window: int = WINDOW, switches: int = SWITCHES) -> None:
        self._recent: collections.deque[Hashable] = collections.deque(maxlen=window)
        self._switches = switches

    def note(self, source: Hashable) -> None:
        self._recent.append(source)

    def single(self) -> bool:
        """Whether one publisher sent every sample in the window (then following its revision
        is safe; a second one, even before it counts as a rival, must not be followed)."""
        return len(set(self._recent)) <= 1

    def rivals(self) -> int:
        """How many distinct publishers interleave in the window (0 when only one is live)."""
        recent = list(self._recent)
        switches = sum(1 for a, b in zip(recent, recent[1:]) if a != b)
        return len(set(recent)) if switches >= self._switches else 0
