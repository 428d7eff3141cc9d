"""Image transport over DDS: three 640x480 rgb8 camera streams at 30 Hz to two subscribers.

Usage: python bench/image_transport.py [--seconds 10] [--width 640 --height 480]

One publisher process (three topics, the cameras' sensor-data QoS) and two subscriber
processes, run three times side by side in one invocation: as the project's node processes run
(the shared-memory Fast DDS profile config/fastdds_shm.xml that `lerobot-lang` selects, and
the malloc thresholds every node sets, lerobot_lang_nodes/allocator.py), with the profile but
glibc's malloc defaults, and with Fast DDS's and glibc's defaults. Each image carries its
publish time (wall clock, one machine) and a sequence number; the subscribers report the
delivered fraction and the latency p50/p99 per stream.

Writes bench/reports/image_transport.{json,md}. DDS stays on this machine (a reserved private
domain, discovery LOCALHOST); every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import REPORT_DIR, write_report

CAMERAS = ('front', 'wrist', 'side')
PROJECT = 'project nodes (shared memory, tuned malloc)'
SHM_ONLY = 'shared memory, malloc defaults'
DEFAULTS = 'Fast DDS and malloc defaults'
HZ = 30.0


def publisher(seconds: float, width: int, height: int, subscribers: int) -> int:
    import rclpy
    from sensor_msgs.msg import Image

    from lerobot_lang_nodes.allocator import tune_allocator
    from lerobot_lang_nodes.nodes import qos
    tune_allocator()  # as a node process does (LEROBOT_LANG_MALLOC=default: glibc's)
    rclpy.init()
    node = rclpy.create_node('image_bench_pub')
    pubs = {c: node.create_publisher(Image, f'bench/{c}/image_raw', qos.SENSOR)
            for c in CAMERAS}
    deadline = time.monotonic() + 30.0
    while any(p.get_subscription_count() < subscribers for p in pubs.values()):
        if time.monotonic() > deadline:
            print('subscribers did not appear', file=sys.stderr)
            return 1
        time.sleep(0.05)  # discovery: nothing to wait on but the count
    time.sleep(1.0)  # let both readers finish matching every writer (best effort drops)
    frames = [np.full((height, width, 3), i * 40 % 255, np.uint8) for i in range(3)]
    n = int(seconds * HZ)
    start = time.monotonic()
    for k in range(n):
        for i, cam in enumerate(CAMERAS):
            msg = Image(height=height, width=width, encoding='rgb8', step=width * 3,
                        data=frames[i].tobytes())
            now = time.time()
            msg.header.stamp.sec, msg.header.stamp.nanosec = int(now), int((now % 1) * 1e9)
            msg.header.frame_id = str(k)
            pubs[cam].publish(msg)
        time.sleep(max(0.0, start + (k + 1) / HZ - time.monotonic()))
    print(json.dumps({'sent_per_stream': n}))
    time.sleep(1.0)  # the last frames reach the readers before the writers go away
    node.destroy_node()
    rclpy.shutdown()
    return 0


def subscriber(seconds: float, out: Path, name: str) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image

    from lerobot_lang_nodes.allocator import tune_allocator
    from lerobot_lang_nodes.nodes import qos
    tune_allocator()
    rclpy.init()
    node = rclpy.create_node(name)
    got: dict[str, list[tuple[int, float]]] = {c: [] for c in CAMERAS}

    def on_image(cam: str):
        def cb(msg: Image) -> None:
            sent = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
            got[cam].append((int(msg.header.frame_id), time.time() - sent))
        return cb
    for cam in CAMERAS:
        node.create_subscription(Image, f'bench/{cam}/image_raw', on_image(cam), qos.SENSOR)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.1)
    out.write_text(json.dumps(got))
    node.destroy_node()
    rclpy.shutdown()
    return 0


def run_profile(label: str, env: dict[str, str], seconds: float, width: int, height: int,
                tmp: Path) -> dict[str, Any]:
    me = [sys.executable, str(Path(__file__).resolve())]
    subs = [subprocess.Popen(me + ['--role', 'sub', '--seconds', str(seconds + 15),
                                   '--out', str(tmp / f'{label}_{i}.json'),
                                   '--name', f'image_bench_sub{i}'], env=env)
            for i in range(2)]
    pub = subprocess.run(me + ['--role', 'pub', '--seconds', str(seconds), '--width',
                               str(width), '--height', str(height)], env=env,
                         capture_output=True, text=True, timeout=seconds + 120)
    for s in subs:
        s.wait(timeout=seconds + 60)
    if pub.returncode != 0:
        return {'error': pub.stderr[-500:]}
    sent = json.loads(pub.stdout.strip().splitlines()[-1])['sent_per_stream']
    streams = {}
    for i in range(2):
        data = json.loads((tmp / f'{label}_{i}.json').read_text())
        for cam, rows in data.items():
            lat = np.array([r[1] for r in rows]) * 1e3
            streams[f'sub{i}/{cam}'] = {
                'delivered': round(len({r[0] for r in rows}) / sent, 4),
                'p50_ms': round(float(np.percentile(lat, 50)), 3) if lat.size else None,
                'p99_ms': round(float(np.percentile(lat, 99)), 3) if lat.size else None}
    delivered = [s['delivered'] for s in streams.values()]
    p50 = [s['p50_ms'] for s in streams.values() if s['p50_ms'] is not None]
    p99 = [s['p99_ms'] for s in streams.values() if s['p99_ms'] is not None]
    return {'sent_per_stream': sent, 'streams': streams,
            'min_delivered': min(delivered), 'median_p50_ms': float(np.median(p50)),
            'max_p99_ms': max(p99)}


def markdown(report: dict[str, Any]) -> str:
    run = report['run']
    lines = ['# Image transport: three rgb8 streams at 30 Hz to two subscribers', '',
             f"{run['width']}x{run['height']}, {run['seconds']} s per profile, all profiles in "
             f"one run on {run['machine']} ({run['date']}). Latency = receive time - publish "
             'time (one wall clock). Target: 100 % delivered, p50 at most 3 ms.', '',
             '| profile | min delivered | median p50 (ms) | max p99 (ms) |', '|---|---|---|---|']
    for label, r in report['profiles'].items():
        if 'error' in r:
            lines.append(f"| {label} | error: {r['error']} | | |")
            continue
        lines.append(f"| {label} | {r['min_delivered'] * 100:.1f} % | "
                     f"{round(r['median_p50_ms'], 3)} | "
                     f"{r['max_p99_ms']} |")
    profiles = report['profiles']
    base = profiles.get(DEFAULTS)
    if base and 'error' not in base and base['median_p50_ms']:
        lines.append('')
        for label in (PROJECT, SHM_ONLY):
            r = profiles.get(label)
            if r and 'error' not in r:
                lines.append(f"- p50 {label} / {DEFAULTS}: "
                             f"{r['median_p50_ms'] / base['median_p50_ms']:.2f}")
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--role', choices=('main', 'pub', 'sub'), default='main')
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--width', type=int, default=640)
    parser.add_argument('--height', type=int, default=480)
    parser.add_argument('--out', type=Path, default=None)
    parser.add_argument('--name', default='image_bench_sub')
    args = parser.parse_args(argv)
    if args.role == 'pub':
        return publisher(args.seconds, args.width, args.height, subscribers=2)
    if args.role == 'sub':
        return subscriber(args.seconds, args.out, args.name)
    import tempfile

    from domain_coordinator import domain_id

    from lerobot_lang_nodes import dds
    from lerobot_lang_nodes.allocator import MALLOC_ENV
    out_dir = args.out or REPORT_DIR
    tmp = Path(tempfile.mkdtemp(prefix='image_bench_'))
    profiles: dict[str, Any] = {}
    with domain_id() as domain:
        base = {**os.environ, 'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST',
                'ROS_DOMAIN_ID': str(domain)}
        project = dds.ros_environment(base, domain_id=domain)
        project['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
        project.pop(MALLOC_ENV, None)
        shm_only = {**project, MALLOC_ENV: 'default'}
        defaults = {k: v for k, v in shm_only.items() if k != 'FASTDDS_DEFAULT_PROFILES_FILE'}
        for i, (label, env) in enumerate(((PROJECT, project), (SHM_ONLY, shm_only),
                                          (DEFAULTS, defaults))):
            profiles[label] = run_profile(f'profile{i}', env, args.seconds,
                                          args.width, args.height, tmp)
            print(label, json.dumps({k: v for k, v in profiles[label].items()
                                     if k != 'streams'}), flush=True)
    report = {'run': {'seconds': args.seconds, 'width': args.width, 'height': args.height,
                      'date': time.strftime('%Y-%m-%d'),
                      'machine': f'{platform.machine()}, {os.cpu_count()} cores'},
              'profiles': profiles}
    write_report(out_dir, 'image_transport', report, markdown(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
