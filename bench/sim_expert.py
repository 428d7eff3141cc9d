"""Benchmark the MuJoCo scene and scripted expert: success rate, sim time, RTF, render cost.

Usage: python bench/sim_expert.py [--seeds 10] [--render-hz 10] [--out bench/reports]

Also times the expert's first chunk for a new cube (the policy's inference after an operator
names another cube) with and without the IK's stall exit, side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault('MUJOCO_GL', 'egl')

import mujoco  # noqa: E402

from lerobot_lang_nodes.sim.episode import run_episode  # noqa: E402
from lerobot_lang_nodes.sim.expert import ScriptedExpert  # noqa: E402
from lerobot_lang_nodes.sim.scene import SceneConfig, So101Scene  # noqa: E402


def _render_cost(decimate: int | None, frames: int) -> dict[str, float]:
    """Mean ms/frame per camera at 320x240 (first frame, which creates the context, excluded)."""
    scene = So101Scene(seed=0, config=SceneConfig(decimate_faces=decimate))
    try:
        out = {}
        for cam in ('front', 'wrist'):
            scene.render(cam)
            start = time.perf_counter()
            for _ in range(frames):
                scene.render(cam)
            out[cam] = 1000.0 * (time.perf_counter() - start) / frames
        return out
    finally:
        scene.close()


def _first_chunk_ms(seeds: int) -> dict[str, float]:
    """The expert's first chunk for a cube it has not reached yet (the grasp-direction search:
    the policy's inference after an operator names another cube), from the home pose, with
    the IK's stall exit and without it, interleaved per case; ms medians and the largest
    difference between the two chunks."""
    import numpy as np
    times: dict[str, list[float]] = {'stall exit': [], 'full iterations': []}
    diff = 0.0
    for seed in range(seeds):
        scene = So101Scene(seed=1000 * (seed + 1))
        try:
            gt, q = scene.ground_truth(), scene.joint_positions()
            for colour in ('red', 'green', 'blue'):
                chunks = []
                for name, stall in (('stall exit', None), ('full iterations', 0.0)):
                    expert = ScriptedExpert(scene.model)  # an empty grasp-direction cache
                    if stall is not None:
                        expert.ik.stall_rad = stall
                    start = time.perf_counter()
                    chunks.append(expert.act(f'reach the {colour} cube', q, gt))
                    times[name].append(1000.0 * (time.perf_counter() - start))
                diff = max(diff, float(np.max(np.abs(chunks[0] - chunks[1]))))
        finally:
            scene.close()
    out = {k: round(statistics.median(v), 2) for k, v in times.items()}
    out['ratio'] = round(out['stall exit'] / out['full iterations'], 3)
    out['max_abs_diff_rad'] = diff
    out['cases'] = len(times['stall exit'])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seeds', type=int, default=10, help='seeds per task')
    parser.add_argument('--max-sim-s', type=float, default=40.0)
    parser.add_argument('--render-hz', type=float, default=10.0,
                        help='render both cameras at this rate during episodes (0: never)')
    parser.add_argument('--render-frames', type=int, default=60)
    parser.add_argument('--full-meshes', action='store_true',
                        help='also measure render cost with the original (undecimated) meshes')
    parser.add_argument('--out', type=Path, default=Path(__file__).parent / 'reports')
    args = parser.parse_args(argv)

    first_chunk = _first_chunk_ms(args.seeds)
    render = {'decimated': _render_cost(SceneConfig().decimate_faces, args.render_frames)}
    if args.full_meshes:
        render['full'] = _render_cost(None, max(10, args.render_frames // 4))

    tasks = ([f'put the {c} cube in the bowl' for c in ('red', 'green', 'blue')]
             + ['pick up the green cube'])
    scene = So101Scene(seed=0)
    expert = ScriptedExpert(scene.model)
    rows = []
    every = max(1, round(scene.ctrl_hz / args.render_hz)) if args.render_hz > 0 else 0
    tick = {'n': 0}

    def on_tick(sc: So101Scene, _sub: str) -> None:
        tick['n'] += 1
        if every and tick['n'] % every == 0:
            for cam in sc.cameras:
                sc.render(cam)

    physics_before = (scene.stats.physics_sim_s, scene.stats.physics_wall_s)
    for task in tasks:
        for seed in range(args.seeds):
            scene.reset(seed=seed)
            res = run_episode(scene, task, args.max_sim_s, expert, on_tick=on_tick)
            rows.append({'task': task, 'seed': seed, 'success': res.success,
                         'sim_s': round(res.sim_time, 3), 'wall_s': round(res.wall_time, 3),
                         'rtf': round(res.real_time_factor, 2),
                         'subtasks': len(res.subtasks), 'reason': res.reason})
            sys.stdout.write(f"{task!r:38} seed {seed:2d}: {'ok ' if res.success else 'FAIL'} "
                             f"{res.sim_time:5.1f} s sim, rtf {res.real_time_factor:5.1f}, "
                             f"{len(res.subtasks)} subtasks\n")
    stats = scene.stats
    physics_rtf = ((stats.physics_sim_s - physics_before[0])
                   / max(1e-9, stats.physics_wall_s - physics_before[1]))
    episode_render = {cam: round(stats.render_ms(cam), 2) for cam in scene.cameras}
    scene.close()

    summary = {}
    for task in tasks:
        mine = [r for r in rows if r['task'] == task]
        ok = [r for r in mine if r['success']]
        summary[task] = {
            'success_rate': len(ok) / len(mine),
            'sim_s_mean': round(statistics.mean(r['sim_s'] for r in ok), 2) if ok else None,
            'sim_s_max': max((r['sim_s'] for r in ok), default=None),
            'rtf_mean': round(statistics.mean(r['rtf'] for r in mine), 1),
        }
    report = {
        'date': time.strftime('%Y-%m-%d %H:%M:%S'), 'host': platform.node(),
        'cpus': os.cpu_count(), 'mujoco': mujoco.__version__, 'image': '320x240',
        'render_ms_per_frame': {k: {c: round(v, 2) for c, v in d.items()}
                                for k, d in render.items()},
        'render_ms_in_episodes': episode_render, 'render_hz_in_episodes': args.render_hz,
        'physics_rtf': round(physics_rtf, 1), 'physics_hz': SceneConfig().physics_hz,
        'first_chunk_ms': first_chunk,
        'summary': summary, 'episodes': rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime('%Y%m%d-%H%M%S')
    path = args.out / f'sim_expert-{stamp}.json'
    path.write_text(json.dumps(report, indent=2))
    lines = [f'# sim expert benchmark {report["date"]}', '',
             f'- CPUs {report["cpus"]}, mujoco {report["mujoco"]}, images 320x240, '
             f'physics {report["physics_hz"]:.0f} Hz, ctrl 30 Hz',
             f'- render ms/frame: {report["render_ms_per_frame"]}',
             f'- render ms/frame during episodes ({args.render_hz} Hz, both cameras): '
             f'{episode_render}',
             f'- physics-only real-time factor: {report["physics_rtf"]}x',
             f"- first chunk for a new cube (grasp-direction search, {first_chunk['cases']} "
             f"cases, median ms): {first_chunk['stall exit']} with the IK's stall exit, "
             f"{first_chunk['full iterations']} without ({first_chunk['ratio']}x; chunks "
             f"differ by at most {first_chunk['max_abs_diff_rad']:.1e} rad)", '',
             '| task | success | sim s mean | sim s max | loop RTF |', '|---|---|---|---|---|']
    for task, s in summary.items():
        lines.append(f"| {task} | {s['success_rate']:.0%} | {s['sim_s_mean']} | "
                     f"{s['sim_s_max']} | {s['rtf_mean']} |")
    md = path.with_suffix('.md')
    md.write_text('\n'.join(lines) + '\n')
    sys.stdout.write('\n'.join(lines) + f'\n\nreport: {md}\n')
    return 0 if all(s['success_rate'] >= 0.8 for s in summary.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
