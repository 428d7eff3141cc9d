"""Benchmark: recorder throughput and drops with three 640x480 cameras at 30 Hz (raw and JPEG),
and export speed and size on disk per minute of session.

The `recorder` node runs in its own process, as in the graph; this process publishes three
cameras, joint states (30 Hz), action chunks (2 Hz) and a latched language context, for
``--seconds`` of wall time per mode. The recorder's own /diagnostics counters give what it
received, wrote and dropped; the raw recording is then exported to a LeRobot dataset.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_lang_nodes import dds

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
CAMERAS = ('front', 'wrist', 'top')
JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper']


def cpu_s(pid: int) -> float:
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob('*') if p.is_file()) / 1e6


def frames(height: int, width: int, n: int = 30) -> list[np.ndarray]:
    """A moving gradient, so JPEG and AV1 see realistic (not constant) images."""
    y, x = np.mgrid[0:height, 0:width]
    return [np.stack([(x + 8 * k) % 256, (y + 4 * k) % 256, (x + y) % 256], -1).astype(np.uint8)
            for k in range(n)]


def record(mode: str, seconds: float, out: Path, tmp: Path) -> dict[str, Any]:
    """One recording run; returns the figures of the recorder for it."""
    from diagnostic_msgs.msg import DiagnosticArray
    from PIL import Image as PilImage
    from sensor_msgs.msg import CompressedImage, Image, JointState
    from std_msgs.msg import String

    from lerobot_lang_msgs.msg import ActionChunk, LanguageContext
    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.testing import NodeProcess, RosProbe, node_command, wait_until

    compressed = mode == 'compressed'
    suffix = 'image_raw/compressed' if compressed else 'image_raw'
    topics = ['joint_states', 'action_chunk', 'language_context', 'task']
    topics += [f'cameras/{c}/{suffix}' for c in CAMERAS]
    proc = NodeProcess('recorder', node_command(
        'lerobot_lang_nodes.nodes.recorder_node',
        params={'output_dir': str(out), 'topics': topics, 'cameras': [''],
                'bag_prefix': mode}), tmp / f'recorder-{mode}.log')
    probe = RosProbe(f'bench_recorder_{mode}')
    try:
        diags = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
        pubs = {c: probe.node.create_publisher(CompressedImage if compressed else Image,
                                               f'cameras/{c}/{suffix}', qos.SENSOR)
                for c in CAMERAS}
        joints = probe.node.create_publisher(JointState, 'joint_states', qos.SENSOR)
        chunks = probe.node.create_publisher(ActionChunk, 'action_chunk', qos.COMMAND)
        context = probe.node.create_publisher(LanguageContext, 'language_context', qos.LATCHED)
        task = probe.node.create_publisher(String, 'task', qos.LATCHED)
        context.publish(LanguageContext(task='bench', subtask='record', revision=1))
        task.publish(String(data='bench'))
        wait_until(lambda: all(p.get_subscription_count() for p in pubs.values())
                   and joints.get_subscription_count(), 30.0, 'the recorder', [proc])
        images = frames(480, 640)
        payloads = []
        for img in images:
            if compressed:
                buf = io.BytesIO()
                PilImage.fromarray(img).save(buf, format='JPEG', quality=85)
                payloads.append(buf.getvalue())
            else:
                payloads.append(img.tobytes())
        cpu0, t0, sent, late = cpu_s(proc.pid), time.monotonic(), 0, 0
        tick = 0
        while time.monotonic() - t0 < seconds:
            due = t0 + tick / 30.0
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            elif now - due > 1 / 30:
                late += 1
            stamp = probe.node.get_clock().now().to_msg()
            for cam, pub in pubs.items():
                data = payloads[tick % len(payloads)]
                if compressed:
                    msg = CompressedImage(format='jpeg', data=data)
                else:
                    msg = Image(height=480, width=640, encoding='rgb8', step=1920, data=data)
                msg.header.stamp = stamp
                pub.publish(msg)
                sent += 1
            js = JointState(name=JOINTS, position=[0.01 * tick] * 6)
            js.header.stamp = stamp
            joints.publish(js)
            if tick % 15 == 0:
                chunk = ActionChunk(context_revision=1, action_names=JOINTS, horizon=15,
                                    action_dim=6, values=[0.0] * 90,
                                    control_period_s=1 / 30)
                chunk.header.stamp = stamp
                chunks.publish(chunk)
            tick += 1
        wall = time.monotonic() - t0
        cpu = cpu_s(proc.pid) - cpu0
        proc.stop(timeout_s=60.0)
        values = {}
        for arr in diags.snapshot():
            for status in arr.status:
                if status.name == 'recorder: recording':
                    values = {kv.key: kv.value for kv in status.values}
        bag = max(out.glob(f'{mode}_*'))
        with_meta = (bag / 'metadata.yaml').is_file()
        in_bag = 0
        if with_meta:
            import yaml
            meta = yaml.safe_load((bag / 'metadata.yaml').read_text())
            in_bag = sum(t['message_count'] for t in
                         meta['rosbag2_bagfile_information']['topics_with_message_count']
                         if t['topic_metadata']['name'].startswith('/cameras/'))
        dropped = int(values.get('dropped', 0))
        return {
            'mode': mode, 'seconds': round(wall, 2), 'images_sent': sent,
            'publisher_late_ticks': late, 'images_in_bag': in_bag, 'dropped': dropped,
            # Best-effort images DDS did not deliver (the recorder never saw them).
            'lost_in_transport': max(0, sent - in_bag - dropped),
            'bag_mb': round(dir_mb(bag), 1), 'bag_mb_per_min': round(dir_mb(bag) / wall * 60, 1),
            'write_mb_per_s': round(int(values.get('bytes_written', 0)) / 1e6 / wall, 1),
            'recorder_cpu_pct': round(100 * cpu / wall, 1), 'bag_closed': with_meta,
            'bag': str(bag),
        }
    finally:
        if proc.alive:
            proc.stop()
        probe.close()


def export_run(bag: str, tmp: Path, fps: int) -> dict[str, Any]:
    from lerobot_lang_nodes.recording.dataset import ExportOptions, export
    out = tmp / 'dataset'
    t0 = time.monotonic()
    result = export([bag], out, ExportOptions(fps=fps, repo_id='bench/recorder',
                                              episodes_by='whole', cameras=('front', 'wrist')))
    wall = time.monotonic() - t0
    minutes = result.frames / fps / 60
    return {'frames': result.frames, 'episodes': result.episodes, 'seconds': round(wall, 1),
            'frames_per_s': round(result.frames / wall, 1),
            'dataset_mb': round(dir_mb(out), 2),
            'dataset_mb_per_min': round(dir_mb(out) / minutes, 2) if minutes else None,
            'cameras': result.cameras}


def markdown(report: dict[str, Any]) -> str:
    lines = ['# Recorder and export benchmark', '',
             f"{report['machine']}; {report['seconds']} s per mode, 3 cameras 640x480 at 30 Hz",
             '', '| mode | images sent | in bag | dropped (queue) | lost (DDS) | bag MB/min | '
             'write MB/s | recorder CPU % |', '|---|---|---|---|---|---|---|---|']
    for r in report['recording']:
        lines.append(f"| {r['mode']} | {r['images_sent']} | {r['images_in_bag']} | "
                     f"{r['dropped']} | {r['lost_in_transport']} | {r['bag_mb_per_min']} | "
                     f"{r['write_mb_per_s']} | {r['recorder_cpu_pct']} |")
    e = report['export']
    lines += ['', f"Export of the raw recording (2 cameras, {e['frames']} frames at "
              f"{report['fps']} fps): {e['frames_per_s']} frames/s, {e['dataset_mb']} MB, "
              f"{e['dataset_mb_per_min']} MB per minute of session.", '']
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--seconds', type=float, default=10.0, help='wall seconds per mode')
    parser.add_argument('--fps', type=int, default=30, help='export frame rate')
    parser.add_argument('--out', type=Path, default=REPORT_DIR, help='report folder')
    parser.add_argument('--keep', action='store_true', help='keep the bags (path printed)')
    args = parser.parse_args(argv)
    from domain_coordinator import domain_id
    tmp = Path(tempfile.mkdtemp(prefix='bench_recorder_'))
    try:
        with domain_id() as domain:
            env = dds.ros_environment(domain_id=domain)
            env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'  # forced, even if set otherwise
            env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
            os.environ.update(env)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            runs = [record(mode, args.seconds, tmp / 'bags', tmp)
                    for mode in ('raw', 'compressed')]
        exported = export_run(runs[0]['bag'], tmp, args.fps)
        report = {'machine': f'{os.cpu_count()} CPUs', 'seconds': args.seconds,
                  'fps': args.fps, 'recording': runs, 'export': exported}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / 'recorder.json').write_text(json.dumps(report, indent=2) + '\n')
        (args.out / 'recorder.md').write_text(markdown(report))
        sys.stdout.write(markdown(report) + f"\nreports: {args.out / 'recorder.md'}\n")
        return 0 if all(r['bag_closed'] for r in runs) else 1
    finally:
        if args.keep:
            print(f'bags kept in {tmp}')
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
