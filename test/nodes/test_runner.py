"""Every node's main(): Ctrl-C stops it cleanly, and a wedged callback cannot keep it alive."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from lerobot_lang_nodes.testing import wait_until

PEER = Path(__file__).with_name('runner_peer.py')


def _start(launch_node, tmp_path):
    trigger = tmp_path / 'block'
    proc = launch_node.command([sys.executable, str(PEER), str(trigger)], name='runner_peer')
    # Spinning, not only built: a signal while the node is still being built aborts the build
    # (exit 130, no close()), as Ctrl-C during a long model load should.
    wait_until(lambda: ': tick 1' in proc.log_text(), 30.0, 'the node to spin', [proc])
    return proc, trigger


def test_sigint_stops_the_node_through_close(launch_node, tmp_path):
    proc, _ = _start(launch_node, tmp_path)
    proc.proc.send_signal(signal.SIGINT)
    proc.proc.wait(timeout=10.0)
    assert proc.returncode == 0, proc.log_text()
    assert 'close() ran' in proc.log_text()


def test_a_core_log_line_is_printed_once_through_ros_logging(launch_node, tmp_path):
    proc, _ = _start(launch_node, tmp_path)
    log = proc.log_text()
    assert '[runner_peer]: [lerobot_lang_nodes.peer] a line of the core' in log, log
    assert log.count('a line of the core') == 1, log
    assert proc.stop() == 0


def test_sigusr1_prints_thread_stacks_and_the_node_goes_on(launch_node, tmp_path):
    proc, _ = _start(launch_node, tmp_path)
    proc.proc.send_signal(signal.SIGUSR1)
    wait_until(lambda: 'most recent call first' in proc.log_text(), 10.0, 'a stack dump', [proc])
    assert proc.alive
    assert proc.stop() == 0


def test_a_raising_callback_is_reported_and_the_node_goes_on(launch_node, tmp_path):
    proc, trigger = _start(launch_node, tmp_path)
    trigger.with_suffix('.raise').touch()
    wait_until(lambda: 'a callback raised RuntimeError: a bug in a callback (1 so far'
               in proc.log_text(), 10.0, 'the callback error in the log', [proc])
    log = proc.log_text()
    assert 'Traceback' in log and 'in _tick' in log  # where it came from
    seen = log.count(': tick ')
    wait_until(lambda: proc.log_text().count(': tick ') > seen + 1, 10.0,
               'the timer to keep ticking', [proc])
    assert proc.stop() == 0


def test_a_wedged_callback_cannot_hold_up_shutdown(launch_node, tmp_path):
    proc, trigger = _start(launch_node, tmp_path)
    trigger.touch()
    wait_until(lambda: 'blocking in a callback' in proc.log_text(), 10.0, 'the callback to block',
               [proc])
    t0 = time.monotonic()
    proc.proc.send_signal(signal.SIGINT)
    proc.proc.wait(timeout=20.0)
    elapsed = time.monotonic() - t0
    log = proc.log_text()
    assert proc.returncode == 1, log  # not 0: the stop was not clean, and says so
    assert 'close() ran' in log
    assert 'did not finish within 5 s of shutdown' in log and '_tick' in log  # where it hung
    assert elapsed < 15.0, elapsed
