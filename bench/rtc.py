"""Real-time chunking on the sim graph: the jump where chunks join, with RTC and without.

Usage: .venv/bin/python bench/rtc.py [--latencies 0.1,0.4,1.0] [--sim-seconds 40]
                                     [--train-steps 3000] [--work DIR] [--task-time]
                                     [--out bench/reports]

The policy is a flow-matching one: a SmolVLA checkpoint built with LeRobot's own classes
(lerobot_lang_nodes.tiny_models.vla) and fitted with LeRobot's flow-matching loss to
``bimodal_chunks``: from the state, a slow pull to a centre pose plus an 8-degree bump that
starts at each chunk's first row and peaks at its middle (to one side or the other, drawn per
example; the fitted model mostly keeps one side). A chunk computed while half of the previous
one is left starts its bump again where the previous one is at its peak: the jump real-time
chunking is for. (It knows nothing of the scene: it does not do the tasks, so the task time
below is the scripted expert's.)

For each added latency (``policy.added_latency_s``: the observation ages while the policy
waits, as with a slower model) the sim graph runs twice for ``--sim-seconds`` of sim time,
side by side in one run: ``policy.rtc=true`` (LeRobot's guidance; the new chunk stamped where
it joins) and ``policy.rtc=false``. From sim_bridge's dispatch log (the actions applied, in
order): every step between consecutive actions is a within-chunk step (same chunk) or a seam
(the first action of a new chunk after the last one played of the old); the report gives the
largest joint change of each, median and p90, and the ratio seam / within-chunk (target with
RTC: at most 1.5 at every latency), plus the starved ticks. ``--task-time`` adds
bench/task_time.py at the same latencies (the expert as policy, time per task against the
expert alone). Output: a table on stdout and bench/reports/rtc.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from models import in_child, offline_report, write_report

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
HERE = Path(__file__).resolve().parent
CHUNK = 60  # 2 s at the sim's 30 Hz: it outlasts the 1 s latency (refill at half)
SETTLE_S = 3.0  # sim seconds left out at the start of each run (the arm leaves its home pose)


def train_child(out: str, steps: int) -> dict:
    """Runs in a fresh process: build the SmolVLA checkpoint and fit it to bimodal chunks."""
    from dataclasses import replace

    from lerobot_lang_nodes.tiny_models import vla
    # Twice TINY's width and layers: the tiny model's chunks stay noisy (within-chunk steps of
    # 1.3 degrees, median, against 0.6 for this one after 3000 steps), hiding the seams.
    size = replace(vla.TINY, hidden_size=128, intermediate_size=256, layers=4, kv_heads=4)
    t0 = time.perf_counter()
    path = vla.build_smolvla(Path(out) / 'smolvla_bimodal', size=size, chunk_size=CHUNK,
                             n_action_steps=CHUNK, num_steps=10, action_scale=1.0)
    losses = vla.train_bimodal(path, steps=steps, batch_size=32)
    return {'path': str(path), 'train_s': round(time.perf_counter() - t0, 1),
            'loss_first': round(float(np.mean(losses[:20])), 4),
            'loss_last': round(float(np.mean(losses[-20:])), 4), 'steps': steps}


def seam_figures(dispatches: list[dict], t0: float) -> dict[str, Any]:
    """Largest joint change (rad) between consecutive applied actions, split into seams
    (another chunk) and within-chunk steps."""
    rows = sorted((d for d in dispatches if d['t'] >= t0), key=lambda d: d['t'])
    within, seams = [], []
    for a, b in zip(rows, rows[1:]):
        jump = float(np.max(np.abs(np.subtract(b['action'], a['action']))))
        (within if a['sequence'] == b['sequence'] else seams).append(jump)

    def pct(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(values, q)), 5) if values else None
    out = {'within_p50': pct(within, 50), 'within_p90': pct(within, 90),
           'seam_p50': pct(seams, 50), 'seam_p90': pct(seams, 90),
           'seam_max': pct(seams, 100), 'seams': len(seams), 'steps': len(within)}
    out['ratio_p50'] = (round(out['seam_p50'] / out['within_p50'], 2)
                        if seams and within and out['within_p50'] else None)
    out['ratio_p90'] = (round(out['seam_p90'] / out['within_p90'], 2)
                        if seams and within and out['within_p90'] else None)
    return out


def graph_run(checkpoint: str, latency: float, rtc: str, sim_seconds: float,
              out: Path) -> dict[str, Any]:
    name = f'rtc_{rtc}_{int(round(latency * 1000))}ms'
    cmd = [sys.executable, str(HERE / 'sim_graph.py'), '--sim-seconds',
           str(sim_seconds + SETTLE_S), '--no-cycle', '--keep-logs', '--out', str(out),
           '--name', name,
           '--param', 'policy.backend=lerobot', '--param', f'policy.model_path={checkpoint}',
           '--param', 'policy.condition_on=task', '--param', f'policy.rtc={rtc}',
           '--param', f'policy.added_latency_s={latency}',
           # Refill with 1.5 s of the 2 s chunk left: it outlasts the 1 s latency, so the
           # chunks overlap at every latency (0.5 starved 40 % of the ticks at 1 s).
           '--param', 'sim_bridge.refill_fraction=0.75',
           '--param', 'policy.inference_timeout_s=30.0']
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=6 * sim_seconds + 600)
    kept = re.search(r'node logs kept in (\S+)', proc.stderr)
    report_path = out / f'{name}.json'
    if not kept or not report_path.exists():
        return {'error': f'sim_graph exited {proc.returncode}: {proc.stderr[-1500:]}'}
    from lerobot_lang_nodes.core.dispatch_file import read_dispatch_file
    folder = Path(kept.group(1))
    try:
        dispatches = read_dispatch_file(folder / 'dispatch.jsonl')
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report = json.loads(report_path.read_text())
    report_path.unlink()
    (out / f'{name}.md').unlink(missing_ok=True)
    t0 = min((d['t'] for d in dispatches), default=0.0) + SETTLE_S
    return {'seams': seam_figures(dispatches, t0),
            'starved_ticks': report['executor']['starved_ticks'],
            'starved_fraction': report['executor']['starved_fraction'],
            'rejected_invalid': report['executor']['rejected_invalid'],
            'discarded_stale': report['executor']['discarded_stale'],
            'chunks_received': report['chunk_latency_ms']['chunks_received'],
            'real_time_factor': report['real_time_factor']}


def task_times(latencies: list[float], out: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / 'task_time.py'), '--no-interjections', '--episodes', '6',
           '--out', str(out), '--name', 'rtc_task_time']
    for lat in latencies:
        cmd += ['--config', f'latency_{int(round(lat * 1000))}ms:policy.added_latency_s={lat}']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    path = out / 'rtc_task_time.json'
    if not path.exists():
        return {'error': f'task_time exited {proc.returncode}: {proc.stderr[-1500:]}'}
    return json.loads(path.read_text())


def markdown(report: dict) -> str:
    lines = ['# Real-time chunking on the sim graph', '',
             f"{report['date']}, {report['machine']['cpus']} CPUs. Policy: SmolVLA fitted to "
             f"bimodal chunks ({report['checkpoint'].get('steps')} steps, loss "
             f"{report['checkpoint'].get('loss_first')} -> "
             f"{report['checkpoint'].get('loss_last')}), {CHUNK}-action chunks at 30 Hz, "
             f"{report['sim_seconds']} sim s per run after {SETTLE_S} s settling, refill "
             'with 3/4 of a chunk left; RTC guidance fading over 10 actions after the delay, '
             'linear schedule, guidance weight 10.', '',
             'Largest joint change between consecutive applied actions (rad): within a chunk '
             'and at a seam (first action of a new chunk after the last of the old).', '',
             '| added latency s | RTC | within p50 | seam p50 | seam / within (p50) | '
             'within p90 | seam p90 | seam / within (p90) | seam max | seams | starved ticks |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for key, run in report['runs'].items():
        lat, rtc = key.split('/')
        if 'error' in run:
            lines.append(f'| {lat} | {rtc} | error: {run["error"][:200]} |' + ' |' * 8)
            continue
        s = run['seams']
        lines.append(f"| {lat} | {rtc} | {s['within_p50']} | {s['seam_p50']} | "
                     f"{s['ratio_p50']} | {s['within_p90']} | {s['seam_p90']} | "
                     f"{s['ratio_p90']} | {s['seam_max']} | {s['seams']} | "
                     f"{run['starved_ticks']} |")
    tt = report.get('task_time')
    if tt:
        lines += ['', '## Time per task against the expert (scripted expert as the policy)', '']
        if 'error' in tt:
            lines.append(f"error: {tt['error']}")
        else:
            lines.append('```')
            lines.append(json.dumps(tt.get('summary', tt.get('ratios', {})), indent=1)[:3000])
            lines.append('```')
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--latencies', type=lambda t: [float(x) for x in t.split(',')],
                        default=[0.1, 0.4, 1.0], metavar='S,S,...')
    parser.add_argument('--sim-seconds', type=float, default=40.0)
    parser.add_argument('--train-steps', type=int, default=3000)
    parser.add_argument('--work', type=Path, default=None,
                        help='folder for the trained checkpoint, kept and reused by a later '
                             'run (default: a temporary folder)')
    parser.add_argument('--task-time', action='store_true',
                        help='also run bench/task_time.py at the same latencies')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {**offline_report(1), 'sim_seconds': args.sim_seconds,
                              'runs': {}}
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix='bench_rtc_') as tmp:
        work = args.work or Path(tmp)
        trained = work / 'checkpoint.json'
        if trained.exists():
            report['checkpoint'] = json.loads(trained.read_text())
        else:
            report['checkpoint'] = in_child(train_child, str(work), args.train_steps)
            work.mkdir(parents=True, exist_ok=True)
            trained.write_text(json.dumps(report['checkpoint']))
        print('checkpoint', json.dumps(report['checkpoint']), flush=True)
        path = report['checkpoint'].get('path')
        for lat in args.latencies:
            for rtc in ('true', 'false'):
                key = f'{lat}/{"on" if rtc == "true" else "off"}'
                report['runs'][key] = (graph_run(path, lat, rtc, args.sim_seconds, args.out)
                                       if path else {'error': 'no checkpoint'})
                print(key, json.dumps(report['runs'][key]), flush=True)
    if args.task_time:
        report['task_time'] = task_times(args.latencies, args.out)
    write_report(args.out, 'rtc', report, markdown(report))
    return 1 if any('error' in r for r in report['runs'].values()) else 0


if __name__ == '__main__':
    sys.exit(main())
