"""Vision-language-action policies and a vision-language planner at real size, on this CPU.

Usage: .venv/bin/python bench/vla.py [--repeats 5] [--tiny-repeats 40] [--sizes tiny real]
                                     [--threads 1 2]
                                     [--no-planner] [--pi] [--out bench/reports]

Policy: SmolVLA checkpoints built offline with LeRobot 0.6.1's own classes and random weights
(lerobot_lang_nodes.tiny_models.vla), at the test size (TINY) and at the published size
(SmolVLM2-500M-Video-Instruct's backbone, of which SmolVLA keeps 16 layers; 50-action chunks,
10 denoising steps, 512 px images). Each (size, threads) pair runs in a fresh process: load
time through the `lerobot` backend, resident memory the load added, parameter count, and the
chunk latency of two paths measured alternately on the same observation, so the machine's
noise falls on both alike: the policy node's backend path (``LeRobotPolicy.infer``: units,
resize, LeRobot's pre-processor, ``predict_action_chunk``, post-processor, radians) and
LeRobot's own path called directly (``prepare_observation_for_inference``, pre-processor,
``predict_action_chunk``, post-processor). The ratio of their medians is the node path's
overhead.

Planner: a SmolVLM2-500M-sized vision-language model with random weights through the
`transformers` planner (load time, memory, generation latency per kind, up to 48 new tokens:
random weights never stop early), so the cost of a real planner beside a real policy is known.

With ``--pi``, PI0 and PI0.5 too, at their published configuration (PaliGemma 3B backbone,
Gemma 300M action expert, 224 px, 50-action chunks, 10 denoising steps, bfloat16: float32
would not fit 24 GB beside anything else; the language padded to 48 / 200 tokens as
LeRobot's configurations do), random weights (lerobot_lang_nodes.tiny_models.pi) with the
stand-in tokenizer in a private HF_HOME: minutes per chunk on 2 CPU cores, so one warm-up and
``--pi-repeats`` timed chunks per path, at ``--pi-threads``. CUDA rows need a GPU machine
(none on these).
Output: a table on stdout and bench/reports/vla.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import write_report
from bench.models import in_child, offline_report, planner_child, rss_mb, summary

REPORT_DIR = Path(__file__).resolve().parent / 'reports'
SIZES = ('tiny', 'real')


def build_child(size: str, out: str) -> dict:
    """Runs in a fresh process: build the SmolVLA checkpoint of ``size`` (and its backbone)."""
    import torch
    from lerobot_lang_nodes.tiny_models import vla
    t0 = time.perf_counter()
    if size == 'tiny':
        path = vla.build_smolvla(Path(out) / 'smolvla_tiny', chunk_size=50, num_steps=10)
    else:
        # The published SmolVLA: 50-action chunks, 10 flow-matching steps, 512 px; the
        # random action head keeps LeRobot's initialisation scale.
        path = vla.build_smolvla(Path(out) / 'smolvla_real', size=vla.SMOLVLM2_500M,
                                 chunk_size=50, num_steps=10, action_scale=1.0)
    return {'path': str(path), 'build_s': round(time.perf_counter() - t0, 1),
            'torch': torch.__version__}


def policy_child(path: str, threads: int, repeats: int) -> dict:
    """Runs in a fresh process: load through the backend, then time both paths alternately."""
    import importlib
    for name in ('torch', 'lerobot', 'transformers'):  # the load is what is measured
        importlib.import_module(name)
    import numpy as np
    import torch
    from lerobot.policies.utils import prepare_observation_for_inference

    from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotPolicy
    from lerobot_lang_nodes.tiny_models import policies, vla
    torch.set_num_threads(threads)
    base = rss_mb()
    from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotConfig
    from lerobot_lang_nodes.nodes.policy_node import PolicyConfig
    cfg = PolicyConfig(model_path=path, device='cpu', dtype='float32',
                       cameras=policies.CAMERAS, lerobot=LeRobotConfig(camera_map=()))
    t0 = time.perf_counter()
    backend = LeRobotPolicy(cfg)
    load_s = time.perf_counter() - t0
    loaded = rss_mb()
    rng = np.random.default_rng(0)
    task = 'put the red cube in the bowl'
    obs = {'instruction': task, 'joint_names': list(policies.JOINT_NAMES),
           'joint_positions': np.zeros(6),
           'images': {c: rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)
                      for c in policies.CAMERAS}}

    def direct() -> np.ndarray:
        # What lerobot-rollout does with the frame: LeRobot's own calls, nothing of ours.
        with torch.inference_mode():
            batch = prepare_observation_for_inference(backend.frame(obs), backend.device, task,
                                                      backend.robot_type)
            backend._resize(batch)  # the checkpoint's declared size, as the dataset gave it
            chunk = backend.policy.predict_action_chunk(backend.preprocessor(batch))
            return backend.postprocessor(chunk[:, :backend.chunk_length]).numpy()

    t = time.perf_counter()
    first = backend.infer(obs)
    first_s = time.perf_counter() - t
    direct()  # warm both paths before timing
    node_times, direct_times = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        backend.infer(obs)
        node_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        direct()
        direct_times.append(time.perf_counter() - t)
    # What only the node path does after LeRobot's post-processor: the conversion to radians
    # (the model-space copy RTC keeps is a (H, n) tensor copy, far below this).
    native = np.zeros(first.shape)  # its cost does not depend on the values
    extra = []
    for _ in range(200):
        t = time.perf_counter()
        backend.units.to_radians(native)
        extra.append(time.perf_counter() - t)
    params = vla.parameter_count(backend.policy)
    backend.close()
    node, lerobot = summary(node_times), summary(direct_times)
    return {'threads': threads, 'load_s': round(load_s, 2),
            'rss_added_mb': round(loaded - base, 1), 'params_m': round(params / 1e6, 1),
            'chunk_shape': list(first.shape), 'first_inference_ms': round(first_s * 1000, 1),
            'repeats': repeats, 'node': {**node, 'p99_ms': percentile(node_times, 99)},
            'lerobot': {**lerobot, 'p99_ms': percentile(direct_times, 99)},
            'overhead_ratio': round(node['p50_ms'] / lerobot['p50_ms'], 3),
            'to_radians_us': round(float(np.median(extra)) * 1e6, 1)}


def build_pi_child(kind: str, out: str) -> dict:
    """Runs in a fresh process: a PI0 / PI0.5 checkpoint at the published configuration."""
    from lerobot_lang_nodes.tiny_models import pi
    t0 = time.perf_counter()
    path = pi.build_pi(Path(out) / kind, kind, chunk_size=50, num_inference_steps=10,
                       image_resolution=(224, 224),
                       tokenizer_max_length=PUBLISHED_TOKENS[kind])
    return {'path': str(path), 'build_s': round(time.perf_counter() - t0, 1)}


# LeRobot's default tokenizer_max_length of each configuration (openpi's).
PUBLISHED_TOKENS = {'pi0': 48, 'pi05': 200}


def percentile(values: list[float], q: float) -> float:
    import numpy as np
    return round(float(np.percentile(np.asarray(values) * 1000.0, q)), 2)


def build_planner_child(out: str) -> dict:
    """Runs in a fresh process: a SmolVLM2-500M-sized model directory with random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from lerobot_lang_nodes.tiny_models import vla
    t0 = time.perf_counter()
    path = vla.build_smolvlm_backbone(Path(out) / 'smolvlm2_500m', vla.SMOLVLM2_500M)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(path))
    model.save_pretrained(path)
    return {'path': str(path), 'build_s': round(time.perf_counter() - t0, 1),
            'params_m': round(sum(p.numel() for p in model.parameters()) / 1e6, 1)}


def markdown(report: dict) -> str:
    lines = ['# VLA policies and a VLM planner at real size (CPU)', '',
             f"{report['date']}, {report['machine']['platform']}, "
             f"{report['machine']['cpus']} CPUs (load average "
             f"{report['machine'].get('loadavg_start')} at the start, "
             f"{report['machine'].get('loadavg_end')} at the end), torch "
             f"{report.get('torch', '?')}, float32 (PI0 / PI0.5: bfloat16); n timed chunks per "
             'path, the two paths alternating on the same observation.', '',
             '| type | size | params M | threads | load s | RSS added MB | first ms | n | '
             'node p50 ms | node p99 ms | LeRobot p50 ms | LeRobot p99 ms | node / LeRobot |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for name, res in report['policy'].items():
        if 'error' in res:
            lines.append(f"| {name} | error: {res['error']} |" + ' |' * 11)
            continue
        kind, size = name.split('_', 1)
        size = size.rsplit('_', 1)[0] + (f" ({res['date'][:10]})" if 'date' in res else '')
        lines.append(f"| {kind} | {size} | {res['params_m']} | "
                     f"{res['threads']} | {res['load_s']} | {res['rss_added_mb']} | "
                     f"{res['first_inference_ms']} | {res.get('repeats', report['repeats'])} | "
                     f"{res['node']['p50_ms']} | "
                     f"{res['node']['p99_ms']} | {res['lerobot']['p50_ms']} | "
                     f"{res['lerobot']['p99_ms']} | {res['overhead_ratio']} |")
    extra = {n: r['to_radians_us'] for n, r in report['policy'].items() if 'to_radians_us' in r}
    if extra:
        lines += ['', 'Node path overhead. Both paths build the frame from the same observation '
                  '(joint names and radians to LeRobot units, images resized to the '
                  "checkpoint's size) and run LeRobot's pre-processor, predict_action_chunk and "
                  'post-processor; the node path adds a lock, a copy of the chunk in model space '
                  '(what real-time chunking continues) and the conversion to radians, timed '
                  'alone (median of 200, microseconds): '
                  + ', '.join(f'{n} {us}' for n, us in extra.items())
                  + '. A ratio further from 1 than these allow is the shared machine\'s noise '
                  'between the alternating calls (p50 of n each).']
    planner = report.get('planner')
    if planner:
        lines += ['', '## Planner: SmolVLM2-500M-sized VLM, random weights, `transformers` '
                  'backend', '']
        if 'error' in planner:
            lines.append(f"error: {planner['error']}")
        else:
            lines += [(f"Measured {planner['date']}. " if 'date' in planner else '')
                      + f"{planner.get('params_m', '?')} M parameters; load "
                      f"{planner['load_s']} s, RSS added by the load {planner['rss_added_mb']} "
                      f"MB (the weights are memory-mapped), process RSS after generating "
                      f"{planner.get('rss_total_after_mb', '?')} MB.", '',
                      '| kind | p50 ms | min ms | max ms | n |', '|---|---|---|---|---|']
            for kind, k in planner['kinds'].items():
                lines.append(f"| {kind} | {k['p50_ms']} | {k['min_ms']} | {k['max_ms']} | "
                             f"{k['n']} |")
    lines += ['', 'CUDA rows: still to be measured (no GPU machine was lent to this run).']
    return '\n'.join(lines) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=5, help='timed chunks per path')
    parser.add_argument('--tiny-repeats', type=int, default=40,
                        help='timed chunks per path at the tiny size (tens of ms a chunk: five '
                             'left the ratio to the noise of a shared 2-core machine)')
    parser.add_argument('--sizes', nargs='+', choices=SIZES, default=list(SIZES))
    parser.add_argument('--threads', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--no-planner', action='store_true')
    parser.add_argument('--pi', action='store_true',
                        help='also PI0 and PI0.5 at their published size (about 4 B parameters '
                             'each, ~14 GB while loaded, minutes per chunk on a CPU)')
    parser.add_argument('--pi-repeats', type=int, default=1)
    parser.add_argument('--pi-threads', type=int, default=2)
    parser.add_argument('--keep', type=Path, default=None,
                        help='an earlier vla.json: its rows (and planner) that this run does '
                             'not measure are kept, marked with their date')
    parser.add_argument('--out', type=Path, default=REPORT_DIR)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {**offline_report(args.repeats), 'builds': {}, 'policy': {}}
    if args.keep:
        earlier = json.loads(args.keep.read_text())
        for name, row in earlier.get('policy', {}).items():
            report['policy'][name] = {'repeats': earlier['repeats'], **row,
                                      'date': row.get('date', earlier['date'])}
        if args.no_planner and earlier.get('planner'):
            report['planner'] = {**earlier['planner'],
                                 'date': earlier['planner'].get('date', earlier['date'])}
    with tempfile.TemporaryDirectory(prefix='bench_vla_') as tmp:
        for size in args.sizes:
            built = in_child(build_child, size, tmp)
            report['builds'][f'smolvla_{size}'] = built
            report['torch'] = built.get('torch')
            for threads in args.threads:
                name = f'smolvla_{size}_{threads}'
                repeats = args.tiny_repeats if size == 'tiny' else args.repeats
                report['policy'][name] = (in_child(policy_child, built['path'], threads,
                                                   repeats)
                                          if 'path' in built else built)
                print(name, json.dumps(report['policy'][name]), flush=True)
        if args.pi:
            from lerobot_lang_nodes.tiny_models.pi import install_paligemma_tokenizer
            # Inherited by the spawned children: the processors find the tokenizer offline.
            os.environ['HF_HOME'] = str(Path(tmp) / 'hf_home')
            install_paligemma_tokenizer(os.environ['HF_HOME'])
            for kind in ('pi0', 'pi05'):
                built = in_child(build_pi_child, kind, tmp)
                report['builds'][f'{kind}_real'] = built
                name = f'{kind}_real_{args.pi_threads}'
                report['policy'][name] = (in_child(policy_child, built['path'], args.pi_threads,
                                                   args.pi_repeats)
                                          if 'path' in built else built)
                print(name, json.dumps(report['policy'][name]), flush=True)
                shutil.rmtree(built.get('path', Path(tmp) / kind), ignore_errors=True)
        if not args.no_planner:
            built = in_child(build_planner_child, tmp)
            report['builds']['planner'] = built
            report['planner'] = (in_child(planner_child, built['path'], '', False, 3)
                                 if 'path' in built else built)
            report['planner']['params_m'] = built.get('params_m')
    report['machine']['loadavg_end'] = os.getloadavg()[0]
    for built in report['builds'].values():  # temporary folders, gone after the run
        built.pop('path', None)
    write_report(args.out, 'vla', report, markdown(report))
    failed = [n for n, r in report['policy'].items() if 'error' in r]
    return 1 if failed or 'error' in report.get('planner', {}) else 0


if __name__ == '__main__':
    sys.exit(main())
