"""The README's main command path: `lerobot-lang sim` brings the graph up and does the task."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lerobot_lang_nodes.testing import child_pids, process_gone, stop_popen, wait_until

pytestmark = pytest.mark.slow


def test_lerobot_lang_sim_completes_the_default_task(tmp_path):
    out = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim',
                          '--exit-on-success', '--timeout', '240',
                          '--output-dir', str(tmp_path / 'session')],
                         capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert '[lerobot-lang] task: put the red cube in the bowl' in log
    assert '[lerobot-lang] live view: http://127.0.0.1:8010/' in log
    assert '[lerobot-lang] task succeeded' in log
    for node in ('sim_bridge', 'planner', 'policy', 'viewer'):
        assert f'[{node}] ' in log, f'no output from {node}'
    # No shutdown noise either (rclpy callbacks failing on a half-destroyed executor).
    assert 'Traceback' not in log and 'never retrieved' not in log, log[-4000:]
    assert log.rstrip().endswith('[lerobot-lang] stopped')


@pytest.fixture
def sim_bringup(tmp_path):
    """`lerobot-lang sim --no-viewer` in its own session, once every node reported ready."""
    log = tmp_path / 'sim.log'
    with log.open('w') as out:
        proc = subprocess.Popen([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim',
                                 '--no-viewer', '--timeout', '240',
                                 '--output-dir', str(tmp_path / 'session')], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: all(f'{n} ready' in log.read_text()
                               for n in ('sim_bridge', 'planner', 'policy')), 120.0,
                   'every node to report ready')
        yield proc, log
    finally:
        stop_popen(proc, 60.0)  # only if a test failed first and left it running


def test_ctrl_c_stops_every_node_cleanly(sim_bringup):
    proc, log = sim_bringup
    kids = child_pids(proc.pid)
    assert len(kids) == 3, kids  # sim_bridge, planner, policy
    proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends to the supervisor
    assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert 'Traceback' not in text and 'killing pid' not in text, text[-3000:]
    assert 'never retrieved' not in text and 'did not finish' not in text, text[-3000:]
    assert text.rstrip().endswith('[lerobot-lang] stopped')
    assert all(process_gone(k) for k in kids), 'a node outlived the bring-up'


def test_a_dead_required_node_stops_the_graph_with_an_error(sim_bringup):
    proc, log = sim_bringup
    policy = [k for k in child_pids(proc.pid)
              if b'policy_node' in Path(f'/proc/{k}/cmdline').read_bytes()]
    assert len(policy) == 1
    os.kill(policy[0], signal.SIGKILL)  # a crash, not a clean stop
    assert proc.wait(timeout=60) == 1
    text = log.read_text()
    assert '[lerobot-lang] required node policy exited with code -9; stopping the graph' in text
    assert text.rstrip().endswith('[lerobot-lang] stopped')


def _describe(pid: int) -> str:
    proc = Path(f'/proc/{pid}')
    try:
        cmd = proc.joinpath('cmdline').read_bytes().replace(b'\0', b' ').decode()[:120]
        status = {line.split(':')[0]: line.split(':', 1)[1].strip()
                  for line in proc.joinpath('status').read_text().splitlines() if ':' in line}
        return (f"{cmd} state={status.get('State')} ppid={status.get('PPid')} "
                f"sigcgt={status.get('SigCgt')} sigign={status.get('SigIgn')}")
    except OSError as exc:
        return str(exc)


def test_a_killed_bring_up_leaves_no_node_behind(sim_bringup):
    proc, log = sim_bringup
    kids = child_pids(proc.pid)
    assert len(kids) == 3, kids
    try:
        proc.kill()  # no chance to stop its nodes itself
        proc.wait(timeout=10)
        # The kernel sends each node SIGTERM (parent-death signal): they stop cleanly.
        try:
            wait_until(lambda: all(process_gone(k) for k in kids), 60.0, 'every node gone')
        except AssertionError:
            left = {k: _describe(k) for k in kids if not process_gone(k)}
            raise AssertionError(f'nodes still running: {left}\n{log.read_text()[-3000:]}')
    finally:
        for pid in kids:
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)
