"""The closed data loop on the simulated SO-101: collect, export, train, deploy, report.

Usage: .venv/bin/python bench/closed_loop.py [all|collect|export|train|deploy|report]
                                             [--work DIR] [--preset default|ci] [options]

Stages (each reads the previous stage's output in the work folder, so each runs alone too):

* collect: the sim graph with the scripted planner and the scripted expert (config/sim.yaml's
  backends) and the recorder, over ``--scenes`` randomised layouts (sim_bridge ``seed``
  ``--collect-seed``; reset k uses seed + 1000 k) and the scene's tasks (every cube into the
  bowl, some scenes starting with "pick up the <colour> cube"); every ``--interject-every``-th
  scene gets an interjection ("use the <colour> cube instead") and a VQA question (``/vqa``,
  then ``/resume``), so the dataset holds every language style. -> collect/bags, collect.json
* export: ``lerobot-lang export`` (--units lerobot --fps 30 = the executor's ctrl_hz,
  episodes split at task outcomes) into one LeRobot v3 dataset, loaded back with LeRobot's
  LeRobotDataset. -> dataset/, export.json
* train: ``lerobot-lang train-policy`` and ``train-planner`` on that dataset only, plus the
  policy on the first episodes only (``--curve``; subsets cut from the dataset with LeRobot's
  ``delete_episodes``). -> models/, train.json
* deploy: the sim graph with (scripted | learned planner) x (scripted | learned policy) through
  the real backends (`transformers` planner, `lerobot` policy: they never read the simulator's
  ground truth) on held-out layouts (``--eval-seed``), the same episodes for every
  configuration; the scripted/scripted run is recorded and exported as the held-out dataset on
  which the learned planner is scored frame by frame against the scripted planner's labels.
  -> deploy/, deploy.json
* report: bench/reports/closed_loop.{md,json} and closed_loop.png (success against training
  episodes; matplotlib if installed, else the data only).

The benchmark probe judges success from ``sim/ground_truth`` (measurement only, as
bench/task_time.py does). Every graph runs in a private ROS domain on loopback
(bench.harness.private_ros_domain); nodes are stopped by PID. See bench/README.md, "Closed data
loop".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import REPORT_DIR, private_ros_domain
from lerobot_lang_nodes.training.evaluation import (REPO_ID, eval_plan, policy_heldout_loss,
                                                    scene_plan, score_planner)

from lerobot_lang_nodes.testing import NodeProcess, SimGraph, WaitTimeout, wait_until

ROOT = Path(__file__).resolve().parents[1]
STAGES = ('collect', 'export', 'train', 'deploy', 'report')
FPS = 30  # = sim_bridge ctrl_hz (its default in sim): the policy must be trained at this rate
STOP_TIMEOUT_S = 10.0
OUTCOME_WAIT_S = 5.0  # wall s a ground-truth success may wait for /task_outcome

# Configurations of the deploy stage: (planner learned?, policy learned?).
CONFIGS = {
    'scripted_planner+scripted_policy': (False, False),
    'scripted_planner+learned_policy': (False, True),
    'learned_planner+scripted_policy': (True, False),
    'learned_planner+learned_policy': (True, True),
}
BASELINE = 'scripted_planner+scripted_policy'

PRESETS: dict[str, dict[str, Any]] = {
    # Sized for the whole loop in under two hours on a 2-core CPU (see bench/README.md).
    'default': dict(scenes=24, interject_every=4, task_timeout=30.0, policy_steps=3000,
                    policy_batch=32, planner_steps=300, planner_examples=512,
                    planner_segment_frames=8, planner_change_frames=0,
                    planner_confirmations=1, planner_prompts='config/prompts_stateful.yaml',
                    planner_vision=64,
                    planner_cameras='front,wrist', eval_episodes=12,
                    eval_timeout=30.0, curve='0.25,0.5', curve_eval_episodes=12,
                    planner_eval_frames=400, configs=','.join(CONFIGS)),
    # CI: every stage connects, in a few minutes; the numbers mean nothing. The planner's
    # change frames and confirmations are on, so their code paths run end to end.
    'ci': dict(scenes=1, interject_every=1, task_timeout=25.0, policy_steps=30,
               policy_batch=8, planner_steps=20, planner_examples=48,
               planner_segment_frames=8, planner_change_frames=4,
               planner_confirmations=2, planner_prompts='config/prompts_stateful.yaml',
               planner_vision=64,
               planner_cameras='front,wrist', eval_episodes=1,
               eval_timeout=10.0, curve='', curve_eval_episodes=0, planner_eval_frames=24,
               configs=f'{BASELINE},learned_planner+learned_policy'),
}


def log(text: str) -> None:
    sys.stdout.write(f'[closed_loop {time.strftime("%H:%M:%S")}] {text}\n')
    sys.stdout.flush()


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise SystemExit(f'{path} is missing: run the stage that writes it first '
                         f'(bench/closed_loop.py --help)')
    return json.loads(path.read_text())


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + '\n')


def folder_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob('*') if f.is_file()) / 2**20, 2)


def run_cli(argv: list[str], log_path: Path, timeout_s: float) -> tuple[int, str, float]:
    """Run one of the project's commands (python -m ...) with this interpreter; output to a log."""
    t0 = time.monotonic()
    env = {**os.environ, 'HF_HUB_OFFLINE': '1'}
    with open(log_path, 'w') as out:
        proc = subprocess.Popen([sys.executable, '-m', *argv], stdout=out,
                                stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()  # only the child this function started, by its handle
            proc.wait()
            code = 124
        except BaseException:  # Ctrl-C / SIGTERM of the run: the trainer must not outlive it
            proc.kill()
            proc.wait()
            raise
    text = log_path.read_text(errors='replace')
    return code, text, round(time.monotonic() - t0, 1)


# --- the graph under test ------------------------------------------------------------------
def normal_scheduling() -> None:
    """Make sure the nodes about to start do not inherit a real-time CPU policy.

    A video encode in this process (LeRobot's AV1 encoder run as root) may have left the
    thread SCHED_FIFO; busy nodes inheriting it would starve the machine.
    """
    if hasattr(os, 'sched_getscheduler') and os.sched_getscheduler(0) != os.SCHED_OTHER:
        log(f'CPU scheduling was {os.sched_getscheduler(0)} (real-time): back to SCHED_OTHER')
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


class Latest:
    """The last message of a subscription, its count, and an optional per-message hook."""

    def __init__(self, hook: Any = None) -> None:
        self.lock = threading.Lock()
        self.msg: Any = None
        self.count = 0
        self.hook = hook

    def __call__(self, msg: Any) -> None:
        with self.lock:
            self.msg, self.count = msg, self.count + 1
            if self.hook is not None:
                self.hook(msg)

    def get(self) -> Any:
        with self.lock:
            return self.msg


class SimSession:
    """The sim graph's nodes (testing.SimGraph: one process each, as sim.launch.py starts
    them), optionally the recorder, and a probe: tasks, resets, interjections, VQA, and what
    came out."""

    def __init__(self, folder: Path, overrides: list[tuple[str, str, Any]],
                 record_dir: Path | None = None) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from std_msgs.msg import String

        from lerobot_lang_msgs.msg import ActionChunk, LanguageContext, TaskOutcome
        from lerobot_lang_nodes.nodes import qos
        from lerobot_lang_nodes.testing import RosProbe

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        normal_scheduling()
        self.String = String
        params: dict[str, dict[str, Any]] = {}
        for node, name, value in overrides:
            params.setdefault(node, {})[name] = value
        launch = {'record': 'true', 'record_dir': str(record_dir)} if record_dir else {}
        self.procs: dict[str, NodeProcess] = {}
        self.probe = None
        try:
            self.graph = SimGraph(folder, params, launch=launch, env=dict(os.environ),
                                  viewer=False, probe=False)
            self.procs = self.graph.procs
            self.probe = RosProbe(f'closed_loop_probe_{os.getpid()}')
            self.subtasks: list[str] = []
            self._last_subtask = ''
            self.truth = Latest()
            self.context = Latest(hook=self._on_context)
            self.chunks = Latest()
            self.outcome = Latest()
            self.diagnostics: dict[str, dict[str, str]] = {}
            node = self.probe.node
            node.create_subscription(String, 'sim/ground_truth', self.truth, qos.LATCHED)
            node.create_subscription(LanguageContext, 'language_context', self.context,
                                     qos.LATCHED)
            node.create_subscription(ActionChunk, 'action_chunk', self.chunks, qos.COMMAND)
            node.create_subscription(TaskOutcome, 'task_outcome', self.outcome, qos.LATCHED)
            node.create_subscription(DiagnosticArray, 'diagnostics', self._on_diagnostics,
                                     qos.STATUS)
            plist = list(self.procs.values())
            for name in self.procs:
                self.probe.wait_for_node(name, timeout_s=180.0, processes=plist)
            self.task_pub = self.probe.publisher(String, 'task', qos.LATCHED)
            self.interjection_pub = self.probe.publisher(String, 'interjection', qos.COMMAND)
            # planner + sim_bridge (+ recorder) on /task before anything is sent.
            subscribers = 2 + (record_dir is not None)
            wait_until(lambda: self.task_pub.get_subscription_count() >= subscribers, 120.0,
                       'the graph on /task', plist)
            wait_until(lambda: self.truth.get() is not None, 120.0,
                       'sim/ground_truth from sim_bridge', plist)
        except BaseException:
            self.close()
            raise

    def _on_context(self, msg: Any) -> None:
        # Against the previous context, empty included: after a reset clears the subtask, the
        # next task's first subtask counts even when the last episode ended on the same text.
        if msg.subtask and msg.subtask != self._last_subtask:
            self.subtasks.append(msg.subtask)
        self._last_subtask = msg.subtask

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            self.diagnostics[status.name] = {kv.key: kv.value for kv in status.values}

    @property
    def plist(self) -> list[NodeProcess]:
        return list(self.procs.values())

    def truth_now(self) -> dict[str, Any]:
        return json.loads(self.truth.get().data)

    def reset_to(self, seed: int) -> None:
        """/sim/reset, then wait until the planner has had the new layout's ground truth."""
        from std_srvs.srv import Trigger
        reply = self.probe.call(Trigger, 'sim/reset', Trigger.Request(), timeout_s=60.0)
        if not reply.success:
            raise RuntimeError(f'sim/reset failed: {reply.message}')
        wait_until(lambda: self.truth_now().get('seed') == seed, 60.0,
                   f'the scene with seed {seed} (sim_bridge seed + 1000 x resets)', self.plist)
        count = self.truth.count
        # One more ground truth of the new layout: every subscriber has had one by now.
        wait_until(lambda: self.truth.count >= count + 1, 30.0, 'a second ground truth',
                   self.plist)

    def run_task(self, task: str, max_sim_s: float, interjection: str = '',
                 interjected_goal: str = '', vqa: str = '') -> dict[str, Any]:
        """Send ``task``; wait for success (ground truth) or ``max_sim_s`` sim seconds.

        ``interjection`` is sent mid-reach (then ``interjected_goal`` is what counts),
        ``vqa`` asked (then /resume) once the cube is lifted.
        """
        from lerobot_lang_nodes.sim.tasks import check_success, parse_task
        t0 = float(self.truth_now()['sim_time'])
        chunks0 = self.chunks.count
        subtasks0 = len(self.subtasks)
        self.task_pub.publish(self.String(data=task))
        goal = parse_task(task)
        events: list[str] = []
        done: dict[str, Any] = {}

        def step() -> bool:
            nonlocal goal
            gt = self.truth_now()
            elapsed = float(gt['sim_time']) - t0
            if elapsed > max_sim_s and 'success_wall' not in done:
                done.update(success=False, sim_s=None)
                return True
            ctx = self.context.get()
            if ctx is None or ctx.task != task:
                return False  # judged only once the planner has taken the task
            subtask = ctx.subtask
            # Mid-reach (or at the grasp): the arm is busy with the first cube, holds nothing.
            if interjection and 'interjection' not in events and (
                    subtask.startswith('grasp')
                    or (subtask.startswith('reach') and elapsed >= 1.0)):
                self.interjection_pub.publish(self.String(data=interjection))
                events.append('interjection')
            if 'interjection' in events and interjected_goal:
                goal = parse_task(interjected_goal)
            if vqa and 'vqa' not in events and subtask.startswith(('lift', 'move')):
                events.append('vqa')
                self._ask(vqa)
            if 'success_wall' not in done and check_success(goal, gt):
                done.update(success=True, sim_s=round(elapsed, 2),
                            success_wall=time.monotonic())
            if 'success_wall' in done:
                # Before the next task: the success must be on /task_outcome, where the
                # exporter cuts the episode; a task sent first would make the exporter take
                # the next episode for idle time after this success.
                out = self.outcome.get()
                seen = (out is not None and out.success
                        and parse_task(out.goal) == goal)
                if seen or time.monotonic() - done['success_wall'] > OUTCOME_WAIT_S:
                    done['outcome_seen'] = bool(seen)
                    del done['success_wall']
                    return True
            return False

        wall_cap = 6.0 * max_sim_s + 60.0
        try:
            wait_until(step, wall_cap, f'{task!r} done or {max_sim_s} sim s', self.plist,
                       poll_s=0.05)
        except WaitTimeout:
            if any(not p.alive for p in self.plist):
                raise
            done.update(success=False, sim_s=None, wall_capped=True)
        return {'task': task, 'goal': goal.text if goal else interjected_goal, **done,
                'events': events, 'chunks': self.chunks.count - chunks0,
                'subtasks': self.subtasks[subtasks0:]}  # how far the arm got

    def _ask(self, question: str) -> None:
        """A VQA question (the planner pauses the executor first), then /resume."""
        from std_srvs.srv import Trigger

        from lerobot_lang_msgs.srv import AskVqa
        reply = self.probe.call(AskVqa, 'vqa', AskVqa.Request(question=question,
                                                              camera='wrist'), timeout_s=60.0)
        log(f'  vqa {question!r} -> {reply.answer!r}')
        resumed = self.probe.call(Trigger, 'resume', Trigger.Request(), timeout_s=30.0)
        if not resumed.success:
            log(f'  resume refused: {resumed.message}')

    def close(self) -> dict[str, int | None]:
        codes: dict[str, int | None] = {}
        # The recorder first (it closes its bag), the simulator last.
        names = [n for n in ('recorder', 'policy', 'planner', 'sim_bridge') if n in self.procs]
        for name in names:
            codes[name] = self.procs[name].stop(timeout_s=STOP_TIMEOUT_S)
        if self.probe is not None:
            self.probe.close()
            self.probe = None
        return codes


# --- collect ---------------------------------------------------------------------------------
def collect(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    out = work / 'collect'
    if (out / 'bags').exists() and any((out / 'bags').iterdir()):
        raise SystemExit(f'{out}/bags is not empty: remove the work folder or choose another')
    t0 = time.monotonic()
    session = SimSession(out / 'logs', [('sim_bridge', 'seed', args.collect_seed)],
                         record_dir=out / 'bags')
    scenes = []
    try:
        startup = time.monotonic() - t0
        for k in range(1, args.scenes + 1):
            seed = args.collect_seed + 1000 * k
            session.reset_to(seed)
            interject = args.interject_every > 0 and k % args.interject_every == 0
            results = []
            for step in scene_plan(k, seed, interject):
                result = session.run_task(step['task'], args.task_timeout,
                                          step.get('interjection', ''),
                                          step.get('interjected_goal', ''), step.get('vqa', ''))
                results.append(result)
                log(f"collect scene {k}/{args.scenes} (seed {seed}): {result['task']!r}"
                    f"{' -> ' + result['goal'] if result['events'] else ''}: "
                    f"{'ok ' + str(result['sim_s']) + ' s' if result['success'] else 'FAILED'}")
                if not result['success']:
                    break  # the rest of the scene depends on this cube: next scene
            scenes.append({'k': k, 'seed': seed, 'tasks': results})
    finally:
        codes = session.close()
    bags = sorted(p.name for p in (out / 'bags').iterdir() if p.is_dir())
    tasks = [t for s in scenes for t in s['tasks']]
    report = {
        'collect_seed': args.collect_seed, 'scenes': scenes, 'bags': bags,
        'tasks_sent': len(tasks), 'tasks_succeeded': sum(t['success'] for t in tasks),
        'interjections': sum('interjection' in t['events'] for t in tasks),
        'vqa_questions': sum('vqa' in t['events'] for t in tasks),
        'startup_wall_s': round(startup, 1), 'wall_s': round(time.monotonic() - t0, 1),
        'bag_mb': folder_mb(out / 'bags'), 'exit_codes': codes,
    }
    write_json(work / 'collect.json', report)
    log(f"collected {report['tasks_succeeded']}/{report['tasks_sent']} tasks in "
        f"{report['wall_s']} s, bags {report['bag_mb']} MB")
    return report


# --- export ----------------------------------------------------------------------------------
def load_dataset(root: Path) -> dict[str, Any]:
    """Load with LeRobot's own class and read one frame: the dataset is usable by LeRobot."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset(REPO_ID, root=root, video_backend='pyav')
    item = ds[len(ds) // 2]
    return {'frames': len(ds), 'episodes': ds.meta.total_episodes,
            'keys': sorted(k for k in item if not k.startswith('language')),
            'tasks': sorted(str(t) for t in ds.meta.tasks.index)}


def export_bags(bag_dir: Path, out: Path, log_path: Path, timeout_s: float) -> dict[str, Any]:
    bags = sorted(str(p) for p in bag_dir.iterdir() if p.is_dir())
    if not bags:
        raise SystemExit(f'no bag in {bag_dir}')
    code, text, wall = run_cli(['lerobot_lang_nodes.cli.export', *bags, str(out), '--units',
                                'lerobot', '--fps', str(FPS), '--repo-id', REPO_ID,
                                '--episodes-by', 'outcome', '--no-progress'], log_path,
                               timeout_s)
    if code != 0:
        raise SystemExit(f'export failed ({code}): {text[-2000:]}')
    info = json.loads((out / 'meta/info.json').read_text())
    return {'frames': info['total_frames'], 'episodes': info['total_episodes'],
            'minutes': round(info['total_frames'] / FPS / 60.0, 2), 'mb': folder_mb(out),
            'wall_s': wall, 'output': text.strip().splitlines()[-1]}


def export(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    read_json(work / 'collect.json')
    out = work / 'dataset'
    if out.exists():
        shutil.rmtree(out)
    result = export_bags(work / 'collect/bags', out, work / 'export.log', 3600.0)
    result['lerobot_load'] = load_dataset(out)
    write_json(work / 'export.json', result)
    log(f"exported {result['frames']} frames ({result['minutes']} min) in "
        f"{result['episodes']} episodes, {result['mb']} MB, in {result['wall_s']} s")
    return result


# --- train -----------------------------------------------------------------------------------
def subset_dataset(src: Path, keep: int, out: Path) -> None:
    """The first ``keep`` episodes of ``src``, cut with LeRobot's own dataset tool."""
    from lerobot.datasets.dataset_tools import delete_episodes
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from lerobot_lang_nodes.recording.scheduling import scheduling_kept
    ds = LeRobotDataset(REPO_ID, root=src, video_backend='pyav')
    # delete_episodes re-encodes AV1, and the encoder leaves this thread SCHED_FIFO 99 when
    # run as root: every node started from it afterwards would inherit real-time priority.
    with scheduling_kept():
        delete_episodes(ds, list(range(keep, ds.meta.total_episodes)), output_dir=out,
                        repo_id=REPO_ID)


def train_policy(dataset: Path, out: Path, args: argparse.Namespace,
                 log_path: Path) -> dict[str, Any]:
    if out.exists():
        shutil.rmtree(out)
    code, text, wall = run_cli(['lerobot_lang_nodes.cli.main', 'train-policy', str(dataset),
                                str(out), '--steps', str(args.policy_steps), '--batch-size',
                                str(args.policy_batch), '--log-every', '500'],
                               log_path, 4 * 3600.0)
    if code != 0:
        raise SystemExit(f'train-policy failed ({code}): {text[-2000:]}')
    summary = json.loads((out / 'training_summary.json').read_text())
    keep = ('frames', 'episodes', 'steps', 'batch_size', 'chunk_size', 'parameters',
            'loss_start', 'loss_end', 'train_loss_first', 'train_loss_last', 'load_s',
            'train_s', 'wall_s', 'image_shape', 'image_keypoints', 'shift_pixels')
    return {**{k: summary.get(k) for k in keep}, 'instructions': len(summary['instructions']),
            'command_wall_s': wall, 'path': str(out.relative_to(args.work))}


def train(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    exported = read_json(work / 'export.json')
    dataset = work / 'dataset'
    models = work / 'models'
    models.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    log(f'training the policy ({args.policy_steps} steps) on {exported["episodes"]} episodes')
    report['policy'] = train_policy(dataset, models / 'policy', args, work / 'train_policy.log')
    log(f"policy: loss {report['policy']['loss_start']:.4f} -> "
        f"{report['policy']['loss_end']:.4f} in {report['policy']['command_wall_s']} s")

    log(f'training the planner ({args.planner_steps} steps)')
    out = models / 'planner'
    if out.exists():
        shutil.rmtree(out)
    prompts = ['--prompts-file', str(ROOT / args.planner_prompts)] if args.planner_prompts \
        else []
    code, text, wall = run_cli(['lerobot_lang_nodes.cli.main', 'train-planner', str(dataset),
                                str(out), '--steps', str(args.planner_steps), '--max-examples',
                                str(args.planner_examples), '--frames-per-segment',
                                str(args.planner_segment_frames), '--change-frames',
                                str(args.planner_change_frames), '--vision-size',
                                str(args.planner_vision), '--cameras', args.planner_cameras,
                                *prompts],
                               work / 'train_planner.log', 4 * 3600.0)
    if code != 0:
        raise SystemExit(f'train-planner failed ({code}): {text[-2000:]}')
    summary = json.loads((out / 'training_summary.json').read_text())
    report['planner'] = {**{k: summary.get(k) for k in (
        'frames', 'frames_used', 'episodes', 'examples', 'subtask_examples_moving_on',
        'subtasks', 'steps', 'vision_size', 'loss_start',
        'loss_end', 'checked', 'exact_matches', 'load_s', 'train_s', 'wall_s')},
        'planner_parameters': summary['planner_parameters'], 'command_wall_s': wall,
        'path': str(out.relative_to(work))}
    log(f"planner: loss {summary['loss_start']:.4f} -> {summary['loss_end']:.4f}, "
        f"{summary['exact_matches']}/{summary['checked']} exact, in {wall} s")

    report['curve'] = []
    total = int(exported['episodes'])
    for fraction in [float(f) for f in args.curve.split(',') if f.strip()]:
        keep = max(1, round(fraction * total))
        if keep >= total:
            continue
        sub = work / 'subsets' / f'episodes_{keep}'
        if sub.exists():
            shutil.rmtree(sub)
        t0 = time.monotonic()
        subset_dataset(dataset, keep, sub)
        cut_s = round(time.monotonic() - t0, 1)
        log(f'training the policy on the first {keep} of {total} episodes')
        result = train_policy(sub, models / f'policy_episodes_{keep}', args,
                              work / f'train_policy_{keep}.log')
        report['curve'].append({'episodes': keep, 'subset_cut_s': cut_s, **result})
        log(f"  loss {result['loss_start']:.4f} -> {result['loss_end']:.4f}")
    write_json(work / 'train.json', report)
    return report


# --- deploy ----------------------------------------------------------------------------------
def config_overrides(name: str, work: Path, trained: dict[str, Any],
                     policy_dir: str = '', confirmations: int = 1
                     ) -> list[tuple[str, str, Any]]:
    learned_planner, learned_policy = CONFIGS.get(name, (False, True))
    out: list[tuple[str, str, Any]] = []
    if learned_planner:
        p = trained['planner']['planner_parameters']
        out += [('planner', 'backend', 'transformers'),
                ('planner', 'model_path', str((work / trained['planner']['path']).resolve())),
                ('planner', 'direct_subtask', False),
                ('planner', 'image_cameras', list(p['image_cameras'])),
                ('planner', 'image_size', int(p['image_size'])),
                ('planner', 'prompts_file', str((work / trained['planner']['path']
                                                 / 'prompts.yaml').resolve())),
                ('planner', 'subtask_confirmations', confirmations),
                ('planner', 'device', 'cpu')]
    if learned_policy:
        path = policy_dir or trained['policy']['path']
        out += [('policy', 'backend', 'lerobot'),
                ('policy', 'model_path', str((work / path).resolve())),
                ('policy', 'device', 'cpu')]
    return out


def deploy_one(args: argparse.Namespace, name: str, overrides: list, plan: list,
               record_dir: Path | None = None) -> dict[str, Any]:
    folder = args.work / 'deploy' / name
    if folder.exists():
        shutil.rmtree(folder)
    t0 = time.monotonic()
    session = SimSession(folder / 'logs', [('sim_bridge', 'seed', args.eval_seed), *overrides],
                         record_dir=record_dir)
    episodes = []
    try:
        startup = time.monotonic() - t0
        for seed, task in plan:
            session.reset_to(seed)
            result = session.run_task(task, args.eval_timeout)
            result['seed'] = seed
            episodes.append(result)
            log(f"  {name}: seed {seed} {task!r}: "
                f"{str(result['sim_s']) + ' s' if result['success'] else 'failed'}, "
                f"{result['chunks']} chunks")
        diagnostics = {k: v for k, v in session.diagnostics.items()
                       if k.startswith(('planner', 'policy'))}
        subtasks = list(session.subtasks)
    finally:
        codes = session.close()
    times = [e['sim_s'] for e in episodes if e['success']]
    return {'overrides': [f'{n}.{k}={v}' for n, k, v in overrides],
            'episodes': episodes, 'successes': len(times), 'n': len(episodes),
            'success_rate': round(len(times) / len(episodes), 3) if episodes else None,
            'median_sim_s': round(statistics.median(times), 2) if times else None,
            'chunks': sum(e['chunks'] for e in episodes),
            'distinct_subtasks': sorted(set(subtasks)), 'subtask_changes': len(subtasks),
            'latency': latency_figures(diagnostics), 'diagnostics': diagnostics,
            'startup_wall_s': round(startup, 1), 'wall_s': round(time.monotonic() - t0, 1),
            'exit_codes': codes}


def latency_figures(diagnostics: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The inference / generation latency figures the nodes report on /diagnostics."""
    out = {}
    for status, values in diagnostics.items():
        for key, value in values.items():
            if 'latency' in key or key in ('load_time_s', 'inferences', 'generations'):
                try:
                    out[f'{status} / {key}'] = round(float(value), 2)
                except ValueError:
                    out[f'{status} / {key}'] = value
    return out


def score(args: argparse.Namespace, trained: dict[str, Any], report: dict[str, Any]) -> None:
    """Export the recorded held-out scripted run; score the learned models on it."""
    work = args.work
    heldout_bags = work / 'deploy' / 'heldout_bags'
    if not heldout_bags.exists() or not any(heldout_bags.iterdir()):
        return
    log('exporting the held-out scripted run; scoring the learned planner on it')
    out = work / 'heldout_dataset'
    if out.exists():
        shutil.rmtree(out)
    report['heldout_dataset'] = export_bags(heldout_bags, out, work / 'export_heldout.log',
                                            3600.0)
    report['planner_accuracy'] = score_planner(
        work / trained['planner']['path'], trained['planner']['planner_parameters'], out,
        args.planner_eval_frames)
    log(f"planner subtask accuracy {report['planner_accuracy']['accuracy']} on "
        f"{report['planner_accuracy']['frames_scored']} frames")
    report['policy_heldout_loss'] = {
        'policy': policy_heldout_loss(work / trained['policy']['path'], out),
        'training_frames_loss_end': trained['policy']['loss_end']}
    for point in trained.get('curve', []):
        report['policy_heldout_loss'][f"policy_{point['episodes']}_episodes"] = \
            policy_heldout_loss(work / point['path'], out)
    log(f"policy loss on held-out frames {report['policy_heldout_loss']}")


def deploy(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    trained = read_json(work / 'train.json')
    if args.score_only:  # the graphs' results kept; the held-out scoring done again
        report = read_json(work / 'deploy.json')
        score(args, trained, report)
        write_json(work / 'deploy.json', report)
        return report
    plan = eval_plan(args.eval_seed, args.eval_episodes)
    collected = read_json(work / 'collect.json')
    used = {s['seed'] for s in collected['scenes']}
    overlap = sorted(used & {seed for seed, _ in plan})
    if overlap:
        raise SystemExit(f'held-out seeds {overlap} were used in collection: choose another '
                         '--eval-seed')
    report: dict[str, Any] = {'eval_seed': args.eval_seed,
                              'plan': [{'seed': s, 'task': t} for s, t in plan], 'configs': {}}
    for name in [c for c in args.configs.split(',') if c]:
        if name not in CONFIGS:
            raise SystemExit(f'unknown configuration {name!r}; known: {list(CONFIGS)}')
        log(f'deploy {name} on {len(plan)} held-out episodes')
        record = work / 'deploy' / 'heldout_bags' if name == BASELINE else None
        if record is not None and record.exists():
            shutil.rmtree(record)
        overrides = config_overrides(name, work, trained,
                                     confirmations=args.planner_confirmations)
        report['configs'][name] = deploy_one(args, name, overrides, plan, record_dir=record)
    curve_plan = eval_plan(args.eval_seed, args.curve_eval_episodes)
    report['curve'] = []
    for point in trained.get('curve', []):
        name = f"scripted_planner+policy_{point['episodes']}_episodes"
        log(f'deploy {name} on {len(curve_plan)} held-out episodes')
        result = deploy_one(args, name, config_overrides(name, work, trained, point['path']),
                            curve_plan)
        report['curve'].append({**result, 'training_episodes': point['episodes']})
    score(args, trained, report)
    write_json(work / 'deploy.json', report)
    return report


# --- report ----------------------------------------------------------------------------------
def plot_curve(points: list[tuple[int, float]], baseline: float | None,
               path: Path) -> str:
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return ('matplotlib is not installed in .venv (requirements/test.txt has it): the '
                'curve is in the JSON only')
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    xs, ys = zip(*sorted(points)) if points else ((), ())
    ax.plot(xs, [100 * y for y in ys], 'o-', label='scripted planner + learned policy')
    if baseline is not None:
        ax.axhline(100 * baseline, color='grey', ls='--', label='scripted expert')
    ax.set_xlabel('training episodes')
    ax.set_ylabel('task success on held-out scenes (%)')
    ax.set_ylim(-5, 105)
    ax.grid(alpha=0.3)
    ax.legend(loc='center right', fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f'![success against training episodes]({path.name})'


def report(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    data = {name: read_json(work / f'{name}.json')
            for name in ('collect', 'export', 'train', 'deploy')}
    timings = read_json(work / 'timings.json') if (work / 'timings.json').is_file() else {}
    collected, exported, trained, deployed = (data['collect'], data['export'], data['train'],
                                              data['deploy'])
    configs = deployed['configs']
    base = configs.get(BASELINE, {})
    base_rate = base.get('success_rate')
    points = [(int(p['training_episodes']), p['success_rate'])
              for p in deployed.get('curve', [])
              if p.get('success_rate') is not None]
    learned = configs.get('scripted_planner+learned_policy')
    if learned and learned.get('success_rate') is not None:
        points.append((int(trained['policy']['episodes']), learned['success_rate']))
    args.report_dir.mkdir(parents=True, exist_ok=True)
    png = args.report_dir / f'{args.name}.png'
    figure = plot_curve(points, base_rate, png)
    acc = deployed.get('planner_accuracy') or {}
    policy_ratio = (round(learned['success_rate'] / base_rate, 3)
                    if learned and base_rate else None)
    summary = {
        'date': time.strftime('%Y-%m-%d %H:%M'),
        'machine': f'{platform.machine()}, {os.cpu_count()} cores',
        'settings': timings.get('settings'), 'stage_wall_s': timings.get('stages'),
        'collect': {k: collected[k] for k in ('tasks_sent', 'tasks_succeeded',
                                              'interjections', 'vqa_questions', 'wall_s',
                                              'bag_mb')} | {'scenes': len(collected['scenes'])},
        'dataset': {k: exported[k] for k in ('frames', 'episodes', 'minutes', 'mb', 'wall_s')},
        'training': {'policy': trained['policy'], 'planner': {
            **{k: v for k, v in trained['planner'].items() if k != 'planner_parameters'},
            'image_cameras': trained['planner']['planner_parameters']['image_cameras']},
            'curve': trained.get('curve', [])},
        'deploy': {name: {k: c[k] for k in ('n', 'successes', 'success_rate', 'median_sim_s',
                                            'chunks', 'subtask_changes', 'latency',
                                            'startup_wall_s', 'wall_s')}
                   for name, c in configs.items()},
        'curve': [{'episodes': e, 'success_rate': r} for e, r in sorted(points)],
        'planner_accuracy': acc,
        'policy_heldout_loss': deployed.get('policy_heldout_loss'),
        'targets': {'learned_policy_success_over_scripted': policy_ratio,
                    'policy_target_met': policy_ratio is not None and policy_ratio >= 0.8,
                    'planner_accuracy': acc.get('accuracy'),
                    'planner_target_met': (acc.get('accuracy') or 0) >= 0.9},
    }
    # No path of this machine in the reports: the work folder and the checkout become names.
    blob = json.dumps({'summary': summary, **data, 'timings': timings}, indent=2)
    blob = blob.replace(str(args.work), '<work>').replace(str(ROOT), '<repo>')
    (args.report_dir / f'{args.name}.json').write_text(blob + '\n')
    text = markdown(summary, figure)
    if args.analysis:
        # A hand-written reading of this run's numbers (what limits the learned models).
        notes = args.analysis.read_text().strip()
        text += f'\n## What limits the learned models\n\n{notes}\n'
    (args.report_dir / f'{args.name}.md').write_text(text)
    sys.stdout.write(text)
    return summary


def _pct(value: float | None) -> str:
    return '-' if value is None else f'{100 * value:.0f} %'


def markdown(s: dict[str, Any], figure: str) -> str:
    c, d, tp, tl = s['collect'], s['dataset'], s['training']['policy'], s['training']['planner']
    lines = ['# Closed data loop: scripted -> recorded -> learned -> deployed', '',
             f"{s['date']}, {s['machine']}. Settings per stage (`bench/closed_loop.py` "
             'options):', '']
    lines += [f'- {stage}: `{json.dumps(values)}`'
              for stage, values in (s['settings'] or {}).items()] + ['']
    if s['stage_wall_s']:
        stages = s['stage_wall_s']
        # Stages run one command each have no 'total'; their sum is the unattended run's time.
        total = '' if 'total' in stages else (
            f" (run stage by stage; sum {round(sum(stages.values()), 1)} s)")
        lines += ['Wall time per stage (s): ' + ', '.join(
            f'{k} {v}' for k, v in stages.items()) + total + '.', '']
    lines += ['## Data', '',
              f"Collection: {c['scenes']} scenes, {c['tasks_succeeded']}/{c['tasks_sent']} "
              f"tasks done by the scripted planner + expert ({c['interjections']} with an "
              f"interjection, {c['vqa_questions']} VQA questions) in {c['wall_s']} s wall; "
              f"bags {c['bag_mb']} MB.", '',
              f"Dataset (`lerobot-lang export --units lerobot --fps {FPS}`, episodes split at "
              f"task outcomes): {d['frames']} frames = {d['minutes']} min in {d['episodes']} "
              f"episodes, {d['mb']} MB, exported in {d['wall_s']} s.", '',
              '## Training (CPU)', '',
              '| model | data | steps | loss (start -> end, eval frames) | train s | wall s |',
              '|---|---|---|---|---|---|',
              f"| policy (`lang_chunk`, {tp['parameters']} parameters, images "
              f"{tp['image_shape']}{', keypoints' if tp.get('image_keypoints') else ''}, "
              f"shift {tp.get('shift_pixels', 0)} px) | {tp['frames']} frames, "
              f"{tp['episodes']} episodes | "
              f"{tp['steps']} x {tp['batch_size']} | {tp['loss_start']:.4f} -> "
              f"{tp['loss_end']:.4f} | {tp['train_s']} | {tp['command_wall_s']} |",
              f"| planner (tiny Idefics3, {tl.get('vision_size', 32)} px vision, cameras "
              f"{','.join(tl['image_cameras'])}) | "
              f"{sum(tl['examples'].values())} examples "
              f"{tl['examples']} from {tl['frames']} frames | {tl['steps']} | "
              f"{tl['loss_start']:.4f} -> {tl['loss_end']:.4f} | {tl['train_s']} | "
              f"{tl['command_wall_s']} |"]
    for p in s['training']['curve']:
        lines.append(f"| policy, first {p['episodes']} episodes | {p['frames']} frames | "
                     f"{p['steps']} x {p['batch_size']} | {p['loss_start']:.4f} -> "
                     f"{p['loss_end']:.4f} | {p['train_s']} | {p['command_wall_s']} |")
    if s.get('policy_heldout_loss'):
        lines += ['', 'Policy loss (the trainer\'s loss, eval mode) on frames of the held-out '
                  'scripted run, against its loss on training frames after training: '
                  + ', '.join(f'{k} {v:.4f}' for k, v in s['policy_heldout_loss'].items())
                  + '.']
    lines += ['', '## Deployed on held-out scenes', '',
              'Same held-out layouts and tasks for every configuration; success = the goal '
              "met in the simulator's ground truth within the time limit; times in sim s "
              'from the task to success.', '',
              '| planner + policy | success | median time (s) | chunks | subtask changes | '
              'latency (diagnostics) |', '|---|---|---|---|---|---|']
    for name, r in s['deploy'].items():
        lat = '; '.join(f"{k.split(':')[0]} {k.rsplit('/', 1)[-1].strip()} {v}"
                        for k, v in r['latency'].items() if 'p50' in k) or '-'
        lines.append(f"| {name.replace('+', ' + ').replace('_', ' ')} | {r['successes']}/"
                     f"{r['n']} ({_pct(r['success_rate'])}) | {r['median_sim_s']} | "
                     f"{r['chunks']} | {r['subtask_changes']} | {lat} |")
    a = s['planner_accuracy']
    if a:
        lines += ['', '## Learned planner against the scripted one, frame by frame', '',
                  f"On {a['frames_scored']} frames sampled from the exported held-out run of "
                  f"the scripted graph ({a['frames_in_dataset']} frames): subtask accuracy "
                  f"**{_pct(a['accuracy'])}**. At all {a['change_frames']} frames where the "
                  "scripted subtask changes (the answer must move on): "
                  f"**{_pct(a['accuracy_at_changes'])}**; at the frame before each "
                  f"(it must not yet): {_pct(a.get('accuracy_before_changes'))}. "
                  f"Generation latency p50 {a['latency_ms']['p50']} ms (max "
                  f"{a['latency_ms']['max']} ms) on this CPU.", '']
        if a['top_errors']:
            lines += ['Most frequent errors (scripted -> learned): ' + '; '.join(
                f'`{k}` x{v}' for k, v in a['top_errors'].items()) + '.']
        if a.get('top_errors_at_changes'):
            lines += ['', 'At the changes: ' + '; '.join(
                f'`{k}` x{v}' for k, v in a['top_errors_at_changes'].items()) + '.']
    lines += ['', '## Success against training episodes', '',
              ', '.join(f"{p['episodes']} episodes: {_pct(p['success_rate'])}"
                        for p in s['curve']) or 'no curve (no subsets trained)', '', figure,
              '', '## Targets', '']
    t = s['targets']
    lines += [f"- learned policy success / scripted expert success: "
              f"{t['learned_policy_success_over_scripted']} (target >= 0.8: "
              f"{'met' if t['policy_target_met'] else 'not met'})",
              f"- learned planner subtask accuracy: {_pct(t['planner_accuracy'])} (target >= "
              f"90 %: {'met' if t['planner_target_met'] else 'not met'})", '',
              'How this was produced and what each figure means: bench/README.md, '
              '"Closed data loop".']
    return '\n'.join(lines) + '\n'


# --- command line ----------------------------------------------------------------------------
STAGE_FUNCTIONS = {'collect': collect, 'export': export, 'train': train, 'deploy': deploy}
STAGE_SETTINGS = {
    'collect': ('scenes', 'interject_every', 'task_timeout', 'collect_seed'),
    'train': ('policy_steps', 'policy_batch', 'planner_steps', 'planner_examples',
              'planner_segment_frames', 'planner_change_frames', 'planner_prompts',
              'planner_vision', 'planner_cameras',
              'curve'),
    'deploy': ('eval_episodes', 'eval_timeout', 'curve_eval_episodes', 'planner_eval_frames',
               'planner_confirmations', 'configs', 'eval_seed'),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('stage', nargs='?', default='all', choices=('all', *STAGES))
    parser.add_argument('--work', type=Path, default=ROOT / 'outputs' / 'closed_loop',
                        help='work folder of every stage (default outputs/closed_loop)')
    parser.add_argument('--preset', choices=sorted(PRESETS), default='default',
                        help='default: the full run (< 2 h on 2 cores); ci: a few minutes')
    parser.add_argument('--report-dir', type=Path, default=REPORT_DIR)
    parser.add_argument('--name', default='closed_loop', help='report file stem')
    parser.add_argument('--score-only', action='store_true',
                        help='deploy: keep deploy.json\'s graph runs, only export the '
                             'held-out recording and score the learned models on it again')
    parser.add_argument('--analysis', type=Path, default=None,
                        help='report: markdown file appended as "What limits the learned '
                             'models" (a reading of this run written by hand)')
    parser.add_argument('--collect-seed', type=int, default=0,
                        help='sim_bridge seed while collecting (scene k: seed + 1000 k)')
    parser.add_argument('--eval-seed', type=int, default=500,
                        help='sim_bridge seed of the held-out scenes (must differ from the '
                             'collection seed modulo 1000)')
    for key, value in PRESETS['default'].items():
        parser.add_argument('--' + key.replace('_', '-'), type=type(value), default=None,
                            help=f'(default preset {value!r}, ci {PRESETS["ci"][key]!r})')
    args = parser.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault('HF_HUB_OFFLINE', '1')
    stages = STAGES if args.stage == 'all' else (args.stage,)
    timings_path = args.work / 'timings.json'
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    timings.setdefault('stages', {})
    if args.stage in ('all', 'collect'):
        timings = {'stages': {}}
    settings = timings.get('settings')
    if not isinstance(settings, dict) or not set(settings) <= set(STAGE_SETTINGS):
        settings = timings['settings'] = {}
    for stage in stages:  # the settings each stage ran with, for the report
        if stage in STAGE_SETTINGS and not (stage == 'deploy' and args.score_only):
            settings[stage] = {'preset': args.preset,
                               **{k: getattr(args, k) for k in STAGE_SETTINGS[stage]}}
    t_all = time.monotonic()
    with private_ros_domain() as domain:
        log(f'ROS_DOMAIN_ID {domain}, discovery {os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"]};'
            f' work folder {args.work}')
        for stage in stages:
            if stage == 'report':
                if args.stage == 'all':
                    timings['stages']['total'] = round(time.monotonic() - t_all, 1)
                write_json(timings_path, timings)
                report(args)
                continue
            t0 = time.monotonic()
            STAGE_FUNCTIONS[stage](args)
            key = 'score' if stage == 'deploy' and args.score_only else stage
            timings['stages'][key] = round(time.monotonic() - t0, 1)
            write_json(timings_path, timings)
    log(f'done in {time.monotonic() - t_all:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
