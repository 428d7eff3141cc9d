"""Ending a node process that ignored its stop signal, leaving a clue why."""

from __future__ import annotations

import signal
import subprocess

STACK_DUMP_WAIT_S = 1.0


def kill_with_stacks(proc: subprocess.Popen) -> int | None:
    """SIGUSR1 (nodes print every thread's stack to their log), then SIGKILL; returns the code.

    Only for processes this program started and that run a node (nodes register SIGUSR1 with
    faulthandler; for anything else SIGUSR1 ends it, which is what was wanted anyway).
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGUSR1)
        try:
            proc.wait(timeout=STACK_DUMP_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=5.0)
    return proc.returncode
