"""The policy on another computer, over a 50 Mbit/s link, against one computer (issue 31).

Usage: sudo .venv/bin/python bench/remote.py [--episodes 2] [--outages 3] [--seconds 10]

Two network namespaces joined by a veth pair capped by `tc tbf` at 50 Mbit/s (a good Wi-Fi
link; lerobot_lang_nodes/netns.py) stand for the robot's computer and the policy computer;
discovery and traffic stay on that link (each namespace holds only its end and its
loopback). Needs root. Three measurements:

* task time: the sim graph with the scripted expert as policy (so the network is what
  differs), all nodes in one namespace (one host: shared memory, raw images) against the
  split graph (`without:=policy` there, graph `policy` on the other side: compressed images,
  the split DDS profiles). Per episode (seed 1000 k), sim seconds from the first chunk's
  observation to the task's success, the ratio split / one host, and the age of each chunk's
  observation when it reaches the executor (the newest joint state's stamp at its arrival
  minus the chunk's stamp: the robot's clock only) and when the policy started on it;
* images: two 640x480 cameras at 30 Hz through the link, raw (sensor_msgs/Image) against
  compressed (JPEG q85, what `compressed_images` publishes), into the policy's own image
  intake (nodes/observations.py, decoding included): frames delivered, latency (stamped with
  CLOCK_MONOTONIC, one machine) and the link's bytes per second (the qdisc's counters).
  The frames are camera-like (a rendered-looking scene with sensor noise, not a real camera);
* outage: in a split run, the link goes down mid-task `--outages` times: time from link down
  to the last action played (the arm holds), and from link up to the first action of a chunk
  observed after the outage.

Writes bench/reports/remote.{json,md}. Every process is ended by its PID, the namespaces are
deleted afterwards, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import REPORT_DIR, percentiles, write_report
from lerobot_lang_nodes import dds, graph
from lerobot_lang_nodes.netns import RATE, Monitor, TwoHosts, link_bytes, platform_problem

TASK = 'put the red cube in the bowl'
MONITOR = 'lerobot_lang_nodes.remote_monitor'
CAMERAS = ('front', 'wrist')


# --- the image roles (run inside a namespace by the main process) ---------------------------
def _frames(width: int, height: int, n: int = 4) -> list[np.ndarray]:
    """Camera-like frames: gradients, flat objects, edges and sensor noise (sigma 3)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([120 + x * 80 // width, 110 + y * 70 // height,
                     np.full_like(x, 95)], axis=2).astype(np.int16)
    for _ in range(12):
        x0, y0 = rng.integers(0, width - 80), rng.integers(0, height - 80)
        base[y0:y0 + rng.integers(20, 80), x0:x0 + rng.integers(20, 80)] = rng.integers(
            0, 255, 3)
    return [np.clip(base + rng.normal(0, 3, base.shape), 0, 255).astype(np.uint8)
            for _ in range(n)]


def _publisher(transport: str, seconds: float, hz: float, width: int, height: int) -> None:
    import rclpy
    from sensor_msgs.msg import CompressedImage, Image

    from lerobot_lang_nodes.nodes import convert, qos
    rclpy.init()
    node = rclpy.create_node('image_source')
    kind, suffix = (Image, '') if transport == 'raw' else (CompressedImage, '/compressed')
    pubs = {c: node.create_publisher(kind, f'cameras/{c}/image_raw{suffix}', qos.SENSOR)
            for c in CAMERAS}
    frames = _frames(width, height)
    time.sleep(3.0)  # discovery across the link before the measured window
    end = time.monotonic() + seconds
    i = 0
    sizes = []
    next_t = time.monotonic()
    while time.monotonic() < end:
        for c in CAMERAS:
            rgb = frames[i % len(frames)]
            now = time.monotonic()
            msg = (convert.rgb_to_image(rgb, now, c) if transport == 'raw'
                   else convert.rgb_to_compressed(rgb, now, c, 85))
            sizes.append(len(msg.data))
            pubs[c].publish(msg)
        i += 1
        next_t += 1.0 / hz
        time.sleep(max(0.0, next_t - time.monotonic()))
    print(json.dumps({'sent_per_camera': i, 'bytes_per_frame': float(np.mean(sizes))}),
          flush=True)
    time.sleep(1.0)
    rclpy.try_shutdown()


def _receiver(transport: str, seconds: float) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from lerobot_lang_nodes.nodes.observations import LatestObservations
    rclpy.init()
    node = rclpy.create_node('image_sink')
    latencies: dict[str, list[float]] = {c: [] for c in CAMERAS}
    intake: list = []

    def on_update(camera: str) -> None:
        latencies[camera].append(time.monotonic() - intake[0].stamps()[camera])
    intake.append(LatestObservations(node, CAMERAS, 'cameras/{name}/image_raw',
                                     on_update=on_update, transport=transport))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    end = time.monotonic() + seconds + 5.0
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.1)
    print(json.dumps({'latencies': latencies}), flush=True)
    rclpy.try_shutdown()


# --- helpers of the main process -------------------------------------------------------------
def _env(side: str, domain: int) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != 'FASTDDS_DEFAULT_PROFILES_FILE'}
    env = dds.ros_environment(base, domain_id=domain, side=side)
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'SUBNET'  # inside the namespaces only
    env.pop('ROS_STATIC_PEERS', None)
    env.setdefault('MUJOCO_GL', 'egl')
    env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    env['PYTHONUNBUFFERED'] = '1'
    return env


def _one_host_env(domain: int) -> dict[str, str]:
    env = dds.ros_environment({k: v for k, v in os.environ.items()
                               if k != 'FASTDDS_DEFAULT_PROFILES_FILE'}, domain_id=domain)
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    env.setdefault('MUJOCO_GL', 'egl')
    env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    return env


def _argv(spec: graph.NodeSpec, plan: graph.LaunchPlan) -> list[str]:
    return [graph.interpreter(spec), '-m', spec.module, *graph.ros_args(spec, plan.params_file)]


def _wait(predicate, timeout_s: float, what: str, hosts: TwoHosts):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, proc in hosts.procs:
            if proc.poll() is not None:
                raise RuntimeError(f'{name} exited: {hosts.log(name)}')
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f'no {what} within {timeout_s:.0f} s')


def _start_graph(hosts: TwoHosts, split: bool, seed: int, domain: int) -> Monitor:
    overrides = {'sim_bridge': {'seed': seed}}
    values = {'viewer': 'false', 'task': TASK, **({'without': 'policy'} if split else {})}
    plans = [graph.launch_plan('sim', values, overrides=overrides)]
    env = _env('robot', domain) if split else _one_host_env(domain)
    for spec in plans[0].specs:
        hosts.start(hosts.robot, spec.name, _argv(spec, plans[0]), env)
    if split:
        plans.append(graph.launch_plan('policy', {'robot': 'sim'}))
        (spec,) = plans[1].specs
        hosts.start(hosts.policy, 'policy', _argv(spec, plans[1]), _env('policy', domain))
    monitor = Monitor(hosts.start(hosts.robot, 'monitor', [sys.executable, '-m', MONITOR],
                                  env, stdout=subprocess.PIPE))
    monitor.plans = plans  # type: ignore[attr-defined]
    return monitor


def _episode(hosts: TwoHosts, monitor: Monitor, timeout_s: float) -> dict[str, Any]:
    outcome = _wait(lambda: [o for o in monitor.of('outcome') if o['success']], timeout_s,
                    'task success', hosts)[0]
    chunks = monitor.of('chunk')
    first = min(c['stamp'] for c in chunks)
    ages = [c['robot_now'] - c['stamp'] for c in chunks if c['robot_now'] > 0]
    starts = [float(d['values']['observation_age_last_ms']) for d in monitor.of('diag')
              if d['name'] == 'policy: policy' and int(d['values']['inferences']) > 0]
    last = monitor.last('status')
    return {'task_s': round(outcome['stamp'] - first, 3), 'chunks': len(chunks),
            'age_at_executor_ms': [round(a * 1000.0, 1) for a in ages],
            'age_at_policy_start_ms': starts, 'starved_ticks': last['starved'],
            'discarded_stale': last['stale']}


def task_times(args: argparse.Namespace, domain: int, log_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {'one_host': [], 'split': []}
    for k in range(1, args.episodes + 1):
        for layout in ('one_host', 'split'):
            hosts = TwoHosts(log_dir / f'{layout}_{k}')
            (log_dir / f'{layout}_{k}').mkdir(parents=True, exist_ok=True)
            try:
                hosts.create()
                monitor = _start_graph(hosts, layout == 'split', 1000 * k, domain)
                try:
                    result = _episode(hosts, monitor, args.episode_timeout)
                finally:
                    for plan in monitor.plans:  # type: ignore[attr-defined]
                        plan.params_file.unlink(missing_ok=True)
            except (TimeoutError, RuntimeError) as exc:
                result = {'error': str(exc)[:300]}
            finally:
                hosts.close()
            result['seed'] = 1000 * k
            out[layout].append(result)
            print(f'[remote] {layout} episode {k}: {result.get("task_s", result.get("error"))}',
                  flush=True)
    return out


def outages(args: argparse.Namespace, domain: int, log_dir: Path) -> list[dict[str, Any]]:
    hosts = TwoHosts(log_dir / 'outage')
    (log_dir / 'outage').mkdir(parents=True, exist_ok=True)
    results = []
    try:
        hosts.create()
        monitor = _start_graph(hosts, True, 1000, domain)
        try:
            _wait(lambda: (monitor.last('status') or {}).get('dispatched', 0) >= 30, 180.0,
                  'the arm moving', hosts)
            for _ in range(args.outages):
                if any(o['success'] for o in monitor.of('outcome')):
                    break
                before = monitor.last('status')
                down_at, down_stamp = time.monotonic(), before['stamp']
                hosts.link(up=False)
                time.sleep(args.outage_s)  # the outage itself: a fixed length on purpose
                statuses = monitor.of('status', since=down_at)
                held = statuses[-1]['dispatched'] if statuses else before['dispatched']
                hold_at = next((s['wall'] for s in statuses if s['dispatched'] == held),
                               down_at)
                up_at = time.monotonic()
                hosts.link(up=True)
                fresh = _wait(lambda: [s for s in monitor.of('status', since=up_at)
                                       if s['dispatched'] > held], 120.0,
                              'actions after the link came back', hosts)[0]
                stamps = {c['seq']: c['stamp'] for c in monitor.of('chunk')}
                results.append({
                    'hold_s': round(hold_at - down_at, 3),
                    'resume_s': round(fresh['wall'] - up_at, 3),
                    'played_after_down': held - before['dispatched'],
                    'fresh_chunk': stamps.get(fresh['playing'], 0.0) > down_stamp})
                print(f'[remote] outage: {results[-1]}', flush=True)
                _wait(lambda: monitor.last('status')['dispatched'] >= held + 30, 120.0,
                      'the arm moving again', hosts)
        finally:
            for plan in monitor.plans:  # type: ignore[attr-defined]
                plan.params_file.unlink(missing_ok=True)
    except (TimeoutError, RuntimeError) as exc:
        results.append({'error': str(exc)[:300]})
    finally:
        hosts.close()
    return results


def images(args: argparse.Namespace, domain: int, log_dir: Path) -> dict[str, Any]:
    out = {}
    for transport in ('raw', 'compressed'):
        hosts = TwoHosts(log_dir / f'images_{transport}')
        (log_dir / f'images_{transport}').mkdir(parents=True, exist_ok=True)
        try:
            hosts.create()
            me = str(Path(__file__).resolve())
            sink = hosts.start(hosts.policy, 'sink', [sys.executable, me, '--role', 'receiver',
                                                      '--transport', transport, '--seconds',
                                                      str(args.seconds)],
                               _env('policy', domain), stdout=subprocess.PIPE)
            source = hosts.start(hosts.robot, 'source', [
                sys.executable, me, '--role', 'publisher', '--transport', transport,
                '--seconds', str(args.seconds), '--width', str(args.width), '--height',
                str(args.height)], _env('robot', domain), stdout=subprocess.PIPE)
            time.sleep(3.0)  # the publisher's own discovery pause: count from its window
            sent0, _ = link_bytes(hosts.robot)
            t0 = time.monotonic()
            src = json.loads(source.communicate(timeout=args.seconds + 60)[0].strip()
                             .splitlines()[-1])
            sent1, dropped = link_bytes(hosts.robot)
            window = time.monotonic() - t0
            got = json.loads(sink.communicate(timeout=args.seconds + 60)[0].strip()
                             .splitlines()[-1])
            lat = [x for c in CAMERAS for x in got['latencies'][c]]
            delivered = {c: len(got['latencies'][c]) / max(1, src['sent_per_camera'])
                         for c in CAMERAS}
            out[transport] = {
                'bytes_per_frame': round(src['bytes_per_frame']),
                'offered_mbit_s': round(src['bytes_per_frame'] * 8 * args.hz * len(CAMERAS)
                                        / 1e6, 1),
                'delivered': {c: round(v, 3) for c, v in delivered.items()},
                'latency_ms': percentiles(lat, 1000.0),
                'link_mbit_s': round((sent1 - sent0) * 8 / window / 1e6, 1),
                'link_dropped_packets': dropped}
        except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError) as exc:
            out[transport] = {'error': str(exc)[:300]}
        finally:
            hosts.close()
        print(f'[remote] images {transport}: {out[transport]}', flush=True)
    return out


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def markdown(r: dict[str, Any]) -> str:
    lines = ['# The policy on another computer (bench/remote.py)', '',
             f"{r['machine']}; link {r['rate']} (tc tbf) between two network namespaces; "
             f"{r['date']}.", '', '## Task time, scripted expert as policy', '',
             '| layout | episodes ok | median task (sim s) | ratio to one host | chunk age at '
             'executor p50 / p99 (ms) | policy start age p50 (ms) | starved ticks |',
             '|---|---|---|---|---|---|---|']
    base = _median([e['task_s'] for e in r['task_time']['one_host'] if 'task_s' in e])
    for layout in ('one_host', 'split'):
        eps = [e for e in r['task_time'][layout] if 'task_s' in e]
        med = _median([e['task_s'] for e in eps])
        ages = percentiles([a for e in eps for a in e['age_at_executor_ms']])
        starts = [a for e in eps for a in e['age_at_policy_start_ms']]
        ratio = f'{med / base:.2f}' if med and base else 'n/a'
        lines.append(f"| {layout.replace('_', ' ')} | {len(eps)}/{len(r['task_time'][layout])}"
                     f" | {med} | {ratio} | {ages['p50']} / {ages['p99']} | "
                     f"{_median(starts)} | {sum(e['starved_ticks'] for e in eps)} |")
    lines += ['', '## Images: two 640x480 cameras at 30 Hz through the link', '',
              '| transport | bytes / frame | offered (Mbit/s) | delivered front / wrist | '
              'latency p50 / p99 (ms) | link use (Mbit/s) | dropped packets |',
              '|---|---|---|---|---|---|---|']
    for transport, v in r['images'].items():
        if 'error' in v:
            lines.append(f'| {transport} | error: {v["error"]} | | | | | |')
            continue
        d = v['delivered']
        lines.append(f"| {transport} | {v['bytes_per_frame']} | {v['offered_mbit_s']} | "
                     f"{d['front']:.0%} / {d['wrist']:.0%} | {v['latency_ms']['p50']} / "
                     f"{v['latency_ms']['p99']} | {v['link_mbit_s']} | "
                     f"{v['link_dropped_packets']} |")
    lines += ['', '## Outage: link down mid-task, then up', '',
              '| # | link down -> last action (s) | actions after down | link up -> first '
              'action (s) | of a chunk observed after the outage |', '|---|---|---|---|---|']
    for i, o in enumerate(r['outages'], 1):
        if 'error' in o:
            lines.append(f'| {i} | error: {o["error"]} | | | |')
            continue
        lines.append(f"| {i} | {o['hold_s']} | {o['played_after_down']} | {o['resume_s']} | "
                     f"{'yes' if o['fresh_chunk'] else 'NO'} |")
    lines += ['', 'Ages are on the robot\'s clock only (the stamps it issued): the chunk\'s '
              'age at the executor is the newest joint state\'s stamp when the chunk arrived '
              'minus the chunk\'s observation stamp. The policy\'s start age is its '
              '/diagnostics observation_age_last_ms, sampled once a second. The robot stamps '
              'joint states once per control tick (33 ms at 30 Hz): ages below a tick read 0. '
              'The last-action time is resolved to the 5 Hz runtime_status. A raw 640x480 '
              'frame is 0.9 MB, some 640 UDP fragments: over best-effort sensor QoS one lost '
              'fragment loses the frame, so through a link slower than the offered rate raw '
              'frames hardly ever arrive whole.', '']
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--episodes', type=int, default=2)
    parser.add_argument('--outages', type=int, default=3)
    parser.add_argument('--outage-s', type=float, default=3.0)
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--hz', type=float, default=30.0)
    parser.add_argument('--width', type=int, default=640)
    parser.add_argument('--height', type=int, default=480)
    parser.add_argument('--episode-timeout', type=float, default=240.0)
    parser.add_argument('--only', choices=('images', 'outages', 'task_time'), default=None)
    parser.add_argument('--role', choices=('publisher', 'receiver'), help=argparse.SUPPRESS)
    parser.add_argument('--transport', default='raw', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == 'publisher':
        _publisher(args.transport, args.seconds, args.hz, args.width, args.height)
        return 0
    if args.role == 'receiver':
        _receiver(args.transport, args.seconds)
        return 0
    problem = platform_problem()
    if problem:
        print(f'bench/remote.py: {problem}', file=sys.stderr)
        return 2
    from domain_coordinator import domain_id
    report: dict[str, Any] = {
        'machine': f'{platform.processor() or platform.machine()}, {os.cpu_count()} cores, '
                   f'load average {os.getloadavg()[0]:.1f} at start',
        'rate': RATE, 'date': time.strftime('%Y-%m-%d'),
        'task_time': {'one_host': [], 'split': []}, 'images': {}, 'outages': []}
    with domain_id() as domain, tempfile.TemporaryDirectory(prefix='remote_bench_') as tmp:
        log_dir = Path(tmp)
        if args.only in (None, 'images'):
            report['images'] = images(args, domain, log_dir)
        if args.only in (None, 'outages'):
            report['outages'] = outages(args, domain, log_dir)
        if args.only in (None, 'task_time'):
            report['task_time'] = task_times(args, domain, log_dir)
    write_report(REPORT_DIR, 'remote', report, markdown(report))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
