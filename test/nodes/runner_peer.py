"""A node run by nodes.runner whose timer callback misbehaves once told to (by files).

<trigger> blocks the callback forever; <trigger>.raise makes the next tick raise once.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

from rclpy.node import Node

from lerobot_lang_nodes.nodes import runner


class Stuck(Node):
    def __init__(self) -> None:
        super().__init__('runner_peer')
        self.trigger = Path(sys.argv[1])
        self.ticks = 0
        self.create_timer(0.05, self._tick)
        # A library that configures the root logger (importing lerobot does, through a
        # module-level logging.debug), then a line from the project's core.
        logging.basicConfig()
        logging.getLogger('lerobot_lang_nodes.peer').warning('a line of the core')
        self.get_logger().info('runner_peer up')

    def _tick(self) -> None:
        raise_once = self.trigger.with_suffix('.raise')
        if raise_once.exists():
            raise_once.unlink()
            raise RuntimeError('a bug in a callback')
        self.ticks += 1
        if self.ticks == 1 or self.ticks % 20 == 0:  # the first: the node is spinning
            self.get_logger().info(f'tick {self.ticks}')
        if self.trigger.exists():
            self.get_logger().info('blocking in a callback')
            threading.Event().wait()  # never set: a wedged driver call, say

    def close(self) -> None:
        self.get_logger().info('close() ran')


if __name__ == '__main__':
    raise SystemExit(runner.run(Stuck, sys.argv[:1], name='runner_peer'))
