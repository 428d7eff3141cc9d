"""Test session set-up: DDS on loopback in a private domain; node-process and probe fixtures."""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from lerobot_lang_nodes import dds
from lerobot_lang_nodes.recording import scheduling
from lerobot_lang_nodes.testing import NodeProcess, RosProbe, node_command

# The fault report (`fault_report` fixture, bench/faults.py's table) and the skip gate CI runs
# under (LEROBOT_LANG_REQUIRE_NO_SKIP): see that module.
pytest_plugins = ('lerobot_lang_nodes.pytest_plugin',)

_domain_lease = None


def pytest_configure(config: pytest.Config) -> None:
    """Reserve a ROS_DOMAIN_ID for this pytest run before any rclpy context exists."""
    global _domain_lease
    from domain_coordinator import domain_id
    _domain_lease = domain_id()
    domain = _domain_lease.__enter__()
    # Every process a test starts inherits this: discovery never leaves the machine.
    os.environ.update(dds.ros_environment(domain_id=domain))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    os.environ.setdefault('MUJOCO_GL', 'egl')
    os.environ.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    config.stash[_DOMAIN_KEY] = domain


_DOMAIN_KEY = pytest.StashKey[int]()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _domain_lease is not None:
        _domain_lease.__exit__(None, None, None)


def pytest_report_header(config: pytest.Config) -> str:
    return (f"ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID')} "
            f"ROS_AUTOMATIC_DISCOVERY_RANGE={os.environ.get('ROS_AUTOMATIC_DISCOVERY_RANGE')}")


class NodeLauncher:
    """Starts nodes as separate processes and stops every one of them by PID at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[NodeProcess] = []

    def __call__(self, module: str, *ros_args: str, name: str | None = None,
                 params: dict | None = None, params_file: str | Path | None = None,
                 env: dict[str, str] | None = None) -> NodeProcess:
        name = name or module.rsplit('.', 1)[-1]
        argv = node_command(module, *ros_args, params=params, params_file=params_file)
        proc = NodeProcess(name, argv, self.log_dir / f'{name}.log',
                           env={**os.environ, **(env or {})})
        self.processes.append(proc)
        return proc

    def command(self, argv: list[str], name: str, env: dict[str, str] | None = None
                ) -> NodeProcess:
        proc = NodeProcess(name, argv, self.log_dir / f'{name}.log',
                           env={**os.environ, **(env or {})})
        self.processes.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()


@pytest.fixture
def launch_node(tmp_path: Path) -> Iterator[NodeLauncher]:
    """Factory: ``launch_node('lerobot_lang_nodes.nodes.planner_node', params={...})``."""
    launcher = NodeLauncher(tmp_path / 'logs')
    try:
        yield launcher
    finally:
        launcher.stop_all()


@pytest.fixture
def probe() -> Iterator[RosProbe]:
    """An in-test rclpy node (own context, spun in a thread) to publish, subscribe and call."""
    p = RosProbe()
    try:
        yield p
    finally:
        p.close()


_SCHEDULING = scheduling.current()


@pytest.fixture(autouse=True)
def normal_cpu_scheduling(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test must leave the test process's CPU scheduling as it found it.

    Every node process a later test starts inherits it: a test that left this thread real-time
    (SVT-AV1 encoding as root does) made every later graph starve the machine.
    """
    yield
    now = scheduling.current()
    if now != _SCHEDULING:
        os.sched_setscheduler(0, _SCHEDULING[0], os.sched_param(_SCHEDULING[1]))
        pytest.fail(f'{request.node.nodeid} left the test process with CPU scheduling {now} '
                    f'(policy, priority) instead of {_SCHEDULING}; restored it', pytrace=False)


def _stray_nodes(domain: str) -> list[int]:
    """PIDs of this package's processes in this run's ROS domain, other than pytest itself."""
    found = []
    for entry in Path('/proc').iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / 'cmdline').read_bytes()
            environ = (entry / 'environ').read_bytes()
        except OSError:
            continue
        if b'lerobot_lang_nodes' in cmdline and \
                f'ROS_DOMAIN_ID={domain}'.encode() in environ.split(b'\0'):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope='module', autouse=True)
def no_stray_nodes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test module must not leave node processes behind in the shared domain (checked after
    its module-scoped fixtures, such as a driver rig, are torn down).

    A leftover simulator keeps publishing /clock: every later graph then sees time jump back
    and forth, and the tests after it fail for no fault of their own. Leftovers are given a
    moment to exit, then killed (they were started by this run) and reported as a warning
    naming the test that leaked them.
    """
    yield
    domain = str(request.config.stash[_DOMAIN_KEY])
    deadline = time.monotonic() + 15.0
    stray = _stray_nodes(domain)
    while stray and time.monotonic() < deadline:
        time.sleep(0.2)  # polling for exits of processes this test started
        stray = _stray_nodes(domain)
    for pid in stray:
        try:
            cmd = Path(f'/proc/{pid}/cmdline').read_bytes().replace(b'\0', b' ')[:120]
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
        warnings.warn(f'{request.node.nodeid} left node process {pid} running ({cmd!r}); '
                      'killed it', stacklevel=1)
