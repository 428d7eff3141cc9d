"""`lerobot-lang console` driven through a pseudo-terminal, as a person types into it, against
`lerobot-lang sim` writing its session folder."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lerobot_lang_nodes.testing import WaitTimeout, free_port, stop_popen

pytestmark = pytest.mark.slow
ANSI = re.compile(r'\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\r')


class Terminal:
    """A program on a pseudo-terminal; what it prints is kept, escape sequences stripped."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self._master, slave = os.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self._raw = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._raw += data

    @property
    def text(self) -> str:
        with self._lock:
            raw = bytes(self._raw)
        return ANSI.sub('', raw.decode('utf-8', 'replace'))

    def type(self, keys: str) -> None:
        os.write(self._master, keys.encode())

    def expect(self, pattern: str, timeout_s: float = 20.0, after: int = 0) -> float:
        """Seconds until ``pattern`` (a regex) shows up in the output after index ``after``."""
        start = time.monotonic()
        while not re.search(pattern, self.text[after:]):
            if self.proc.poll() is not None or time.monotonic() - start > timeout_s:
                raise WaitTimeout(f'{pattern!r} not printed within {timeout_s} s (exit '
                                  f'{self.proc.poll()}); output:\n{self.text[-3000:]}')
            time.sleep(0.02)
        return time.monotonic() - start

    def close(self) -> None:
        stop_popen(self.proc, 10.0)
        os.close(self._master)


@pytest.fixture
def bringup(tmp_path):
    session = tmp_path / 'session'
    log = (tmp_path / 'bringup.log').open('w')
    proc = subprocess.Popen([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim',
                             '--task', '', '--output-dir', str(session), '--record',
                             '--viewer-port', str(free_port())],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, 'PYTHONUNBUFFERED': '1'})
    try:
        yield proc, session, tmp_path / 'bringup.log'
    finally:
        stop_popen(proc, 30.0)
        log.close()


def test_console_drives_the_sim_and_the_session_folder_keeps_it(bringup):
    proc, session, log = bringup
    env = {**os.environ, 'TERM': 'xterm-256color', 'PROMPT_TOOLKIT_NO_CPR': '1',
           'PYTHONUNBUFFERED': '1'}
    term = Terminal([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'console',
                     '--timeout', '90'], env)
    try:
        term.expect(r'connected \(ROS_DOMAIN_ID', timeout_s=120.0)
        assert 'no task given' in log.read_text()
        term.type('/help\r')
        term.expect(r'/burst SECONDS')
        mark = len(term.text)
        term.type('/task put the red cube in the bowl\r')
        term.expect(r'task sent: put the red cube in the bowl', after=mark)
        term.expect(r'subtask: \w+', timeout_s=60.0, after=mark)
        mark = len(term.text)
        term.type('/pause\r')  # connected once: an answer in well under a second
        assert term.expect(r'pause: paused', after=mark) < 1.0
        term.expect(r'mode: paused', after=mark)
        mark = len(term.text)
        term.type('/ask wrist what is in the gripper?\r')
        term.expect(r'answer: \S+', timeout_s=60.0, after=mark)
        mark = len(term.text)
        term.type('/burst 0.5\r')
        term.expect(r'burst: acting for 0.5 s', after=mark)
        term.expect(r'(?s)mode: action.*mode: paused', timeout_s=20.0, after=mark)
        # A line half typed while updates arrive is sent whole.
        mark = len(term.text)
        term.type('/resume\r')
        term.expect(r'resume: resumed', after=mark)
        term.type('use the blue')
        time.sleep(0.3)  # keys typed by a person, with output arriving in between
        term.type(' cube instead\r')
        term.expect(r'interjection: use the blue cube instead', after=mark)
        term.expect(r'plan: .*blue', timeout_s=60.0, after=mark)
        mark = len(term.text)
        term.type('/status\r')
        term.expect(r'planner: .*repeats \d+ .*failures \d+', after=mark)
        assert re.search(r'task: +put the red cube in the bowl', term.text[mark:])
        mark = len(term.text)
        term.type('/burst soon\r')
        term.expect(r'error: /burst takes seconds', after=mark)
        term.type('/nonsense\r')
        term.expect(r'error: unknown command /nonsense', after=mark)
        mark = len(term.text)
        term.type('/record stop\r')  # the recorder of `lerobot-lang sim --record`
        term.expect(r'recorder/stop: recorded .*bags', timeout_s=30.0, after=mark)
        term.type('/record start\r')
        term.expect(r'recorder/start: recording into .*bags', timeout_s=30.0, after=mark)
        term.type('/record pause\r')
        term.expect(r'error: /record start or /record stop', after=mark)
        mark = len(term.text)
        term.type('/t\r')  # takeover; no leader arm in this graph: teleop, the arm holds
        term.expect(r'takeover: takeover: a human commands the arm', timeout_s=30.0, after=mark)
        term.expect(r'mode: teleop', after=mark)
        term.type('/b\r')  # hand-back
        term.expect(r'handback: hand-back', after=mark)
        term.expect(r'control: policy', after=mark)
        mark = len(term.text)
        term.type('/reset\r')
        term.expect(r'sim/reset: scene reset', timeout_s=30.0, after=mark)
        term.expect(r'task cleared: send a new task', timeout_s=30.0, after=mark)
        term.type('/quit\r')
        assert term.proc.wait(timeout=15) == 0
        assert 'Traceback' not in term.text and 'never retrieved' not in term.text
    finally:
        term.close()
    assert proc.poll() is None, log.read_text()[-3000:]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    text = log.read_text()
    assert f'[lerobot-lang] session folder: {session}' in text
    assert text.rstrip().endswith('[lerobot-lang] stopped')
    for node in ('sim_bridge', 'planner', 'policy', 'viewer'):
        assert (session / 'logs' / f'{node}.log').stat().st_size > 0
    assert (session / 'latest.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    import av
    with av.open(str(session / 'live_view.mp4')) as container:  # closed cleanly: decodes
        frames = sum(1 for _ in container.decode(video=0))
    assert frames > 10
    assert 'recorded' in (session / 'logs' / 'viewer.log').read_text()
    assert Path(session / 'params.yaml').is_file()
    bags = sorted(p for p in (session / 'bags').iterdir() if p.is_dir())
    assert len(bags) == 2 and all((b / 'metadata.yaml').is_file() for b in bags)
