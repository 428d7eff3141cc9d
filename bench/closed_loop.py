"""The closed data loop on the simulated SO-101: collect, export, train, deploy, report.

Usage: .venv/bin/python bench/closed_loop.py [all|collect|export|train|deploy|dagger|report]
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
* dagger: ``--dagger-rounds`` DAgger rounds. Each: the current learned policy under the
  scripted planner with the virtual operator (virtual_operator:=true) and the recorder on
  ``--dagger-scenes`` fresh training layouts (``--dagger-seed``), exported (the
  ``intervention`` column), aggregated with all earlier data (LeRobot's aggregate_datasets),
  the policy trained again from scratch with the corrections weighted
  (``--dagger-intervention-weight``, ``--dagger-learner-weight``); the learned planner likewise
  under the scripted policy (``--dagger-planner-scenes``; 0: off), relabelled with the scripted
  planner's subtasks (``lerobot-lang annotate``) and retrained with ``--dagger-planner-change-
  frames``; then ``--dagger-configs`` evaluated on the deploy stage's held-out episodes
  without the operator. -> dagger/round_k/, dagger.json
* report: bench/reports/closed_loop.{md,json} and closed_loop.png (success against training
  episodes; matplotlib if installed, else the data only); with dagger.json a DAgger section
  and closed_loop_dagger.png.

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
STAGES = ('collect', 'export', 'train', 'deploy', 'dagger', 'report')
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
                    planner_confirmations=1, planner_prompts='config/prompts_joints.yaml',
                    planner_vision=64,
                    planner_cameras='front,wrist', eval_episodes=12,
                    eval_timeout=30.0, curve='0.25,0.5', curve_eval_episodes=12,
                    planner_eval_frames=400, configs=','.join(CONFIGS),
                    # Estimated 45 min per round on 2 cores (policy run 4 min, export 2,
                    # policy training 11-14 as the aggregate grows, planner run, relabelling
                    # and training 12, three held-out evaluations 15): two rounds after the
                    # 66 min of the stages before come to about 2.5 h.
                    dagger_rounds=2, dagger_scenes=4, dagger_tasks=0, dagger_timeout=30.0,
                    dagger_planner_scenes=3, dagger_intervention_weight=3.0,
                    dagger_learner_weight=0.0, dagger_planner_change_frames=4,
                    dagger_planner_confirmations=2,
                    dagger_configs=','.join(c for c in CONFIGS if c != BASELINE)),
    # CI: every stage connects, in a few minutes; the numbers mean nothing. The planner's
    # change frames and confirmations are on, so their code paths run end to end.
    'ci': dict(scenes=1, interject_every=1, task_timeout=25.0, policy_steps=30,
               policy_batch=8, planner_steps=20, planner_examples=48,
               planner_segment_frames=8, planner_change_frames=4,
               planner_confirmations=2, planner_prompts='config/prompts_joints.yaml',
               planner_vision=64,
               planner_cameras='front,wrist', eval_episodes=1,
               eval_timeout=10.0, curve='', curve_eval_episodes=0, planner_eval_frames=24,
               configs=f'{BASELINE},learned_planner+learned_policy',
               # One round of the policy's DAgger on one task (about 90 s); the planner's
               # (a minute of planner training more) is left to the manual and full runs.
               dagger_rounds=1, dagger_scenes=1, dagger_tasks=1, dagger_timeout=10.0,
               dagger_planner_scenes=0,
               dagger_intervention_weight=3.0, dagger_learner_weight=0.0,
               dagger_planner_change_frames=4, dagger_planner_confirmations=2,
               dagger_configs='scripted_planner+learned_policy'),
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
                 record_dir: Path | None = None,
                 launch: dict[str, str] | None = None) -> None:
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
        launch = {**(launch or {}),
                  **({'record': 'true', 'record_dir': str(record_dir)} if record_dir else {})}
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
        from lerobot_lang_nodes.training.evaluation import ExpertSubtasks, moves_on_latencies
        expert = ExpertSubtasks(task)
        # (sim s, the expert's subtask, the planner's): how soon the planner follows the
        # expert at each change (an interjection changes the goal: not measured then).
        timeline: list[tuple[float, str, str]] = []
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
            if not interjection and 'success_wall' not in done:
                timeline.append((elapsed, expert.update(gt), subtask))
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
                'subtasks': self.subtasks[subtasks0:],  # how far the arm got
                'moves_on_s': moves_on_latencies(timeline)}

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
        # Every node started, the virtual operator included (before the arm's executor).
        first = ('recorder', 'virtual_operator', 'policy', 'planner')
        names = [n for n in first if n in self.procs] + sorted(
            n for n in self.procs if n not in first and n != 'sim_bridge') + (
            ['sim_bridge'] if 'sim_bridge' in self.procs else [])
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
                 log_path: Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    if out.exists():
        shutil.rmtree(out)
    code, text, wall = run_cli(['lerobot_lang_nodes.cli.main', 'train-policy', str(dataset),
                                str(out), '--steps', str(args.policy_steps), '--batch-size',
                                str(args.policy_batch), '--log-every', '500', *extra],
                               log_path, 4 * 3600.0)
    if code != 0:
        raise SystemExit(f'train-policy failed ({code}): {text[-2000:]}')
    summary = json.loads((out / 'training_summary.json').read_text())
    keep = ('frames', 'episodes', 'steps', 'batch_size', 'chunk_size', 'parameters',
            'loss_start', 'loss_end', 'train_loss_first', 'train_loss_last', 'load_s',
            'train_s', 'wall_s', 'image_shape', 'image_keypoints', 'shift_pixels',
            'intervention_frames', 'intervention_weight', 'learner_weight',
            'sampled_share_intervention')
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
    report['planner'] = train_planner(dataset, models / 'planner', args,
                                      work / 'train_planner.log', args.planner_change_frames)

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


def train_planner(dataset: Path, out: Path, args: argparse.Namespace, log_path: Path,
                  change_frames: int) -> dict[str, Any]:
    if out.exists():
        shutil.rmtree(out)
    prompts = ['--prompts-file', str(ROOT / args.planner_prompts)] if args.planner_prompts \
        else []
    code, text, wall = run_cli(['lerobot_lang_nodes.cli.main', 'train-planner', str(dataset),
                                str(out), '--steps', str(args.planner_steps), '--max-examples',
                                str(args.planner_examples), '--frames-per-segment',
                                str(args.planner_segment_frames), '--change-frames',
                                str(change_frames), '--vision-size',
                                str(args.planner_vision), '--cameras', args.planner_cameras,
                                *prompts],
                               log_path, 4 * 3600.0)
    if code != 0:
        raise SystemExit(f'train-planner failed ({code}): {text[-2000:]}')
    summary = json.loads((out / 'training_summary.json').read_text())
    log(f"planner: loss {summary['loss_start']:.4f} -> {summary['loss_end']:.4f}, "
        f"{summary['exact_matches']}/{summary['checked']} exact, in {wall} s")
    return {**{k: summary.get(k) for k in (
        'frames', 'frames_used', 'episodes', 'examples', 'subtask_examples_moving_on',
        'subtasks', 'steps', 'vision_size', 'loss_start',
        'loss_end', 'checked', 'exact_matches', 'load_s', 'train_s', 'wall_s')},
        'planner_parameters': summary['planner_parameters'], 'command_wall_s': wall,
        'path': str(out.relative_to(args.work))}


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
                ('planner', 'transformers.image_cameras',
                 list(p['transformers.image_cameras'])),
                ('planner', 'transformers.image_size', int(p['transformers.image_size'])),
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
               record_dir: Path | None = None, folder: Path | None = None) -> dict[str, Any]:
    folder = folder or args.work / 'deploy' / name
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
            'moves_on': moves_on_summary([x for e in episodes for x in e['moves_on_s']]),
            'startup_wall_s': round(startup, 1), 'wall_s': round(time.monotonic() - t0, 1),
            'exit_codes': codes}


def moves_on_summary(latencies: list[float | None]) -> dict[str, Any]:
    """At the expert's subtask changes: how soon the planner followed (training/evaluation.py
    moves_on_latencies)."""
    from lerobot_lang_nodes.training.evaluation import moves_on_share
    followed = sorted(x for x in latencies if x is not None)
    return {'changes': len(latencies), 'within_0_5_s': moves_on_share(latencies, 0.5),
            'followed': len(followed),
            'median_s': round(statistics.median(followed), 2) if followed else None}


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


# --- dagger ----------------------------------------------------------------------------------
# DAgger rounds (issue 33): the learned models act on fresh training layouts while the virtual
# operator (the scripted expert, through /takeover and the leader arm) corrects them; the
# corrections join the data and the models are trained again, then evaluated on the held-out
# episodes of the deploy stage without the operator.
#
# Aggregation: LeRobot's own aggregate_datasets (lerobot.datasets.aggregate), offline, with
# concatenate_videos=False: the plain dataset and every round's dataset are merged into one
# LeRobot dataset per round (the videos copied file by file, no re-encode; the statistics
# merged by LeRobot), so the trainers read one dataset as before.
#
# Retraining: from scratch on the aggregate each round, not fine-tuned from the last
# checkpoint. The normalisation statistics are recomputed over the aggregate (the corrections
# reach states and actions the demonstrations did not), which a fine-tuned checkpoint would
# keep stale; and on this machine decoding the frames, not the steps, is most of a training
# run, so fine-tuning would save little. It is also DAgger's own recipe (train on the
# aggregate).
#
# Weighting (train-policy --intervention-weight / --learner-weight, training/policy.py): the
# corrections are sampled --dagger-intervention-weight (3) times as often as a plain frame: a
# round adds a few hundred corrected frames to thousands of demonstrations, so at weight 1 the
# states the policy reaches by itself would stay about a tenth of the steps; 3 brings them to
# about a quarter without letting a few corrected episodes dominate. The learned policy's own
# frames in a corrected episode get --dagger-learner-weight (0, as HG-DAgger): their actions
# are the drift the operator took over from (stall_s of no progress before each takeover).
#
# The planner's DAgger data is weighted to the subtask changes: --dagger-planner-change-frames
# (4) examples from the first frames after each change with the old subtask still quoted
# (train-planner --change-frames). The report's side experiment found such examples raise the
# planner's moves at the changes (30 -> 57.5 %) but also move it on too early at the frame
# before; so the retrained planner is deployed with --dagger-planner-confirmations (2): a new
# subtask must be the answer of two looks in a row, which filters one early answer for the
# cost of one look.
DAGGER_POLICY_CONFIG = 'scripted_planner+learned_policy'


def dagger_seed(args: argparse.Namespace, r: int, planner: bool) -> int:
    """sim_bridge seed of round r's policy (planner) deployment; scene k: seed + 1000 k."""
    return args.dagger_seed + 2 * (r - 1) + (1 if planner else 0)


def intervention_counts(dataset: Path) -> dict[str, Any]:
    """Frames, frames under intervention and episodes holding one, from the parquet files."""
    import pyarrow.parquet as pq
    frames = under = 0
    corrected: set[int] = set()
    for path in sorted((dataset / 'data').rglob('*.parquet')):
        table = pq.read_table(path, columns=['intervention', 'episode_index']).to_pydict()
        for flag, episode in zip(table['intervention'], table['episode_index']):
            flag = bool(flag[0] if isinstance(flag, list) else flag)
            frames += 1
            under += flag
            if flag:
                corrected.add(int(episode))
    return {'frames': frames, 'intervention_frames': under,
            'intervention_share': round(under / frames, 4) if frames else None,
            'corrected_episodes': len(corrected)}


def aggregate(roots: list[Path], out: Path) -> dict[str, Any]:
    """LeRobot's aggregate_datasets over ``roots`` into ``out`` (see the comment above)."""
    from lerobot.datasets.aggregate import aggregate_datasets

    from lerobot_lang_nodes.recording.scheduling import scheduling_kept
    if out.exists():
        shutil.rmtree(out)
    t0 = time.monotonic()
    with scheduling_kept():
        aggregate_datasets([REPO_ID] * len(roots), REPO_ID, roots=roots, aggr_root=out,
                           concatenate_videos=False)
    info = json.loads((out / 'meta/info.json').read_text())
    return {'sources': [str(r) for r in roots],
            'frames': info['total_frames'], 'episodes': info['total_episodes'],
            'wall_s': round(time.monotonic() - t0, 1)}


def dagger_deploy(args: argparse.Namespace, folder: Path, seed: int,
                  overrides: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """The learned model(s) with the virtual operator and the recorder on ``--dagger-scenes``
    training layouts (each scene's cubes into the bowl, as in collection)."""
    if folder.exists():
        shutil.rmtree(folder)
    t0 = time.monotonic()
    session = SimSession(folder / 'logs', [('sim_bridge', 'seed', seed), *overrides],
                         record_dir=folder / 'bags', launch={'virtual_operator': 'true'})
    scenes, operator = [], {}
    try:
        for k in range(1, args.dagger_scenes + 1):
            scene_seed = seed + 1000 * k
            session.reset_to(scene_seed)
            results = []
            steps = scene_plan(k, scene_seed, False)
            for step in steps[:args.dagger_tasks or len(steps)]:
                result = session.run_task(step['task'], args.dagger_timeout)
                results.append(result)
                log(f"  dagger scene {k}/{args.dagger_scenes} (seed {scene_seed}): "
                    f"{result['task']!r}: "
                    f"{'ok ' + str(result['sim_s']) + ' s' if result['success'] else 'FAILED'}")
                if not result['success']:
                    break
            scenes.append({'k': k, 'seed': scene_seed, 'tasks': results})
        # The operator's counts since it started (its /diagnostics, cumulative).
        wait_until(lambda: 'virtual_operator: virtual operator' in session.diagnostics, 10.0,
                   'the virtual operator on /diagnostics', session.plist)
        operator = dict(session.diagnostics['virtual_operator: virtual operator'])
    finally:
        codes = session.close()
    tasks = [t for s in scenes for t in s['tasks']]
    reasons = ('stall', 'deviation', 'drop')
    return {'seed': seed, 'scenes': scenes, 'tasks_sent': len(tasks),
            'tasks_succeeded': sum(t['success'] for t in tasks),
            'takeovers': int(operator.get('takeovers', 0)),
            'takeovers_by_reason': {r: int(operator.get(f'takeovers_{r}', 0)) for r in reasons},
            'handbacks': int(operator.get('handbacks', 0)),
            'intervention_s': float(operator.get('intervention_s', 0.0)),
            'wall_s': round(time.monotonic() - t0, 1), 'exit_codes': codes}


def dagger(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    trained = read_json(work / 'train.json')
    read_json(work / 'export.json')
    collected = read_json(work / 'collect.json')
    plan = eval_plan(args.eval_seed, args.eval_episodes)
    reserved = {s['seed'] for s in collected['scenes']} | {seed for seed, _ in plan}
    used = {dagger_seed(args, r, p) + 1000 * k for r in range(1, args.dagger_rounds + 1)
            for p in (False, True) for k in range(1, args.dagger_scenes + 1)}
    if used & reserved:
        raise SystemExit(f'DAgger layouts {sorted(used & reserved)} are collection or held-out '
                         'layouts: choose another --dagger-seed')
    names = [n for n in args.dagger_configs.split(',') if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f'unknown --dagger-configs {unknown}; known: {list(CONFIGS)}')
    root = work / 'dagger'
    root.mkdir(parents=True, exist_ok=True)
    policy_sets, planner_sets = [work / 'dataset'], [work / 'dataset']
    current = {'policy': trained['policy'], 'planner': trained['planner']}
    rounds: list[dict[str, Any]] = []
    weights = ('--intervention-weight', str(args.dagger_intervention_weight),
               '--learner-weight', str(args.dagger_learner_weight))
    for r in range(1, args.dagger_rounds + 1):
        rd = root / f'round_{r}'
        if rd.exists():  # a round run again starts from nothing
            shutil.rmtree(rd)
        rd.mkdir(parents=True)
        entry: dict[str, Any] = {'round': r}
        # (a) the current policy under the scripted planner, the operator correcting it.
        log(f'DAgger round {r}: the learned policy with the virtual operator on '
            f'{args.dagger_scenes} training layouts')
        entry['policy_deploy'] = dagger_deploy(
            args, rd / 'policy_run', dagger_seed(args, r, False),
            config_overrides(DAGGER_POLICY_CONFIG, work, current))
        # (b) export; (c) aggregate with everything before; (d) retrain from scratch.
        entry['policy_dataset'] = export_bags(rd / 'policy_run' / 'bags', rd / 'policy_dataset',
                                              rd / 'export_policy.log', 3600.0)
        entry['policy_dataset'].update(intervention_counts(rd / 'policy_dataset'))
        policy_sets.append(rd / 'policy_dataset')
        entry['policy_aggregate'] = aggregate(policy_sets, rd / 'policy_aggregate')
        log(f"  round {r}: {entry['policy_dataset']['intervention_frames']} of "
            f"{entry['policy_dataset']['frames']} frames under the operator; aggregate "
            f"{entry['policy_aggregate']['frames']} frames; retraining the policy")
        current['policy'] = train_policy(rd / 'policy_aggregate', rd / 'policy', args,
                                         rd / 'train_policy.log', weights)
        entry['policy_training'] = current['policy']
        # Planner DAgger: the learned planner under the scripted policy, the operator moving
        # the arm on where the planner is stuck (so the recording reaches the later states);
        # the frames relabelled offline with the scripted planner's subtasks over the recorded
        # ground truth (lerobot-lang annotate), the planner retrained on its own states.
        if args.dagger_planner_scenes > 0:
            entry.update(dagger_planner_round(args, rd, r, current, planner_sets))
        # (e) the held-out episodes of the deploy stage, without the operator.
        entry['eval'] = {}
        for name in names:
            if CONFIGS[name][0] and args.dagger_planner_scenes <= 0:
                continue  # the planner is not retrained: the deploy stage's figure stands
            log(f'  round {r}: deploy {name} on {len(plan)} held-out episodes')
            result = deploy_one(args, name, config_overrides(
                name, work, current, confirmations=args.dagger_planner_confirmations), plan,
                folder=rd / 'eval' / name)
            entry['eval'][name] = {k: result[k] for k in (
                'n', 'successes', 'success_rate', 'median_sim_s', 'chunks', 'subtask_changes',
                'distinct_subtasks', 'moves_on', 'diagnostics', 'exit_codes', 'wall_s',
                'overrides')}
            entry['eval'][name]['seeds'] = [e['seed'] for e in result['episodes']]
            log(f"  round {r}: {name} {result['successes']}/{result['n']}")
        rounds.append(entry)
        write_json(work / 'dagger.json', {'rounds': rounds, 'eval_seed': args.eval_seed})
    report = {'rounds': rounds, 'eval_seed': args.eval_seed,
              'policy_weights': {'intervention': args.dagger_intervention_weight,
                                 'learner': args.dagger_learner_weight},
              'retraining': 'from scratch on the aggregate, every round'}
    write_json(work / 'dagger.json', report)
    return report


def dagger_planner_round(args: argparse.Namespace, rd: Path, r: int,
                         current: dict[str, Any], planner_sets: list[Path]) -> dict[str, Any]:
    work = args.work
    log(f'DAgger round {r}: the learned planner with the scripted policy and the virtual '
        f'operator on {args.dagger_planner_scenes} training layouts')
    scenes = args.dagger_scenes
    args.dagger_scenes = args.dagger_planner_scenes
    try:
        deployed = dagger_deploy(args, rd / 'planner_run', dagger_seed(args, r, True),
                                 config_overrides('learned_planner+scripted_policy', work,
                                                  current,
                                                  confirmations=args.dagger_planner_confirmations))
    finally:
        args.dagger_scenes = scenes
    out = rd / 'planner_dataset'
    if out.exists():
        shutil.rmtree(out)
    bags = sorted(str(p) for p in (rd / 'planner_run' / 'bags').iterdir() if p.is_dir())
    # Episodes at task changes: the learned planner may never report an outcome.
    code, text, wall = run_cli(['lerobot_lang_nodes.cli.main', 'annotate', *bags, str(out),
                                '--units', 'lerobot', '--fps', str(FPS), '--repo-id', REPO_ID,
                                '--episodes-by', 'task', '--planner-backend', 'scripted',
                                '--no-progress'], rd / 'annotate_planner.log', 3600.0)
    if code != 0:
        raise SystemExit(f'annotate failed ({code}): {text[-2000:]}')
    info = json.loads((out / 'meta/info.json').read_text())
    planner_sets.append(out)
    aggregated = aggregate(planner_sets, rd / 'planner_aggregate')
    log(f"  round {r}: {info['total_frames']} relabelled frames; aggregate "
        f"{aggregated['frames']} frames; retraining the planner")
    current['planner'] = train_planner(rd / 'planner_aggregate', rd / 'planner', args,
                                       rd / 'train_planner.log',
                                       args.dagger_planner_change_frames)
    return {'planner_deploy': deployed,
            'planner_dataset': {'frames': info['total_frames'],
                                'episodes': info['total_episodes'], 'annotate_wall_s': wall},
            'planner_aggregate': aggregated, 'planner_training': current['planner']}


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


def dagger_summary(dagger_data: dict[str, Any], deployed: dict[str, Any],
                   trained: dict[str, Any], exported: dict[str, Any]) -> dict[str, Any]:
    """Per round (round 0: the deploy stage's models, trained on the demonstrations only):
    success of each configuration against the expert's, what the round recorded, the
    operator's takeovers, and how soon the learned planner followed the expert's changes."""
    configs = deployed['configs']
    base = (configs.get(BASELINE) or {}).get('success_rate')

    def row(results: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, c in results.items():
            if name == BASELINE:
                continue
            rate = c.get('success_rate')
            out[name] = {'successes': c.get('successes'), 'n': c.get('n'),
                         'success_rate': rate,
                         'over_expert': round(rate / base, 3) if base and rate is not None
                         else None}
            if CONFIGS.get(name, (False,))[0]:
                out[name]['moves_on'] = c.get('moves_on')
        return out

    rounds = [{'round': 0, 'policy_frames': trained['policy']['frames'],
               'planner_frames': trained['planner'].get('frames'),
               'recorded_frames': exported['frames'], 'eval': row(configs)}]
    policy_frames, planner_frames = trained['policy']['frames'], trained['planner'].get('frames')
    for r in dagger_data.get('rounds', []):
        d, ds = r['policy_deploy'], r['policy_dataset']
        policy_frames = r['policy_aggregate']['frames']
        if 'planner_aggregate' in r:
            planner_frames = r['planner_aggregate']['frames']
        evals = dict(rounds[-1]['eval'])  # a configuration not rerun keeps its last figure
        evals.update(row(r['eval']))
        rounds.append({
            'round': r['round'], 'policy_frames': policy_frames,
            'planner_frames': planner_frames,
            'recorded_frames': ds['frames'] + (r.get('planner_dataset') or {}).get('frames', 0),
            'policy_run': {'tasks': f"{d['tasks_succeeded']}/{d['tasks_sent']}",
                           'frames': ds['frames'],
                           'intervention_frames': ds['intervention_frames'],
                           'intervention_share': ds['intervention_share'],
                           'takeovers': d['takeovers'],
                           'takeovers_by_reason': d['takeovers_by_reason'],
                           'intervention_s': d['intervention_s']},
            'planner_run': ({'tasks': f"{r['planner_deploy']['tasks_succeeded']}/"
                                      f"{r['planner_deploy']['tasks_sent']}",
                             'frames': r['planner_dataset']['frames'],
                             'takeovers': r['planner_deploy']['takeovers'],
                             'takeovers_by_reason': r['planner_deploy']['takeovers_by_reason']}
                            if 'planner_deploy' in r else None),
            'policy_training_wall_s': r['policy_training']['command_wall_s'],
            'sampled_share_intervention': r['policy_training'].get('sampled_share_intervention'),
            'eval': evals, 'rerun': sorted(r['eval'])})
    last = rounds[-1]['eval']

    def ratio(name: str) -> float | None:
        return (last.get(name) or {}).get('over_expert')

    moves = ((last.get('learned_planner+scripted_policy') or {}).get('moves_on') or {})
    targets = {
        'learned_policy_over_expert': ratio('scripted_planner+learned_policy'),
        'learned_planner_over_expert': ratio('learned_planner+scripted_policy'),
        'both_learned_over_expert': ratio('learned_planner+learned_policy'),
        'planner_moves_on_within_0_5_s': moves.get('within_0_5_s')}
    targets.update(
        policy_target_met=(targets['learned_policy_over_expert'] or 0) >= 0.8,
        planner_target_met=(targets['learned_planner_over_expert'] or 0) >= 0.8,
        moves_on_target_met=(targets['planner_moves_on_within_0_5_s'] or 0) >= 0.8)
    return {'expert_success_rate': base, 'rounds': rounds, 'targets': targets,
            'weights': dagger_data.get('policy_weights'),
            'retraining': dagger_data.get('retraining')}


def plot_dagger(dg: dict[str, Any], plain: list[tuple[int, float]], path: Path) -> str:
    """Success against rounds, and against the policy's training frames beside the curve of
    plain demonstrations (subsets of the collection)."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return 'matplotlib is not installed in .venv: the DAgger figures are in the JSON only'
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5), dpi=120)
    rounds = dg['rounds']
    for name in CONFIGS:
        pts = [(r['round'], r['eval'][name]['success_rate']) for r in rounds
               if (r['eval'].get(name) or {}).get('success_rate') is not None]
        if pts:
            xs, ys = zip(*pts)
            left.plot(xs, [100 * y for y in ys], 'o-', label=name.replace('_', ' ')
                      .replace('+', ' + '))
    share = [(r['round'], r['policy_run']['intervention_share']) for r in rounds[1:]
             if r['policy_run']['intervention_share'] is not None]
    if share:
        xs, ys = zip(*share)
        left.plot(xs, [100 * y for y in ys], 'x:', color='grey',
                  label='frames under the operator (policy runs)')
    pts = [(r['policy_frames'], r['eval'][DAGGER_POLICY_CONFIG]['success_rate'])
           for r in rounds
           if (r['eval'].get(DAGGER_POLICY_CONFIG) or {}).get('success_rate') is not None]
    if pts:
        xs, ys = zip(*pts)
        right.plot(xs, [100 * y for y in ys], 'o-', label='DAgger rounds')
    if plain:
        xs, ys = zip(*sorted(plain))
        right.plot(xs, [100 * y for y in ys], 's--', label='plain demonstrations')
    for ax, xlabel in ((left, 'DAgger round (0: demonstrations only)'),
                       (right, 'policy training frames')):
        if dg['expert_success_rate'] is not None:
            ax.axhline(100 * dg['expert_success_rate'], color='grey', ls='--', lw=0.8,
                       label='scripted expert')
        ax.set_xlabel(xlabel)
        ax.set_ylim(-5, 105)
        ax.grid(alpha=0.3)
        ax.legend(loc='best', fontsize=6)
    left.set_ylabel('held-out success; frames under the operator (%)', fontsize=8)
    left.set_xticks([r['round'] for r in rounds])
    right.set_ylabel('held-out success (%)', fontsize=8)
    right.set_title('scripted planner + learned policy', fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f'![DAgger: success against rounds and training frames]({path.name})'


def dagger_markdown(dg: dict[str, Any], figure: str) -> list[str]:
    w = dg.get('weights') or {}
    lines = ['', '## DAgger rounds', '',
             'Each round the current learned policy runs under the scripted planner on fresh '
             'training layouts with the virtual operator taking over when it strays, recorded '
             'and exported (`intervention` column); the round\'s data joins the earlier data '
             '(LeRobot\'s `aggregate_datasets`) and the policy is trained again '
             f"({dg.get('retraining')}; corrections sampled x{w.get('intervention')}, the "
             f"learner's own frames of a corrected episode x{w.get('learner')}). The learned "
             'planner runs likewise under the scripted policy, its frames relabelled with the '
             "scripted planner's subtasks (`lerobot-lang annotate`). Every model is then "
             'evaluated on the held-out episodes of the deploy stage without the operator. '
             'Round 0 is the deploy stage.', '',
             '| round | policy frames | planner frames | recorded | under the operator | '
             'takeovers (stall / deviation / drop) | learned policy | learned planner | '
             'both learned | planner follows <= 0.5 s |', '|' + '---|' * 10]
    for r in dg['rounds']:
        pr = r.get('policy_run') or {}
        by = pr.get('takeovers_by_reason') or {}
        cells = []
        for name in ('scripted_planner+learned_policy', 'learned_planner+scripted_policy',
                     'learned_planner+learned_policy'):
            c = r['eval'].get(name)
            kept = r['round'] > 0 and name not in r.get('rerun', [])
            cells.append('-' if not c else f"{c['successes']}/{c['n']} "
                         f"({c['over_expert'] if c['over_expert'] is not None else '-'} of "
                         f"the expert){' *' if kept else ''}")
        moves = (r['eval'].get('learned_planner+scripted_policy') or {}).get('moves_on') or {}
        lines.append(
            f"| {r['round']} | {r['policy_frames']} | {r['planner_frames']} | "
            f"{r['recorded_frames']} | "
            f"{_pct(pr.get('intervention_share')) if pr else '-'} | "
            + (f"{pr['takeovers']} ({by.get('stall', 0)} / {by.get('deviation', 0)} / "
               f"{by.get('drop', 0)})" if pr else '-')
            + f" | {' | '.join(cells)} | "
            + (f"{_pct(moves.get('within_0_5_s'))} of {moves['changes']} changes"
               if moves.get('changes') else '-') + ' |')
    lines += ['', '\\* not rerun this round (its models did not change): the last figure.', '',
              'Recorded = frames the round added (policy and planner runs; round 0: the '
              'demonstrations). Planner follows = at each change of the expert\'s subtask '
              '(the scripted plan advanced on the ground truth) in the held-out run of the '
              'learned planner with the scripted policy, the share where the learned '
              'planner\'s subtask was the new one within 0.5 sim s.', '', figure, '',
              '### DAgger targets', '']
    t = dg['targets']
    for key, met, label in (
            ('learned_policy_over_expert', 'policy_target_met',
             'learned policy (scripted planner) success / expert'),
            ('learned_planner_over_expert', 'planner_target_met',
             'learned planner (scripted policy) success / expert'),
            ('planner_moves_on_within_0_5_s', 'moves_on_target_met',
             'learned planner follows the expert\'s changes within 0.5 s')):
        lines.append(f"- {label}: {t[key]} (target >= 0.8: "
                     f"{'met' if t[met] else 'not met'})")
    lines.append(f"- both learned, success / expert: {t['both_learned_over_expert']} "
                 '(reported, no target)')
    return lines


def report(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work
    data = {name: read_json(work / f'{name}.json')
            for name in ('collect', 'export', 'train', 'deploy')}
    timings = read_json(work / 'timings.json') if (work / 'timings.json').is_file() else {}
    dagger_data = (read_json(work / 'dagger.json') if (work / 'dagger.json').is_file()
                   else None)
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
            'image_cameras':
                trained['planner']['planner_parameters']['transformers.image_cameras']},
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
    if dagger_data:
        summary['dagger'] = dagger_summary(dagger_data, deployed, trained, exported)
    # No path of this machine in the reports: the work folder and the checkout become names.
    blob = json.dumps({'summary': summary, **data, 'timings': timings,
                       **({'dagger': dagger_data} if dagger_data else {})}, indent=2)
    blob = blob.replace(str(args.work), '<work>').replace(str(ROOT), '<repo>')
    (args.report_dir / f'{args.name}.json').write_text(blob + '\n')
    text = markdown(summary, figure)
    if dagger_data:
        plain = [(int(p['frames']), r['success_rate'])
                 for p, r in zip(trained.get('curve', []), deployed.get('curve', []))
                 if r.get('success_rate') is not None]
        if learned and learned.get('success_rate') is not None:
            plain.append((int(trained['policy']['frames']), learned['success_rate']))
        dfig = plot_dagger(summary['dagger'], plain,
                           args.report_dir / f'{args.name}_dagger.png')
        text += '\n'.join(dagger_markdown(summary['dagger'], dfig)) + '\n'
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
STAGE_FUNCTIONS = {'collect': collect, 'export': export, 'train': train, 'deploy': deploy,
                   'dagger': dagger}
STAGE_SETTINGS = {
    'collect': ('scenes', 'interject_every', 'task_timeout', 'collect_seed'),
    'train': ('policy_steps', 'policy_batch', 'planner_steps', 'planner_examples',
              'planner_segment_frames', 'planner_change_frames', 'planner_prompts',
              'planner_vision', 'planner_cameras',
              'curve'),
    'deploy': ('eval_episodes', 'eval_timeout', 'curve_eval_episodes', 'planner_eval_frames',
               'planner_confirmations', 'configs', 'eval_seed'),
    'dagger': ('dagger_rounds', 'dagger_scenes', 'dagger_tasks', 'dagger_timeout',
               'dagger_planner_scenes',
               'dagger_intervention_weight', 'dagger_learner_weight',
               'dagger_planner_change_frames', 'dagger_planner_confirmations',
               'dagger_configs', 'dagger_seed',
               'eval_episodes', 'eval_timeout'),
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
    parser.add_argument('--dagger-seed', type=int, default=250,
                        help='sim_bridge seed of DAgger round r\'s training layouts: policy '
                             'runs seed + 2 (r - 1), planner runs one more (scene k: + 1000 k; '
                             'refused where they meet collection or held-out layouts)')
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
        # New data: an earlier run's DAgger rounds must not reach this run's report.
        (args.work / 'dagger.json').unlink(missing_ok=True)
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
