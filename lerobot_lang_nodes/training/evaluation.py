"""Evaluating what the closed data loop learns, without ROS: the scenes and tasks of
collection and of the held-out evaluation, the learned planner scored frame by frame against
the scripted one, and the learned policy's loss on held-out frames.

`bench/closed_loop.py` (and `bench/policy_rollout.py`) drive the graph and call these; they
read only exported datasets and checkpoints. Heavy imports (torch, LeRobot) stay inside the
functions that need them.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

COLOURS = ('red', 'green', 'blue')
REPO_ID = 'local/closed_loop'


def scene_plan(k: int, seed: int, interject: bool) -> list[dict[str, str]]:
    """The tasks of collection scene k (layout ``seed``): each cube into the bowl in a random
    order; odd scenes first pick the first cube up; ``interject`` redirects the first task."""
    rng = random.Random(seed)
    order = list(COLOURS)
    rng.shuffle(order)
    steps: list[dict[str, str]] = []
    if k % 2 == 1 and not interject:
        steps.append({'task': f'pick up the {order[0]} cube'})
    if interject:
        first, other = order[0], order[1]
        steps.append({'task': f'put the {first} cube in the bowl',
                      'interjection': f'use the {other} cube instead',
                      'interjected_goal': f'put the {other} cube in the bowl',
                      'vqa': 'what is in the gripper?'})
        # The interrupted task's text again would be taken as no change by the planner
        # (its plan stays the interjection's): the third cube first, a new text.
        rest = [order[2], first]
    else:
        rest = order
    steps += [{'task': f'put the {c} cube in the bowl'} for c in rest]
    return steps


def eval_plan(eval_seed: int, n: int) -> list[tuple[int, str]]:
    """(layout seed, task) of held-out episode k = 1..n: every third a pick, the rest a place;
    the graph's sim_bridge seed is ``eval_seed``, so reset k has seed eval_seed + 1000 k."""
    out = []
    for k in range(1, n + 1):
        seed = eval_seed + 1000 * k
        colour = COLOURS[random.Random(seed).randrange(3)]
        task = (f'pick up the {colour} cube' if k % 3 == 0
                else f'put the {colour} cube in the bowl')
        out.append((seed, task))
    return out


def score_planner(model_dir: Path, params: dict[str, Any], dataset: Path, max_frames: int,
                  repo_id: str = REPO_ID, calibration: str = '') -> dict[str, Any]:
    """The learned planner's subtask at frames of a held-out dataset against the scripted
    planner's subtask active at that frame (the `transformers` backend itself, on the prompts
    the planner node sends: training/planner.py's subtask turn).

    Three sets of frames: up to ``max_frames`` spread over the dataset (the frame-by-frame
    accuracy); every frame where the scripted subtask changes (the answer must move on); and
    the frame before each of those (the answer must stay: the old subtask is not done yet).
    Sampled frames are mostly stretches of one subtask, so the last two say what the first
    hides: whether the planner moves on when it should, and not before. Prompts that quote
    ``{joints}`` get each frame's state as the trainer renders it (``calibration``: the
    export's, for a --units lerobot dataset).
    """
    from types import SimpleNamespace

    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from lerobot_lang_nodes.backends.planners.transformers_planner import (TransformersConfig,
                                                                        TransformersPlanner)
    from lerobot_lang_nodes.core import prompts
    from lerobot_lang_nodes.training.data import IMAGE_PREFIX, check_dataset
    from lerobot_lang_nodes.training.planner import frames_of, subtask_candidates

    templates = prompts.load_templates(Path(params['prompts_file']), None)
    ds = LeRobotDataset(repo_id, root=dataset, video_backend='pyav')
    frames = frames_of(ds, check_dataset(dataset, need_cameras=False), templates, calibration)
    # Every frame with a task and an active subtask (one segment per frame).
    every = subtask_candidates(frames, templates, frames_per_segment=10**9)
    sampled = every
    if len(every) > max_frames:
        step = (len(every) - 1) / (max_frames - 1)
        sampled = [every[round(i * step)] for i in range(max_frames)]
    episode = {f.index: f.episode for f in frames}
    changes = [k for k, c in enumerate(every) if c.moves_on]
    before = [every[k - 1] for k in changes
              if k > 0 and every[k - 1].frame == every[k].frame - 1
              and episode[every[k - 1].frame] == episode[every[k].frame]]
    cameras = tuple(params['transformers.image_cameras'])
    planner = TransformersPlanner(SimpleNamespace(
        model_path=str(model_dir), device='cpu', dtype='float32', max_new_tokens=48,
        system_prompt='', prompts_file=params['prompts_file'], min_new_tokens=0,
        temperature=0.0, top_p=1.0,
        transformers=TransformersConfig(model_kind='vlm', image_cameras=cameras,
                                        image_size=int(params['transformers.image_size']),
                                        generation_timeout_s=0.0)))
    answers: dict[tuple[int, str], str] = {}
    latencies = []

    def answer(cand: Any) -> dict[str, Any]:
        key = (cand.frame, json.dumps(cand.messages, sort_keys=True))
        if key not in answers:
            item = ds[cand.frame]
            images = {c: (item[IMAGE_PREFIX + c].clamp(0, 1) * 255).round().to(torch.uint8)
                      .permute(1, 2, 0).contiguous().numpy() for c in cameras}
            t0 = time.monotonic()
            answers[key] = planner.generate('subtask', cand.messages, {'images': images})
            latencies.append(time.monotonic() - t0)
        predicted = answers[key]
        return {'frame': cand.frame, 'episode': episode[cand.frame], 'label': cand.target,
                'predicted': predicted, 'right': predicted == cand.target,
                'change': cand.moves_on}

    try:
        rows = [answer(c) for c in sampled]
        at_changes = [answer(every[k]) for k in changes]
        before_changes = [answer(c) for c in before]
    finally:
        planner.close()

    def rate(group: list[dict[str, Any]]) -> float | None:
        return round(sum(r['right'] for r in group) / len(group), 4) if group else None

    def top_errors(group: list[dict[str, Any]]) -> dict[str, int]:
        wrong: dict[str, int] = {}
        for r in group:
            if not r['right']:
                key = f"{r['label']} -> {r['predicted']}"
                wrong[key] = wrong.get(key, 0) + 1
        return dict(sorted(wrong.items(), key=lambda kv: -kv[1])[:8])

    return {'frames_scored': len(rows), 'frames_in_dataset': len(frames),
            'accuracy': rate(rows),
            'change_frames': len(at_changes), 'accuracy_at_changes': rate(at_changes),
            'before_change_frames': len(before_changes),
            'accuracy_before_changes': rate(before_changes),
            'latency_ms': {'p50': round(1000 * statistics.median(latencies), 1),
                           'max': round(1000 * max(latencies), 1)} if latencies else None,
            'top_errors': top_errors(rows), 'top_errors_at_changes': top_errors(at_changes)}


def policy_heldout_loss(model_dir: Path, dataset: Path, max_frames: int = 256,
                        repo_id: str = REPO_ID) -> float:
    """The trained policy's loss on frames of the held-out dataset, computed as the trainer
    computes its loss_start / loss_end on training frames (eval mode, the checkpoint's own
    normalisation): the gap between the two says whether more data or more training helps."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    from lerobot_lang_nodes.backends.policies.lerobot_policy import register_project_policy_type
    from lerobot_lang_nodes.training.policy import FrameCache

    register_project_policy_type(model_dir)
    config = PreTrainedConfig.from_pretrained(model_dir)
    config.device = 'cpu'
    policy = get_policy_class(config.type).from_pretrained(model_dir, config=config).eval()
    pre, _ = make_pre_post_processors(config, pretrained_path=str(model_dir))
    meta = LeRobotDatasetMetadata(repo_id, root=dataset)
    ds = LeRobotDataset(repo_id, root=dataset, video_backend='pyav',
                        delta_timestamps=resolve_delta_timestamps(config, meta))
    cache = FrameCache(ds, config, 'subtask')
    n = len(cache)
    index = torch.linspace(0, n - 1, min(n, max_frames)).round().long().unique()
    with torch.no_grad():
        loss, _ = policy.forward(pre(cache.batch(index)))
    return round(float(loss), 4)


class ExpertSubtasks:
    """The expert's subtask of ``task`` as the world changes: the scripted planner's plan,
    advanced (or sent back on a drop) from the simulator's ground truth, as the virtual
    operator follows it. ``update(gt)`` returns the subtask text, '' once the task is done."""

    def __init__(self, task: str) -> None:
        from lerobot_lang_nodes.sim.tasks import decompose, parse_task
        spec = parse_task(task)
        self.steps = decompose(spec) if spec else []
        self.index: int | None = None

    def update(self, gt: dict[str, Any]) -> str:
        from lerobot_lang_nodes.sim.tasks import advance, infer_subtask_index
        if not self.steps:
            return ''
        try:
            self.index = (infer_subtask_index(self.steps, gt) if self.index is None
                          else advance(self.steps, self.index, gt))
        except KeyError:  # a cube this scene does not have
            return ''
        return self.steps[self.index].text if self.index < len(self.steps) else ''


def moves_on_latencies(timeline: list[tuple[float, str, str]]) -> list[float | None]:
    """For each change of the expert's subtask in ``timeline`` ((time s, expert's subtask,
    the planner's subtask) samples in time order), the time from the change until the
    planner's subtask is the expert's new one: 0 when it already was, None when it never got
    there before the expert changed again (or the run ended). The first subtask of the task is
    not a change, nor is the task's end ('')."""
    out: list[float | None] = []
    for k in range(1, len(timeline)):
        t, expert, _ = timeline[k]
        if not expert or expert == timeline[k - 1][1]:
            continue
        latency = None
        for t2, expert2, planner2 in timeline[k:]:
            if expert2 != expert:
                break
            if planner2 == expert:
                latency = round(t2 - t, 3)
                break
        out.append(latency)
    return out


def moves_on_share(latencies: list[float | None], within_s: float = 0.5) -> float | None:
    """The share of changes the planner followed within ``within_s``."""
    if not latencies:
        return None
    return round(sum(1 for x in latencies if x is not None and x <= within_s)
                 / len(latencies), 4)
