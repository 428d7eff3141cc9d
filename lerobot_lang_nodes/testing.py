"""Helpers for tests and benchmarks: node processes started by PID, an in-process ROS probe and
a servo-bus emulator in a child process.

Used by test/conftest.py and bench/. Importing this module does not import rclpy; RosProbe does.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lerobot_lang_nodes.procs import kill_with_stacks

if TYPE_CHECKING:
    from lerobot_lang_nodes.so101.emulator import FaultKind, GoalWrite

logger = logging.getLogger(__name__)


class WaitTimeout(AssertionError):
    """A condition did not become true before its deadline."""


class NodeProcess:
    """One node (or any command) in its own process, logging to a file, stopped by its PID."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path,
                 env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # A file, not a pipe: a full pipe would block the child.
        self._log = self.log_path.open('wb')
        self.started = time.monotonic()  # the clock of the inference and dispatch logs
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**(env or os.environ), 'PYTHONUNBUFFERED': '1'},
                                     cwd=cwd, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def log_text(self, tail: int | None = None) -> str:
        try:
            text = self.log_path.read_text(errors='replace')
        except FileNotFoundError:
            return ''
        return text[-tail:] if tail else text

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGINT (the Ctrl-C path nodes handle), then SIGKILL after ``timeout_s``."""
        if self.alive:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning('%s (pid %d) ignored SIGINT for %.0f s; killing it (its log '
                               'ends with the stacks of its threads)', self.name, self.pid,
                               timeout_s)
                kill_with_stacks(self.proc)
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, as tests of the graph's failure handling need."""
        if self.alive:
            self.proc.kill()
            self.proc.wait(timeout=5.0)


def node_command(module: str, *ros_args: str, params: dict[str, Any] | None = None,
                 params_file: str | Path | None = None) -> list[str]:
    """argv that runs ``python -m module --ros-args ...`` with this interpreter."""
    argv = [sys.executable, '-m', module]
    extra: list[str] = []
    if params_file is not None:
        extra += ['--params-file', str(params_file)]
    for key, value in (params or {}).items():
        extra += ['-p', f'{key}:={format_param(value)}']
    extra += list(ros_args)
    if extra:
        argv += ['--ros-args', *extra]
    return argv


def with_cycle_fault(node_class: type, fault: Callable[[Any], None]) -> type:
    """A subclass of a control-loop node whose every cycle first calls ``fault(node)``.

    For tests of the loops' error policy (``fault`` raises in the cycles it chooses): the
    shipped node keeps no test hook in its loop. Counters ``fault`` keeps must exist before the
    node's constructor returns, as a simulator bridge's loop starts inside it.
    """
    class WithCycleFault(node_class):
        def _cycle(self):
            fault(self)
            return super()._cycle()

    WithCycleFault.__name__ = WithCycleFault.__qualname__ = f'{node_class.__name__}WithFault'
    return WithCycleFault


def policy_config(**values: Any) -> Any:
    """The policy node's config with ``values`` set by parameter name; a group's parameter
    may also go by its own name (``camera_map`` for ``lerobot.camera_map``): how tests and
    benchmarks give a backend the configuration the node would."""
    from lerobot_lang_nodes.nodes.policy_node import PolicyConfig
    return _config(PolicyConfig, values)


def planner_config(**values: Any) -> Any:
    """The planner node's config with ``values`` set, as ``policy_config``."""
    from lerobot_lang_nodes.nodes.planner_node import PlannerConfig
    return _config(PlannerConfig, values)


def _config(cls: type, values: dict[str, Any]) -> Any:
    from lerobot_lang_nodes.nodes.params import describe, with_values
    full = {row['name'].rsplit('.', 1)[-1]: row['name'] for row in describe(cls)}
    return with_values(cls(), {full.get(k, k): v for k, v in values.items()})


def format_param(value: Any) -> str:
    """Render a Python value as a `-p name:=value` literal (YAML)."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, (list, tuple)):
        return '[' + ','.join(format_param(v) if not isinstance(v, str) else repr(v)
                              for v in value) + ']'
    return str(value)


def thread_stats(pid: int) -> dict[int, dict[str, Any]]:
    """Each thread of ``pid`` (Linux /proc): its name, nice, rt_priority and policy."""
    found = {}
    for task in Path(f'/proc/{pid}/task').iterdir():
        try:
            text = (task / 'stat').read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = text.rsplit(')', 1)[1].split()  # after "pid (comm)"
        found[int(task.name)] = {'name': text[text.index('(') + 1:text.rindex(')')],
                                 'nice': int(fields[16]),  # fields 19, 40 and 41 of stat
                                 'rt_priority': int(fields[37]), 'policy': int(fields[38])}
    return found


def realtime_threads(pid: int) -> list[tuple[int, int]]:
    """(rt_priority, policy) of each SCHED_FIFO / SCHED_RR thread of ``pid`` (Linux /proc)."""
    return [(t['rt_priority'], t['policy']) for t in thread_stats(pid).values()
            if t['policy'] in (os.SCHED_FIFO, os.SCHED_RR)]


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str,
               processes: Iterable[NodeProcess] = (), poll_s: float = 0.02) -> Any:
    """Poll ``predicate`` until truthy; fail with ``what`` and the logs of dead processes."""
    deadline = time.monotonic() + timeout_s
    procs = list(processes)
    while True:
        value = predicate()
        if value:
            return value
        dead = [p for p in procs if not p.alive]
        if dead or time.monotonic() > deadline:
            detail = ''.join(f'\n--- {p.name} (pid {p.pid}, exit {p.returncode}) log tail ---\n'
                             f'{p.log_text(3000)}' for p in (dead or procs))
            reason = 'a process died' if dead else f'not within {timeout_s:.1f} s'
            raise WaitTimeout(f'waited for {what}: {reason}{detail}')
        time.sleep(poll_s)


# The model stacks (torch, transformers, LeRobot) come with `scripts/setup.sh --ml`, which the
# test command runs. CI sets this so a missing stack fails the run instead of skipping tests.
REQUIRE_ML_ENV = 'LEROBOT_LANG_REQUIRE_ML'
ML_MODULES = ('torch', 'transformers', 'lerobot')


def require_ml(*modules: str) -> None:
    """Skip the calling test (module) unless the model stacks import; fail under CI's flag."""
    import importlib

    import pytest
    for name in modules or ML_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            reason = (f'{name} is not installed ({exc}); `scripts/setup.sh --ml` installs the '
                      'model backends')
            if os.environ.get(REQUIRE_ML_ENV) == '1':
                pytest.fail(f'{REQUIRE_ML_ENV}=1 but {reason}', pytrace=False)
            pytest.skip(reason, allow_module_level=True)


REQUIRE_ROBOCASA_ENV = 'LEROBOT_LANG_REQUIRE_ROBOCASA'


def require_robocasa_env() -> Path:
    """The RoboCasa bridge's environment prefix; skip the test without it (fail under CI)."""
    import pytest

    from lerobot_lang_nodes import graph
    try:
        return graph.environment_prefix('robocasa')
    except FileNotFoundError as exc:
        if os.environ.get(REQUIRE_ROBOCASA_ENV) == '1':
            pytest.fail(f'{REQUIRE_ROBOCASA_ENV}=1 but {exc}', pytrace=False)
        pytest.skip(str(exc), allow_module_level=True)


def stop_popen(proc: subprocess.Popen, timeout_s: float) -> None:
    """Stop a still-running process as an operator would: SIGINT, SIGKILL after ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # nodes under lerobot-lang still get SIGTERM (parent-death signal)
        proc.wait(timeout=10.0)


def child_pids(pid: int) -> list[int]:
    """PIDs of the direct children of ``pid`` (Linux /proc), e.g. a bring-up's nodes."""
    kids = []
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            fields = stat.read_text().rsplit(')', 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def process_gone(pid: int) -> bool:
    """True when ``pid`` has exited (gone, or a zombie waiting to be reaped)."""
    try:
        state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == 'Z'


class Collector:
    """Messages received on one subscription, with a condition to wait on."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, msg: Any) -> None:
        with self._cond:
            self.messages.append(msg)
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self.messages)

    @property
    def last(self) -> Any:
        with self._cond:
            return self.messages[-1] if self.messages else None

    def snapshot(self) -> list[Any]:
        with self._cond:
            return list(self.messages)

    def wait_for(self, predicate: Callable[[Any], bool] = lambda m: True,
                 timeout_s: float = 10.0, what: str = 'a message', since: int = 0) -> Any:
        """Return the first message matching ``predicate``, from index ``since`` on.

        ``since=len(collector)`` waits for a message that arrives after the call.
        """
        deadline = time.monotonic() + timeout_s
        checked = since
        with self._cond:
            while True:
                # Each message is tested once: rescanning a long history on every arrival
                # would hog the GIL and starve the test process's other threads (the
                # probe's executor).
                for msg in self.messages[checked:]:
                    if predicate(msg):
                        return msg
                checked = len(self.messages)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    # The newest message says where it got stuck (counters, reasons).
                    last = repr(self.messages[-1])[:1500] if self.messages else 'none'
                    raise WaitTimeout(f'no {what} within {timeout_s:.1f} s '
                                      f'({len(self.messages)} messages received; last: {last})')
                self._cond.wait(remaining)


def topic_pub_once(msg_type: Any, topic: str, msg: Any, qos: Any, keep_alive_s: float = 0.1,
                   timeout_s: float = 30.0) -> None:
    """Publish as `ros2 topic pub --once` does (ros2cli 0.36): a new participant, a publisher
    that polls every 0.1 s for one matching subscription, one publish, kept alive for
    ``keep_alive_s`` (`--keep-alive`, default 0.1 s), exit.

    The polling and keep-alive intervals are ros2cli's behaviour under test, not waits: a
    subscriber that matches later than the first one misses a volatile sample.
    """
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node('ros2cli_pub_once', context=context)
        pub = node.create_publisher(msg_type, topic, qos)
        deadline = time.monotonic() + timeout_s
        while pub.get_subscription_count() < 1:
            if time.monotonic() > deadline:
                raise WaitTimeout(f'no subscriber matched {topic} within {timeout_s} s')
            time.sleep(0.1)
        pub.publish(msg)
        time.sleep(keep_alive_s)
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


class RosProbe:
    """An in-test rclpy node in its own context, spun by a background thread."""

    def __init__(self, name: str = 'test_probe') -> None:
        import rclpy
        from lerobot_lang_nodes.nodes.runner import DefaultGroupInlineExecutor
        self._rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = DefaultGroupInlineExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name=f'{name}-spin', daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException
        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass

    def subscribe(self, msg_type: Any, topic: str, qos: Any) -> Collector:
        collector = Collector()
        self.node.create_subscription(msg_type, topic, collector, qos)
        return collector

    def publisher(self, msg_type: Any, topic: str, qos: Any, *, wait_subscribers: int = 0,
                  timeout_s: float = 10.0) -> Any:
        pub = self.node.create_publisher(msg_type, topic, qos)
        if wait_subscribers:
            wait_until(lambda: pub.get_subscription_count() >= wait_subscribers, timeout_s,
                       f'{wait_subscribers} subscriber(s) on {topic}')
        return pub

    def wait_for_node(self, name: str, timeout_s: float = 15.0,
                      processes: Iterable[NodeProcess] = ()) -> None:
        wait_until(lambda: name in self.node.get_node_names(), timeout_s,
                   f'node {name!r} in the ROS graph', processes)

    def wait_for_publisher(self, topic: str, timeout_s: float = 15.0,
                           processes: Iterable[NodeProcess] = ()) -> None:
        wait_until(lambda: self.node.count_publishers(topic) > 0, timeout_s,
                   f'a publisher on {topic}', processes)

    def call(self, srv_type: Any, name: str, request: Any, timeout_s: float = 10.0) -> Any:
        """Call a service and return its response; fails clearly if it is absent or slow."""
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout_s):
                raise WaitTimeout(f'service {name} not available within {timeout_s:.1f} s')
            future = client.call_async(request)
            done = threading.Event()
            future.add_done_callback(lambda _f: done.set())
            if not done.wait(timeout_s):
                raise WaitTimeout(f'service {name} did not answer within {timeout_s:.1f} s')
            return future.result()
        finally:
            self.node.destroy_client(client)

    def close(self) -> None:
        # The spin thread must be out of its wait before the node's entities are destroyed:
        # destroying them under a running wait raised InvalidHandle in the spin thread.
        self.executor.shutdown(timeout_sec=2.0)
        self._thread.join(timeout=5.0)
        self.node.destroy_node()
        self.context.try_shutdown()


CHROMIUM = '/usr/bin/chromium'


def chromium_screenshot(url: str, out_png: Path, user_data_dir: Path,
                        size: tuple[int, int] = (1000, 520), timeout_s: float = 90.0) -> str:
    """Headless Debian Chromium takes one screenshot of ``url``; returns its output.

    Flags keep it off the network (no background services, no QUIC) and in a fresh profile.
    Raises WaitTimeout (after ending its whole process group) when it hangs.
    """
    cmd = [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync',
           '--disable-quic', '--disable-dev-shm-usage', f'--user-data-dir={user_data_dir}',
           f'--screenshot={out_png}', f'--window-size={size[0]},{size[1]}', url]
    # Own session so that on a hang the whole Chromium process tree can be ended together.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            env={**os.environ, 'HOME': str(user_data_dir)})
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise WaitTimeout(f'chromium did not finish within {timeout_s} s:\n'
                          f'{output.decode(errors="replace")[-2000:]}') from None
    return output.decode(errors='replace')


class EmulatorProcessError(RuntimeError):
    """The emulator process did not start, died, or did not answer a call in time."""


_EMULATOR_METHODS = frozenset({
    'present_position', 'set_present_position', 'register', 'set_register', 'goal_writes',
    'inject', 'clear_faults', 'set_error_bits', 'pending_faults', 'disconnect', 'reconnect'})
_EMULATOR_ATTRIBUTES = frozenset({'port', 'connected', 'requests', 'replies', 'instructions'})
_PARENT_POLL_S = 0.5  # how often an idle emulator process checks that its parent still runs


def _portable_error(exc: Exception) -> Exception:
    """``exc`` when it survives pickling, else a RuntimeError carrying its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f'{type(exc).__name__}: {exc}')


def serve_emulator_process(conn: Connection, ids: list[int], link: str | None, seed: int,
                           positions: list[int] | None, parent_pid: int) -> None:
    """Body of the EmulatorProcess child: run a ServoBusEmulator, answer calls over ``conn``.

    Requests are ``(seq, op, name, args, kwargs)`` with op 'call', 'get' or 'stop'; replies are
    ``(seq, ok, value_or_error, traceback_text)``, seq 0 reporting the start. Ends when told to
    stop, on EOF (the parent closed the pipe or died) or when the parent PID changes.
    """
    from lerobot_lang_nodes.so101.emulator import ServoBusEmulator
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format='%(asctime)s emulator[%(process)d] %(levelname)s %(message)s')
    # A Ctrl-C of the test run reaches this whole process group; the parent's clean-up (stop
    # the driver, then the emulator) decides when the bus goes away.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        emu = ServoBusEmulator(ids, link=link, seed=seed, positions=positions).start()
    except Exception as exc:
        conn.send((0, False, _portable_error(exc), traceback.format_exc()))
        return
    stop_seq = None
    try:
        conn.send((0, True, None, ''))
        stop_seq = _answer_calls(conn, emu, parent_pid)
    except OSError:
        pass  # the parent went away mid-reply
    finally:
        emu.stop()  # removes the pty and the symlink
    if stop_seq is not None:
        try:
            conn.send((stop_seq, True, None, ''))  # after emu.stop(): the link is gone
        except OSError:
            pass


def _answer_calls(conn: Connection, emu: Any, parent_pid: int) -> int | None:
    """Serve requests until a stop (returns its seq) or the parent is gone (returns None)."""
    while True:
        if not conn.poll(_PARENT_POLL_S):
            if os.getppid() != parent_pid:
                logger.warning('emulator: parent %d gone; stopping', parent_pid)
                return None
            continue
        try:
            seq, op, name, args, kwargs = conn.recv()
        except EOFError:
            return None
        if op == 'stop':
            return seq
        try:
            if op == 'get' and name in _EMULATOR_ATTRIBUTES:
                value = getattr(emu, name)
                # A copy: the serving thread may update the dict while it is pickled.
                value = dict(value) if isinstance(value, dict) else value
            elif op == 'call' and name in _EMULATOR_METHODS:
                value = getattr(emu, name)(*args, **kwargs)
            else:
                raise AttributeError(f'EmulatorProcess does not forward {op} {name!r}')
            reply = (seq, True, value, '')
        except Exception as exc:
            reply = (seq, False, _portable_error(exc), traceback.format_exc())
        conn.send(reply)


class EmulatorProcess:
    """A ServoBusEmulator in a child process, driven through a Pipe; same API as the emulator.

    In its own process the emulator answers the bus without sharing a GIL or a garbage
    collector with a large test process, so a driver under test never sees servo timeouts
    that the test process caused. Calls are serialised (thread-safe) and time out with
    EmulatorProcessError; exceptions raised in the child are re-raised here with their type.
    """

    def __init__(self, ids: Iterable[int] = range(1, 7),
                 link: str | os.PathLike[str] | None = None, *, seed: int = 0,
                 positions: Sequence[int] | None = None, call_timeout_s: float = 10.0,
                 start_timeout_s: float = 30.0) -> None:
        self._args = (list(ids), os.fspath(link) if link is not None else None, seed,
                      list(positions) if positions is not None else None)
        self.link = Path(link) if link is not None else None
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._seq = 0
        self._conn: Connection | None = None
        self._proc: multiprocessing.process.BaseProcess | None = None

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> EmulatorProcess:
        """Start the child (spawned: the test process has rclpy threads) and wait until ready."""
        if self._proc is not None:
            raise EmulatorProcessError('EmulatorProcess already started')
        ctx = multiprocessing.get_context('spawn')
        parent_conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=serve_emulator_process, name='so101-emulator',
                                 args=(child_conn, *self._args, os.getpid()), daemon=True)
        self._proc.start()
        child_conn.close()  # only the child holds it now: its death reads as EOF here
        self._conn = parent_conn
        try:
            with self._lock:
                self._receive(0, self.start_timeout_s, 'start')
        except BaseException:
            self.stop()
            raise
        logger.info('emulator process pid %d serving %s', self._proc.pid, self.port)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the emulator (removes its pty and symlink) and join the child; idempotent.

        Kills the child by its PID only when it does not exit within ``timeout_s``.
        """
        proc, conn = self._proc, self._conn
        if proc is None or conn is None or conn.closed:
            return
        if proc.is_alive():
            try:
                self._call('stop', '', timeout_s=timeout_s)
            except EmulatorProcessError as exc:
                logger.warning('%s', exc)
        proc.join(timeout_s)
        if proc.exitcode is None:
            logger.warning('emulator process pid %d did not exit in %.0f s; killing it',
                           proc.pid, timeout_s)
            proc.kill()
            proc.join(5.0)
        if proc.exitcode != 0 and self.link is not None and self.link.is_symlink():
            self.link.unlink()  # a killed or crashed child could not remove its own link
        with self._lock:
            conn.close()

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        """True while the child process runs."""
        return self._proc is not None and self._proc.is_alive()

    # ---- calls ---------------------------------------------------------------------------

    def _receive(self, seq: int, timeout_s: float, what: str) -> Any:
        """The reply to request ``seq`` (caller holds the lock); late replies to requests
        that timed out earlier are dropped."""
        assert self._conn is not None and self._proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                # The child's death wakes poll() too: its end of the pipe closes (EOF).
                if remaining <= 0 or not self._conn.poll(remaining):
                    state = ('running' if self._proc.is_alive()
                             else f'exit code {self._proc.exitcode}')
                    raise EmulatorProcessError(
                        f'emulator process pid {self._proc.pid} ({state}) did not answer '
                        f'{what} within {timeout_s:.1f} s')
                got, ok, value, remote_tb = self._conn.recv()
            except (EOFError, OSError):
                raise self._exited(what) from None
            if got != seq:
                continue
            if not ok:
                if remote_tb:
                    value.add_note(f'raised in the emulator process:\n{remote_tb}')
                raise value
            return value

    def _call(self, op: str, name: str, *args: Any, timeout_s: float | None = None,
              **kwargs: Any) -> Any:
        with self._lock:
            if self._conn is None or self._conn.closed:
                raise EmulatorProcessError(f'{name or op}: the emulator process is not running')
            self._seq += 1
            try:
                self._conn.send((self._seq, op, name, args, kwargs))
            except OSError:
                raise self._exited(name or op) from None
            return self._receive(self._seq, timeout_s or self.call_timeout_s, name or op)

    def _exited(self, what: str) -> EmulatorProcessError:
        """The error for a call that found the pipe closed: the child has died."""
        assert self._proc is not None
        self._proc.join(1.0)  # reap it, for its exit code
        return EmulatorProcessError(f'emulator process pid {self._proc.pid} exited (code '
                                    f'{self._proc.exitcode}) before answering {what}')

    # ---- forwarded ServoBusEmulator API --------------------------------------------------

    @property
    def port(self) -> str:
        return self._call('get', 'port')

    @property
    def connected(self) -> bool:
        return self._call('get', 'connected')

    @property
    def requests(self) -> int:
        return self._call('get', 'requests')

    @property
    def replies(self) -> int:
        return self._call('get', 'replies')

    @property
    def instructions(self) -> dict[int, int]:
        return self._call('get', 'instructions')

    def present_position(self, servo_id: int) -> int:
        return self._call('call', 'present_position', servo_id)

    def set_present_position(self, servo_id: int, present: int) -> None:
        self._call('call', 'set_present_position', servo_id, present)

    def register(self, servo_id: int, name: str) -> int:
        return self._call('call', 'register', servo_id, name)

    def set_register(self, servo_id: int, name: str, value: int) -> None:
        self._call('call', 'set_register', servo_id, name, value)

    def goal_writes(self, clear: bool = False) -> list[GoalWrite]:
        return self._call('call', 'goal_writes', clear=clear)

    def inject(self, kind: FaultKind, ids: Iterable[int] | None = None, count: int = 1) -> None:
        self._call('call', 'inject', kind, list(ids) if ids is not None else None, count)

    def clear_faults(self) -> None:
        self._call('call', 'clear_faults')

    def set_error_bits(self, servo_id: int, bits: int) -> None:
        self._call('call', 'set_error_bits', servo_id, bits)

    def pending_faults(self) -> int:
        return self._call('call', 'pending_faults')

    def disconnect(self) -> None:
        self._call('call', 'disconnect')

    def reconnect(self) -> None:
        self._call('call', 'reconnect')


def free_port() -> int:
    """A TCP port free on loopback right now."""
    import socket
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def action_client(node: Any, action_type: Any, name: str) -> Any:
    """An rclpy ActionClient safe to create while the node's executor spins in another thread:
    rclpy adds it to the node's waitables before it has its lock, and an executor that counts
    its entities in between dies with AttributeError (the probe then receives nothing)."""
    from rclpy.action import ActionClient

    class _Client(ActionClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._lock = threading.Lock()
            super().__init__(*args, **kwargs)
    return _Client(node, action_type, name)


def run_task(probe: RosProbe, task: str, time_limit_s: float, timeout_s: float,
             direct: bool = False) -> tuple[Any, list[str]]:
    """Send a RunTask goal and wait for its result: (result or None, feedback subtasks)."""
    from lerobot_lang_msgs.action import RunTask
    client = action_client(probe.node, RunTask, 'run_task')
    try:
        if not client.wait_for_server(timeout_sec=15.0):
            raise WaitTimeout('run_task server not found')
        feedback: list[str] = []
        done = threading.Event()
        box: dict = {}

        def on_goal(fut) -> None:
            handle = fut.result()
            box['accepted'] = handle.accepted
            if not handle.accepted:
                done.set()
                return
            handle.get_result_async().add_done_callback(
                lambda r: (box.update(result=r.result().result), done.set()))

        client.send_goal_async(
            RunTask.Goal(task=task, time_limit_s=time_limit_s, direct_subtask=direct),
            feedback_callback=lambda f: feedback.append(f.feedback.subtask)
        ).add_done_callback(on_goal)
        if not done.wait(timeout_s):
            raise WaitTimeout(f'RunTask {task!r} gave no result in {timeout_s} s')
        return box.get('result'), feedback
    finally:
        client.destroy()


class SimGraph:
    """The sim graph as `ros2 launch lerobot_lang_nodes sim.launch.py` starts it (the same
    graph.launch_plan), each node its own process, plus a subscribed probe.

    ``launch``: launch argument values (``{'composed': 'true'}``); ``params``: node parameters
    set over config/sim.yaml (``{'planner': {'key': value}}``); ``env``: the node processes'
    environment (default: this process's); ``probe=False`` leaves the DDS side to the caller
    (a benchmark with its own subscriptions). Every dispatched action is logged by sim_bridge
    (``dispatches()``), every inference by the policy (``inferences()``).
    """

    def __init__(self, tmp: Path, params: dict[str, dict[str, Any]] | None = None,
                 probe_name: str = 'sim_graph_probe', *, launch: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, viewer: bool = True,
                 probe: bool = True) -> None:
        from lerobot_lang_nodes import graph
        self.tmp = tmp
        self.dispatch_log = tmp / 'dispatch.jsonl'
        self.inference_log = tmp / 'inference.jsonl'
        # Not the default 8010: a live `lerobot-lang sim` on this machine may hold it.
        self.viewer_port = free_port() if viewer else 0
        values = {'viewer': 'true' if viewer else 'false', **(launch or {})}
        if viewer:
            values.setdefault('viewer_port', str(self.viewer_port))
        overrides: dict[str, dict[str, Any]] = {
            'sim_bridge': {'dispatch_log_path': str(self.dispatch_log)},
            'policy': {'inference_log_path': str(self.inference_log)}}
        for node, values_of_node in (params or {}).items():
            overrides.setdefault(node, {}).update(values_of_node)
        self.plan = graph.launch_plan('sim', values, out_dir=tmp, overrides=overrides)
        self.params_file = self.plan.params_file
        self.env = env
        self.argv: dict[str, list[str]] = {}
        self.procs: dict[str, NodeProcess] = {}
        for spec in self.plan.specs:
            self.argv[spec.name] = [graph.interpreter(spec), '-m', spec.module,
                                    *graph.ros_args(spec, self.params_file)]
            self.start(spec.name)
        self.probe: RosProbe | None = None
        if probe:
            self._subscribe(probe_name)

    def params_of(self, node: str) -> dict[str, Any]:
        """The parameters the params file gives ``node`` (where it differs from the node's
        dataclass defaults, nodes/params.config_defaults)."""
        return dict(self.plan.params.get(node, {}).get('ros__parameters', {}))

    def _subscribe(self, probe_name: str) -> None:
        from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus, TaskOutcome
        from lerobot_lang_nodes.nodes import qos
        self.probe = RosProbe(probe_name)
        self.status = self.probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
        self.context = self.probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
        self.outcome = self.probe.subscribe(TaskOutcome, 'task_outcome', qos.LATCHED)

    def start(self, name: str) -> NodeProcess:
        """(Re)start one node; a restart's log goes to ``<name>.<n>.log``."""
        n = sum(1 for p in self.tmp.glob(f'{name}*.log'))
        log = self.tmp / (f'{name}.log' if n == 0 else f'{name}.{n}.log')
        self.procs[name] = NodeProcess(name, self.argv[name], log, env=self.env)
        return self.procs[name]

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        procs = list(self.procs.values())
        for name in ('sim_bridge', 'planner', 'policy'):
            self.probe.wait_for_node(name, timeout_s=timeout_s, processes=procs)
        self.status.wait_for(timeout_s=timeout_s, what='a runtime_status from sim_bridge')

    def alive(self) -> list[NodeProcess]:
        return [p for p in self.procs.values() if p.alive]

    def dispatches(self) -> list[dict]:
        from lerobot_lang_nodes.core.dispatch_file import read_dispatch_file
        return read_dispatch_file(self.dispatch_log)

    def inferences(self) -> list[dict]:
        from lerobot_lang_nodes.core.inference_file import read_inference_file
        return read_inference_file(self.inference_log)

    def logs(self, tail: int = 3000) -> str:
        return '\n'.join(f'===== {name} =====\n{p.log_text(tail)}'
                         for name, p in self.procs.items())

    def run_task(self, task: str, time_limit_s: float, timeout_s: float,
                 direct: bool = False) -> tuple[Any, list[str]]:
        """Send a RunTask goal and wait for its result: (result or None, feedback subtasks)."""
        return run_task(self.probe, task, time_limit_s, timeout_s, direct)

    def run_task_direct(self, task: str) -> tuple[Any, list[str]]:
        return self.run_task(task, time_limit_s=60.0, timeout_s=240.0, direct=True)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        if self.probe is not None:
            self.probe.close()
