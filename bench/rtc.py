"""Real-time chunking on the sim graph: the jump where chunks join, with RTC and without.

Usage: .venv/bin/python bench/rtc.py [--latencies 0.1,0.4,1.0] [--sim-seconds 40]
                                     [--train-steps 3000] [--chunk 100] [--work DIR]
                                     [--init-from CHECKPOINT] [--task-time]
                                     [--runs-from RTC_JSON] [--compare RTC_JSON]
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
side by side in one run: ``policy.lerobot.rtc=true`` (LeRobot's guidance; the new chunk
stamped where it joins) and ``policy.lerobot.rtc=false``. From sim_bridge's dispatch log (the
actions applied, in order): every step between consecutive actions is a within-chunk step
(same chunk) or a seam (the first action of a new chunk after the last one played of the
old); the report gives the largest joint change of each, median and p90, and the ratio
seam / within-chunk (target with RTC: at most 1.5 at every latency), plus the starved ticks.
``--task-time`` adds bench/task_time.py at the same latencies (the expert as policy, time per
task against the expert alone; at 0.4 and 1.0 s also with chunks long enough to outlast two
inferences). The
policy's inference log gives each run's latency and when the next chunk lands against how
long a chunk lasts (see CHUNK: RTC needs a chunk of at least twice the inference delay).
``--runs-from`` takes the graph runs of an earlier report (to add ``--task-time``),
``--compare`` shows another chunk length's report beside this one. Output: a table on stdout
and bench/reports/rtc.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import write_report
from bench.models import in_child, offline_report

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
HERE = Path(__file__).resolve().parent
# 100 actions, 3.3 s at the sim's 30 Hz. Inference is one at a time and RTC's chunk starts where
# its inference started (its first `delay` rows are played from the old chunk meanwhile), so a
# chunk stamped at the start of inference i must last until inference i+1 has ended: H * T >=
# cycle + latency, about 2 * latency. At 1.0 s added latency an inference takes 1.3-1.4 s on
# this CPU (guided denoising included), so 60 actions (2 s) starved 40 % of the ticks and the
# chunk that ended a starved gap began past the end of the guidance (the 0.5.x report's 5.5x
# seam ratio at 1.0 s); 100 keeps a margin of 0.5 s for a loaded machine.
CHUNK = 100
SETTLE_S = 3.0  # sim seconds left out at the start of each run (the arm leaves its home pose)


def train_child(out: str, steps: int, chunk: int, init_from: str = '') -> dict:
    """Runs in a fresh process: build the SmolVLA checkpoint and fit it to bimodal chunks
    (starting from the weights of ``init_from``, a checkpoint this function fitted before,
    when given: no weight depends on the chunk length, so a model fitted to 60-action chunks
    only has to learn to stretch its bump over the longer chunk)."""
    from dataclasses import replace
    import shutil as _shutil

    from lerobot_lang_nodes.tiny_models import vla
    # Twice TINY's width and layers: the tiny model's chunks stay noisy (within-chunk steps of
    # 1.3 degrees, median, against 0.6 for this one after 3000 steps), hiding the seams.
    size = replace(vla.TINY, hidden_size=128, intermediate_size=256, layers=4, kv_heads=4)
    t0 = time.perf_counter()
    path = vla.build_smolvla(Path(out) / 'smolvla_bimodal', size=size, chunk_size=chunk,
                             n_action_steps=chunk, num_steps=10, action_scale=1.0)
    if init_from:
        _shutil.copyfile(Path(init_from) / 'model.safetensors', path / 'model.safetensors')
    losses = vla.train_bimodal(path, steps=steps, batch_size=32)
    return {'path': str(path), 'train_s': round(time.perf_counter() - t0, 1),
            'loss_first': round(float(np.mean(losses[:20])), 4),
            'loss_last': round(float(np.mean(losses[-20:])), 4), 'steps': steps,
            'chunk': chunk, 'init_from': str(init_from)}


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


def inference_figures(records: list[dict], chunk: int) -> dict[str, Any]:
    """What the chunk length must cover, from the policy's inference log (monotonic s): the
    latency, the cycle (start to next start: one inference at a time) and ``ready``, the
    time from an inference's start to the end of the next one. A chunk stamped where its
    inference started (RTC: where it joins the old one) must last that long, or the queue
    runs dry before its successor lands."""
    done = sorted((r for r in records if r['outcome'] == 'published'), key=lambda r: r['start'])
    if len(done) < 3:
        return {}
    done = done[len(done) // 10:]  # the first inferences are slower (warm-up)
    lat = [r['latency_s'] for r in done]
    cycle = [b['start'] - a['start'] for a, b in zip(done, done[1:])]
    ready = [b['end'] - a['start'] for a, b in zip(done, done[1:])]
    delays = [r['rtc_delay'] for r in done if r.get('rtc_delay') is not None]

    def pct(values: list[float], q: float) -> float | None:
        return round(float(np.percentile(values, q)), 3) if values else None
    return {'latency_p50_s': pct(lat, 50), 'latency_max_s': pct(lat, 100),
            'cycle_p50_s': pct(cycle, 50), 'ready_p50_s': pct(ready, 50),
            'ready_max_s': pct(ready, 100), 'chunk_s': round(chunk / 30.0, 3),
            'late_fraction': round(sum(r > chunk / 30.0 for r in ready) / len(ready), 3),
            'rtc_delay_p50': pct(delays, 50), 'rtc_delay_max': pct(delays, 100),
            'outcomes': {k: sum(r['outcome'] == k for r in records)
                         for k in sorted({r['outcome'] for r in records})}}


def graph_run(checkpoint: str, latency: float, rtc: str, sim_seconds: float,
              out: Path, chunk: int) -> dict[str, Any]:
    name = f'rtc_{rtc}_{int(round(latency * 1000))}ms'
    inference_log = Path(tempfile.mkdtemp(prefix='bench_rtc_inf_')) / 'inference.jsonl'
    cmd = [sys.executable, str(HERE / 'sim_graph.py'), '--sim-seconds',
           str(sim_seconds + SETTLE_S), '--no-cycle', '--keep-logs', '--out', str(out),
           '--name', name,
           '--param', 'policy.backend=lerobot', '--param', f'policy.model_path={checkpoint}',
           '--param', 'policy.condition_on=task', '--param', f'policy.lerobot.rtc={rtc}',
           '--param', f'policy.added_latency_s={latency}',
           # Refill with 3/4 of the chunk left: the next inference starts early enough at
           # every latency (at 1.0 s the queue is below it when a chunk lands, so inference
           # runs back to back).
           '--param', 'sim_bridge.refill_fraction=0.75',
           '--param', 'policy.inference_timeout_s=30.0',
           '--param', f'policy.inference_log_path={inference_log}']
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=6 * sim_seconds + 600)
    kept = re.search(r'node logs kept in (\S+)', proc.stderr)
    report_path = out / f'{name}.json'
    if not kept or not report_path.exists():
        return {'error': f'sim_graph exited {proc.returncode}: {proc.stderr[-1500:]}'}
    from lerobot_lang_nodes.core.dispatch_file import read_dispatch_file
    from lerobot_lang_nodes.core.inference_file import read_inference_file
    folder = Path(kept.group(1))
    try:
        dispatches = read_dispatch_file(folder / 'dispatch.jsonl')
        inferences = read_inference_file(inference_log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(inference_log.parent, ignore_errors=True)
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
            'inference': inference_figures(inferences, chunk),
            'real_time_factor': report['real_time_factor']}


def task_horizon(latency: float) -> int:
    """Scripted chunk length (actions at 30 Hz) that outlasts two inferences at ``latency``
    plus 0.3 s of compute and delivery, in steps of 5: without RTC a chunk is stamped at its
    observation and its successor lands a cycle plus a latency later."""
    return int(5 * math.ceil((2 * latency + 0.3) * 30 / 5))


def task_configs(latencies: list[float]) -> list[str]:
    """Per latency: the shipped chunk_horizon (15, 0.5 s), and where 0.5 s is shorter than
    two inferences, chunks sized by ``task_horizon``. A 15-action chunk at 1.0 s is left out:
    every one of its actions is in the past when it lands (the executor discards it as
    expired), so the arm never moves."""
    out = []
    for lat in latencies:
        ms = int(round(lat * 1000))
        if lat < 0.5:
            out.append(f'latency_{ms}ms:policy.added_latency_s={lat}')
        horizon = task_horizon(lat)
        if horizon > 15:
            out.append(f'latency_{ms}ms_h{horizon}:policy.added_latency_s={lat},'
                       f'policy.chunk_horizon={horizon}')
    return out


def task_times(latencies: list[float], out: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / 'task_time.py'), '--no-interjections', '--episodes', '6',
           '--out', str(out), '--name', 'rtc_task_time']
    for config in task_configs(latencies):
        cmd += ['--config', config]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    path = out / 'rtc_task_time.json'
    if not path.exists():
        return {'error': f'task_time exited {proc.returncode}: {proc.stderr[-1500:]}'}
    return json.loads(path.read_text())


def seam_table(runs: dict[str, Any]) -> list[str]:
    lines = ['| added latency s | RTC | within p50 | seam p50 | seam / within (p50) | '
             'within p90 | seam p90 | seam / within (p90) | seam max | seams | starved ticks |'
             ' inference p50 / max s | next chunk lands p50 / max s | chunks landing after '
             'the current one ended | RTC delay p50 / max (steps) |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    order = sorted(runs, key=lambda k: (float(k.split('/')[0]), k.split('/')[1] != 'on'))
    for key in order:
        run = runs[key]
        lat, rtc = key.split('/')
        if 'error' in run:
            lines.append(f'| {lat} | {rtc} | error: {run["error"][:200]} |' + ' |' * 12)
            continue
        s, inf = run['seams'], run.get('inference') or {}
        lines.append(f"| {lat} | {rtc} | {s['within_p50']} | {s['seam_p50']} | "
                     f"{s['ratio_p50']} | {s['within_p90']} | {s['seam_p90']} | "
                     f"{s['ratio_p90']} | {s['seam_max']} | {s['seams']} | "
                     f"{run['starved_ticks']} | {inf.get('latency_p50_s', '-')} / "
                     f"{inf.get('latency_max_s', '-')} | {inf.get('ready_p50_s', '-')} / "
                     f"{inf.get('ready_max_s', '-')} | "
                     f"{round(100 * inf['late_fraction']) if 'late_fraction' in inf else '-'} % | "
                     f"{inf.get('rtc_delay_p50') or '-'} / {inf.get('rtc_delay_max') or '-'} |")
    return lines


GEOMETRY = (
    'Why the chunk length matters at 1.0 s. One inference runs at a time, and a chunk is '
    'stamped where its inference started (RTC: where it joins the chunk being played; '
    'without RTC: at its observation), so its first `delay` actions are played from the old '
    'chunk while it is computed and it is useful from the moment it lands until it ends. '
    'Its successor starts when it has landed (the queue is then below the refill threshold) '
    'and lands one cycle plus one latency after its start: "next chunk lands" is that time, '
    'from the start of one inference to the end of the next, on the policy\'s clock. A chunk '
    'shorter than it runs dry (starved ticks: the arm holds) and the chunk that ends the gap '
    'is entered past the actions it was guided to continue, so the seam is unguided: RTC '
    'needs a chunk of at least twice the inference delay (Black et al. 2025: d <= H - s), '
    'whatever the refill point. {evidence}')


def markdown(report: dict) -> str:
    ck = report['checkpoint']
    lines = ['# Real-time chunking on the sim graph', '',
             f"{report['date']}, {report['machine']['cpus']} CPUs (shared: load average "
             f"{round(report['machine'].get('loadavg_start', 0), 1)} at the start). Policy: "
             "SmolVLA fitted "
             f"to bimodal chunks ({ck.get('steps')} steps"
             + (', starting from the model fitted to 60-action chunks below'
                if ck.get('init_from') else '')
             + f"; loss {ck.get('loss_first')} -> "
             f"{ck.get('loss_last')}), {ck.get('chunk', CHUNK)}-action chunks at 30 Hz "
             f"({round(ck.get('chunk', CHUNK) / 30.0, 2)} s), {report['sim_seconds']} sim s "
             f"per run after {SETTLE_S} s settling, refill with 3/4 of a chunk left; RTC "
             'guidance fading over 10 actions after the delay, linear schedule, guidance '
             'weight 10.', '',
             'Largest joint change between consecutive applied actions (rad): within a chunk '
             'and at a seam (first action of a new chunk after the last of the old). Target '
             'with RTC: seam / within at most 1.5 at every latency. Inference figures from the '
             'policy\'s inference log (the first tenth of each run left out).', '',
             *seam_table(report['runs'])]
    before = report.get('compare')
    if before:
        bck = before['checkpoint']
        def late(runs: dict[str, Any]) -> str:
            return ', '.join(f"{k}: {round(100 * r['inference']['late_fraction'])} %"
                             for k, r in runs.items()
                             if k.startswith('1.0/') and 'late_fraction' in
                             (r.get('inference') or {}))
        lat = [r['inference']['latency_p50_s'] for k, r in before['runs'].items()
               if (r.get('inference') or {}).get('latency_p50_s') is not None]
        evidence = (f"With {bck.get('chunk')}-action chunks ({round(bck.get('chunk') / 30, 2)} "
                    f"s; {before['sim_seconds']} sim s per run, {before['date']}, table below) "
                    f"an inference at 1.0 s added latency took {min(lat, default='?')}-"
                    f"{max(lat, default='?')} s (median), the next chunk landed "
                    f"{late(before['runs'])} of the time after the current one had ended, the "
                    'arm starved and the guided left-over was clipped to what was left (RTC '
                    f"delay median well below the latency's steps); with "
                    f"{ck.get('chunk', CHUNK)} actions: {late(report['runs'])}.")
        lines += ['', '## ' + GEOMETRY.split('. ', 1)[0], '',
                  GEOMETRY.split('. ', 1)[1].format(evidence=evidence), '',
                  f"The same checkpoint family with {bck.get('chunk')}-action chunks "
                  f"({bck.get('steps')} steps, loss {bck.get('loss_last')}), 1.0 s only:", '',
                  *seam_table(before['runs'])]
    tt = report.get('task_time')
    if tt:
        lines += ['', '## Time per task against the expert (scripted expert as the policy)', '',
                  'bench/task_time.py at the same added latencies: the scripted expert as the '
                  'policy through the sim graph (no RTC: it is not a flow-matching policy), '
                  f"{(tt.get('run') or {}).get('episodes', 6)} episodes, against the expert "
                  'alone on the same episodes. `_hN`: chunks of '
                  'N actions instead of the shipped 15 (0.5 s), sized to outlast two '
                  'inferences (task_horizon); a 15-action chunk at 1.0 s is not run: every '
                  'action is in the past when it lands, so the executor discards each as '
                  'expired and the arm never moves.', '']
        if 'error' in tt:
            lines.append(f"error: {tt['error']}")
        else:
            lines += ['| configuration | median task time (s) | ratio to expert | median '
                      'per-episode ratio | successes | starved ticks (after the first '
                      'dispatch) | stale discards |', '|---|---|---|---|---|---|---|']
            for name, r in tt['summary'].items():
                lines.append(f"| {name} | {r['median_s']} | {r['ratio_to_expert']} | "
                             f"{r.get('median_episode_ratio', '-')} | {r['successes']} | "
                             f"{r.get('starved_ticks', '-')} "
                             f"({r.get('starved_after_first_dispatch', '-')}) | "
                             f"{r.get('stale_discards', '-')} |")
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--latencies', type=lambda t: [float(x) for x in t.split(',')],
                        default=[0.1, 0.4, 1.0], metavar='S,S,...')
    parser.add_argument('--sim-seconds', type=float, default=40.0)
    parser.add_argument('--train-steps', type=int, default=3000)
    parser.add_argument('--chunk', type=int, default=CHUNK,
                        help='actions per chunk of the checkpoint trained (and of one reused '
                             'from --work whose record does not say)')
    parser.add_argument('--init-from', type=Path, default=None,
                        help='start the fit from this earlier fitted checkpoint (another '
                             'chunk length is fine) instead of random weights')
    parser.add_argument('--work', type=Path, default=None,
                        help='folder for the trained checkpoint, kept and reused by a later '
                             'run (default: a temporary folder)')
    parser.add_argument('--task-time', action='store_true',
                        help='also run bench/task_time.py at the same latencies')
    parser.add_argument('--runs-from', type=Path, default=None,
                        help='take the checkpoint and the graph runs from this earlier '
                             'rtc.json instead of running them (e.g. to add --task-time)')
    parser.add_argument('--compare', type=Path, default=None,
                        help='an rtc.json of another chunk length, shown beside this one')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {**offline_report(1), 'sim_seconds': args.sim_seconds,
                              'runs': {}}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.compare:
        before = json.loads(args.compare.read_text())
        report['compare'] = {k: before[k] for k in ('date', 'checkpoint', 'sim_seconds', 'runs')}
    if args.runs_from:
        earlier = json.loads(args.runs_from.read_text())
        for key in ('date', 'machine', 'checkpoint', 'sim_seconds', 'runs'):
            report[key] = earlier[key]
    else:
        graph_runs(args, report)
    if args.task_time:
        report['task_time'] = task_times(args.latencies, args.out)
    write_report(args.out, 'rtc', report, markdown(report))
    return 1 if any('error' in r for r in report['runs'].values()) else 0


def graph_runs(args: argparse.Namespace, report: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix='bench_rtc_') as tmp:
        work = args.work or Path(tmp)
        trained = work / 'checkpoint.json'
        if trained.exists():
            report['checkpoint'] = json.loads(trained.read_text())
        else:
            report['checkpoint'] = in_child(train_child, str(work), args.train_steps,
                                            args.chunk, str(args.init_from or ''))
            work.mkdir(parents=True, exist_ok=True)
            trained.write_text(json.dumps(report['checkpoint']))
        print('checkpoint', json.dumps(report['checkpoint']), flush=True)
        path = report['checkpoint'].get('path')
        chunk = int(report['checkpoint'].get('chunk', args.chunk))
        for lat in args.latencies:
            for rtc in ('true', 'false'):
                key = f'{lat}/{"on" if rtc == "true" else "off"}'
                report['runs'][key] = (graph_run(path, lat, rtc, args.sim_seconds, args.out,
                                                 chunk)
                                       if path else {'error': 'no checkpoint'})
                print(key, json.dumps(report['runs'][key]), flush=True)


if __name__ == '__main__':
    sys.exit(main())
