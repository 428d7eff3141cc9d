"""Run the benchmarks and write bench/REPORT.md: every report's table plus PNG plots.

Usage:
    .venv/bin/python bench/report.py --run        # run them all (about an hour on 2 cores)
    .venv/bin/python bench/report.py              # only assemble the reports already there

With --run, each benchmark runs as a user runs it, one after the other (never side by side:
they would measure each other): the simulated graph, time per task (current rules against the
old ones), the starvation sweep against injected inference latency, image transport, jitter,
operator latency, the recorder, the fault suite, the models, VLAs at real size and real-time
chunking. Then REPORT.md collects their
Markdown reports (each headed by the file it comes from) and draws, with matplotlib, the plots
the tables cannot show: starved ticks and task time against inference latency, image latency
per stream and profile, and task time per configuration. A benchmark that failed is listed
with its exit code; the others are still reported. Last, the report tables bench/README.md
shows (between `<!-- table N of reports/NAME.md -->` and `<!-- end of table -->`) are copied
anew from the reports, so that file never quotes a figure by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPORTS = BENCH / 'reports'
README = BENCH / 'README.md'
# bench/README.md shows tables of the committed reports between these markers, never typed by
# hand: this script copies them anew from the reports (test/bench/test_bench_small.py checks
# that they match).
TABLE_BLOCK = re.compile(r'(<!-- table (?P<n>\d+) of reports/(?P<name>[\w.-]+)\.md -->\n)'
                         r'.*?(?=<!-- end of table -->)', re.S)
# (report name, command after the interpreter); run in this order, one at a time.
RUNS: list[tuple[str, list[str]]] = [
    ('sim_graph', ['sim_graph.py', '--sim-seconds', '60']),
    ('sim_graph_pool_executor', ['sim_graph.py', '--sim-seconds', '60', '--executor', 'pool',
                                 '--name', 'sim_graph_pool_executor']),
    ('task_time', ['task_time.py', '--episodes', '10', '--reaction-load', 'generation']),
    ('task_time_latency', ['task_time.py', '--latencies', '0.05,0.15,0.4', '--episodes', '6',
                           '--name', 'task_time_latency']),
    ('image_transport', ['image_transport.py', '--seconds', '10']),
    ('jitter', ['jitter.py', '--seconds', '20']),
    ('operator_latency', ['operator_latency.py', '--repeats', '10']),
    ('sim_graph_640x480', ['sim_graph.py', '--sim-seconds', '60', '--name', 'sim_graph_640x480',
                           '--param', 'sim_bridge.image_width=640',
                           '--param', 'sim_bridge.image_height=480']),
    ('recorder', ['recorder.py']),
    ('remote', ['remote.py']),
    ('faults', ['faults.py']),
    ('models', ['models.py']),
    ('vla', ['vla.py']),
    ('rtc', ['rtc.py']),
    ('robocasa_bridge', ['robocasa_bridge.py']),
]
ORDER = ('task_time', 'task_time_latency', 'sim_graph', 'sim_graph_pool_executor',
         'sim_graph_640x480', 'jitter',
         'image_transport', 'operator_latency', 'faults', 'models', 'vla', 'rtc',
         'recorder', 'remote', 'so101_bus', 'leader_rate', 'closed_loop', 'robocasa_bridge')


def run_all(only: list[str] | None) -> dict[str, int]:
    codes = {}
    for name, cmd in RUNS:
        if only and name not in only:
            continue
        print(f'[report] running {name}: {" ".join(cmd)}', flush=True)
        start = time.monotonic()
        codes[name] = subprocess.run([sys.executable, str(BENCH / cmd[0]), *cmd[1:]],
                                     cwd=BENCH.parent).returncode
        print(f'[report] {name} exited {codes[name]} after {time.monotonic() - start:.0f} s',
              flush=True)
    return codes


def load(name: str) -> dict[str, Any] | None:
    path = REPORTS / f'{name}.json'
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _pyplot() -> Any:
    """matplotlib's pyplot drawing to files only (no display on these machines)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def _save(fig: Any, out: Path) -> bool:
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    _pyplot().close(fig)
    return True


def plot_latency_sweep(report: dict[str, Any], out: Path) -> bool:
    plt = _pyplot()
    from bench.harness import median
    from bench.task_time import starved_per_minute
    graphs, max_sim = report['graphs'], report['run'].get('max_sim_s', 30.0)
    lat = sorted({int(n[2:-2]) for n in graphs if n.startswith(('a_', 'b_'))})
    if not lat:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for rule, label in (('a', "seeds' rules (refill when empty, every change flushes)"),
                        ('b', 'current rules')):
        ax1.plot(lat, [starved_per_minute(graphs[f'{rule}_{ms}ms'], max_sim) for ms in lat],
                 'o-', label=label)
        ax2.plot(lat, [median(graphs[f'{rule}_{ms}ms']['times_s']) for ms in lat], 'o-',
                 label=label)
    ax1.set(xlabel='added inference latency (ms)', ylabel='starved ticks / min',
            title='Starvation after the first dispatch')
    ax2.set(xlabel='added inference latency (ms)', ylabel='median task time (sim s)',
            title='Task time')
    ax1.legend(fontsize=8)
    return _save(fig, out)


def plot_image_transport(report: dict[str, Any], out: Path) -> bool:
    plt = _pyplot()
    profiles = {k: v for k, v in report['profiles'].items() if 'streams' in v}
    if not profiles:
        return False
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(profiles)
    names = sorted(next(iter(profiles.values()))['streams'])
    for i, (label, prof) in enumerate(profiles.items()):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [prof['streams'][n]['p50_ms'] or 0 for n in names], width,
               label=f'{label} p50')
        ax.scatter(xs, [prof['streams'][n]['p99_ms'] or 0 for n in names], marker='_', s=200,
                   color='black')
    ax.set_xticks([j + width / 2 for j in range(len(names))], names, rotation=30, fontsize=8)
    ax.set(ylabel='latency (ms); bars p50, ticks p99', title='Image transport per stream')
    ax.legend(fontsize=8)
    return _save(fig, out)


def plot_task_time(report: dict[str, Any], out: Path) -> bool:
    plt = _pyplot()
    rows = {n: r for n, r in report['summary'].items() if r.get('median_s') is not None}
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(list(rows), [r['median_s'] for r in rows.values()])
    ax.set(ylabel='median task time (sim s)', title='Time per task')
    return _save(fig, out)


PLOTS = {'task_time_latency': plot_latency_sweep, 'image_transport': plot_image_transport,
         'task_time': plot_task_time}


def report_tables(name: str) -> list[str]:
    """The Markdown tables of reports/<name>.md, in order."""
    tables: list[list[str]] = [[]]
    for line in (REPORTS / f'{name}.md').read_text().splitlines():
        if line.startswith('|'):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    return ['\n'.join(t) for t in tables if t]


def with_report_tables(text: str) -> str:
    """``text`` (bench/README.md) with every marked table copied anew from its report."""
    def fill(m: re.Match) -> str:
        tables = report_tables(m['name'])
        n = int(m['n'])
        if not 1 <= n <= len(tables):
            raise ValueError(f'reports/{m["name"]}.md has {len(tables)} tables, not {n}')
        return m[1] + tables[n - 1] + '\n'
    return TABLE_BLOCK.sub(fill, text)


def assemble(codes: dict[str, int]) -> str:
    lines = ['# Benchmark report', '',
             f'Assembled {time.strftime("%Y-%m-%d %H:%M")} on {os.cpu_count()} cores by '
             '`bench/report.py`; each section is the report its benchmark wrote (see '
             '[bench/README.md](README.md) for what each measures). Figures are medians and '
             'ratios of runs made side by side in one invocation; absolute times depend on '
             'the machine and its load.', '']
    failed = {n: c for n, c in codes.items() if c != 0}
    if failed:
        lines += ['Benchmarks that failed in this run (their older reports may follow): '
                  + ', '.join(f'`{n}` (exit {c})' for n, c in failed.items()), '']
    for name in ORDER:
        md = REPORTS / f'{name}.md'
        if not md.exists():
            continue
        lines += [f'## {name}', '', f'From `reports/{name}.md`:', '']
        body = md.read_text().splitlines()
        lines += [('#' + line if line.startswith('#') else line) for line in body]
        data = load(name)
        plot = PLOTS.get(name)
        if data is not None and plot is not None:
            png = REPORTS / f'{name}.png'
            try:
                drawn = plot(data, png)
            except (KeyError, TypeError, ValueError) as exc:
                lines += ['', f'(no plot: {type(exc).__name__}: {exc})']
                drawn = False
            if drawn:
                lines += ['', f'![{name}](reports/{name}.png)']
        lines.append('')
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--run', action='store_true', help='run the benchmarks first')
    parser.add_argument('--only', nargs='*', default=None, metavar='NAME',
                        help=f'with --run: only these of {[n for n, _ in RUNS]}')
    args = parser.parse_args(argv)
    codes = run_all(args.only) if args.run else {}
    text = assemble(codes)
    (BENCH / 'REPORT.md').write_text(text)
    print(f'wrote {BENCH / "REPORT.md"}')
    readme = README.read_text()
    if with_report_tables(readme) != readme:
        README.write_text(with_report_tables(readme))
        print(f"{README}: the reports' tables copied anew")
    return 1 if any(codes.values()) else 0


if __name__ == '__main__':
    sys.exit(main())
