"""One `main()` for every node: init, build, spin, clean shutdown, clear start-up errors."""

from __future__ import annotations

import concurrent.futures
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import (ConditionReachedException, ExternalShutdownException,
                             MultiThreadedExecutor, ShutdownException, TimeoutException)
from rclpy.signals import SignalHandlerOptions

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.allocator import tune_allocator

# Errors whose message already says what to do: log one line and exit, no traceback.
STARTUP_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, LookupError,
                                                   ImportError, OSError)


class DefaultGroupInlineExecutor(MultiThreadedExecutor):
    """A MultiThreadedExecutor that runs the default callback group's callbacks itself.

    A node's default group is mutually exclusive: its callbacks never overlap, so handing each
    one to the thread pool buys no concurrency, only cost. Every hand-off rebuilds the wait
    set in Python once more and makes the spinning thread race the worker for the GIL; with
    the /clock, joint states, images and status a node receives, that was most of the CPU the
    planner and policy used (31 % and 49 % of a core with the stock executor against 8 % and
    11 % with a single-threaded one, sim graph at 30 Hz) and slowed the policy's inference
    thread. Callbacks in an explicit group (a reentrant group for the planner's VQA and
    RunTask, the recorder's own groups) and tasks (an action's execute) still go to the pool,
    so a callback that blocks there keeps blocking nothing else.

    Relies on rclpy's MultiThreadedExecutor internals (``_spin_once_impl``, ``_executor``,
    ``_futures``) of the pinned rclpy version.
    """

    def _spin_once_impl(self, timeout_sec: Any = None,
                        wait_condition: Callable[[], bool] = lambda: False) -> None:
        try:
            handler, entity, node = self.wait_for_ready_callbacks(timeout_sec, None,
                                                                  wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException,
                ConditionReachedException):
            return
        if (entity is not None and node is not None
                and entity.callback_group is node.default_callback_group):
            handler()
            handler.result()  # raise the callback's exception, as the stock executors do
            return
        self._executor.submit(handler)
        self._futures.append(handler)
        for future in self._futures[:]:
            if future.done():
                self._futures.remove(future)
                future.result()


EXECUTOR_ENV = 'LEROBOT_LANG_EXECUTOR'


def log_emitter(node: Any) -> Callable[[int, str], None]:
    """``emit(level, text)`` onto ``node``'s logger, for the ROS-free cores' logging.

    One call site per severity: rclpy refuses a call site whose severity changes.
    """
    def emit(level: int, text: str) -> None:
        log = node.get_logger()
        if level >= logging.ERROR:
            log.error(text)
        elif level >= logging.WARNING:
            log.warning(text)
        elif level >= logging.INFO:
            log.info(text)
        else:
            log.debug(text)
    return emit


def make_ros_executor(threads: int) -> MultiThreadedExecutor:
    """The nodes' executor; ``LEROBOT_LANG_EXECUTOR=pool`` picks rclpy's stock one instead
    (every callback on the pool), to measure the difference (bench/sim_graph.py --executor)."""
    kind = os.environ.get(EXECUTOR_ENV, 'inline')
    if kind == 'pool':
        return MultiThreadedExecutor(num_threads=threads)
    if kind != 'inline':
        raise ValueError(f'{EXECUTOR_ENV}={kind!r}: expected inline (default) or pool')
    return DefaultGroupInlineExecutor(num_threads=threads)


class RclpyLogHandler(logging.Handler):
    """Forward the ROS-free core's `logging` records to an rclpy logger (console and /rosout)."""

    def __init__(self, logger: Any) -> None:
        super().__init__()
        self._logger = logger

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


# While spinning, a signal only sets this flag (no lock taken in the handler): an exception
# raised at an arbitrary bytecode of the main thread could leave an executor lock held and
# hang the shutdown that follows.
_stop_requested = False
_spinning = False


def _spin(executor: Any, node: Any, name: str) -> None:
    """Spin until a stop is requested or the context ends; a raising callback is logged."""
    errors = 0
    while node.context.ok() and not _stop_requested:
        try:
            executor.spin_once(timeout_sec=0.2)
        except ExternalShutdownException:
            break
        except Exception as exc:  # noqa: BLE001 - one failed callback must not end the node
            if not node.context.ok():
                break
            # rclcpp would end the process here; a driver that exits drops torque and the arm
            # with it, so report the callback's failure loudly and keep serving.
            errors += 1
            text = (f'a callback raised {type(exc).__name__}: {exc} ({errors} so far; the '
                    'node goes on)')
            if errors <= 3:  # the first ones with their traceback; then no log flood
                rclpy.logging.get_logger(name).error(
                    text + '\n' + ''.join(traceback.format_exception(exc)))
            else:
                rclpy.logging.get_logger(name).error(text, throttle_duration_sec=5.0)


def _on_stop_signal(_signum: int, _frame: Any) -> None:
    global _stop_requested
    _stop_requested = True
    if not _spinning:  # still building the node (loading a model): abort that
        raise KeyboardInterrupt


_PR_SET_PDEATHSIG = 1


def _die_with_supervisor() -> None:
    """Under `lerobot-lang`, get SIGTERM (a clean stop) if the supervisor dies, even by SIGKILL.

    Without it a killed bring-up would leave its nodes running (and a driver holding torque).
    """
    supervisor = os.environ.get(graph.SUPERVISOR_PID_ENV)
    if not supervisor or not sys.platform.startswith('linux'):
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return
    if os.getppid() != int(supervisor):  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _join_threads(timeout_s: float) -> list[threading.Thread]:
    """Join the process's other non-daemon threads; return those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threading.enumerate()
            if t is not threading.current_thread() and not t.daemon and t.is_alive()]


def run(factory: Callable[[], Any], args: list[str] | None = None, *, threads: int = 4,
        name: str = 'node') -> int:
    """Create the node with ``factory`` and spin it until Ctrl-C or shutdown.

    ``factory`` may also return a sequence of nodes (one process hosting several, e.g. the
    composed planner + policy): they share one executor, and shut down in reverse order.
    Returns the process exit code: 0 after a clean stop, 2 when a node could not start.
    """
    try:  # before DDS and the node allocate their first image-sized buffers
        malloc = tune_allocator()
    except ValueError as exc:
        print(f'[{name}] cannot start: {exc}', file=sys.stderr)
        return 2
    # rclpy's own SIGINT handler shuts the context down at once, so a node's close() could no
    # longer publish its last words (or finish a recording) over ROS. Handle Ctrl-C and
    # SIGTERM here instead: close() runs while the context is still valid.
    rclpy.init(args=sys.argv if args is None else args,
               signal_handler_options=SignalHandlerOptions.NO)
    global _spinning, _stop_requested
    _spinning = _stop_requested = False
    signal.signal(signal.SIGTERM, _on_stop_signal)
    # A shell's `cmd &` starts children with SIGINT ignored; a node (a driver that must drop
    # torque) still has to stop on SIGINT from its supervisor, so take the default back.
    signal.signal(signal.SIGINT, _on_stop_signal)
    # `kill -USR1 <pid>` prints every thread's stack: how to see where a node is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    _die_with_supervisor()
    nodes: list[Any] = []
    executor = None
    stuck: list[threading.Thread] = []
    # Attached before the node exists, so what the core logs while the node starts (loading a
    # model, writing a calibration) goes through ROS logging too.
    rclpy.logging.get_logger(name).debug(malloc)
    handler = RclpyLogHandler(rclpy.logging.get_logger(name))
    root = logging.getLogger('lerobot_lang_nodes')
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # Not on to the root logger too: importing lerobot logs through the root logger, which
    # gives it a stderr handler, and every line would then be printed a second time.
    root.propagate = False
    try:
        try:
            built = factory()
        except KeyboardInterrupt:  # Ctrl-C while loading (models can take a while)
            return 130
        except Exception as exc:
            if _stop_requested:  # the interrupt surfaced inside a C extension call
                return 130
            if not isinstance(exc, STARTUP_ERRORS):
                raise
            rclpy.logging.get_logger(name).fatal(f'cannot start: {exc}')
            return 2
        nodes = list(built) if isinstance(built, (list, tuple)) else [built]
        node = nodes[0]
        executor = make_ros_executor(threads)
        for each in nodes:
            executor.add_node(each)
        _spinning = True
        if _stop_requested:  # the signal came between the node's creation and here
            return 0
        # The executor spins on its own thread: default-group callbacks run on it, and one
        # that wedges (a hung driver call) must not keep the main thread, which handles the
        # signals and the shutdown below, from stopping the node.
        spinner = threading.Thread(target=_spin, args=(executor, node, name), name='ros-spin')
        spinner.start()
        while spinner.is_alive() and node.context.ok() and not _stop_requested:
            spinner.join(0.2)  # the signal handler runs between joins
        spinner.join(1.0)  # spin_once returns within its 0.2 s timeout, unless wedged
        return 0
    finally:
        # A second Ctrl-C must not interrupt close() (a driver disabling torque); the
        # supervisor's SIGKILL after its timeout is the way out of a hung shutdown.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if nodes:
            for each in reversed(nodes):
                close = getattr(each, 'close', None)
                if callable(close):
                    close()  # join worker threads, release hardware/renderers before the context
            if executor is not None:
                # rclpy's Executor.shutdown() destroys its guard condition without waiting for
                # callbacks already handed to the thread pool, which then fail on it ("exception
                # was never retrieved" noise). Close the pool first: queued callbacks still run,
                # and the pool's threads end once they have.
                pool = getattr(executor, '_executor', None)
                if isinstance(pool, concurrent.futures.ThreadPoolExecutor):
                    pool.shutdown(wait=False)
            stuck = _join_threads(5.0)
            if executor is not None:
                executor.shutdown(timeout_sec=0.0, wait_for_threads=False)
            if stuck:
                rclpy.logging.get_logger(name).error(
                    f'{len(stuck)} thread(s) did not finish within 5 s of shutdown '
                    f'({", ".join(t.name for t in stuck)}); their stacks follow')
                faulthandler.dump_traceback(all_threads=True)
            for each in reversed(nodes):
                each.destroy_node()
        root.removeHandler(handler)
        rclpy.try_shutdown()
        if stuck:
            # A wedged callback's pool thread would block the interpreter's exit forever;
            # close() has already released the hardware, so leave without joining it.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        # Work a node's close() chose not to wait for (a model's inference in flight, minutes
        # for a VLA on a CPU): the interpreter's finalisation under a thread still running
        # torch aborts the process ("terminate called ..."), so leave at once, cleanly.
        if any(t.is_alive() for each in nodes for t in getattr(each, 'abandoned_threads', ())):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
