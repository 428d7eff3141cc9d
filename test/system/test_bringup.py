"""The README's main command path: `lerobot-lang sim` brings the graph up and does the task."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_lerobot_lang_sim_completes_the_default_task():
    out = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim',
                          '--exit-on-success', '--timeout', '240'],
                         capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert '[lerobot-lang] task: put the red cube in the bowl' in log
    assert '[lerobot-lang] live view: http://127.0.0.1:8010/' in log
    assert '[lerobot-lang] task succeeded' in log
    for node in ('sim_bridge', 'planner', 'policy', 'viewer'):
        assert f'[{node}] ' in log, f'no output from {node}'
    assert 'Traceback' not in log, log[-4000:]
    assert log.rstrip().endswith('[lerobot-lang] stopped')
