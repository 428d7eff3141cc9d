"""Dispatch jitter of the control loops: the simulator and the driver, at 30 and 50 Hz, under load.

Usage: python bench/jitter.py [--seconds 8] [--rates 30,50] [--priorities 0,50]

For each loop (sim_bridge with MuJoCo and two cameras; so101_driver on the byte-level emulated
arm), each rate and each load, the loop runs for --seconds while a probe keeps its queue full
(a chunk of two seconds, published every second). The intervals between consecutive dispatches
(the loop's dispatch log: the wall-clock instant each action was applied, or written to the
serial port) give the jitter |interval - period|, as p50 and p99. Driver rows also give the
jitter seen at the emulated arm (its stamp of each Goal_Position write to the pan servo), which
adds the emulator's own scheduling (a normal-priority process reading a pseudo-terminal).

Loads, one at a time: `idle`; `generation`, a process running the planner's model generation
in a loop (a tiny Idefics3 built offline, 48 new tokens per call, one torch thread, standing in
for a planner that generates continuously); `cameras`, three 640x480 rgb8 streams at 30 Hz to
two subscribers (bench/image_transport.py's processes). Each loop runs with each of
--priorities as its ``thread_priority`` (0: normal scheduling; 1..99: SCHED_FIFO, where the
host allows it; the shipped defaults are 0 for sim_bridge and 50 for so101_driver). Target: p99
under 10 % of the period, and at most 1.1x the idle p99 (same priority) under load.

Writes bench/reports/jitter.{json,md}; a private ROS domain, discovery LOCALHOST, every process
stopped by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import BENCH, REPORT_DIR, write_report
from lerobot_lang_nodes.core.dispatch_file import read_dispatch_file

GENERATION = '''
import sys, time, torch
from pathlib import Path
from transformers import AutoModelForImageTextToText, AutoProcessor
from lerobot_lang_nodes.tiny_models import vlm
torch.set_num_threads(1)
out = Path(sys.argv[1])
vlm.build_tiny_vlm(out, vlm.example_texts(vlm.scene_planner_examples()))
processor = AutoProcessor.from_pretrained(out)
model = AutoModelForImageTextToText.from_pretrained(out).eval()
text = processor.apply_chat_template([{'role': 'user', 'content': 'task: put the red cube in '
                                       'the bowl. next subtask?'}], add_generation_prompt=True)
ids = processor.tokenizer(text, return_tensors='pt')
print('ready', flush=True)
end = time.monotonic() + float(sys.argv[2])
with torch.inference_mode():
    while time.monotonic() < end:
        model.generate(**ids, max_new_tokens=48, min_new_tokens=48, do_sample=False)
'''


class Load:
    """A background load started before a measurement and stopped by PID after it."""

    def __init__(self, kind: str, seconds: float, tmp: Path, env: dict[str, str]) -> None:
        self.procs: list[subprocess.Popen] = []
        me = [sys.executable]
        if kind == 'generation':
            p = subprocess.Popen(me + ['-c', GENERATION, str(tmp / 'tiny_vlm'), str(seconds)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
            seen = []
            for line in p.stdout:  # model building prints progress first
                seen.append(line)
                if line.strip() == 'ready':
                    break
            else:
                raise RuntimeError(f"generation load did not start: {''.join(seen)[-2000:]}")
            self.procs.append(p)
        elif kind == 'cameras':
            it = [str(BENCH / 'image_transport.py')]
            for i in range(2):
                self.procs.append(subprocess.Popen(
                    me + it + ['--role', 'sub', '--seconds', str(seconds + 20), '--out',
                               str(tmp / f'load_sub{i}.json'), '--name', f'jitter_load_sub{i}'],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.procs.append(subprocess.Popen(
                me + it + ['--role', 'pub', '--seconds', str(seconds + 10)], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def jitter(intervals_s: np.ndarray, period_s: float) -> dict[str, float]:
    dev = np.abs(intervals_s - period_s) * 1e3
    return {'n': int(dev.size), 'p50_ms': round(float(np.percentile(dev, 50)), 3),
            'p99_ms': round(float(np.percentile(dev, 99)), 3),
            'p99_pct_of_period': round(float(np.percentile(dev, 99)) / (period_s * 1e3) * 100,
                                       2)}


def feed(probe, names: list[str], hz: float, now, positions, stop: threading.Event,
         topic: str = 'action_chunk') -> None:
    """Keep the executor's queue full: a 2 s hold chunk every second."""
    from lerobot_lang_msgs.msg import ActionChunk
    from lerobot_lang_nodes.nodes import convert, qos
    pub = probe.publisher(ActionChunk, topic, qos.COMMAND, wait_subscribers=1, timeout_s=60.0)
    seq = 0
    while not stop.is_set():
        seq += 1
        values = np.tile(positions(), (int(2 * hz), 1))
        pub.publish(convert.chunk_to_msg(values, tuple(names), revision=1, sequence=seq,
                                         stamp_s=now(), period_s=1.0 / hz, instruction='hold',
                                         backend='bench', flush_revision=1))
        stop.wait(1.0)


def measure_sim(hz: float, seconds: float, tmp: Path, priority: int) -> dict[str, float]:
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState

    from lerobot_lang_msgs.msg import LanguageContext
    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.testing import NodeProcess, RosProbe, node_command
    log = tmp / f'sim_{hz:.0f}.jsonl'
    log.unlink(missing_ok=True)
    proc = NodeProcess('sim_bridge', node_command(
        'lerobot_lang_nodes.nodes.sim_bridge_node',
        params={'ctrl_hz': hz, 'dispatch_log_path': str(log), 'thread_priority': priority}),
        tmp / 'sim_bridge.log')
    probe = RosProbe('jitter_sim_probe')
    stop = threading.Event()
    try:
        clock = probe.subscribe(Clock, '/clock', qos.CLOCK)
        joints = probe.subscribe(JointState, 'joint_states', qos.SENSOR)
        first = joints.wait_for(timeout_s=90.0, what='joint states')
        probe.publisher(LanguageContext, 'language_context', qos.LATCHED).publish(
            LanguageContext(task='hold', revision=1, flush_revision=1))

        def now() -> float:
            c = clock.last.clock
            return c.sec + c.nanosec * 1e-9
        hold = np.array(first.position)
        t = threading.Thread(target=feed, args=(probe, list(first.name), hz, now,
                                                lambda: hold, stop), daemon=True)
        t.start()
        time.sleep(2.0 + seconds)  # a measuring window of wall time
    finally:
        stop.set()
        probe.close()
        proc.stop()
    wall = np.array([r['wall'] for r in read_dispatch_file(log)])
    return {**jitter(np.diff(wall[len(wall) // 4:]), 1.0 / hz),  # skip the start-up quarter
            **refused(tmp / 'sim_bridge.log')}


def measure_driver(hz: float, seconds: float, tmp: Path, priority: int) -> dict[str, float]:
    from std_srvs.srv import Trigger

    from lerobot_lang_msgs.msg import LanguageContext
    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.so101.calibration import (JOINT_NAMES, MotorCalibration,
                                                      save_calibration)
    from lerobot_lang_nodes.testing import EmulatorProcess, NodeProcess, RosProbe, node_command
    emu = EmulatorProcess(range(1, 7), link=tmp / f'so101_{hz:.0f}').start()
    log = tmp / f'driver_{hz:.0f}.jsonl'
    log.unlink(missing_ok=True)
    cal = tmp / 'calibration.json'
    save_calibration({j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                                          4095 if j == 'wrist_roll' else 3000)
                      for i, j in enumerate(JOINT_NAMES)}, path=cal)
    proc = NodeProcess('so101_driver', node_command(
        'lerobot_lang_nodes.nodes.so101_driver_node', params={
            'port': str(tmp / f'so101_{hz:.0f}'), 'calibration_path': str(cal), 'ctrl_hz': hz,
            'timeout_margin_ms': 100.0, 'thread_priority': priority,
            'dispatch_log_path': str(log)}), tmp / 'so101_driver.log')
    probe = RosProbe('jitter_arm_probe')
    stop = threading.Event()
    try:
        probe.publisher(LanguageContext, 'language_context', qos.LATCHED).publish(
            LanguageContext(task='hold', revision=1, flush_revision=1))
        deadline = time.monotonic() + 60.0
        while not probe.call(Trigger, 'resume', Trigger.Request(), timeout_s=30.0).success:
            if time.monotonic() > deadline:
                raise RuntimeError('the driver never resumed')
            time.sleep(0.5)  # not yet active: configure and activate run at start-up
        # Alternate a small step so every cycle writes a goal (the executor's queue is full).
        t = threading.Thread(target=feed, args=(probe, list(JOINT_NAMES), hz, time.time,
                                                lambda: np.zeros(len(JOINT_NAMES)), stop),
                             daemon=True)
        t.start()
        time.sleep(2.0)
        emu.goal_writes(clear=True)
        start = time.monotonic()
        time.sleep(seconds)
        end = time.monotonic()
        writes = [w.stamp for w in emu.goal_writes(clear=True) if w.servo_id == 1]
    finally:
        stop.set()
        probe.close()
        proc.stop()
        emu.stop()
    wall = np.array([r['wall'] for r in read_dispatch_file(log) if start <= r['wall'] <= end])
    arm = jitter(np.diff(np.array(writes)), 1.0 / hz)
    return {**jitter(np.diff(wall), 1.0 / hz), 'at_arm_p50_ms': arm['p50_ms'],
            'at_arm_p99_ms': arm['p99_ms'], 'at_arm_p99_pct': arm['p99_pct_of_period'],
            **refused(tmp / 'so101_driver.log')}


def refused(node_log: Path) -> dict[str, bool]:
    """Whether the host refused the loop's real-time priority (the node logs why)."""
    text = node_log.read_text(errors='replace') if node_log.exists() else ''
    return {'priority_refused': 'SCHED_FIFO priority' in text and 'refused' in text}


def markdown(report: dict[str, Any]) -> str:
    run = report['run']
    lines = ['# Dispatch jitter of the control loops', '',
             f"{run['seconds']} s per measurement, all in one run on {run['machine']} "
             f"({run['date']}"
             + (f", load average {run['load_average_1min_at_end']} at the end: other work "
                'shared the cores' if run.get('load_average_1min_at_end', 0) > 2.5 else '')
             + '). Jitter = |interval between consecutive dispatches - period|. '
             'Target: p99 under 10 % of the period, at most 1.1x the idle p99 under load.', '',
             'Driver rows: the last column is the p99 at the emulated arm (its own stamp of '
             'each write, emulator scheduling included).', '',
             '| loop | rate | thread_priority | load | dispatches | p50 (ms) | p99 (ms) | '
             'p99 % of period | p99 / idle p99 | at the arm: p99 (ms) |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for r in report['rows']:
        prio = (f"SCHED_FIFO {r['priority']}" + (' (refused: normal)'
                                                 if r.get('priority_refused') else '')
                if r.get('priority') else 'normal')
        lines.append(f"| {r['loop']} | {r['hz']:.0f} Hz | {prio} | {r['load']} | "
                     f"{r.get('n', '-')} | "
                     f"{r.get('p50_ms', '-')} | {r.get('p99_ms', '-')} | "
                     f"{r.get('p99_pct_of_period', '-')} | {r.get('vs_idle', '-')} | "
                     f"{r.get('at_arm_p99_ms', '-')} |")
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=8.0)
    parser.add_argument('--rates', type=lambda t: [float(x) for x in t.split(',')],
                        default=[30.0, 50.0])
    parser.add_argument('--loads', type=lambda t: t.split(','),
                        default=['idle', 'generation', 'cameras'])
    parser.add_argument('--loops', type=lambda t: t.split(','), default=['sim', 'driver'])
    parser.add_argument('--priorities', type=lambda t: [int(x) for x in t.split(',')],
                        default=[0, 50], help='thread_priority values to compare')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    from domain_coordinator import domain_id

    from lerobot_lang_nodes import dds
    tmp = Path(tempfile.mkdtemp(prefix='jitter_'))
    rows: list[dict[str, Any]] = []
    with domain_id() as domain:
        env = dds.ros_environment(domain_id=domain)
        env.update(ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST', MUJOCO_GL='egl',
                   HF_HUB_OFFLINE='1')
        env.setdefault('AMENT_PREFIX_PATH', sys.prefix)
        os.environ.update(env)
        for loop in args.loops:
            for hz in args.rates:
                for priority in args.priorities:
                    idle_p99 = None
                    for load_kind in args.loads:
                        row = {'loop': loop, 'hz': hz, 'priority': priority, 'load': load_kind}
                        load = Load(load_kind, args.seconds + 40, tmp, dict(os.environ))
                        try:
                            fn = measure_sim if loop == 'sim' else measure_driver
                            row.update(fn(hz, args.seconds, tmp, priority))
                        except Exception as exc:  # noqa: BLE001 - report it, measure the rest
                            row['error'] = f'{type(exc).__name__}: {exc}'
                        finally:
                            load.stop()
                        if load_kind == 'idle':
                            idle_p99 = row.get('p99_ms')
                        elif idle_p99 and row.get('p99_ms') is not None:
                            row['vs_idle'] = round(row['p99_ms'] / idle_p99, 2)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    report = {'run': {'seconds': args.seconds, 'date': time.strftime('%Y-%m-%d'),
                      'load_average_1min_at_end': round(os.getloadavg()[0], 2),
                      'machine': f'{platform.machine()}, {os.cpu_count()} cores'},
              'rows': rows}
    write_report(args.out, 'jitter', report, markdown(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
