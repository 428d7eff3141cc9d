"""The smaller benchmarks as a user runs them: the image transport run, the latency sweep's
report table, one episode of the task-time run with its interjection."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / 'bench'


def load(name: str):
    """A benchmark script as a module of the bench package (as the scripts import each other)."""
    return importlib.import_module(f'bench.{name}')


def test_latency_sweep_pairs_the_seeds_rules_with_the_current_ones():
    tt = load('task_time')
    configs = dict(tt.parse_config(c) for c in tt.latency_configs([0.05, 0.4]))
    assert list(configs) == ['a_50ms', 'b_50ms', 'a_400ms', 'b_400ms']
    a = {f'{n}.{k}': v for n, k, v in configs['a_400ms']}
    assert a['sim_bridge.refill_fraction'] == 0.0 and a['planner.subtask_change_flushes']
    assert a['policy.added_latency_s'] == 0.4
    assert [(n, k) for n, k, _ in configs['b_50ms']] == [('policy', 'added_latency_s')]
    graph = {'times_s': [10.0, None], 'starved_ticks': 40, 'starved_before_first_dispatch': 10,
             'stale_discards': 0}
    better = {**graph, 'times_s': [5.0, 5.0], 'starved_ticks': 10}
    report = {'run': {'max_sim_s': 30.0}, 'graphs': {'a_50ms': graph, 'b_50ms': better}}
    (row,) = [line for line in tt.latency_table(report) if line.startswith('| 50 ms')]
    # a: 30 starved over 40 sim s = 45/min; b: 0 over 10 s; times 10 -> 5.
    assert row == '| 50 ms | 45.0 | 0.0 | 0.0 | 10.0 | 5.0 | 0.5 | None / None | 0.083 |'


def test_bench_readme_shows_the_reports_tables_as_they_are():
    """bench/README.md's report tables are copies `bench/report.py` makes, never typed by hand:
    a report that has changed since (a rerun, an edit) fails here until the copies are made
    again."""
    report = load('report')
    text = report.README.read_text()
    marked = report.TABLE_BLOCK.findall(text)
    assert len(marked) >= 10, marked
    assert text == report.with_report_tables(text), \
        'a report table in bench/README.md differs from its report: run bench/report.py'


def test_the_reaction_table_names_inference_plus_a_tick_wait_not_a_floor():
    """The 2026-12-06 loaded run: 80.0 ms in all against inference 58.2 ms + one period. A
    reaction can come in under inference + period (the chunk lands just before a tick), so
    that sum is not a floor; the floor is the inference."""
    tt = load('task_time')
    hops = {'planner': 4.0, 'waiting': 0.6, 'inference': 58.2, 'to_dispatch': 13.0,
            'total': 80.0, 'busy': False}
    lines = tt.hop_table([{'load': 'none', 'period_s': 1 / 30, 'hops_ms': [hops]}])
    header, row = lines[3], lines[5]
    columns = [c.strip() for c in header.strip('|').split('|')]
    values = dict(zip(columns, (c.strip() for c in row.strip('|').split('|'))))
    assert values['inference + longest tick wait (ms)'] == '91.5'
    assert values['inference (ms)'] == '58.2' and values['total (ms)'] == '80.0'
    assert not any('floor' in c for c in columns)
    assert 'The floor is the inference itself' in lines[1]


@pytest.mark.slow
def test_task_time_times_a_task_and_an_interjection_through_the_graph(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / 'task_time.py'), '--episodes', '1',
                          '--config', 'current:', '--reaction-load', 'generation',
                          '--out', str(tmp_path), '--name', 'tt'],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads((tmp_path / 'tt.json').read_text())
    (expert,), (graph,) = report['expert_times_s'], report['graphs']['current']['times_s']
    assert 1.0 < expert < 30.0 and 1.0 < graph < 30.0  # the cube is in the bowl
    inter = report['interjections']
    # The re-plan comes from the planner after the interjection, and the arm acts on it.
    for inter in (report['interjections'], report['interjections_under_load']):
        (planner_s,), (reaction,) = inter['planner_s'], inter['reactions_s']
        assert 0.0 <= planner_s <= reaction < 5.0
        assert 0.0 < inter['reactions_wall_s'][0] < 30.0
    assert report['interjections_under_load']['load'] == 'generation'
    text = (tmp_path / 'tt.md').read_text()
    assert '## Reaction to an interjection' in text
    assert '| none | 1 | ' in text and '| generation | 1 | ' in text


@pytest.mark.slow
def test_image_transport_delivers_and_reports_every_profile(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / 'image_transport.py'), '--seconds', '2',
                          '--width', '160', '--height', '120', '--out', str(tmp_path)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads((tmp_path / 'image_transport.json').read_text())
    profiles = report['profiles']
    assert len(profiles) == 3
    for label, prof in profiles.items():  # the project's setting and the two baselines
        assert prof['sent_per_stream'] == 60 and len(prof['streams']) == 6, label
        assert prof['min_delivered'] > 0.5 and 0 < prof['median_p50_ms'] < 1000, label
        assert f'| {label} |' in (tmp_path / 'image_transport.md').read_text()


@pytest.mark.slow
def test_jitter_of_the_driver_loop_is_measured_and_reported(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / 'jitter.py'), '--seconds', '2',
                          '--rates', '30', '--loads', 'idle', '--loops', 'driver',
                          '--priorities', '0,50', '--out', str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    normal, fifo = json.loads((tmp_path / 'jitter.json').read_text())['rows']
    text = (tmp_path / 'jitter.md').read_text()
    for row in (normal, fifo):
        assert 'error' not in row, row
        # About 30 writes a second in the driver's dispatch log, each interval measured; the
        # same writes, as the emulated arm received them, measured apart.
        assert 45 <= row['n'] <= 75 and 0 <= row['p50_ms'] <= row['p99_ms']
        assert 0 <= row['at_arm_p50_ms'] <= row['at_arm_p99_ms']
    assert (normal['priority'], fifo['priority']) == (0, 50) and not normal['priority_refused']
    assert '| driver | 30 Hz | normal | idle |' in text
    # Applied where the host allows real-time scheduling, else labelled as refused.
    assert ('| driver | 30 Hz | SCHED_FIFO 50 (refused: normal) | idle |' if
            fifo['priority_refused'] else '| driver | 30 Hz | SCHED_FIFO 50 | idle |') in text


@pytest.mark.slow
def test_operator_latency_measures_both_paths(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH / 'operator_latency.py'), '--repeats', '1',
                          '--out', str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads((tmp_path / 'operator_latency.json').read_text())['latency_s']
    (say,), (line,) = report['one-shot `lerobot-lang say`'], report['console line']
    # A one-shot command starts a process and joins the graph; a console line does not.
    assert 0 < line < say < 30
