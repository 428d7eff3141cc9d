"""A node's health on /diagnostics (diagnostic_msgs/DiagnosticArray), published periodically.

Model nodes report what would otherwise live only in memory (load errors, failures, latencies,
last raw output), so `ros2 topic echo /diagnostics` or rqt_robot_monitor shows why a node that
is up does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import logging
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType

from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.nodes.publishing import PublishGuard

OK, WARN, ERROR, STALE = (DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR,
                          DiagnosticStatus.STALE)
LEVELS = {'ok': OK, 'warn': WARN, 'error': ERROR, 'stale': STALE}
# DiagnosticStatus strings are unbounded, but a multi-kB raw model output on every status is
# noise for every monitor; keep the head.
MAX_VALUE_CHARS = 500

# One status: (level, message, key/values); level is a DiagnosticStatus level or a LEVELS key.
StatusFn = Callable[[], tuple[Any, str, Mapping[str, Any]]]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f'{value:.6g}'
    text = str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + '...'


def make_status(name: str, hardware_id: str, level: Any, message: str,
                values: Mapping[str, Any]) -> DiagnosticStatus:
    """One DiagnosticStatus; values are stringified (bools as true/false, floats short)."""
    lvl = LEVELS[level] if isinstance(level, str) else level
    return DiagnosticStatus(level=lvl, name=name, hardware_id=hardware_id,
                            message=_text(message),
                            values=[KeyValue(key=str(k), value=_text(v))
                                    for k, v in values.items()])


class DiagnosticsPublisher:
    """Publishes ``status_fn()`` as ``'<node>: <component>'`` on ``diagnostics`` every period.

    ``publish_now()`` sends one at once (e.g. right after a model failed to load).
    """

    def __init__(self, node: Any, component: str, status_fn: StatusFn, period_s: float = 1.0,
                 hardware_id: str = '') -> None:
        self._node = node
        self._name = f'{node.get_name()}: {component}'
        self._hardware_id = hardware_id
        self._status_fn = status_fn
        self._pub = node.create_publisher(DiagnosticArray, 'diagnostics', qos.STATUS)
        self._refused = PublishGuard(node, 'diagnostics publish', 'the next period publishes '
                                     'again', level=logging.WARNING, period_s=10.0)
        # Steady clock, not the node's: under use_sim_time, when /clock jumps back and forth
        # (two simulators in one domain, a leftover one), a ROS-time timer makes the executor
        # spin without sleeping: planner, policy and recorder were seen at ~95 % CPU each,
        # starving the simulator until it stood still (test/nodes/test_sim_time_jumps.py).
        self._timer = node.create_timer(period_s, self.publish_now,
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))

    def publish_now(self) -> None:
        with self._refused:
            level, message, values = self._status_fn()
            arr = DiagnosticArray()
            arr.header.stamp = self._node.get_clock().now().to_msg()
            arr.status.append(make_status(self._name, self._hardware_id, level, message,
                                          values))
            self._pub.publish(arr)
