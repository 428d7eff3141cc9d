"""`lerobot-lang train-policy` and `lerobot-lang train-planner`: the trainers' command lines.

The trainers themselves (lerobot_lang_nodes.training) are library code with no argparse; this
module maps options to their keyword arguments and prints the one-line summary.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from lerobot_lang_nodes.training import planner, policy
from lerobot_lang_nodes.training.data import DatasetError, SettingsError


def _policy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument('dataset', help='LeRobot v3.0 dataset folder (lerobot-lang export ... '
                                   '--units lerobot)')
    p.add_argument('output', help='checkpoint folder to create (must not exist or be empty)')
    p.add_argument('--steps', type=int, default=3000, help='optimizer steps (default 3000)')
    p.add_argument('--batch-size', type=int, default=32, help='frames per step (default 32)')
    p.add_argument('--seed', type=int, default=0, help='random seed (default 0)')
    p.add_argument('--chunk-size', type=int, default=20,
                   help='actions predicted per inference, at the dataset fps (default 20)')
    p.add_argument('--n-action-steps', type=int, default=0,
                   help='actions of each chunk the backend sends (default: the chunk size)')
    p.add_argument('--image-size', type=int, default=64,
                   help='longest image side the policy runs at (default 64)')
    p.add_argument('--keypoints', action=argparse.BooleanOptionalAction, default=True,
                   help='spatial-softmax keypoints on a 1/8-size feature map (default on; '
                        '--no-keypoints: the plain pooled grid)')
    p.add_argument('--shift-pixels', type=int, default=4,
                   help='random image shift in pixels while training (default 4; 0 = off)')
    p.add_argument('--relative-actions', action='store_true',
                   help='predict each step as an offset from the current joint state')
    p.add_argument('--intervention-weight', type=float, default=1.0,
                   help='sampling weight of frames under a human\'s (or the virtual '
                        'operator\'s) correction, the dataset\'s intervention column, against '
                        '1 for a plain frame (default 1: every frame alike)')
    p.add_argument('--learner-weight', type=float, default=1.0,
                   help='sampling weight of the other frames of an episode that holds a '
                        'correction: what the learned policy commanded itself (default 1; '
                        '0: train on the corrections only, HG-DAgger)')
    p.add_argument('--instruction', choices=policy.INSTRUCTIONS, default='subtask',
                   help='condition on the active subtask (else the task), or the task only')
    p.add_argument('--lr', type=float, default=0.0, help='peak learning rate (default: the '
                                                          "policy's preset, 1e-3)")
    p.add_argument('--device', default='cpu', help='cpu (default) or cuda')
    p.add_argument('--threads', type=int, default=0,
                   help='torch CPU threads (default: torch\'s choice)')
    p.add_argument('--log-every', type=int, default=200, help='log the loss every N steps')


def _run_policy(args: argparse.Namespace) -> int:
    os.environ.setdefault('HF_HUB_OFFLINE', '1')  # everything is local; never reach the hub
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    try:
        summary = policy.train_policy(
            args.dataset, args.output, steps=args.steps, batch_size=args.batch_size,
            seed=args.seed, chunk_size=args.chunk_size,
            n_action_steps=args.n_action_steps or None, image_size=args.image_size,
            instruction=args.instruction, lr=args.lr or None, device=args.device,
            num_threads=args.threads, log_every=args.log_every, keypoints=args.keypoints,
            shift_pixels=args.shift_pixels, relative_actions=args.relative_actions,
            intervention_weight=args.intervention_weight, learner_weight=args.learner_weight)
    except (DatasetError, SettingsError) as exc:
        print(f'train-policy: {exc}', file=sys.stderr)
        return 2
    print(f"trained {summary['policy_type']} on {summary['frames']} frames of "
          f"{summary['episodes']} episode(s) ({len(summary['instructions'])} instructions) in "
          f"{summary['wall_s']:.1f} s: loss {summary['loss_start']:.4f} -> "
          f"{summary['loss_end']:.4f}; checkpoint {summary['output_dir']}")
    return 0


def _planner_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument('dataset', help='LeRobot v3.0 dataset folder with language columns '
                                   '(lerobot-lang export)')
    p.add_argument('output', help='model folder to create (must not exist or be empty)')
    p.add_argument('--steps', type=int, default=300, help='optimizer steps (default 300)')
    p.add_argument('--seed', type=int, default=0, help='random seed (default 0)')
    p.add_argument('--cameras', default='front',
                   help="comma-separated cameras shown to the planner: its image_cameras "
                        "(default front; '' = text only)")
    p.add_argument('--image-size', type=int, default=0,
                   help="the planner's image_size (default 0: frames as they come)")
    p.add_argument('--vision-size', type=int, default=planner.VISION_SIZE,
                   help='side of the frame the vision tower sees, a multiple of 32 '
                        f'((side/32)^2 image tokens per frame; default {planner.VISION_SIZE})')
    p.add_argument('--frames-per-segment', type=int, default=3,
                   help='frames used per stretch of one prompt and answer (default 3)')
    p.add_argument('--change-frames', type=int, default=0,
                   help='frames from the start of each new subtask taught as "move on now" '
                        'with the previous subtask still quoted (default 0)')
    p.add_argument('--max-examples', type=int, default=256,
                   help='most examples (all are fitted at every step; default 256)')
    p.add_argument('--kinds', default=','.join(planner.KINDS),
                   help=f'turns to learn (default {",".join(planner.KINDS)}; subtask is required)')
    p.add_argument('--prompts-file', default='',
                   help="prompt templates (default: the planner's config/prompts.yaml)")
    p.add_argument('--lr', type=float, default=3e-3, help='learning rate (default 3e-3)')
    p.add_argument('--check', type=int, default=8,
                   help='subtask examples answered by the planner backend after training')
    p.add_argument('--calibration', default='',
                   help='prompts that quote {joints} on a --units lerobot dataset: the '
                        'calibration id or JSON path the export was given (default: the '
                        'simulated arm\'s nominal calibration, the export\'s default)')


def _run_planner(args: argparse.Namespace) -> int:
    os.environ.setdefault('HF_HUB_OFFLINE', '1')  # everything is local; never reach the hub
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    try:
        summary = planner.train_planner(
            args.dataset, args.output, steps=args.steps, seed=args.seed,
            cameras=tuple(c for c in args.cameras.split(',') if c),
            image_size=args.image_size, frames_per_segment=args.frames_per_segment,
            change_frames=args.change_frames,
            vision_size=args.vision_size,
            max_examples=args.max_examples,
            kinds=tuple(k for k in args.kinds.split(',') if k),
            prompts_file=args.prompts_file, lr=args.lr, check_examples=args.check,
            calibration=args.calibration)
    except (DatasetError, SettingsError) as exc:
        print(f'train-planner: {exc}', file=sys.stderr)
        return 2
    params = summary['planner_parameters']
    kinds = ', '.join(f'{k} {n}' for k, n in summary['examples'].items() if n)
    print(f"trained the planner on {sum(summary['examples'].values())} examples ({kinds}) "
          f"from {summary['frames']} "
          f"frames of {summary['episodes']} episode(s) in {summary['wall_s']:.1f} s: loss "
          f"{summary['loss_start']:.4f} -> {summary['loss_end']:.4f}; "
          f"{summary['exact_matches']}/{summary['checked']} subtasks answered exactly. Model "
          f"{summary['output_dir']}; run the planner with transformers.image_cameras "
          f"{params['transformers.image_cameras']}, transformers.image_size "
          f"{params['transformers.image_size']}, prompts_file {params['prompts_file']}")
    return 0


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    (_policy_arguments if name == 'train-policy' else _planner_arguments)(p)


def run(name: str, args: argparse.Namespace) -> int:
    return (_run_policy if name == 'train-policy' else _run_planner)(args)
