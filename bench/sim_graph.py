"""Benchmark the simulated node graph: real-time factor, dispatch jitter, latency, CPU per node.

Usage: .venv/bin/python bench/sim_graph.py [--sim-seconds 60] [--viewer] [--no-cycle]
                                           [--out bench/reports]

The graph is started as `ros2 launch lerobot_lang_nodes sim.launch.py` starts it
(testing.SimGraph on graph.launch_plan, with a dispatch log), one process per node, in a
private ROS domain with discovery kept on loopback. A task is published on `task`; by default the
next colour is sent after each success (and the scene re-rolled after the last colour) so the
arm keeps working for the whole measured window. See bench/README.md, "Simulated graph".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import (REPORT_DIR, parse_override, percentiles, private_ros_domain,
                           write_report)
from lerobot_lang_nodes.core.dispatch_file import read_dispatch_file
from lerobot_lang_nodes.nodes.params import config_defaults
from lerobot_lang_nodes.nodes.sim_bridge_node import SimBridgeConfig
from lerobot_lang_nodes.testing import SimGraph, WaitTimeout, wait_until

# nodes/runner.py's executor switch (not imported from there: that would import rclpy before
# private_ros_domain() set the DDS environment).
EXECUTOR_ENV = 'LEROBOT_LANG_EXECUTOR'

COLOURS = ('red', 'green', 'blue')
CLK_TCK = os.sysconf('SC_CLK_TCK')
STOP_TIMEOUT_S = 5.0


def task_text(colour: str) -> str:
    # The canonical phrasing: the sim's TaskOutcome.goal is then exactly this text.
    return f'put the {colour} cube in the bowl'


def stamp_s(stamp: Any) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


# --- /proc readings -----------------------------------------------------------------------
def cpu_seconds(pid: int | str) -> float | None:
    """utime + stime of a process (all its threads), in seconds; None once it is gone."""
    try:
        text = Path(f'/proc/{pid}/stat').read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces: split after its closing parenthesis.
    fields = text[text.rindex(')') + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def max_rss_mb(pid: int | str) -> float | None:
    """Peak resident set size (VmHWM) in MiB."""
    try:
        for line in Path(f'/proc/{pid}/status').read_text().splitlines():
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) / 1024.0
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


# --- statistics ---------------------------------------------------------------------------
def sim_dispatch_jitter(dispatches: list[dict], period: float) -> dict[str, Any]:
    """|period - nominal| between consecutive dispatches, in sim ms.

    Sim time advances by exactly one period per tick, so this is 0 while the queue is fed;
    a tick without an action (starved, paused, reset) shows up as a multiple of the period.
    """
    t = np.array([d['t'] for d in dispatches], dtype=np.float64)
    dt = np.diff(t)
    out = percentiles(np.abs(dt - period), 1000.0)
    out['gaps'] = int(np.sum(dt > 1.5 * period))  # periods with at least one tick missing
    return out


def wall_joint_jitter(arrivals: list[tuple[float, float]], period: float,
                      camera_every: int) -> dict[str, Any]:
    """|wall period - nominal| between /joint_states of consecutive ticks, as the probe saw them.

    Pairs across a lost message (best-effort QoS) are skipped: they say nothing about the
    loop's pacing. The figure includes DDS delivery and the probe's own scheduling.
    """
    rows = sorted(arrivals, key=lambda r: r[0])  # by sim stamp
    diffs, dropped = [], 0
    by_phase: list[list[float]] = [[] for _ in range(camera_every)]
    for (s0, w0), (s1, w1) in zip(rows, rows[1:]):
        ticks = round((s1 - s0) / period)
        if ticks == 1:
            diffs.append(abs((w1 - w0) - period))
            by_phase[round(s1 / period) % camera_every].append(1000.0 * (w1 - w0))
        elif ticks > 1:
            dropped += ticks - 1
    out = percentiles(diffs, 1000.0)
    out['lost_messages'] = dropped
    # The sim loop renders the cameras on one tick in camera_every, in the control thread:
    # a pattern across these medians says the jitter is the renderer's, not DDS noise.
    out['period_p50_ms_by_camera_phase'] = [round(float(np.median(v)), 1) if v else None
                                            for v in by_phase]
    return out


# --- the graph ----------------------------------------------------------------------------
class Recorder:
    """The probe's subscriptions: everything the figures need, timestamped on arrival."""

    def __init__(self, probe: Any) -> None:
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from lerobot_lang_msgs.msg import (ActionChunk, LanguageContext, RuntimeStatus,
                                           TaskOutcome)
        from lerobot_lang_nodes.nodes import qos
        self.lock = threading.Lock()
        self.clock: tuple[float, float] | None = None      # (sim s, wall s) of the last /clock
        self.joints: list[tuple[float, float]] = []        # (stamp sim s, arrival wall s)
        self.chunks: dict[int, float] = {}                 # sequence -> observation stamp
        self.status: Any = None
        self.context: Any = None
        self.outcome: Any = None
        self.truth_seed: int | None = None  # layout seed of the latest sim/ground_truth
        self.truth_count = 0                # ground truths received with that seed
        self.recording = False
        node = probe.node
        node.create_subscription(Clock, '/clock', self._on_clock, qos.CLOCK)
        node.create_subscription(JointState, 'joint_states', self._on_joints, qos.SENSOR)
        node.create_subscription(ActionChunk, 'action_chunk', self._on_chunk, qos.COMMAND)
        node.create_subscription(RuntimeStatus, 'runtime_status', self._set('status'),
                                 qos.STATUS)
        node.create_subscription(LanguageContext, 'language_context', self._set('context'),
                                 qos.LATCHED)
        node.create_subscription(TaskOutcome, 'task_outcome', self._set('outcome'),
                                 qos.LATCHED)
        node.create_subscription(String, 'sim/ground_truth', self._on_truth, qos.LATCHED)

    def _set(self, attr: str):
        def callback(msg: Any) -> None:
            with self.lock:
                setattr(self, attr, msg)
        return callback

    def _on_clock(self, msg: Any) -> None:
        with self.lock:
            self.clock = (stamp_s(msg.clock), time.monotonic())

    def _on_joints(self, msg: Any) -> None:
        wall = time.monotonic()  # first thing: the arrival time is the measurement
        if self.recording:
            with self.lock:
                self.joints.append((stamp_s(msg.header.stamp), wall))

    def _on_truth(self, msg: Any) -> None:
        seed = json.loads(msg.data).get('seed')
        with self.lock:
            self.truth_count = self.truth_count + 1 if seed == self.truth_seed else 1
            self.truth_seed = seed

    def _on_chunk(self, msg: Any) -> None:
        with self.lock:
            self.chunks[int(msg.sequence)] = stamp_s(msg.header.stamp)

    def get(self, attr: str) -> Any:
        with self.lock:
            return getattr(self, attr)


class TaskCycler:
    """Sends a task, notices its success, then sends the next colour (re-rolling after blue)."""

    def __init__(self, probe: Any, rec: Recorder, cycle: bool, first: str,
                 task_timeout_s: float) -> None:
        from std_msgs.msg import String

        from lerobot_lang_nodes.nodes import qos
        self._String = String
        self.probe, self.rec, self.cycle = probe, rec, cycle
        self.task_timeout_s = task_timeout_s
        self.pub = probe.publisher(String, 'task', qos.LATCHED, wait_subscribers=1,
                                   timeout_s=30.0)
        self.colour = first
        self.current = ''
        self.revision: int | None = None   # context revision at which the planner took it
        self.sent_sim = 0.0
        self.done_for_current = False
        self.sent = 0
        self.completed: list[float] = []    # sim seconds from send to success
        self.timed_out = 0
        self.resets = 0
        self.await_seed: int | None = None  # after a reset: send once the new layout is seen

    def send(self, sim_now: float) -> None:
        self.current = task_text(self.colour)
        self.revision, self.sent_sim, self.done_for_current = None, sim_now, False
        self.pub.publish(self._String(data=self.current))
        self.sent += 1

    def _next(self, sim_now: float) -> None:
        index = COLOURS.index(self.colour) + 1
        if index == len(COLOURS):
            # Every cube is in the bowl: re-roll the layout (the only way objects move other
            # than through physics), so the next round has work to do.
            from std_srvs.srv import Trigger
            old_seed = self.rec.get('truth_seed')
            reply = self.probe.call(Trigger, 'sim/reset', Trigger.Request(), timeout_s=30.0)
            if not reply.success:
                raise RuntimeError(f'sim/reset failed: {reply.message}')
            self.resets += 1
            # The planner plans from the latest ground truth; sent at once, the task would be
            # judged on the pre-reset scene (that cube already in the bowl). See the report.
            self.await_seed = old_seed
        self.colour = COLOURS[index % len(COLOURS)]
        if self.await_seed is None:
            self.send(sim_now)

    def step(self, sim_now: float) -> None:
        if self.await_seed is not None:
            # Two ground truths of the new layout: every subscriber has had one by now.
            with self.rec.lock:
                fresh = (self.rec.truth_seed != self.await_seed
                         and self.rec.truth_count >= 2)
            if fresh:
                self.await_seed = None
                self.send(sim_now)
            return
        ctx = self.rec.get('context')
        if self.revision is None:
            if ctx is not None and ctx.task == self.current:
                self.revision = int(ctx.revision)
            return
        out = self.rec.get('outcome')
        success = (out is not None and out.success and out.goal == self.current
                   and out.context_revision >= self.revision)
        if success and not self.done_for_current:
            self.done_for_current = True
            self.completed.append(sim_now - self.sent_sim)
            if self.cycle:
                self._next(sim_now)
        elif (self.cycle and not self.done_for_current
              and sim_now - self.sent_sim > self.task_timeout_s):
            self.timed_out += 1  # the expert got stuck: move on so the arm keeps working
            self._next(sim_now)


# --- the run ------------------------------------------------------------------------------
def run(args: argparse.Namespace, env: dict[str, str], t_start: float) -> dict[str, Any]:
    from lerobot_lang_nodes.testing import RosProbe

    wall_cap = 3.0 * args.sim_seconds + 60.0 if args.wall_cap is None else args.wall_cap
    deadline = t_start + wall_cap

    def remaining(limit: float) -> float:
        return max(0.1, min(limit, deadline - time.monotonic()))

    tmp = Path(tempfile.mkdtemp(prefix='bench_sim_graph_'))
    overrides: dict[str, dict[str, Any]] = {}
    for node, name, value in args.param:
        overrides.setdefault(node, {})[name] = value
    if args.target_rtf is not None:
        overrides.setdefault('sim_bridge', {})['real_time_factor'] = args.target_rtf
    sim_graph = SimGraph(tmp, overrides, env={**env, EXECUTOR_ENV: args.executor},
                         viewer=args.viewer, probe=False)
    dispatch_log = sim_graph.dispatch_log
    # The params file sets what differs from the node's defaults; read both.
    sim_params = {**config_defaults(SimBridgeConfig), **sim_graph.params_of('sim_bridge')}
    ctrl_hz = float(sim_params['ctrl_hz'])
    period = 1.0 / ctrl_hz
    # Same rounding as the sim loop: images go out on one tick in camera_every.
    camera_every = max(1, int(round(ctrl_hz / float(sim_params['camera_hz']))))
    procs = sim_graph.procs
    plist = list(procs.values())
    probe = None
    ok = False
    try:
        probe = RosProbe('bench_sim_graph_probe')
        rec = Recorder(probe)
        for name in procs:
            probe.wait_for_node(name, timeout_s=remaining(90.0), processes=plist)
        wait_until(lambda: rec.get('status') is not None and rec.get('clock') is not None,
                   remaining(90.0), 'runtime_status and /clock from sim_bridge', plist)
        startup_wall = time.monotonic() - t_start

        cycler = TaskCycler(probe, rec, not args.no_cycle, args.colour, args.task_timeout)
        sent_sim = rec.get('clock')[0]
        dispatched_before = rec.get('status').dispatched
        cycler.send(sent_sim)
        # The measured window starts at the first dispatched action, not at the send: the
        # policy's first inference warms its backend up (seconds on a loaded machine), and
        # those starved ticks would swamp the steady-state figures of a short run.
        wait_until(lambda: rec.get('status').dispatched > dispatched_before,
                   remaining(60.0), 'the first dispatched action of the task', plist)
        sim0, wall0 = rec.get('clock')
        cpu0 = {name: cpu_seconds(p.pid) for name, p in procs.items()}
        cpu0['bench_probe'] = cpu_seconds('self')
        status0 = rec.get('status')
        rec.recording = True
        sim_end = sim0 + args.sim_seconds

        def step() -> bool:
            clock = rec.get('clock')
            cycler.step(clock[0])
            return clock[0] >= sim_end

        truncated = False
        try:
            wait_until(step, deadline - time.monotonic(), f'{args.sim_seconds} s of sim time',
                       plist, poll_s=0.05)
        except WaitTimeout:
            if any(not p.alive for p in plist):
                raise
            truncated = True  # the wall-clock cap: report what was measured, flagged
        rec.recording = False
        sim1, wall1 = rec.get('clock')
        cpu1 = {name: cpu_seconds(p.pid) for name, p in procs.items()}
        cpu1['bench_probe'] = cpu_seconds('self')
        rss = {name: max_rss_mb(p.pid) for name, p in procs.items()}
        rss['bench_probe'] = max_rss_mb('self')
        status1 = rec.get('status')
        joints = list(rec.joints)
        chunks = dict(rec.chunks)
        ok = True
    finally:
        # Reverse start order: the simulator stops last, so no node waits on a dead clock.
        # A node that ignores SIGINT is killed after STOP_TIMEOUT_S (exit code -9 in the
        # report): the run stays bounded and the unclean stop is visible, not hidden.
        codes = {name: procs[name].stop(timeout_s=STOP_TIMEOUT_S)
                 for name in reversed(list(procs))}
        if probe is not None:
            probe.close()
        if not ok or args.keep_logs:
            sys.stderr.write(f'node logs kept in {tmp}\n')
        if ok and args.keep_logs:
            (tmp / 'joint_state_arrivals.json').write_text(json.dumps(joints))
    try:
        dispatches = read_dispatch_file(dispatch_log)
    finally:
        if not args.keep_logs:
            shutil.rmtree(tmp, ignore_errors=True)

    sim_s, wall_s = sim1 - sim0, wall1 - wall0
    window = [d for d in dispatches if sim0 <= d['t'] <= sim1]
    first_dispatch: dict[int, float] = {}
    for d in dispatches:
        first_dispatch.setdefault(int(d['sequence']), float(d['t']))
    latencies, never = [], 0
    for seq, obs in chunks.items():
        if not sim0 <= obs <= sim1:
            continue
        if seq in first_dispatch:
            latencies.append(first_dispatch[seq] - obs)
        else:
            never += 1  # replaced before its first action was due, or arrived after the end
    starved = int(status1.starved_ticks - status0.starved_ticks)
    cpu = {}
    for name in cpu1:
        used = (cpu1[name] - cpu0[name]) if None not in (cpu0[name], cpu1[name]) else None
        cpu[name] = {'cpu_pct_of_core': None if used is None else round(100.0 * used / wall_s, 1),
                     'max_rss_mb': None if rss[name] is None else round(rss[name], 1)}
    done = cycler.completed
    return {
        'benchmark': 'sim_graph',
        'date': time.strftime('%Y-%m-%d %H:%M:%S'),
        'machine': {'cpus': os.cpu_count(), 'python': platform.python_version(),
                    'loadavg_1min_at_start': round(args.loadavg0, 2)},
        'config': {'sim_seconds': args.sim_seconds, 'ctrl_hz': ctrl_hz,
                   'target_real_time_factor': sim_params['real_time_factor'],
                   'cameras': list(sim_params['cameras']),
                   'image': f"{sim_params['image_width']}x{sim_params['image_height']}",
                   'camera_hz': sim_params['camera_hz'], 'viewer': bool(args.viewer),
                   'cycle_tasks': not args.no_cycle, 'nodes': list(procs),
                   'executor': args.executor},
        'run': {'sim_s': round(sim_s, 3), 'wall_s': round(wall_s, 3),
                'startup_wall_s': round(startup_wall, 1),
                'task_to_first_dispatch_sim_s': round(sim0 - sent_sim, 2),
                'truncated_by_wall_cap': truncated,
                'exit_codes': codes},
        'real_time_factor': round(sim_s / wall_s, 3),
        'dispatch_jitter_ms': {'sim_dispatch_log': sim_dispatch_jitter(window, period),
                               'wall_joint_states': wall_joint_jitter(
                                   joints, period, camera_every)},
        'executor': {
            'dispatched': int(status1.dispatched - status0.dispatched),
            'dispatch_log_lines': len(window),
            'starved_ticks': starved,
            'starved_per_sim_min': round(60.0 * starved / sim_s, 1) if sim_s > 0 else None,
            'starved_fraction': round(starved / max(1.0, sim_s * ctrl_hz), 4),
            'discarded_stale': int(status1.discarded_stale - status0.discarded_stale),
            'rejected_invalid': int(status1.rejected_invalid - status0.rejected_invalid)},
        'chunk_latency_ms': {**percentiles(latencies, 1000.0), 'never_dispatched': never,
                             'chunks_received': len(chunks)},
        'cpu': cpu,
        'tasks': {'sent': cycler.sent, 'completed': len(done), 'timed_out': cycler.timed_out,
                  'scene_resets': cycler.resets,
                  'median_sim_s_to_success': (round(float(np.median(done)), 2) if done
                                              else None)},
    }


# --- output -------------------------------------------------------------------------------
def _fmt(stats: dict[str, Any], unit: str = 'ms') -> str:
    if not stats.get('n'):
        return 'no data'
    return f"p50 {stats['p50']:.3f} / p99 {stats['p99']:.3f} {unit} (max {stats['max']:.1f}, " \
           f"n {stats['n']})"


def rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    jit, ex, lat, tasks = (r['dispatch_jitter_ms'], r['executor'], r['chunk_latency_ms'],
                           r['tasks'])
    out = [
        ('real-time factor (sim s / wall s)',
         f"{r['real_time_factor']:.3f} (target {r['config']['target_real_time_factor']}; "
         f"{r['run']['sim_s']:.1f} sim s in {r['run']['wall_s']:.1f} wall s)"),
        ('dispatch jitter, sim (dispatch log)',
         _fmt(jit['sim_dispatch_log']) + f", gaps {jit['sim_dispatch_log']['gaps']}"),
        ('dispatch jitter, wall (/joint_states)',
         _fmt(jit['wall_joint_states'])
         + f", lost {jit['wall_joint_states']['lost_messages']}"),
        ('wall period p50 by tick mod camera',
         ' / '.join(f'{v} ms' for v in jit['wall_joint_states']
                    ['period_p50_ms_by_camera_phase'])
         + f" (nominal {1000.0 / r['config']['ctrl_hz']:.1f} ms)"),
        ('starved ticks', f"{ex['starved_ticks']} ({ex['starved_per_sim_min']}/sim min, "
                          f"{100 * ex['starved_fraction']:.1f}% of ticks)"),
        ('discarded stale / rejected invalid',
         f"{ex['discarded_stale']} / {ex['rejected_invalid']}"),
        ('chunk latency, obs stamp -> 1st dispatch',
         _fmt(lat, 'sim ms') + f", never dispatched {lat['never_dispatched']}"),
    ]
    for name, c in r['cpu'].items():
        pct = 'gone' if c['cpu_pct_of_core'] is None else f"{c['cpu_pct_of_core']:.1f}%"
        out.append((f'CPU {name}', f"{pct} of one core, max RSS {c['max_rss_mb']} MiB"))
    unclean = {k: v for k, v in r['run']['exit_codes'].items() if v != 0}
    out.append(('node exit codes', 'all 0 (clean SIGINT stop)' if not unclean else
                ', '.join(f'{k} {v}' + (' (killed: ignored SIGINT)' if v == -9 else '')
                          for k, v in unclean.items())))
    out.append(('tasks completed',
                f"{tasks['completed']} of {tasks['sent']} sent (timed out "
                f"{tasks['timed_out']}, resets {tasks['scene_resets']}, median "
                f"{tasks['median_sim_s_to_success']} sim s each)"))
    return out


def markdown(r: dict[str, Any]) -> str:
    c, m = r['config'], r['machine']
    lines = ['# Simulated graph benchmark', '',
             f"{r['date']}; {m['cpus']} CPUs, Python {m['python']}, load average "
             f"{m['loadavg_1min_at_start']} at start. Nodes: {', '.join(c['nodes'])} "
             f"(one process each); ctrl {c['ctrl_hz']:.0f} Hz, cameras "
             f"{', '.join(c['cameras'])} {c['image']} @ {c['camera_hz']} Hz; "
             f"{c['sim_seconds']} sim s, tasks {'cycled' if c['cycle_tasks'] else 'single'}"
             f"; node executor {c.get('executor', 'pool')}."
             + (' Stopped by the wall-clock cap.' if r['run']['truncated_by_wall_cap'] else ''),
             '', '| figure | value |', '|---|---|']
    lines += [f'| {k} | {v} |' for k, v in rows(r)]
    lines += ['', 'One run on a shared machine: compare ratios and medians between runs, not '
              'absolute values. Figures are explained in bench/README.md ("Simulated graph").']
    return '\n'.join(lines) + '\n'


def table(r: dict[str, Any]) -> str:
    data = rows(r)
    width = max(len(k) for k, _ in data)
    return '\n'.join(f'{k:<{width}}  {v}' for k, v in data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sim-seconds', type=float, default=60.0,
                        help='measured duration in sim time (default 60)')
    parser.add_argument('--viewer', action='store_true', help='also run the viewer node')
    parser.add_argument('--no-cycle', action='store_true',
                        help='send one task only (the arm idles after it succeeds)')
    parser.add_argument('--colour', choices=COLOURS, default='red', help='first cube')
    parser.add_argument('--task-timeout', type=float, default=30.0,
                        help='sim s after which a cycled task is abandoned for the next')
    parser.add_argument('--target-rtf', type=float, default=None,
                        help="sim_bridge real_time_factor (default: config/sim.yaml's)")
    parser.add_argument('--wall-cap', type=float, default=None,
                        help='stop after this many wall s in all (default 3 x sim + 60)')
    parser.add_argument('--out', type=Path, default=REPORT_DIR,
                        help='folder for sim_graph.json and sim_graph.md')
    parser.add_argument('--keep-logs', action='store_true',
                        help='keep the node logs and dispatch log (path printed)')
    parser.add_argument('--param', type=parse_override, action='append', default=[],
                        metavar='NODE.PARAM=VALUE',
                        help='override one node parameter of config/sim.yaml (repeatable), '
                             'e.g. planner.backend=transformers')
    parser.add_argument('--executor', choices=('inline', 'pool'), default='inline',
                        help="the nodes' executor: inline (the default: default-group "
                             "callbacks on the spinning thread) or pool (rclpy's stock "
                             'MultiThreadedExecutor), to compare CPU and latency')
    parser.add_argument('--name', default='sim_graph',
                        help='report file name stem (default sim_graph)')
    args = parser.parse_args(argv)
    t_start = time.monotonic()
    args.loadavg0 = os.getloadavg()[0]

    with private_ros_domain() as domain:
        report = run(args, dict(os.environ), t_start)

    report['run']['param_overrides'] = [f'{n}.{k}={v!r}' for n, k, v in args.param]
    sys.stdout.write(table(report) + f'\n\n(ROS_DOMAIN_ID {domain})\n')
    write_report(args.out, args.name, report, markdown(report), echo=False)
    return 0 if not report['run']['truncated_by_wall_cap'] else 1


if __name__ == '__main__':
    sys.exit(main())
