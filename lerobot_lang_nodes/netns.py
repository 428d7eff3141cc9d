"""Two network namespaces joined by a veth pair: two hosts on one Linux machine (issue 31).

The robot's computer and the policy computer of a split graph, for the tests and
bench/remote.py: each namespace holds only its end of the link and its own loopback, so
nothing the processes started in it send can reach another interface. The link is capped by
``tc tbf`` (``rate``, 50 Mbit/s by default: a good Wi-Fi link; these kernels have no netem) and
can be taken down and up. ``close()`` ends the processes started here, by PID, then deletes
the namespaces (and with them the link). Needs root.
"""

from __future__ import annotations

import os
import random
import shutil
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

RATE = '50mbit'


class Host:
    """One network namespace: its name, its end of the link and its address."""

    def __init__(self, ns: str, dev: str, address: str) -> None:
        self.ns, self.dev, self.address = ns, dev, address


def ip(*args: str) -> None:
    subprocess.run(['ip', *args], check=True, capture_output=True, timeout=30)


class TwoHosts:
    """Two namespaces and the link between them; processes started in them, ended by PID."""

    def __init__(self, log_dir: Path, rate: str = RATE) -> None:
        tag = f'{os.getpid() % 100000}'
        self.rate = rate
        subnet = random.randrange(0, 64) * 4
        self.robot = Host(f'llr{tag}', f'llr{tag}v', f'10.231.{subnet // 256}.{subnet % 256 + 1}')
        self.policy = Host(f'llp{tag}', f'llp{tag}v', f'10.231.{subnet // 256}.{subnet % 256 + 2}')
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.made: list[str] = []

    def create(self) -> None:
        for host in (self.robot, self.policy):
            ip('netns', 'add', host.ns)
            self.made.append(host.ns)
        ip('link', 'add', self.robot.dev, 'netns', self.robot.ns, 'type', 'veth', 'peer',
            'name', self.policy.dev, 'netns', self.policy.ns)
        for host in (self.robot, self.policy):
            ip('-n', host.ns, 'addr', 'add', f'{host.address}/30', 'dev', host.dev)
            ip('-n', host.ns, 'link', 'set', 'lo', 'up')
            ip('-n', host.ns, 'link', 'set', host.dev, 'up')
            # A computer on a network has a default route; a namespace only has its /30, and
            # without a route for multicast DDS cannot send its discovery (SUBNET, and static
            # peers too on some kernels: nothing is discovered). The link is the only way out.
            ip('-n', host.ns, 'route', 'add', '224.0.0.0/4', 'dev', host.dev)
            # A good Wi-Fi link by default: 50 Mbit/s each way.
            subprocess.run(['ip', 'netns', 'exec', host.ns, 'tc', 'qdisc', 'add', 'dev',
                            host.dev, 'root', 'tbf', 'rate', self.rate, 'burst', '64kb', 'latency',
                            '50ms'], check=True, capture_output=True, timeout=30)

    def start(self, host: Host, name: str, argv: list[str], env: dict[str, str],
              stdout=None) -> subprocess.Popen:
        log = (self.log_dir / f'{name}.log').open('w', encoding='utf-8')
        proc = subprocess.Popen(['ip', 'netns', 'exec', host.ns, *argv], env=env,
                                stdout=stdout or log, stderr=log, stdin=subprocess.DEVNULL,
                                text=True, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def link(self, up: bool) -> None:
        """The robot's end of the link goes down (or up), as a cable pulled or a lost Wi-Fi."""
        ip('-n', self.robot.ns, 'link', 'set', self.robot.dev, 'up' if up else 'down')

    def log(self, name: str) -> str:
        path = self.log_dir / f'{name}.log'
        return path.read_text(encoding='utf-8', errors='replace')[-3000:] if path.exists() else ''

    def close(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 10.0
        for _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10.0)
        for ns in self.made:  # its end of the link goes with it, and the peer's with that
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True, timeout=30)


def platform_problem() -> str:
    if sys.platform != 'linux' or os.geteuid() != 0:
        return 'needs root on Linux to create network namespaces'
    if not shutil.which('ip') or not shutil.which('tc'):
        return 'needs iproute2 (ip, tc)'
    probe = f'llq{os.getpid() % 100000}'
    made = subprocess.run(['ip', 'netns', 'add', probe], capture_output=True, text=True)
    if made.returncode:
        return f'ip netns add failed: {made.stderr.strip()}'
    subprocess.run(['ip', 'netns', 'del', probe], capture_output=True)
    return ''




class Monitor:
    """The JSON lines of lerobot_lang_nodes.remote_monitor (the robot side's events), collected
    on a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)

    def of(self, kind: str, since: float = 0.0) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e['k'] == kind and e['wall'] >= since]

    def last(self, kind: str) -> dict | None:
        found = self.of(kind)
        return found[-1] if found else None


def link_bytes(host: Host) -> tuple[int, int]:
    """(bytes, packets dropped) the link's qdisc at ``host``'s end has sent so far."""
    out = subprocess.run(['ip', 'netns', 'exec', host.ns, 'tc', '-s', 'qdisc', 'show', 'dev',
                          host.dev], capture_output=True, text=True, timeout=30).stdout
    words = out.split()
    sent = int(words[words.index('Sent') + 1]) if 'Sent' in words else 0
    dropped = 0
    if 'dropped' in words:
        dropped = int(words[words.index('dropped') + 1].rstrip(','))
    return sent, dropped


__all__ = ['Host', 'Monitor', 'RATE', 'TwoHosts', 'ip', 'link_bytes', 'platform_problem']
