"""One `main()` for every node: init, build, spin, clean shutdown, clear start-up errors."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor

# Errors whose message already says what to do: log one line and exit, no traceback.
STARTUP_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, LookupError,
                                                   ImportError, OSError)


class RclpyLogHandler(logging.Handler):
    """Forward the ROS-free core's `logging` records to a node's rclpy logger (so /rosout)."""

    def __init__(self, node: Any) -> None:
        super().__init__()
        self._logger = node.get_logger()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f'[{record.name}] {record.getMessage()}'
            if record.levelno >= logging.ERROR:
                self._logger.error(text)
            elif record.levelno >= logging.WARNING:
                self._logger.warning(text)
            elif record.levelno >= logging.INFO:
                self._logger.info(text)
            else:
                self._logger.debug(text)
        except Exception:  # noqa: BLE001 - a logging failure must never break a callback
            self.handleError(record)


def run(factory: Callable[[], Any], args: list[str] | None = None, *, threads: int = 4,
        name: str = 'node') -> int:
    """Create the node with ``factory`` and spin it until Ctrl-C or shutdown.

    Returns the process exit code: 0 after a clean stop, 2 when the node could not start.
    """
    rclpy.init(args=sys.argv if args is None else args)
    node = None
    handler = None
    try:
        try:
            node = factory()
        except STARTUP_ERRORS as exc:
            rclpy.logging.get_logger(name).fatal(f'cannot start: {exc}')
            return 2
        handler = RclpyLogHandler(node)
        root = logging.getLogger('lerobot_lang_nodes')
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        executor = MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        try:
            executor.spin()
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        return 0
    finally:
        if node is not None:
            close = getattr(node, 'close', None)
            if callable(close):
                close()  # join worker threads, release hardware/renderers before the context
            if handler is not None:
                logging.getLogger('lerobot_lang_nodes').removeHandler(handler)
            node.destroy_node()
        rclpy.try_shutdown()
