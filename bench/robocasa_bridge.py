"""RoboCasa bridge: environment step time and real-time factor against camera count and size.

Usage:
    .venv/bin/python bench/robocasa_bridge.py                 # 128 and 256 px, host and node
    .venv/bin/python bench/robocasa_bridge.py --quick         # a smoke run: 64 px, few steps
    .venv/bin/python bench/robocasa_bridge.py --sizes 128,256,512 --node-seconds 0

Two measurements, in one run, of the stock robosuite scene (simulator 'robosuite': Lift with a
PandaOmron and RoboCasa's three views; no kitchen assets needed), holding still (no action):

* host: the ROS-free KitchenHost (lerobot_lang_nodes/robocasa/host.py) in the bridge's own
  environment (.venv-robocasa; this script re-executes itself there with --host-worker when
  started from another interpreter). One host per configuration (no cameras = the physics-only
  reference, and the three views robot0_agentview_left, robot0_eye_in_hand,
  robot0_agentview_right at each --sizes), all built first, then stepped in --rounds rounds of
  --steps steps each, the configuration order rotated every round, so drift in the machine's
  load falls on every configuration alike. Each `host.step()` is timed (robosuite renders every
  view in every step); medians, p90 and each round's median are reported.
* node: `robocasa_bridge` in its own process from .venv-robocasa (AMENT_PREFIX_PATH that
  prefix), over DDS in a private ROS domain (domain_coordinator, discovery LOCALHOST), with
  real_time_factor 0 (as fast as the CPU allows) and the shipped camera_hz, for each size
  with the three views. A probe subscribes to /clock, the three image topics and /diagnostics.
  Reported: the node's own `real_time_factor` and `step_ms_p50` (status
  '... robocasa simulation loop'), the real-time factor over the measuring window from /clock,
  the wall time per control tick (median interval between /clock arrivals) and the node's CPU.
  tick - step is what the ROS side (executor, publishing, images) adds to every tick.

Real-time factor = control period / step time (20 Hz: 50 ms). Writes
bench/reports/robocasa_bridge.{json,md}. Every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from bench.harness import write_report

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
REPORT_DIR = BENCH / 'reports'
VIEWS = ('robot0_agentview_left', 'robot0_eye_in_hand', 'robot0_agentview_right')
MODULE = 'lerobot_lang_nodes.nodes.robocasa_bridge_node'
DIAG_SUFFIX = 'robocasa simulation loop'
# A node step below this fraction of the host's at the same size means the views were not
# really rendered (see the warning in markdown()).
SUSPECT_STEP_RATIO = 0.5
PRESETS = {
    'full': {'sizes': [128, 256], 'steps': 40, 'rounds': 4, 'warmup': 5, 'node_seconds': 30.0,
             'node_warmup': 5.0},
    'quick': {'sizes': [64], 'steps': 5, 'rounds': 2, 'warmup': 2, 'node_seconds': 4.0,
              'node_warmup': 2.0},
}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float('nan')
    k = (len(s) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def label(cameras: int, size: int) -> str:
    return 'physics only' if cameras == 0 else f'{cameras} views {size} px'


# --- host: runs inside .venv-robocasa ----------------------------------------------------
def host_worker(sizes: list[int], steps: int, rounds: int, warmup: int, hz: float,
                physics: bool) -> dict[str, Any]:
    os.environ.setdefault('MUJOCO_GL', 'egl')
    import mujoco
    import robosuite

    from lerobot_lang_nodes.robocasa.envs import factory, reseed_rng
    from lerobot_lang_nodes.robocasa.host import KitchenHost, KitchenSpec
    configs = ([(0, 0)] if physics else []) + [(len(VIEWS), s) for s in sizes]
    hosts, build_s = {}, {}
    for cams, size in configs:
        start = time.perf_counter()
        spec = KitchenSpec(simulator='robosuite', cameras=VIEWS[:cams], image_size=size or 64,
                           control_hz=hz)
        hosts[(cams, size)] = KitchenHost(spec, factory('robosuite'), reseed_rng)
        build_s[(cams, size)] = time.perf_counter() - start
        print(f'[host] built {label(cams, size)} in {build_s[(cams, size)]:.1f} s',
              file=sys.stderr, flush=True)
    times: dict[tuple[int, int], list[list[float]]] = {c: [] for c in configs}
    for host in hosts.values():  # first renders and caches are not what we measure
        for _ in range(warmup):
            host.step(None)
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for c in order:
            host, round_ms = hosts[c], []
            for _ in range(steps):
                t0 = time.perf_counter()
                host.step(None)
                round_ms.append((time.perf_counter() - t0) * 1000.0)
            times[c].append(round_ms)
        print(f'[host] round {r + 1}/{rounds}: ' + ', '.join(
            f'{label(*c)} {statistics.median(times[c][-1]):.1f} ms' for c in configs),
              file=sys.stderr, flush=True)
    # The observation the node reads on a camera tick (upright copies of every view).
    obs_ms = {}
    for c, host in hosts.items():
        if c[0]:
            t0 = time.perf_counter()
            for _ in range(5):
                host.images()
                host.state()
            obs_ms[c] = (time.perf_counter() - t0) * 1000.0 / 5
    for host in hosts.values():
        host.close()
    period_ms = 1000.0 / hz
    rows = []
    for c in configs:
        flat = [v for rnd in times[c] for v in rnd]
        p50 = statistics.median(flat)
        rows.append({'config': label(*c), 'cameras': c[0], 'size_px': c[1], 'steps': len(flat),
                     'build_s': round(build_s[c], 2), 'step_ms_p50': round(p50, 2),
                     'step_ms_p90': round(pct(flat, 90), 2),
                     'round_medians_ms': [round(statistics.median(r), 2) for r in times[c]],
                     'real_time_factor': round(period_ms / p50, 3),
                     'max_ctrl_hz': round(1000.0 / p50, 1),
                     'images_ms': round(obs_ms[c], 2) if c in obs_ms else None})
    return {'rows': rows, 'versions': {'robosuite': robosuite.__version__,
                                       'mujoco': mujoco.__version__,
                                       'python': platform.python_version()}}


def robocasa_prefix() -> Path:
    from lerobot_lang_nodes import graph
    return graph.environment_prefix('robocasa')


def in_prefix(prefix: Path) -> bool:
    return Path(sys.prefix).resolve() == prefix.resolve()


def measure_host(prefix: Path, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    kwargs = dict(sizes=args.sizes, steps=args.steps, rounds=args.rounds, warmup=args.warmup,
                  hz=args.ctrl_hz, physics=not args.no_physics)
    if in_prefix(prefix):
        return host_worker(**kwargs)
    out = tmp / 'host.json'
    cmd = [str(prefix / 'bin' / 'python'), str(Path(__file__).resolve()), '--host-worker',
           str(out), '--sizes', ','.join(map(str, args.sizes)), '--steps', str(args.steps),
           '--rounds', str(args.rounds), '--warmup', str(args.warmup),
           '--ctrl-hz', str(args.ctrl_hz)] + (['--no-physics'] if args.no_physics else [])
    env = {**os.environ, 'MUJOCO_GL': 'egl', 'PYTHONUNBUFFERED': '1'}
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        code = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: stop the worker by its PID
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if code != 0:
        raise RuntimeError(f'the host worker in {prefix.name} exited {code}')
    return json.loads(out.read_text())


# --- node: over DDS --------------------------------------------------------------------------
def cpu_s(pid: int) -> float:
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def measure_node(prefix: Path, size: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from diagnostic_msgs.msg import DiagnosticArray
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import Image

    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.testing import NodeProcess, RosProbe, node_command
    argv = node_command(MODULE, params={
        'simulator': 'robosuite', 'image_size': size, 'ctrl_hz': args.ctrl_hz,
        'real_time_factor': 0.0, 'camera_hz': args.camera_hz, 'cameras': list(VIEWS)})
    argv[0] = str(prefix / 'bin' / 'python')
    env = {**os.environ, 'AMENT_PREFIX_PATH': str(prefix), 'MUJOCO_GL': 'egl'}
    proc = NodeProcess('robocasa_bridge', argv, tmp / f'robocasa_bridge_{size}.log', env=env,
                       cwd=str(ROOT))
    probe = RosProbe(f'robocasa_bench_probe_{size}')
    lock, clock, frames = threading.Lock(), [], {v: 0 for v in VIEWS}
    recording = threading.Event()

    def on_clock(msg: Clock) -> None:
        if recording.is_set():
            with lock:
                clock.append((time.monotonic(), msg.clock.sec + msg.clock.nanosec * 1e-9))

    def on_image(view: str):
        def cb(_msg: Image) -> None:
            if recording.is_set():
                with lock:
                    frames[view] += 1
        return cb

    try:
        probe.node.create_subscription(Clock, '/clock', on_clock, qos.CLOCK)
        for v in VIEWS:
            probe.node.create_subscription(Image, f'cameras/{v}/image_raw', on_image(v),
                                           qos.SENSOR)
        diags = probe.subscribe(DiagnosticArray, '/diagnostics', qos.STATUS)
        started = time.monotonic()
        ours = (lambda m: any(s.name.endswith(DIAG_SUFFIX) for s in m.status))
        while not any(ours(m) for m in diags.snapshot()):
            if not proc.alive:
                raise RuntimeError(f'robocasa_bridge exited {proc.returncode}: '
                                   f'{proc.log_text(tail=2000)}')
            if time.monotonic() - started > args.node_timeout:
                raise RuntimeError(f'no diagnostics from robocasa_bridge in '
                                   f'{args.node_timeout:.0f} s: {proc.log_text(tail=2000)}')
            time.sleep(0.2)
        startup_s = time.monotonic() - started
        time.sleep(args.node_warmup)
        cpu0, wall0 = cpu_s(proc.pid), time.monotonic()
        recording.set()
        time.sleep(args.node_seconds)
        recording.clear()
        cpu1, wall1 = cpu_s(proc.pid), time.monotonic()
        since = len(diags)
        report = diags.wait_for(ours, timeout_s=10.0, since=since,
                                what='robocasa_bridge diagnostics after the window')
    finally:
        probe.close()
        code = proc.stop()
    values = {kv.key: kv.value for s in report.status if s.name.endswith(DIAG_SUFFIX)
              for kv in s.values}
    period = 1.0 / args.ctrl_hz
    with lock:
        arrivals = list(clock)
    per_tick = []
    for (w0, s0), (w1, s1) in zip(arrivals, arrivals[1:]):
        ticks = round((s1 - s0) / period)
        if ticks > 0:  # a lost best-effort /clock spans several ticks
            per_tick.append((w1 - w0) * 1000.0 / ticks)
    window_rtf = ((arrivals[-1][1] - arrivals[0][1]) / (arrivals[-1][0] - arrivals[0][0])
                  if len(arrivals) > 1 and arrivals[-1][0] > arrivals[0][0] else None)
    step = float(values['step_ms_p50'])
    tick = statistics.median(per_tick) if per_tick else None
    wall = wall1 - wall0
    return {'config': label(len(VIEWS), size), 'cameras': len(VIEWS), 'size_px': size,
            'startup_s': round(startup_s, 1), 'window_s': round(wall, 1),
            'ticks': len(per_tick), 'step_ms_p50': step,
            'tick_ms_p50': round(tick, 2) if tick else None,
            'ros_ms_per_tick': round(tick - step, 2) if tick else None,
            'real_time_factor_window': round(window_rtf, 3) if window_rtf else None,
            'real_time_factor_diag': float(values['real_time_factor']),
            'images_per_s': round(sum(frames.values()) / len(VIEWS) / wall, 2),
            'cpu_pct': round((cpu1 - cpu0) / wall * 100.0, 1),
            'loop_errors': int(values.get('loop_errors', 0)), 'exit_code': code}


# --- report ----------------------------------------------------------------------------------
def ratios(rows: list[dict[str, Any]], key: str = 'step_ms_p50') -> dict[str, float]:
    """Step-time ratios: each size against the smallest, every view set against physics."""
    views = sorted((r for r in rows if r['cameras']), key=lambda r: r['size_px'])
    out = {}
    for r in views[1:]:
        out[f"{r['size_px']} px / {views[0]['size_px']} px"] = round(
            r[key] / views[0][key], 2)
    phys = next((r for r in rows if not r['cameras']), None)
    if phys:
        for r in views:
            out[f"{r['size_px']} px / physics only"] = round(r[key] / phys[key], 1)
    return out


def markdown(report: dict[str, Any]) -> str:
    run = report['run']
    period = 1000.0 / run['ctrl_hz']
    lines = ['# RoboCasa bridge: step time and real-time factor', '',
             f"Stock robosuite scene (simulator `robosuite`: Lift, PandaOmron, RoboCasa's three "
             f"views), holding still, {run['ctrl_hz']:g} Hz control ({period:g} ms period); "
             f"robosuite {run['versions'].get('robosuite')}, MuJoCo "
             f"{run['versions'].get('mujoco')}, MUJOCO_GL=egl; {run['machine']}, {run['date']}"
             f", load average {run['load_average_1min_at_start']} at the start and "
             f"{run['load_average_1min_at_end']} at the end"
             + (' (other work shared the cores)' if max(run['load_average_1min_at_start'],
                                                        run['load_average_1min_at_end']) > 2.5
                else '')
             + f"{'; preset quick' if run['preset'] == 'quick' else ''}. Real-time factor = "
             'period / step time; compare ratios, not absolute times.', '',
             f"## KitchenHost (no ROS), {run['rounds']} rounds x {run['steps']} steps per "
             'configuration, order rotated per round', '',
             '| configuration | step p50 (ms) | step p90 (ms) | round medians (ms) | '
             'real-time factor | max control rate (Hz) | images() (ms) | build (s) |',
             '|---|---|---|---|---|---|---|---|']
    for r in report['host']['rows']:
        lines.append(f"| {r['config']} | {r['step_ms_p50']} | {r['step_ms_p90']} | "
                     f"{' / '.join(f'{v:g}' for v in r['round_medians_ms'])} | "
                     f"{r['real_time_factor']} | {r['max_ctrl_hz']} | "
                     f"{r['images_ms'] if r['images_ms'] is not None else '-'} | "
                     f"{r['build_s']} |")
    if report['host'].get('ratios'):
        lines += ['', 'Step-time ratios: ' + ', '.join(
            f'{k} = {v}' for k, v in report['host']['ratios'].items()) + '.']
    node = report.get('node')
    if node:
        lines += ['', f"## robocasa_bridge node over DDS (real_time_factor 0, camera_hz "
                  f"{run['camera_hz']:g}, {run['node_seconds']:g} s window after "
                  f"{run['node_warmup']:g} s)", '',
                  '| configuration | env step p50 (ms) | env step / host step | tick p50 (ms) | '
                  'ROS per tick (ms) | real-time factor (window) | '
                  'real-time factor (diagnostics) | host real-time factor | node / host | '
                  'images/s per view | node CPU (%) |',
                  '|---|---|---|---|---|---|---|---|---|---|---|']
        for r in node['rows']:
            if 'error' in r:
                lines.append(f"| {r['config']} | error: {r['error'][:200]} |"
                             + ' |' * 9)
                continue
            lines.append(f"| {r['config']} | {r['step_ms_p50']} | {r.get('step_over_host')} | "
                         f"{r['tick_ms_p50']} | "
                         f"{r['ros_ms_per_tick']} | {r['real_time_factor_window']} | "
                         f"{r['real_time_factor_diag']} | {r.get('host_real_time_factor')} | "
                         f"{r.get('node_over_host')} | {r['images_per_s']} | {r['cpu_pct']} |")
        lines += ['', 'env step = the node\'s `step_ms_p50` (its last 200 `env.step` calls); '
                  'tick = wall time per control tick from /clock arrivals; ROS per tick = tick '
                  '- env step (executor, clock/joint/state/status publishing, images on camera '
                  'ticks); the diagnostics\' real-time factor counts from the loop\'s start '
                  '(first images included); node / host = window real-time factor / the bare '
                  "host's at the same size."]
        cheap = [r for r in node['rows'] if r.get('step_over_host', 1.0) < SUSPECT_STEP_RATIO]
        if cheap:
            lines += ['', '**Warning**: the node\'s environment step is under '
                      f'{SUSPECT_STEP_RATIO:g}x the bare host\'s at '
                      + ', '.join(f"{r['size_px']} px ({r['step_over_host']}x)" for r in cheap)
                      + '. The same scene cannot step that much faster inside the node unless '
                      'its views are not rendered: a robosuite host built on one thread and '
                      'stepped on another (the node builds its KitchenHost in __init__ and steps '
                      'it in its loop thread) renders without a current EGL context, which is '
                      'fast and returns garbage images. These node figures are not the cost of '
                      'rendering.']
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    ints = (lambda t: [int(x) for x in t.split(',') if x])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true',
                        help='smoke preset: ' + json.dumps(PRESETS['quick']))
    parser.add_argument('--sizes', type=ints, help='view sizes (px), default 128,256')
    parser.add_argument('--steps', type=int, help='steps per configuration per round (40)')
    parser.add_argument('--rounds', type=int, help='rounds (4)')
    parser.add_argument('--warmup', type=int, help='unmeasured steps per host first (5)')
    parser.add_argument('--node-seconds', type=float,
                        help='node measuring window per size (30 s); 0 skips the node')
    parser.add_argument('--node-warmup', type=float, help='node seconds before the window (5)')
    parser.add_argument('--node-timeout', type=float, default=180.0,
                        help='seconds for the node to start')
    parser.add_argument('--no-physics', action='store_true',
                        help='skip the no-camera physics-only reference')
    parser.add_argument('--ctrl-hz', type=float, default=20.0)
    parser.add_argument('--camera-hz', type=float, default=10.0,
                        help="the node's image rate (config/robocasa.yaml: 10)")
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    parser.add_argument('--name', default='robocasa_bridge')
    parser.add_argument('--host-worker', type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    preset = 'quick' if args.quick else 'full'
    for key, value in PRESETS[preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.host_worker is not None:  # inside .venv-robocasa, started by measure_host
        result = host_worker(args.sizes, args.steps, args.rounds, args.warmup, args.ctrl_hz,
                             not args.no_physics)
        args.host_worker.write_text(json.dumps(result))
        return 0
    try:
        prefix = robocasa_prefix()
    except FileNotFoundError as exc:
        print(f'robocasa_bridge benchmark: {exc}', file=sys.stderr)
        return 2
    load_start = round(os.getloadavg()[0], 2)
    tmp = Path(tempfile.mkdtemp(prefix='robocasa_bench_'))
    host = measure_host(prefix, args, tmp)
    host['ratios'] = ratios(host['rows'])
    by_size = {r['size_px']: r for r in host['rows'] if r['cameras']}
    node = None
    if args.node_seconds > 0:
        rows = []
        from sim_graph import private_ros_domain  # the main environment only
        with private_ros_domain():
            for size in args.sizes:
                print(f'[node] robocasa_bridge at {size} px ...', file=sys.stderr, flush=True)
                try:
                    row = measure_node(prefix, size, args, tmp)
                    h = by_size.get(size)
                    if h:
                        row['host_step_ms_p50'] = h['step_ms_p50']
                        row['host_real_time_factor'] = h['real_time_factor']
                        row['step_over_host'] = round(row['step_ms_p50'] / h['step_ms_p50'], 2)
                        if row['real_time_factor_window']:
                            row['node_over_host'] = round(
                                row['real_time_factor_window'] / h['real_time_factor'], 2)
                except Exception as exc:  # noqa: BLE001 - report it, measure the rest
                    row = {'config': label(len(VIEWS), size), 'size_px': size,
                           'error': f'{type(exc).__name__}: {exc}'}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
        node = {'rows': rows, 'ratios': ratios([r for r in rows if 'error' not in r])}
    report = {'run': {'preset': preset, 'date': time.strftime('%Y-%m-%d'),
                      'machine': f'{platform.machine()}, {os.cpu_count()} cores',
                      'load_average_1min_at_start': load_start,
                      'load_average_1min_at_end': round(os.getloadavg()[0], 2),
                      'ctrl_hz': args.ctrl_hz, 'camera_hz': args.camera_hz,
                      'sizes': args.sizes, 'steps': args.steps, 'rounds': args.rounds,
                      'warmup': args.warmup, 'node_seconds': args.node_seconds,
                      'node_warmup': args.node_warmup, 'versions': host.pop('versions', {}),
                      'views': list(VIEWS)},
              'host': host, 'node': node}
    write_report(args.out, args.name, report, markdown(report))
    failed = node is not None and any('error' in r for r in node['rows'])
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
