"""bench/sim_graph.py end to end: a short run writes a report whose figures are sane.

The benchmark is run as a user runs it (a subprocess with this interpreter); it reserves its
own ROS domain, so it does not meet the graph of any other test.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / 'bench' / 'sim_graph.py'


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_short_run_reports_every_figure(tmp_path):
    # The benchmark's own wall cap (3 x 8 + 60 s) ends it; the timeout here is a backstop.
    proc = subprocess.Popen([sys.executable, str(BENCH), '--sim-seconds', '8',
                             '--out', str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # its clean path: stops every node by PID
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f'benchmark did not finish:\n{out[-3000:]}')
    assert proc.returncode == 0, out[-3000:]
    assert 'real-time factor' in out and 'chunk latency' in out

    report = json.loads((tmp_path / 'sim_graph.json').read_text())
    assert (tmp_path / 'sim_graph.md').read_text().startswith('# Simulated graph')
    assert report['run']['sim_s'] >= 8.0 and not report['run']['truncated_by_wall_cap']
    assert 0.0 < report['real_time_factor'] < 10.0
    # Clean node shutdown is the system tests' concern; here every node must be accounted for.
    assert set(report['run']['exit_codes']) == {'sim_bridge', 'planner', 'policy'}
    for name in ('sim_bridge', 'planner', 'policy', 'bench_probe'):
        cpu = report['cpu'][name]
        assert _finite(cpu['cpu_pct_of_core']) and 0.0 < cpu['cpu_pct_of_core'] < 210.0
        assert _finite(cpu['max_rss_mb']) and cpu['max_rss_mb'] > 10.0
    for source in ('sim_dispatch_log', 'wall_joint_states'):
        jitter = report['dispatch_jitter_ms'][source]
        assert jitter['n'] > 100, jitter  # ~240 ticks in 8 sim s at 30 Hz
        assert _finite(jitter['p50']) and _finite(jitter['p99'])
        assert 0.0 <= jitter['p50'] <= jitter['p99']
    executor = report['executor']
    assert executor['dispatched'] > 100 and executor['rejected_invalid'] == 0
    assert 0 <= executor['starved_fraction'] < 1.0
    latency = report['chunk_latency_ms']
    assert latency['n'] > 0 and _finite(latency['p50'])
    # No chunk's first action is dispatched before its observation's stamp (min 0: at the
    # tick right after it), and a dispatch comes on a control tick: the stamps are ticks, so
    # a latency is a whole number of periods.
    assert 0.0 <= latency['min'] <= latency['p50'] <= latency['p99'] <= latency['max']
    period_ms = 1000.0 / report['config']['ctrl_hz']
    for key in ('min', 'max'):
        assert latency[key] / period_ms == pytest.approx(round(latency[key] / period_ms),
                                                         abs=1e-3), latency
    assert report['tasks']['sent'] >= 1
