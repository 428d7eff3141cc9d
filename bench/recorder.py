"""Benchmark: does the recorder keep every frame of three 640x480 cameras at 30 Hz (raw and
JPEG) with the simulated graph running beside it; and how fast is the export.

Publishers are what a user runs: each camera is its own process publishing from a timer with
sensor-data QoS, as nodes/camera_node.py does (a late timer skips a frame, it never sends a
burst), and a robot process publishes joint states (30 Hz), action chunks (2 Hz) and the latched
task and language context. Every process uses the README's DDS settings (dds.ros_environment:
shared memory, loopback discovery, a private domain). The sim graph (sim_bridge, planner, policy;
the scripted expert working on a task) runs in a second private domain, so it loads the CPU
without mixing its topics into the recording. Each camera writes the header stamps it sent; the
bag is read back, so a frame is counted lost by its stamp, split into frames sent before the
recorder's first frame of that camera (subscription start-up) and frames lost after it.
The raw recording is then exported to a LeRobot dataset (2 cameras) and timed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import write_report
from lerobot_lang_nodes import dds

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
CAMERAS = ('front', 'wrist', 'top')
JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper']
WIDTH, HEIGHT, FPS = 640, 480, 30.0
GRAPH_TASK = 'put the red cube in the bowl'


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


def stamp_ns(raw: bytes) -> int:
    """Header stamp (ns) of a serialized message that starts with a std_msgs/Header."""
    sec, nsec = struct.unpack_from('<iI' if raw[1] == 1 else '>iI', raw, 4)
    return sec * 1_000_000_000 + nsec


# --- publisher processes (``--role``) -------------------------------------------------------

def _spin_until(executor: Any, done: Any) -> None:
    while not done():
        executor.spin_once(timeout_sec=0.05)


def camera_process(name: str, mode: str, seconds: float, stamps_out: Path) -> int:
    """One camera driver: a timer at 30 Hz, sensor-data QoS; writes the stamps it sent."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import CameraInfo, CompressedImage, Image

    from lerobot_lang_nodes.nodes import qos
    rclpy.init()
    node = rclpy.create_node(f'camera_{name}')
    compressed = mode == 'compressed'
    topic = f'cameras/{name}/image_raw' + ('/compressed' if compressed else '')
    pub = node.create_publisher(CompressedImage if compressed else Image, topic, qos.SENSOR)
    info_pub = node.create_publisher(CameraInfo, f'cameras/{name}/camera_info', qos.SENSOR)
    payloads = []
    for img in frames(HEIGHT, WIDTH):
        if compressed:
            from PIL import Image as PilImage
            buf = io.BytesIO()
            PilImage.fromarray(img).save(buf, format='JPEG', quality=85)
            payloads.append(buf.getvalue())
        else:
            payloads.append(img.tobytes())
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    # A driver starts publishing when it starts; the bench waits for the recorder to match so
    # that each camera's run is the same length (frames before the match are counted anyway).
    _spin_until(executor, lambda: pub.get_subscription_count() > 0)
    sent: list[int] = []
    state = {'t0': time.monotonic(), 'k': 0}

    def tick() -> None:
        now = node.get_clock().now()
        k = state['k']
        if compressed:
            msg = CompressedImage(format='jpeg', data=payloads[k % len(payloads)])
        else:
            msg = Image(height=HEIGHT, width=WIDTH, encoding='rgb8', step=3 * WIDTH,
                        data=payloads[k % len(payloads)])
        msg.header.stamp = now.to_msg()
        msg.header.frame_id = f'{name}_optical_frame'
        pub.publish(msg)
        info = CameraInfo(height=HEIGHT, width=WIDTH)
        info.header = msg.header
        info_pub.publish(info)
        sent.append(now.nanoseconds)
        state['k'] = k + 1

    node.create_timer(1.0 / FPS, tick)
    _spin_until(executor, lambda: time.monotonic() - state['t0'] >= seconds)
    stamps_out.write_text(json.dumps(sent))
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def robot_process(seconds: float) -> int:
    """Joint states at 30 Hz, a 15-step action chunk at 2 Hz, latched task and context."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from lerobot_lang_msgs.msg import ActionChunk, LanguageContext
    from lerobot_lang_nodes.nodes import qos
    rclpy.init()
    node = rclpy.create_node('bench_robot')
    joints = node.create_publisher(JointState, 'joint_states', qos.SENSOR)
    chunks = node.create_publisher(ActionChunk, 'action_chunk', qos.COMMAND)
    context = node.create_publisher(LanguageContext, 'language_context', qos.LATCHED)
    task = node.create_publisher(String, 'task', qos.LATCHED)
    context.publish(LanguageContext(task='bench', subtask='record', revision=1))
    task.publish(String(data='bench'))
    state = {'k': 0}

    def tick() -> None:
        k = state['k']
        stamp = node.get_clock().now().to_msg()
        js = JointState(name=JOINTS, position=[0.01 * (k % 100)] * 6)
        js.header.stamp = stamp
        joints.publish(js)
        if k % 15 == 0:
            chunk = ActionChunk(context_revision=1, action_names=JOINTS, horizon=15,
                                action_dim=6, values=[0.0] * 90, control_period_s=1 / FPS)
            chunk.header.stamp = stamp
            chunks.publish(chunk)
        state['k'] = k + 1

    node.create_timer(1.0 / FPS, tick)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    t0 = time.monotonic()
    _spin_until(executor, lambda: time.monotonic() - t0 >= seconds)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def graph_task_process() -> int:
    """The task of the graph beside the recording (latched; kept until SIGINT)."""
    import rclpy
    from std_msgs.msg import String

    from lerobot_lang_nodes.nodes import qos
    rclpy.init()
    node = rclpy.create_node('bench_graph_task')
    node.create_publisher(String, 'task', qos.LATCHED).publish(String(data=GRAPH_TASK))
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    rclpy.try_shutdown()
    return 0


# --- the run ----------------------------------------------------------------------------------

def start_graph(tmp: Path, env: dict[str, str]) -> list[Any]:
    """sim_bridge, planner and policy with the default sim parameters, and a task."""
    import yaml

    from lerobot_lang_nodes import graph
    from lerobot_lang_nodes.testing import NodeProcess
    values = yaml.safe_load(graph.default_params_file('sim').read_text())
    # The bridge's dispatch log tells when the arm works (the graph is in another domain).
    values['sim_bridge']['ros__parameters']['dispatch_log_path'] = str(tmp / 'dispatch.jsonl')
    params = tmp / 'sim.yaml'
    params.write_text(yaml.safe_dump(values))
    procs = [NodeProcess(spec.name, [sys.executable, '-m', spec.module,
                                     *graph.ros_args(spec, params)],
                         tmp / f'graph-{spec.name}.log', env=env)
             for spec in graph.SIM if spec.name != 'viewer']
    procs.append(NodeProcess('graph_task', [sys.executable, __file__, '--role', 'graph-task'],
                             tmp / 'graph-task.log', env=env))
    return procs


def bag_stamps(bag: Path, topics: list[str]) -> dict[str, list[int]]:
    from lerobot_lang_nodes.recording.bag_reader import BagSet
    out: dict[str, list[int]] = {t: [] for t in topics}
    with BagSet([bag]) as bags:
        present = [t for t in topics if t in bags.topics()]
        for _t, topic, _type, raw in bags.messages(present):
            out[topic].append(stamp_ns(raw))
    return out


def record(mode: str, seconds: float, out: Path, tmp: Path, graph_procs: list[Any]
           ) -> dict[str, Any]:
    """One recording run; returns the figures of the recorder for it."""
    from diagnostic_msgs.msg import DiagnosticArray

    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.testing import NodeProcess, RosProbe, node_command, wait_until

    compressed = mode == 'compressed'
    suffix = 'image_raw/compressed' if compressed else 'image_raw'
    image_topics = [f'/cameras/{c}/{suffix}' for c in CAMERAS]
    topics = ['joint_states', 'action_chunk', 'language_context', 'task']
    topics += [t.lstrip('/') for t in image_topics]
    topics += [f'cameras/{c}/camera_info' for c in CAMERAS]
    recorder = NodeProcess('recorder', node_command(
        'lerobot_lang_nodes.nodes.recorder_node',
        params={'output_dir': str(out), 'topics': topics, 'cameras': [''],
                'bag_prefix': mode}), tmp / f'recorder-{mode}.log')
    probe = RosProbe(f'bench_recorder_{mode}')
    pubs: list[Any] = []
    try:
        diags = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
        probe.wait_for_node('recorder', 60.0, [recorder])
        stamps_files = {c: tmp / f'{mode}-{c}-sent.json' for c in CAMERAS}
        me = [sys.executable, __file__]
        pubs = [NodeProcess(f'camera_{c}', me + ['--role', 'camera', '--camera', c, '--mode',
                                                 mode, '--seconds', str(seconds),
                                                 '--stamps-out', str(stamps_files[c])],
                            tmp / f'{mode}-camera-{c}.log') for c in CAMERAS]
        pubs.append(NodeProcess('robot', me + ['--role', 'robot', '--seconds',
                                               str(seconds + 2.0)], tmp / f'{mode}-robot.log'))
        cpu0 = cpu_s(recorder.pid)
        t0 = time.monotonic()
        wait_until(lambda: all(f.is_file() for f in stamps_files.values()), seconds + 90.0,
                   'every camera to finish', [recorder, *graph_procs])
        wall = time.monotonic() - t0
        cpu = cpu_s(recorder.pid) - cpu0
        for p in pubs:
            p.proc.wait(timeout=30.0)
        recorder.stop(timeout_s=60.0)
        values = {}
        for arr in diags.snapshot():
            for status in arr.status:
                if status.name == 'recorder: recording':
                    values = {kv.key: kv.value for kv in status.values}
        bag = max(out.glob(f'{mode}_*'))
        closed = (bag / 'metadata.yaml').is_file()
        in_bag = bag_stamps(bag, image_topics)
        per_camera = {}
        for cam, topic in zip(CAMERAS, image_topics):
            sent = json.loads(stamps_files[cam].read_text())
            got = set(in_bag[topic])
            first = min(got) if got else None
            before = sum(1 for s in sent if first is None or s < first)
            after = sum(1 for s in sent if first is not None and s >= first and s not in got)
            per_camera[cam] = {'sent': len(sent), 'in_bag': len(got),
                               'lost_before_first': before, 'lost_after_first': after}
        sent_total = sum(c['sent'] for c in per_camera.values())
        return {
            'mode': mode, 'seconds': round(wall, 2), 'images_sent': sent_total,
            'images_in_bag': sum(c['in_bag'] for c in per_camera.values()),
            'lost_before_first': sum(c['lost_before_first'] for c in per_camera.values()),
            'lost_after_first': sum(c['lost_after_first'] for c in per_camera.values()),
            'dropped': int(values.get('dropped', 0)), 'per_camera': per_camera,
            'bag_mb': round(dir_mb(bag), 1),
            'bag_mb_per_min': round(dir_mb(bag) / wall * 60, 1),
            'write_mb_per_s': round(int(values.get('bytes_written', 0)) / 1e6 / wall, 1),
            'recorder_cpu_pct': round(100 * cpu / wall, 1), 'bag_closed': closed,
            'load_average': round(os.getloadavg()[0], 2), 'bag': str(bag),
        }
    finally:
        for p in pubs:
            if p.alive:
                p.stop()
        if recorder.alive:
            recorder.stop()
        probe.close()


def export_run(bag: str, tmp: Path, fps: int) -> dict[str, Any]:
    """Export the raw recording; the steady rate is timed from the first frame written, so
    the fixed start-up (importing LeRobot and torch, reading the bag's stamps) is apart."""
    t_import = time.monotonic()
    import importlib
    importlib.import_module('lerobot.datasets.lerobot_dataset')  # timed: a fixed cost

    from lerobot_lang_nodes.recording.dataset import ExportOptions, export
    import_s = time.monotonic() - t_import
    out = tmp / 'dataset'
    first: list[float] = []

    def progress(_n: int, _total: int) -> None:
        if not first:
            first.append(time.monotonic())

    t0 = time.monotonic()
    cpu0 = time.process_time()
    result = export([bag], out, ExportOptions(fps=fps, repo_id='bench/recorder',
                                              episodes_by='whole', cameras=('front', 'wrist')),
                    progress=progress)
    end = time.monotonic()
    wall = end - t0
    cpu = time.process_time() - cpu0
    steady = result.frames / (end - first[0])
    minutes = result.frames / fps / 60
    return {'frames': result.frames, 'episodes': result.episodes, 'seconds': round(wall, 1),
            'import_s': round(import_s, 1), 'before_first_frame_s': round(first[0] - t0, 1),
            'frames_per_s': round(result.frames / wall, 1),
            'steady_frames_per_s': round(steady, 1),
            'real_time_factor': round(steady / fps, 2),
            'cpu_s': round(cpu, 1), 'load_average': round(os.getloadavg()[0], 2),
            'dataset_mb': round(dir_mb(out), 2),
            'dataset_mb_per_min': round(dir_mb(out) / minutes, 2) if minutes else None,
            'cameras': result.cameras}


def markdown(report: dict[str, Any]) -> str:
    graph = 'with the sim graph running beside it' if report['graph'] else 'no graph running'
    lines = ['# Recorder and export benchmark', '',
             f"{report['machine']}; {report['seconds']} s per mode, 3 cameras "
             f"{WIDTH}x{HEIGHT} at {FPS:.0f} Hz, one publisher process per camera (sensor-data "
             f"QoS, shared memory), {graph}.", '',
             '| mode | images sent | in bag | lost before the first | lost after the first | '
             'dropped (queue) | bag MB/min | write MB/s | recorder CPU % | load avg |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for r in report['recording']:
        lines.append(f"| {r['mode']} | {r['images_sent']} | {r['images_in_bag']} | "
                     f"{r['lost_before_first']} | {r['lost_after_first']} | {r['dropped']} | "
                     f"{r['bag_mb_per_min']} | {r['write_mb_per_s']} | "
                     f"{r['recorder_cpu_pct']} | {r['load_average']} |")
    e = report['export']
    if e:
        lines += ['', f"Export of the raw recording (2 cameras, {e['frames']} frames at "
                  f"{report['fps']} fps, AV1 as LeRobot encodes it): {e['steady_frames_per_s']} "
                  f"frames/s from the first frame written ({e['real_time_factor']}x real time); "
                  f"fixed start-up {e['import_s']} s importing LeRobot and torch and "
                  f"{e['before_first_frame_s']} s reading the bag before the first frame; "
                  f"{e['frames_per_s']} frames/s over the whole {e['seconds']} s export "
                  f"(load average {e['load_average']}); {e['dataset_mb']} MB, "
                  f"{e['dataset_mb_per_min']} MB per minute of session."]
    lines += ['', '`lost before the first`: frames a camera sent before the recorder had its '
              'first one (subscription start-up); `lost after the first`: the target, 0. The '
              'recorder holds 30 raw or 90 JPEG images per camera in its DDS history (1 s, '
              '3 s at 30 Hz) while it is not scheduled; a raw 640x480 publisher can also have '
              'at most about 17 frames in flight in its 16 MiB shared-memory segment '
              '(config/fastdds_shm.xml), so a recorder descheduled for more than about 0.55 s '
              'loses raw frames even so, JPEG ones not.', '']
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--seconds', type=float, default=10.0, help='wall seconds per mode')
    parser.add_argument('--fps', type=int, default=30, help='export frame rate')
    parser.add_argument('--out', type=Path, default=REPORT_DIR, help='report folder')
    parser.add_argument('--keep', action='store_true', help='keep the bags (path printed)')
    parser.add_argument('--no-graph', action='store_true', help='no sim graph beside it')
    parser.add_argument('--no-export', action='store_true', help='recording only')
    parser.add_argument('--modes', default='raw,compressed', help='comma-separated modes')
    # Child roles (the publisher processes this script starts).
    parser.add_argument('--role', choices=('camera', 'robot', 'graph-task'),
                        help=argparse.SUPPRESS)
    parser.add_argument('--camera', help=argparse.SUPPRESS)
    parser.add_argument('--mode', help=argparse.SUPPRESS)
    parser.add_argument('--stamps-out', type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == 'camera':
        return camera_process(args.camera, args.mode, args.seconds, args.stamps_out)
    if args.role == 'robot':
        return robot_process(args.seconds)
    if args.role == 'graph-task':
        return graph_task_process()
    from domain_coordinator import domain_id

    from lerobot_lang_nodes.testing import wait_until
    tmp = Path(tempfile.mkdtemp(prefix='bench_recorder_'))
    graph_procs: list[Any] = []
    try:
        with domain_id() as domain, domain_id() as graph_domain:
            env = dds.ros_environment(domain_id=domain)
            env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'  # forced, even if set otherwise
            env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
            env['PYTHONPATH'] = os.pathsep.join(p for p in (str(Path(__file__).parent.parent),
                                                            env.get('PYTHONPATH')) if p)
            os.environ.update(env)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            if not args.no_graph:
                graph_env = {**env, 'ROS_DOMAIN_ID': str(graph_domain), 'MUJOCO_GL':
                             env.get('MUJOCO_GL', 'egl')}
                graph_procs = start_graph(tmp, graph_env)
                # Measured once the arm moves: start-up (model loading) is not steady state.
                dispatches = tmp / 'dispatch.jsonl'
                wait_until(lambda: dispatches.is_file() and dispatches.stat().st_size > 0,
                           300.0, 'the sim graph dispatching its first action', graph_procs)
            runs = [record(mode, args.seconds, tmp / 'bags', tmp, graph_procs)
                    for mode in args.modes.split(',')]
        for p in graph_procs:
            p.stop()
        exported = (export_run(runs[0]['bag'], tmp, args.fps)
                    if not args.no_export and runs[0]['mode'] == 'raw' else {})
        for r in runs:
            del r['bag']  # a temporary folder of this run
        report = {'machine': f'{os.cpu_count()} CPUs', 'seconds': args.seconds,
                  'fps': args.fps, 'graph': not args.no_graph, 'recording': runs,
                  'export': exported}
        write_report(args.out, 'recorder', report, markdown(report))
        return 0 if all(r['bag_closed'] for r in runs) else 1
    finally:
        for p in graph_procs:
            if p.alive:
                p.stop()
        if args.keep:
            print(f'bags kept in {tmp}')
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
