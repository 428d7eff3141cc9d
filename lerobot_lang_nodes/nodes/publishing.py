"""One guard for writes DDS refuses: a refused write costs that output only.

rclpy raises its RCLError from ``publish()`` when the middleware refuses a write (a full
history under load, a participant going away). No node stops for that: the guard counts the
failure, logs it throttled per guard (a failing 50 Hz loop must not write 50 lines a second)
and lets the caller carry on; the next period, job or refill publishes again. While ROS is
shutting down (Ctrl-C shut the context between a loop's check and its publish) it stays
silent: the caller is about to stop anyway.

    self._outputs = PublishGuard(self, 'publish', 'the simulation goes on')
    with self._outputs:
        self._pub.publish(msg)

``PublishError`` is the one name of rclpy's exception in the nodes, for the few places that
do something else with a refused write (each says why).
"""

from __future__ import annotations

from collections.abc import Callable
import logging
from typing import Any

from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

from lerobot_lang_nodes.core.control_loop import ThrottledLog
from lerobot_lang_nodes.nodes.runner import log_emitter

PublishError: type[Exception] = _rclpy.RCLError


class PublishGuard:
    """Context manager (and ``failed(exc)``) for one kind of output of a node."""

    def __init__(self, node: Any, what: str, consequence: str, *,
                 level: int = logging.ERROR, period_s: float = 5.0,
                 on_failed: Callable[[], None] | None = None) -> None:
        self._node = node
        self._what = what
        self._consequence = consequence
        self._level = level
        self._period_s = period_s
        self._on_failed = on_failed
        self._log = ThrottledLog(log_emitter(node))
        self.count = 0  # writes refused while ROS was up

    def __enter__(self) -> PublishGuard:
        return self

    def __exit__(self, typ, exc, tb) -> bool:
        if typ is None or not issubclass(typ, PublishError):
            return False
        self.failed(exc)
        return True

    def failed(self, exc: BaseException) -> bool:
        """Count and log a refused write; False (silently) when ROS is shutting down."""
        if not self._node.context.ok():
            return False
        self.count += 1
        if self._on_failed is not None:
            self._on_failed()
        self._log(self._level,
                  f'{self._what} failed ({self.count} so far; {self._consequence}): {exc}',
                  key='refused', period_s=self._period_s)
        return True


__all__ = ['PublishError', 'PublishGuard']
