"""`lerobot-lang export BAG... OUT_DIR`: recorded bags -> a LeRobot v3.0 dataset with language.

Frames are resampled at ``--fps`` with the rule "last value at or before each tick, at most
``--max-age`` old" (see recording/timeline.py); the language columns hold the subtasks, plans,
memory, interjections, speech and VQA exchanges of the session (recording/language.py).

`lerobot-lang annotate BAG... OUT_DIR --planner-backend ...` is the same export whose subtask,
plan and memory rows (and the replies to recorded interjections) come from a planner backend
run offline over the recorded frames (recording/annotate.py) instead of the recorded planner's
/language_context and /speech: a teleoperated demonstration becomes a language-annotated one.
"""

from __future__ import annotations

import argparse
import logging
import sys

from lerobot_lang_nodes import dependencies
from lerobot_lang_nodes.backends.registry import known
from lerobot_lang_nodes.recording.annotate import AnnotateOptions
from lerobot_lang_nodes.recording.dataset import (EPISODES_BY, UNITS, ExportError, ExportOptions,
                                                  export)


def add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    p.add_argument('paths', nargs='+', metavar='BAG... OUT_DIR',
                   help='one or more bags (or folders of bags, e.g. a split recording), then '
                        'the dataset folder to create (must not exist or be empty)')
    p.add_argument('--fps', type=int, default=30, help='frame rate of the dataset (default 30)')
    p.add_argument('--repo-id', default='local/lerobot_lang_session',
                   help='dataset name <user>/<name> written into the metadata')
    p.add_argument('--units', choices=UNITS, default='radians',
                   help='joint units: radians as recorded, or lerobot (SO-101: degrees, '
                        'gripper 0..100) for LeRobot SO-101 policies')
    p.add_argument('--calibration', default='',
                   help='with --units lerobot: a LeRobot calibration id or JSON path of the real '
                        'arm; default: the simulated arm\'s nominal calibration')
    p.add_argument('--episodes-by', choices=EPISODES_BY, default='outcome',
                   help='where episodes end: at each task success (outcome), at scene resets, '
                        'at task changes, one per gap-free stretch (whole), or exactly at the '
                        'episode_event marks of an episodic recording (marks: phase and '
                        'outcome columns)')
    p.add_argument('--keep-resets', action='store_true',
                   help='with --episodes-by marks: keep the reset phases as episodes of their '
                        'own (phase column reset); default: left out')
    p.add_argument('--max-age', type=float, default=0.5, metavar='SECONDS',
                   help='oldest sample a frame may use; older data drops the frame and ends '
                        'the episode (default 0.5)')
    p.add_argument('--min-episode', type=float, default=1.0, metavar='SECONDS',
                   help='shorter episodes are left out (default 1.0)')
    p.add_argument('--cameras', default='',
                   help='comma-separated cameras to export (default: every recorded camera)')
    p.add_argument('--namespace', default='', help='namespace the graph ran in, if any')
    p.add_argument('--state-topic', default='joint_states', metavar='TOPIC',
                   help='JointState topic whose named values become observation.state '
                        '(default joint_states; robot_state for RoboCasa kitchens)')
    p.add_argument('--robot-type', default='so101_follower',
                   help='robot_type written into the dataset metadata (default %(default)s)')
    p.add_argument('--no-progress', action='store_true', help='no progress bar')
    if name == 'annotate':
        add_annotate_arguments(p)


def add_annotate_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group('annotation (the planner run offline over the recording; its '
                             'subtasks, plans, memory and replies to the recorded '
                             'interjections replace any recorded planner\'s)')
    g.add_argument('--planner-backend', default='scripted', choices=known('planner'),
                   help='scripted: from the recorded simulator ground truth (sim only); '
                        'transformers: a vision-language model on the recorded camera images; '
                        'hierarchical: a two-head checkpoint (default %(default)s)')
    g.add_argument('--planner-model', default='', metavar='PATH',
                   help='checkpoint of a model backend (the planner\'s model_path)')
    g.add_argument('--planner-cameras', default='', metavar='CAMERAS',
                   help='comma-separated cameras whose frames a VLM planner sees (the '
                        'planner\'s image_cameras; default: its default)')
    g.add_argument('--planner-device', default='', metavar='DEVICE',
                   help='cpu, cuda, cuda:N or auto (the planner\'s device; default: its '
                        'default)')
    g.add_argument('--planner-param', action='append', default=[], metavar='NAME=VALUE',
                   help='any other planner parameter (as the planner node takes it, e.g. '
                        'max_new_tokens=32, candidates=[reach the red cube, ...], '
                        'subtask_confirmations=2); repeatable')
    g.add_argument('--task', default='',
                   help='the task of the whole recording, replacing the recorded ones '
                        '(default: the recorded /task, language context or episode tasks)')
    g.add_argument('--rate', type=float, default=0.0, metavar='HZ',
                   help='planner looks per second of the recording (default: the planner\'s '
                        'high_level_hz)')


def annotate_options(args: argparse.Namespace) -> AnnotateOptions:
    """The planner node's parameters (their defaults are its), with the ones given here."""
    from lerobot_lang_nodes.nodes.params import config_defaults, with_values
    from lerobot_lang_nodes.nodes.planner_node import PlannerConfig
    changes: dict = {'backend': args.planner_backend, 'model_path': args.planner_model,
                     'revision_wait_s': 0.0}
    if args.planner_cameras:
        cams = tuple(c for c in args.planner_cameras.split(',') if c)
        changes.update({'transformers.image_cameras': cams, 'cameras': cams})
    if args.planner_device:
        changes['device'] = args.planner_device
    defaults = config_defaults(PlannerConfig)
    for item in args.planner_param:
        key, sep, raw = item.partition('=')
        key = key.strip()
        if not sep or key not in defaults:
            raise ValueError(f'--planner-param {item!r}: expected NAME=VALUE with NAME one of '
                             f'the planner\'s parameters {sorted(defaults)}')
        changes[key] = _param_value(defaults[key], raw, key)
    try:
        planner = with_values(PlannerConfig(), changes)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from exc
    return AnnotateOptions(backend=args.planner_backend, planner=planner, rate_hz=args.rate,
                           task=args.task)


def _param_value(default: object, raw: str, key: str) -> object:
    """``raw`` as the type of the parameter's default (YAML for numbers and lists)."""
    import yaml
    if isinstance(default, str):
        return raw
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f'--planner-param {key}={raw!r}: {exc}') from exc
    if isinstance(default, tuple):
        return tuple(str(v) for v in (value if isinstance(value, list) else [value]))
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f'--planner-param {key}={raw!r}: expected true or false')
        return value
    if isinstance(default, (int, float)) and (isinstance(value, bool)
                                              or not isinstance(value, (int, float))):
        raise ValueError(f'--planner-param {key}={raw!r}: expected a number')
    return type(default)(value)


def run(name: str, args: argparse.Namespace) -> int:
    if len(args.paths) < 2:
        print(f'{name}: give at least one BAG and the OUT_DIR', file=sys.stderr)
        return 2
    *bags, out_dir = args.paths
    logging.basicConfig(level=logging.WARNING, format='%(message)s')
    try:
        annotation = None
        if name == 'annotate':
            annotation = annotate_options(args)
        options = ExportOptions(
            fps=args.fps, repo_id=args.repo_id, units=args.units,
            episodes_by=args.episodes_by, keep_resets=args.keep_resets, max_age_s=args.max_age,
            min_episode_s=args.min_episode, namespace=args.namespace,
            cameras=tuple(c for c in args.cameras.split(',') if c),
            calibration=args.calibration, state_topic=args.state_topic,
            robot_type=args.robot_type, annotate=annotation)
    except ValueError as exc:
        print(f'{name}: {exc}', file=sys.stderr)
        return 2
    # LeRobot writes the dataset: without it, say so before reading any bag.
    dependencies.require_model_stack(f'lerobot-lang {name}', 'lerobot')
    bars: dict = {}

    def counter(unit: str, desc: str):
        def progress(n: int, total: int) -> None:
            if unit not in bars:
                from tqdm import tqdm
                for bar in bars.values():  # the planner's pass ends before frames are written
                    bar.close()
                bars[unit] = tqdm(total=total, unit=unit, desc=desc, disable=args.no_progress)
            bars[unit].update(n)
        return progress

    try:
        result = export(bags, out_dir, options, progress=counter('frame', name),
                        annotation_progress=counter('look', f'{args.planner_backend} planner'
                                                    if name == 'annotate' else name))
    except (ExportError, OSError) as exc:
        print(f'{name} failed, nothing written: {exc}', file=sys.stderr)
        return 1
    finally:
        for bar in bars.values():
            bar.close()
    for warning in result.warnings:
        print(f'warning: {warning}', file=sys.stderr)
    print(f'wrote {result.frames} frames in {result.episodes} episode(s), cameras '
          f'{result.cameras}, to {result.root}')
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m lerobot_lang_nodes.cli.export BAG... OUT_DIR [options]`."""
    from lerobot_lang_nodes.cli.main import run_one
    return run_one('export', sys.modules[__name__], argv)


if __name__ == '__main__':
    sys.exit(main())
