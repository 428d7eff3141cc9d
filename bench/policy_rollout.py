"""A policy checkpoint alone in the MuJoCo scene, without ROS: where does it take the arm?

Usage: .venv/bin/python bench/policy_rollout.py CHECKPOINT [CHECKPOINT...] [--episodes 6]
       [--eval-seed 500] [--timeout 25] [--replan-every 10] [--out bench/reports]
       [--name policy_rollout]

Each CHECKPOINT is a LeRobot policy folder (run through the `lerobot` backend, exactly as the
policy node runs it: same observation, resizing, units and instruction) or ``scripted`` (the
scripted expert, the demonstrator). The episodes are bench/closed_loop.py's held-out ones (the
same layouts and tasks for the same ``--eval-seed``), driven by sim/episode.py's loop: the
plan advances on ground truth as the scripted planner's does, the policy gets the active
subtask, the 320x240 front and wrist frames and the joint state, and a fresh chunk every
``--replan-every`` control ticks.

What the graph's success rate cannot say, this measures: per episode the furthest subtask
reached and the closest approach of the gripper's grasp point to the target cube while
reaching, set against the tolerance the plan needs to move on to the grasp
(sim/tasks.py REACH_TOL_XY / REACH_TOL_Z). Output: a table on stdout, ``<name>.json`` and
``<name>.md`` in ``--out``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault('MUJOCO_GL', 'egl')
os.environ.setdefault('HF_HUB_OFFLINE', '1')

import numpy as np  # noqa: E402

from bench.harness import write_report
from lerobot_lang_nodes.sim import tasks
from lerobot_lang_nodes.sim.episode import run_episode
from lerobot_lang_nodes.sim.expert import ScriptedExpert
from lerobot_lang_nodes.sim.scene import JOINT_NAMES, So101Scene

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
CAMERAS = ('front', 'wrist')


def held_out_episodes(eval_seed: int, n: int) -> list[tuple[int, str]]:
    """bench/closed_loop.py's held-out (layout seed, task) list for ``eval_seed``."""
    from lerobot_lang_nodes.training.evaluation import eval_plan
    return eval_plan(eval_seed, n)


class CheckpointActor:
    """The `lerobot` policy backend behind ScriptedExpert's ``act`` / ``reset``."""

    def __init__(self, path: str, scene: So101Scene) -> None:
        from lerobot_lang_nodes.backends.policies.lerobot_policy import (LeRobotConfig,
                                                                         LeRobotPolicy)
        from lerobot_lang_nodes.nodes.policy_node import PolicyConfig
        self.scene = scene
        self.policy = LeRobotPolicy(PolicyConfig(
            model_path=path, cameras=CAMERAS, device='cpu', dtype='auto',
            lerobot=LeRobotConfig(camera_map=())))
        # The backend's columns are its action order; the scene takes JOINT_NAMES order.
        self.columns = [list(self.policy.action_names).index(j) for j in JOINT_NAMES]
        self.latencies: list[float] = []

    def reset(self) -> None:
        self.policy.reset()

    def act(self, instruction: str, joint_positions: np.ndarray, _gt: Any,
            now_s: float | None = None) -> np.ndarray:
        # The observation as the policy node builds it, its stamp included.
        observation = {'joint_names': list(JOINT_NAMES), 'joint_positions': joint_positions,
                       'images': {c: self.scene.render(c) for c in CAMERAS},
                       'instruction': instruction, 'stamp_s': now_s}
        t0 = time.perf_counter()
        chunk = self.policy.infer(observation)
        self.latencies.append(time.perf_counter() - t0)
        return chunk[:, self.columns]


def rollout(actor_name: str, episodes: list[tuple[int, str]], timeout_s: float,
            replan_every: int) -> dict[str, Any]:
    """Every episode with one actor (checkpoint path or 'scripted')."""
    scene = So101Scene(seed=episodes[0][0] if episodes else 0)
    actor: Any = (ScriptedExpert(scene.model) if actor_name == 'scripted'
                  else CheckpointActor(actor_name, scene))
    rows = []
    try:
        for seed, task in episodes:
            scene.reset(seed)
            spec, _ = tasks.explain_task(task)
            closest = {'xy_mm': math.inf, 'z_mm': math.inf}
            reached: list[str] = []

            def on_tick(s: So101Scene, subtask: str, colour: str = spec.colour) -> None:
                if not reached or reached[-1] != subtask:
                    reached.append(subtask)
                if not subtask.startswith('reach'):
                    return
                gt = s.ground_truth()
                gp = gt['gripper']['grasp_point']
                cube = gt['objects'][f'{colour}_cube']['position']
                xy = 1000 * math.hypot(gp[0] - cube[0], gp[1] - cube[1])
                z = 1000 * abs(gp[2] - cube[2])
                # Closest in units of the tolerance: the sample nearest to passing.
                if tolerances(xy, z) < tolerances(closest['xy_mm'], closest['z_mm']):
                    closest.update(xy_mm=round(xy, 1), z_mm=round(z, 1))

            result = run_episode(scene, task, max_sim_s=timeout_s, expert=actor,
                                 replan_every=replan_every, on_tick=on_tick)
            rows.append({'seed': seed, 'task': task, 'success': result.success,
                         'sim_s': round(result.sim_time, 2) if result.success else None,
                         'furthest_subtask': reached[-1].split(' ', 1)[0] if reached else '',
                         'subtasks': reached, 'closest_reach': closest})
            log_row(actor_name, rows[-1])
    finally:
        scene.close()
    latencies = getattr(actor, 'latencies', [])
    xy = [r['closest_reach']['xy_mm'] for r in rows]
    return {'actor': actor_name, 'episodes': rows, 'n': len(rows),
            'successes': sum(r['success'] for r in rows),
            'closest_xy_mm_median': round(statistics.median(xy), 1) if xy else None,
            'within_reach_tolerance': sum(
                r['closest_reach']['xy_mm'] < 1000 * tasks.REACH_TOL_XY
                and r['closest_reach']['z_mm'] < 1000 * tasks.REACH_TOL_Z for r in rows),
            'inference_ms_p50': round(1000 * statistics.median(latencies), 2)
            if latencies else None}


def tolerances(xy_mm: float, z_mm: float) -> float:
    """How many reach tolerances away (the worse of the two axes); < 1 passes."""
    return max(xy_mm / (1000 * tasks.REACH_TOL_XY), z_mm / (1000 * tasks.REACH_TOL_Z))


def log_row(actor: str, row: dict[str, Any]) -> None:
    c = row['closest_reach']
    print(f"[policy_rollout] {Path(actor).name or actor}: seed {row['seed']} {row['task']!r}: "
          f"{'success in ' + str(row['sim_s']) + ' s' if row['success'] else 'failed'}, "
          f"furthest {row['furthest_subtask']}, closest reach {c['xy_mm']} mm (xy) "
          f"{c['z_mm']} mm (z)", flush=True)


def markdown(report: dict[str, Any]) -> str:
    lines = ['# Policy rollouts without ROS', '',
             f"{report['date']}, {report['machine']}. Held-out episodes of bench/closed_loop.py "
             f"(eval seed {report['eval_seed']}), {report['timeout_s']} sim s each, a new chunk "
             f"every {report['replan_every']} ticks; the plan advances on ground truth. Reach "
             f"is done within {1000 * tasks.REACH_TOL_XY:.0f} mm (xy) and "
             f"{1000 * tasks.REACH_TOL_Z:.0f} mm (z) of the cube centre.", '',
             '| actor | success | closest reach xy, median (mm) | episodes within the reach '
             'tolerance | inference p50 (ms) |', '|---|---|---|---|---|']
    for r in report['actors']:
        lines.append(f"| `{r['actor']}` | {r['successes']}/{r['n']} | "
                     f"{r['closest_xy_mm_median']} | {r['within_reach_tolerance']}/{r['n']} | "
                     f"{r['inference_ms_p50'] if r['inference_ms_p50'] is not None else '-'} |")
    lines += ['', '| actor | seed | task | result | furthest subtask | closest reach xy / z '
              '(mm) |', '|---|---|---|---|---|---|']
    for r in report['actors']:
        for e in r['episodes']:
            c = e['closest_reach']
            result = f"ok {e['sim_s']} s" if e['success'] else 'failed'
            lines.append(f"| `{Path(r['actor']).name or r['actor']}` | {e['seed']} | "
                         f"{e['task']} | {result} | {e['furthest_subtask']} | "
                         f"{c['xy_mm']} / {c['z_mm']} |")
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('actors', nargs='+',
                        help="LeRobot policy folders, or 'scripted' for the scripted expert")
    parser.add_argument('--episodes', type=int, default=6)
    parser.add_argument('--eval-seed', type=int, default=500)
    parser.add_argument('--timeout', type=float, default=25.0, help='sim s per episode')
    parser.add_argument('--replan-every', type=int, default=10,
                        help='control ticks between chunks (default 10, a third of a second)')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    parser.add_argument('--name', default='policy_rollout')
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.replan_every < 1:
        parser.error('--episodes and --replan-every must be >= 1')
    missing = [a for a in args.actors if a != 'scripted' and not Path(a).is_dir()]
    if missing:
        parser.error(f'no checkpoint folder {missing}')
    episodes = held_out_episodes(args.eval_seed, args.episodes)
    report = {'date': time.strftime('%Y-%m-%d %H:%M'),
              'machine': f'{platform.machine()}, {os.cpu_count()} cores',
              'eval_seed': args.eval_seed, 'timeout_s': args.timeout,
              'replan_every': args.replan_every,
              'actors': [rollout(a, episodes, args.timeout, args.replan_every)
                         for a in args.actors]}
    write_report(args.out, args.name, report, markdown(report))
    return 0


if __name__ == '__main__':
    sys.exit(main())
