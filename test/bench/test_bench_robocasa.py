"""bench/robocasa_bridge.py --quick as a user runs it (from the main environment): the bare
KitchenHost in .venv-robocasa and the robocasa_bridge node over DDS, 64 px, a few steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lerobot_lang_nodes.testing import require_robocasa_env

BENCH = Path(__file__).resolve().parents[2] / 'bench'
require_robocasa_env()


@pytest.mark.slow
def test_quick_preset_reports_step_time_and_real_time_factor(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / 'robocasa_bridge.py'), '--quick',
                          '--out', str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    report = json.loads((tmp_path / 'robocasa_bridge.json').read_text())
    assert report['run']['preset'] == 'quick' and report['run']['versions']['robosuite']
    host = {r['config']: r for r in report['host']['rows']}
    assert set(host) == {'physics only', '3 views 64 px'}
    for row in host.values():
        assert row['steps'] == 10 and len(row['round_medians_ms']) == 2
        assert 0 < row['step_ms_p50'] <= row['step_ms_p90']
        assert row['real_time_factor'] == pytest.approx(50.0 / row['step_ms_p50'], rel=0.01)
    assert '64 px / physics only' in report['host']['ratios']
    (node,) = report['node']['rows']
    assert 'error' not in node, node
    assert node['size_px'] == 64 and node['ticks'] > 0 and node['step_ms_p50'] > 0
    assert node['real_time_factor_diag'] > 0 and node['real_time_factor_window'] > 0
    assert node['images_per_s'] > 0 and node['loop_errors'] == 0
    md = (tmp_path / 'robocasa_bridge.md').read_text()
    assert '| physics only |' in md and md.count('| 3 views 64 px |') == 2
