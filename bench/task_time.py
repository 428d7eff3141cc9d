"""Time per task through the sim graph against the scripted expert alone, side by side.

Usage: python bench/task_time.py [--episodes 10] [--config NAME:NODE.PARAM=VALUE,...]

For each layout seed (the graph's reset k uses seed 1000 k, and so does the expert's scene) the
same "put the <colour> cube in the bowl" task is timed in sim seconds, from the task to the
moment the cube lies in the bowl (the simulator's ground truth, checked the same way for both):

* expert: the scripted expert alone (`sim/episode.py`), no ROS, checking its subtask on every
  control tick: the floor the graph is measured against;
* one row per graph configuration: sim_bridge, planner and policy in their own processes over
  DDS (scripted backends), configured from config/sim.yaml plus the configuration's overrides.
  Default configurations: `current` (the shipped parameters) and `before` (the rules before
  the control-loop issue: every subtask change flushes the queue, the planner regenerates
  after a chunk is published, at 1 Hz).

Writes bench/reports/task_time.{json,md}: per configuration the median task time, its ratio to
the expert's on the same episodes, successes, starved ticks and stale discards; and (unless
--no-interjections) the reaction to an interjection on the first configuration's graph: one
"use the <next colour> cube instead" per episode, timed to the planner's re-plan and to the
first dispatched action of it; with --reaction-load generation, the interjections are timed
again while another process runs the planner's model generation in a loop (a CPU load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import (REPORT_DIR, median, parse_override, private_ros_domain,
                           write_report)
from lerobot_lang_nodes.core.dispatch_file import read_dispatch_file
from lerobot_lang_nodes.core.inference_file import read_inference_file

from lerobot_lang_nodes.testing import SimGraph  # noqa: E402


COLOURS = ('red', 'green', 'blue')
DEFAULT_CONFIGS = [
    'current:',
    'before:planner.regen_on=chunk,planner.subtask_change_flushes=true,'
    'planner.high_level_hz=1.0',
]
# The seeds' design for the latency sweep: refill only when the queue is empty, and every
# context change flushes it.
SEEDS_RULES = ('sim_bridge.refill_fraction=0.0,planner.regen_on=chunk,'
               'planner.subtask_change_flushes=true')


def latency_configs(latencies_s: list[float]) -> list[str]:
    """(a) the seeds' rules and (b) the current ones, each with the policy slowed by L."""
    out = []
    for lat in latencies_s:
        ms = int(round(lat * 1000))
        out += [f'a_{ms}ms:{SEEDS_RULES},policy.added_latency_s={lat}',
                f'b_{ms}ms:policy.added_latency_s={lat}']
    return out


def episode_plan(n: int) -> list[tuple[int, str]]:
    """(layout seed, task) of episode k = 1..n: the graph's k-th reset uses seed 1000 k."""
    return [(1000 * k, f'put the {COLOURS[(k - 1) % 3]} cube in the bowl')
            for k in range(1, n + 1)]


def expert_times(plan: list[tuple[int, str]], max_sim_s: float) -> list[float | None]:
    from lerobot_lang_nodes.sim.episode import run_episode
    from lerobot_lang_nodes.sim.scene import So101Scene
    out: list[float | None] = []
    scene = So101Scene(seed=plan[0][0], cameras=())
    try:
        for seed, task in plan:
            scene.reset(seed)
            result = run_episode(scene, task, max_sim_s=max_sim_s)
            out.append(round(result.sim_time, 3) if result.success else None)
    finally:
        scene.close()
    return out


def parse_config(text: str) -> tuple[str, list[tuple[str, str, Any]]]:
    name, _, rest = text.partition(':')
    if not name:
        raise argparse.ArgumentTypeError(f'expected NAME:NODE.PARAM=VALUE,..., got {text!r}')
    return name, [parse_override(part) for part in rest.split(',') if part.strip()]


class RunningGraph:
    """sim_bridge, planner and policy in their own processes, and the probe that drives them."""

    def __init__(self, name: str, overrides: list, env: dict[str, str]) -> None:
        self.name, self.overrides, self.env = name, overrides, env

    def __enter__(self) -> RunningGraph:
        from rosgraph_msgs.msg import Clock
        from std_msgs.msg import String

        from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus
        from lerobot_lang_nodes.nodes import qos
        from lerobot_lang_nodes.testing import RosProbe

        self.tmp = Path(tempfile.mkdtemp(prefix=f'task_time_{self.name}_'))
        params: dict[str, dict[str, Any]] = {}
        for node, key, value in self.overrides:
            params.setdefault(node, {})[key] = value
        self.graph = SimGraph(self.tmp, params, env=self.env, viewer=False, probe=False)
        self.dispatch_log, self.inference_log = self.graph.dispatch_log, self.graph.inference_log
        self.procs = self.graph.procs
        self.probe = RosProbe(f'task_time_{self.name}')
        try:
            self.truth = self.probe.subscribe(String, 'sim/ground_truth', qos.LATCHED)
            self.clock = self.probe.subscribe(Clock, '/clock', qos.CLOCK)
            self.status = self.probe.subscribe(RuntimeStatus, 'runtime_status', qos.STATUS)
            self.context = self.probe.subscribe(LanguageContext, 'language_context',
                                                qos.LATCHED)
            for node in self.procs:
                self.probe.wait_for_node(node, timeout_s=90.0,
                                         processes=list(self.procs.values()))
            self.task_pub = self.probe.publisher(String, 'task', qos.LATCHED)
            self.interjection_pub = self.probe.publisher(String, 'interjection', qos.COMMAND)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.probe.close()
        for proc in reversed(list(self.procs.values())):
            proc.stop()

    def sim_now(self) -> float:
        now = self.clock.wait_for(timeout_s=10.0, since=len(self.clock), what='/clock').clock
        return now.sec + now.nanosec * 1e-9

    def start_task(self, seed: int, task: str) -> tuple[float, Any]:
        """Reset to layout ``seed``, send ``task``; (sim time it was sent at, status before)."""
        from std_msgs.msg import String
        from std_srvs.srv import Trigger

        reply = self.probe.call(Trigger, 'sim/reset', Trigger.Request(), timeout_s=60.0)
        if not reply.success:
            raise RuntimeError(f'sim/reset failed: {reply.message}')
        self.truth.wait_for(lambda m: json.loads(m.data)['seed'] == seed, timeout_s=30.0,
                            since=len(self.truth), what=f'the scene with seed {seed}')
        st0 = self.status.wait_for(timeout_s=10.0, since=len(self.status), what='a status')
        t0 = self.sim_now()
        self.task_pub.publish(String(data=task))
        return t0, st0


def graph_times(name: str, overrides: list, plan: list[tuple[int, str]], max_sim_s: float,
                env: dict[str, str]) -> dict[str, Any]:
    """Run the plan's episodes on one graph; times in sim seconds, None when not done."""
    from lerobot_lang_nodes.sim.tasks import check_success, parse_task

    times: list[float | None] = []
    reactions: list[float | None] = []
    starved = stale = starved_start = 0
    with RunningGraph(name, overrides, env) as g:
        for seed, task in plan:
            since = len(g.truth)
            t0, st0 = g.start_task(seed, task)
            spec = parse_task(task)

            def done(msg, spec=spec, t0=t0) -> bool:
                gt = json.loads(msg.data)
                return gt['sim_time'] - t0 > max_sim_s or check_success(spec, gt)

            mark = len(g.status)
            end = json.loads(g.truth.wait_for(done, timeout_s=max_sim_s * 6 + 60.0,
                                              since=since, what=f'{task!r} done').data)
            # Ticks starved before the task's first dispatched action are the reaction to the
            # operator's change; the rest are idle time while the task runs.
            first = next((m for m in g.status.snapshot()[mark:]
                          if m.dispatched > st0.dispatched), None)
            if first is not None:
                starved_start += first.starved_ticks - st0.starved_ticks
            times.append(round(end['sim_time'] - t0, 3) if check_success(spec, end) else None)
            reactions.append(first_dispatch_after(g.dispatch_log, t0))
            st1 = g.status.last
            starved += st1.starved_ticks - st0.starved_ticks
            stale += st1.discarded_stale - st0.discarded_stale
            print(f'  {name}: seed {seed} {task!r}: {times[-1]} s', flush=True)
    return {'times_s': times, 'reactions_s': reactions, 'starved_ticks': int(starved),
            'starved_before_first_dispatch': int(starved_start), 'stale_discards': int(stale),
            'overrides': [f'{n}.{k}={v!r}' for n, k, v in overrides]}


def interjection_reactions(overrides: list, plan: list[tuple[int, str]], env: dict[str, str],
                           after_s: float = 1.0) -> dict[str, Any]:
    """Per episode: the task, then ``after_s`` sim s into it "use the <next colour> cube
    instead" from this process; sim seconds from the interjection to the planner's re-planned
    context (its stamp) and to the first action the simulator dispatched for it, and where the
    wall time went (the policy's inference log joined with the dispatch log, one clock)."""
    from std_msgs.msg import String

    planner_s: list[float | None] = []
    reactions: list[float | None] = []
    walls: list[float | None] = []
    hops: list[dict[str, Any] | None] = []
    with RunningGraph('interjection', overrides, env) as g:
        for k, (seed, task) in enumerate(plan):
            mark = len(g.context)
            t0, st0 = g.start_task(seed, task)
            g.status.wait_for(lambda m, st0=st0: m.dispatched > st0.dispatched, timeout_s=60.0,
                              since=len(g.status), what=f'{task!r} under way')
            while g.sim_now() < t0 + after_s:
                pass  # each call waits for the next /clock
            g.context.wait_for(lambda m: m.task == task, timeout_s=10.0, since=mark,
                               what='the task in the context')
            before = g.context.last
            text = f'use the {COLOURS[(k + 1) % len(COLOURS)]} cube instead'
            mark = len(g.context)
            ti = g.sim_now()
            wall_i = time.monotonic()
            g.interjection_pub.publish(String(data=text))
            ctx = g.context.wait_for(lambda m, r=before.flush_revision: m.flush_revision > r,
                                     timeout_s=30.0, since=mark,
                                     what=f'the re-plan after {text!r}')
            planner_s.append(round(ctx.header.stamp.sec + ctx.header.stamp.nanosec * 1e-9
                                   - ti, 3))
            row = None
            deadline = time.monotonic() + 30.0
            while row is None and time.monotonic() < deadline:
                row = first_dispatch_row(g.dispatch_log, ti, min_revision=ctx.revision)
                if row is None:
                    g.sim_now()  # wait a tick
            reactions.append(round(row['t'] - ti, 3) if row else None)
            walls.append(round(row['wall'] - wall_i, 3) if row else None)
            hops.append(reaction_hops(g.inference_log, row, wall_i) if row else None)
            print(f'  interjection {text!r} in {task!r}: planner {planner_s[-1]} s, first '
                  f'action {reactions[-1]} s ({walls[-1]} s wall; {hops[-1]})', flush=True)
        period_s = float(g.status.last.control_period_s)
    return {'planner_s': planner_s, 'reactions_s': reactions, 'reactions_wall_s': walls,
            'hops_ms': hops, 'period_s': period_s,
            'after_s': after_s, 'overrides': [f'{n}.{k}={v!r}' for n, k, v in overrides]}


def reaction_hops(inference_log: Path, row: dict[str, Any], wall_i: float
                  ) -> dict[str, Any] | None:
    """Wall ms of each step from an interjection (published at ``wall_i``) to ``row``, the
    first dispatched action of its chunk: to the policy receiving the re-planned context
    (planner and two DDS hops), waiting there (an inference for the old context still
    running, or the gate), the chunk's inference, and from its end to the dispatch (DDS and
    the next control tick). ``busy``: an inference was running when the context came."""
    records = read_inference_file(inference_log)
    rec = next((r for r in records if r['outcome'] == 'published'
                and r['sequence'] == row['sequence']), None)
    if rec is None or rec['context_wall'] is None:
        return None
    heard = rec['context_wall']
    busy = any(r['start'] < heard <= r['end'] for r in records)

    def ms(seconds: float) -> float:
        return round(seconds * 1e3, 1)
    return {'planner': ms(heard - wall_i), 'waiting': ms(rec['start'] - heard),
            'inference': ms(rec['latency_s']), 'to_dispatch': ms(row['wall'] - rec['end']),
            'total': ms(row['wall'] - wall_i), 'busy': busy}


def first_dispatch_row(dispatch_log: Path, t0: float, min_revision: int = 0) -> dict | None:
    """The first action the simulator dispatched after sim time t0 (a task or an interjection
    sent), of a chunk conditioned on ``min_revision`` or newer; its dispatch-log record."""
    return next((row for row in read_dispatch_file(dispatch_log)
                 if row['t'] > t0 and row['revision'] >= min_revision), None)


def first_dispatch_after(dispatch_log: Path, t0: float, min_revision: int = 0) -> float | None:
    """Sim seconds from t0 to ``first_dispatch_row``."""
    row = first_dispatch_row(dispatch_log, t0, min_revision)
    return round(row['t'] - t0, 3) if row else None


def summarise(expert: list[float | None], graphs: dict[str, dict]) -> dict[str, Any]:
    rows = {'expert': {'median_s': median(expert), 'successes': sum(v is not None for v in expert),
                       'ratio_to_expert': 1.0}}
    for name, g in graphs.items():
        pairs = [(t, e) for t, e in zip(g['times_s'], expert) if t is not None and e]
        ratio = (round(statistics.median([t for t, _ in pairs])
                       / statistics.median([e for _, e in pairs]), 3) if pairs else None)
        rows[name] = {'median_s': median(g['times_s']),
                      'successes': sum(v is not None for v in g['times_s']),
                      'ratio_to_expert': ratio,
                      'median_episode_ratio': round(statistics.median(
                          [t / e for t, e in pairs]), 3) if pairs else None,
                      'median_reaction_s': median(g.get('reactions_s', [])),
                      'starved_ticks': g['starved_ticks'],
                      'starved_after_first_dispatch': g['starved_ticks']
                      - g['starved_before_first_dispatch'],
                      'stale_discards': g['stale_discards'],
                      'overrides': g['overrides']}
    return rows


def starved_per_minute(g: dict[str, Any], max_sim_s: float) -> float | None:
    """Starved ticks after each task's first dispatch, per minute of task time."""
    sim_s = sum(t if t is not None else max_sim_s for t in g['times_s'])
    starved = g['starved_ticks'] - g['starved_before_first_dispatch']
    return round(60.0 * starved / sim_s, 2) if sim_s > 0 else None


def latency_table(report: dict[str, Any]) -> list[str]:
    """b/a per added latency when the run was a --latencies sweep."""
    graphs, max_sim_s = report['graphs'], report['run'].get('max_sim_s', 30.0)
    pairs = sorted({int(n[2:-2]) for n in graphs if n.startswith(('a_', 'b_'))})
    if not pairs:
        return []
    lines = ['', "## Starvation against inference latency: the seeds' rules (a) and the current "
             'ones (b)', '',
             'Starved ticks per minute of task time, after each task\'s first dispatch (the '
             'ticks before it wait for the first inference of an operator change); median '
             'task time in sim seconds.', '',
             '| added latency | starved/min a | starved/min b | b/a | median time a (s) | '
             'median time b (s) | b/a | median reaction a / b (s) | latency + period (s) |',
             '|---|---|---|---|---|---|---|---|---|']
    for ms in pairs:
        a, b = graphs.get(f'a_{ms}ms'), graphs.get(f'b_{ms}ms')
        if a is None or b is None:
            continue
        sa, sb = starved_per_minute(a, max_sim_s), starved_per_minute(b, max_sim_s)
        ta, tb = median(a['times_s']), median(b['times_s'])
        lines.append(f'| {ms} ms | {sa} | {sb} | '
                     f'{round(sb / sa, 3) if sa and sb is not None else "-"} | {ta} | {tb} | '
                     f'{round(tb / ta, 3) if ta and tb else "-"} | '
                     f"{median(a.get('reactions_s', []))} / {median(b.get('reactions_s', []))}"
                     f' | {ms / 1000 + 1 / 30:.3f} |')
    return lines


def interjection_table(report: dict[str, Any]) -> list[str]:
    inter = report.get('interjections')
    if not inter:
        return []
    loaded = report.get('interjections_under_load')

    def spread(values: list[float | None]) -> str:
        done = sorted(v for v in values if v is not None)
        if not done:
            return '-'
        return f'{median(done)} ({done[0]} to {done[-1]})'

    return ['', '## Reaction to an interjection', '',
            f"On the `{inter['configuration']}` graph, {inter['after_s']} sim s into each "
            'episode\'s task (the arm reaching), "use the <next colour> cube instead" published '
            'by the benchmark; sim seconds from it to the planner\'s re-planned context (its '
            'stamp) and to the first dispatched action conditioned on that context (sim and '
            'wall seconds). Median (min to max).'
            + (f" Under load: the same, while another process runs {loaded['load']}."
               if loaded else ''), '',
            '| load | interjections | to the re-planned context (s) | to its first action (s) '
            '| to its first action (wall s) | answered |',
            '|---|---|---|---|---|---|',
            *[f"| {r.get('load', 'none')} | {len(r['reactions_s'])} | {spread(r['planner_s'])} | "
              f"{spread(r['reactions_s'])} | {spread(r.get('reactions_wall_s', []))} | "
              f"{sum(v is not None for v in r['reactions_s'])}/{len(r['reactions_s'])} |"
              for r in (inter, loaded) if r],
            *hop_table([r for r in (inter, loaded) if r and r.get('hops_ms')])]


def hop_table(runs: list[dict[str, Any]]) -> list[str]:
    """Where the reaction's wall time goes, per step: medians over the interjections."""
    if not runs:
        return []

    def med(hops: list, key: str) -> str:
        vals = [h[key] for h in hops if h]
        return f'{statistics.median(vals):.1f}' if vals else '-'

    def inference_and_tick(r: dict[str, Any]) -> str:
        vals = [h['inference'] + r['period_s'] * 1e3 for h in r['hops_ms'] if h]
        return f'{statistics.median(vals):.1f}' if vals else '-'

    return ['', "Where the wall time goes (median ms over the interjections, from the policy's "
            'inference log and the dispatch log, one clock): the planner (the interjection to '
            'the policy receiving the re-planned context: two DDS deliveries and the re-plan), '
            'waiting in the policy (an inference for the old context still running: its chunk '
            'is thrown away), the inference of the first chunk for the new context, and its '
            'delivery to the simulator with the wait for the next control tick (at most one '
            'period). The floor is the inference itself (plus the planner\'s and the '
            "deliveries' few ms): a chunk that lands just before a control tick is "
            'dispatched at that tick. "inference + longest tick wait" adds the most that '
            'waiting for the next tick can add, one period: a reaction lies between the two, '
            'plus the hops. "busy" counts the interjections that came while an inference was '
            'running.', '',
            '| load | planner (ms) | waiting (ms) | inference (ms) | to dispatch (ms) | total '
            '(ms) | inference + longest tick wait (ms) | busy |',
            '|---|---|---|---|---|---|---|---|',
            *[f"| {r.get('load', 'none')} | {med(r['hops_ms'], 'planner')} | "
              f"{med(r['hops_ms'], 'waiting')} | {med(r['hops_ms'], 'inference')} | "
              f"{med(r['hops_ms'], 'to_dispatch')} | {med(r['hops_ms'], 'total')} | "
              f"{inference_and_tick(r)} | {sum(1 for h in r['hops_ms'] if h and h['busy'])}/"
              f"{len(r['hops_ms'])} |" for r in runs]]


def markdown(report: dict[str, Any]) -> str:
    run = report['run']
    lines = ['# Time per task: the sim graph against the scripted expert alone', '',
             f"{run['episodes']} episodes (layout seeds 1000..{1000 * run['episodes']}, tasks "
             f"cycling red / green / blue into the bowl), sim seconds from the task to the cube "
             f"in the bowl; measured {run['date']} on {run['machine']} in one run"
             + (f" (load average {run['load_average_1min_at_end']} at the end: other work "
                'shared the cores)' if run.get('load_average_1min_at_end', 0) > 2.5 else '')
             + '.', '',
             '| configuration | median task time (s) | ratio to expert (medians, same '
             'episodes) | median per-episode ratio | successes | starved ticks (after the '
             'first dispatch of the task) | stale discards | median reaction (s) |',
             '|---|---|---|---|---|---|---|---|']
    for name, r in report['summary'].items():
        lines.append(f"| {name} | {r['median_s']} | {r['ratio_to_expert']} | "
                     f"{r.get('median_episode_ratio', '-')} | {r['successes']}/{run['episodes']}"
                     f" | {r.get('starved_ticks', '-')} "
                     f"({r.get('starved_after_first_dispatch', '-')})"
                     f" | {r.get('stale_discards', '-')} | {r.get('median_reaction_s', '-')} |")
    lines += ['', 'Reaction: sim seconds from the task (published by the benchmark, another '
              'process) to the first action the simulator dispatched for it. Its floor is the '
              "policy's inference latency (a chunk that lands just before a control tick is "
              'dispatched at that tick); waiting for the next tick adds up to one control '
              'period (33 ms).']
    lines += latency_table(report)
    lines += interjection_table(report)
    lines += ['', 'Overrides of config/sim.yaml per configuration:', '']
    for name, r in report['summary'].items():
        if name != 'expert':
            lines.append(f"- `{name}`: {', '.join(r['overrides']) or 'none (shipped defaults)'}")
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--episodes', type=int, default=10)
    parser.add_argument('--max-sim-s', type=float, default=30.0,
                        help='an episode not done after this many sim seconds counts as failed')
    parser.add_argument('--config', type=parse_config, action='append', default=None,
                        metavar='NAME:NODE.PARAM=VALUE,...',
                        help='a graph configuration to time (repeatable); default: current '
                             'and before')
    parser.add_argument('--latencies', type=lambda t: [float(x) for x in t.split(',')],
                        default=None, metavar='S,S,...',
                        help='instead of --config: for each added policy latency (s), (a) the '
                             "seeds' rules (refill when empty, every change flushes) and (b) "
                             'the current ones; the report adds b/a')
    parser.add_argument('--interjections', action=argparse.BooleanOptionalAction, default=True,
                        help="also time the reaction to an interjection on the first "
                             "configuration's graph, one per episode (default on)")
    parser.add_argument('--reaction-load', choices=('generation',), default=None,
                        help='time the interjections again while another process loads the '
                             "CPU (generation: the planner's model generating in a loop, as in "
                             'bench/jitter.py)')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    parser.add_argument('--name', default='task_time')
    args = parser.parse_args(argv)
    if args.latencies:
        configs = [parse_config(c) for c in latency_configs(args.latencies)]
    else:
        configs = args.config or [parse_config(c) for c in DEFAULT_CONFIGS]
    plan = episode_plan(args.episodes)
    with private_ros_domain():
        started = time.monotonic()
        expert = expert_times(plan, args.max_sim_s)
        print(f'expert: {expert}', flush=True)
        graphs = {name: graph_times(name, overrides, plan, args.max_sim_s, dict(os.environ))
                  for name, overrides in configs}
        interjections = (interjection_reactions(configs[0][1], plan, dict(os.environ))
                         if args.interjections else None)
        under_load = None
        if args.interjections and args.reaction_load:
            from bench.jitter import Load
            load = Load(args.reaction_load, 3600.0, Path(tempfile.mkdtemp(prefix='load_')),
                        dict(os.environ))
            try:
                under_load = interjection_reactions(configs[0][1], plan, dict(os.environ))
            finally:
                load.stop()
    report = {'run': {'episodes': args.episodes, 'date': time.strftime('%Y-%m-%d'),
                      'max_sim_s': args.max_sim_s,
                      'load_average_1min_at_end': round(os.getloadavg()[0], 2),
                      'machine': f'{platform.machine()}, {os.cpu_count()} cores',
                      'wall_s': round(time.monotonic() - started, 1)},
              'expert_times_s': expert, 'graphs': graphs,
              'summary': summarise(expert, graphs)}
    if interjections is not None:
        report['interjections'] = {'configuration': configs[0][0], **interjections}
    if under_load is not None:
        report['interjections_under_load'] = {'load': args.reaction_load, **under_load}
    write_report(args.out, args.name, report, markdown(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
