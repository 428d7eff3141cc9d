"""Keep the exporting thread's CPU scheduling as it was around AV1 encoding.

SVT-AV1 (the `libsvtav1` encoder LeRobot writes its videos with, bundled in PyAV's wheel)
switches the calling thread to SCHED_FIFO at priority 99 when the process runs as root, and
never switches it back. A thread left real-time would make every process started from it
afterwards (`lerobot-lang` bringing up nodes, a test session starting nodes) inherit that
priority: busy nodes then starve the rest of the machine, the kernel throttles real-time tasks,
and the graph stalls. So every encode runs inside `scheduling_kept()`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


def current() -> tuple[int, int] | None:
    """(policy, priority) of the calling thread, or None where the OS does not tell."""
    if not hasattr(os, 'sched_getscheduler'):
        return None
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


@contextmanager
def scheduling_kept() -> Iterator[None]:
    """Restore the calling thread's scheduling policy and priority on exit if they changed."""
    before = current()
    try:
        yield
    finally:
        after = current()
        if before is not None and after != before:
            policy, priority = before
            try:
                os.sched_setscheduler(0, policy, os.sched_param(priority))
                logger.debug('restored CPU scheduling %s (the video encoder had set %s)',
                             before, after)
            except OSError as exc:  # pragma: no cover - lowering a priority is always allowed
                logger.warning('could not restore CPU scheduling %s after encoding (now %s): '
                               '%s', before, after, exc)
