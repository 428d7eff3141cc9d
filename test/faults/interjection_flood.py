"""Publish interjections at RATE Hz for DURATION_S seconds, numbered; the last is #(N-1).

Usage: python interjection_flood.py RATE DURATION_S. Waits for the planner to subscribe first.
"""

from __future__ import annotations

import sys
import time

import rclpy
import rclpy.duration
from std_msgs.msg import String

from lerobot_lang_nodes.nodes import qos


def main() -> int:
    rate, duration = float(sys.argv[1]), float(sys.argv[2])
    rclpy.init()
    node = rclpy.create_node('interjection_flood')
    pub = node.create_publisher(String, 'interjection', qos.COMMAND)
    deadline = time.monotonic() + 15.0
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # discovery: nothing to wait on but the count
    n = int(rate * duration)
    start = time.monotonic()
    for i in range(n):
        pub.publish(String(data=f'use the blue cube instead #{i}'))
        time.sleep(max(0.0, start + (i + 1) / rate - time.monotonic()))
    pub.wait_for_all_acked(timeout=rclpy.duration.Duration(seconds=5.0))  # reliable: delivered
    print(n)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
