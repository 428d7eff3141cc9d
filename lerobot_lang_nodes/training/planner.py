"""Train a tiny vision-language planner from an exported dataset's language columns, on CPU.

``lerobot-lang train-planner DATASET OUT_DIR --steps 300`` (arguments: cli/train.py)

What it learns: the planner node's subtask turn. At frame ``t`` of an episode the answer is
the subtask active at ``t`` (the ``language_persistent`` subtask row with the latest timestamp
<= t, LeRobot's ``active_at``); the prompt is what the planner would have sent just before
deciding at ``t``: the task, the plan active at ``t``, and the subtask and memory active at
the frame before (the planner's current subtask and memory), with the frames of
``image_cameras`` at ``t``, and, where the prompt templates quote ``{joints}``, the arm's joint
state at ``t``: ``observation.state`` in radians (converted back from ``--units lerobot``),
rendered by the planner node's own ``render_joints``. When the dataset has them, the memory
turns (each memory change: previous memory and completed subtask -> new memory) and the
interjection turns (task and interjection, with the frames -> the new plan and ``<say>``
speech) are learned too.

Identical rendering at training and deployment: the messages come from the planner's own
prompt builders (core/prompts.py) with the same prompt templates (``config/prompts.yaml``
unless ``--prompts-file``), the camera frames are attached by the `transformers` backend's own
``_with_frames``, and tiny_models/vlm.py renders them through the backend's chat conversion
and the checkpoint's chat template. The model is vlm.py's tiny Idefics3, with a tokenizer
trained on the dataset's texts; ``save_pretrained`` writes it for the `transformers` backend.

Frames: consecutive frames with the same language in the prompt and the same answer form a
segment; up to ``frames_per_segment`` frames spread over each segment are used (their images
and joint state differ, the language does not), so a long stretch of one subtask does not
drown the moments it changes.

torch and transformers are imported only inside the functions; importing this module is cheap.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from lerobot_lang_nodes.training.data import (EVENTS_KEY, IMAGE_PREFIX, PERSISTENT_KEY,
                                              STATE_KEY, DatasetError, SettingsError,
                                              check_dataset, check_output_dir, language_at,
                                              previous_row, rows_of, state_in_radians)

logger = logging.getLogger(__name__)

KINDS = ('subtask', 'memory', 'interjection')
SUMMARY_FILE = 'training_summary.json'
PROMPTS_FILE = 'prompts.yaml'
REPO_ID = 'local/lerobot_lang_dataset'
VISION_SIZE = 32  # the tiny Idefics3's default image side: one image token per frame


@dataclass
class Frame:
    """The text columns of one dataset frame (no pixels)."""

    index: int
    episode: int
    timestamp: float
    task: str
    persistent: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    joints: str = ''  # the {joints} text of the frame's state ('' = not read)


@dataclass
class Candidate:
    """One training example before its frames are decoded."""

    kind: str
    messages: list[dict]
    target: str
    frame: int  # dataset index whose images go with it (-1: no images)
    moves_on: bool = False  # a subtask turn whose answer is not the quoted current subtask


@dataclass(frozen=True)
class _PlannerView:
    """What `TransformersPlanner._with_frames` reads from its instance, for a VLM checkpoint."""

    image_cameras: tuple[str, ...]
    checkpoint: Any = field(default_factory=lambda: SimpleNamespace(kind='vlm'))


def _scalar(value: Any) -> float:
    return float(value.item() if hasattr(value, 'item') else value)


def read_frames(dataset: Any, joints: tuple[list[str], Any] | None = None) -> list[Frame]:
    """The text columns of every frame, read without decoding any video.

    ``joints`` (``data.state_in_radians``: joint names and the state's conversion to radians)
    also renders each frame's ``observation.state`` as the planner node renders its joint
    state.
    """
    from lerobot_lang_nodes.core.prompts import render_joints

    columns = ['episode_index', 'timestamp', 'task_index']
    names = set(dataset.hf_dataset.column_names)
    columns += [c for c in (PERSISTENT_KEY, EVENTS_KEY) if c in names]
    if joints is not None:
        columns.append(STATE_KEY)
    table = dataset.hf_dataset.select_columns(columns)
    tasks = dataset.meta.tasks
    frames = []
    for i in range(len(table)):
        row = table[i]
        text = '' if joints is None else render_joints(
            joints[0], joints[1](np.asarray(row[STATE_KEY], dtype=np.float64)))
        frames.append(Frame(index=i, episode=int(_scalar(row['episode_index'])),
                            timestamp=_scalar(row['timestamp']),
                            task=str(tasks.iloc[int(_scalar(row['task_index']))].name),
                            persistent=list(row.get(PERSISTENT_KEY) or []),
                            events=list(row.get(EVENTS_KEY) or []), joints=text))
    return frames


def frames_of(dataset: Any, info: Any, templates: Any, calibration: str = '') -> list[Frame]:
    """``read_frames``, with each frame's joint state when ``templates`` quote ``{joints}``."""
    joints = state_in_radians(info, calibration) if templates.uses('joints') else None
    return read_frames(dataset, joints)


def _spread(start: int, stop: int, count: int) -> list[int]:
    """Up to ``count`` indices spread evenly over [start, stop), both ends included."""
    n = stop - start
    if count <= 1 or n <= 1:
        return [start]
    if n <= count:
        return list(range(start, stop))
    return sorted({start + round(k * (n - 1) / (count - 1)) for k in range(count)})


def task_start_episodes(frames: Sequence[Frame]) -> set[int]:
    """Episodes whose first frame starts a task (the previous episode had another task).

    The language an episode starts with was generated there only if so; after a reset or a
    gap within one task it was inherited from before the episode.
    """
    out: set[int] = set()
    previous_task = None
    previous_episode = None
    for frame in frames:
        if frame.episode != previous_episode and frame.task != previous_task:
            out.add(frame.episode)
        previous_task, previous_episode = frame.task, frame.episode
    return out


def subtask_candidates(frames: Sequence[Frame], templates: Any,
                       frames_per_segment: int, change_frames: int = 0) -> list[Candidate]:
    """The subtask turn at every frame, grouped into segments and spread (module doc).

    ``change_frames`` > 0 adds, for each subtask change, up to that many frames spread over the
    first half of the new subtask's stretch, each with the prompt of the change frame (the old
    subtask and memory still quoted) and the new subtask as the answer: what a planner that
    has not moved on yet must answer once the old subtask is visibly done. Without them each
    change is one frame against ``frames_per_segment`` frames of "stay", and a model learns to
    keep the current subtask (module doc). Those frames quote their own joint state (what a
    planner looking then would see); segments are runs of one language state and answer, the
    joint state moving within them.
    """
    from lerobot_lang_nodes.core import prompts

    starts = task_start_episodes(frames)
    keyed: list[tuple[Frame, tuple, Candidate]] = []
    language: list[tuple[str, ...]] = []  # the language quoted by each of keyed
    changes: list[int] = []  # positions in keyed of frames whose answer differs from the quote
    prev: Frame | None = None
    for frame in frames:
        before = prev if prev is not None and prev.episode == frame.episode else None
        prev = frame
        now = language_at(frame.persistent, frame.timestamp)
        if not now.subtask or not frame.task:
            continue
        # A new task starts with no subtask and no memory (LanguageState.set_task clears them).
        current, prior = '', ''
        memory = '' if frame.episode in starts else now.memory
        if before is not None:
            then = language_at(frame.persistent, before.timestamp)
            current, memory = then.subtask, then.memory
            prior = previous_row(frame.persistent, before.timestamp, 'subtask')
        quoted = (frame.task, now.plan, memory, current, prior)
        messages = prompts.subtask_messages(*quoted, templates, frame.joints)
        key = (frame.episode, json.dumps(prompts.subtask_messages(*quoted, templates),
                                         sort_keys=True), now.subtask)
        moves_on = bool(current) and current != now.subtask
        if moves_on:
            changes.append(len(keyed))
        keyed.append((frame, key, Candidate('subtask', messages, now.subtask, frame.index,
                                            moves_on)))
        language.append(quoted)
    segments: list[tuple[int, int]] = []  # [i, j) runs of one prompt and answer
    i = 0
    while i < len(keyed):
        j = i + 1
        while j < len(keyed) and keyed[j][1] == keyed[i][1] \
                and keyed[j][0].index == keyed[j - 1][0].index + 1:
            j += 1
        segments.append((i, j))
        i = j
    late: dict[int, list[Candidate]] = {}
    if change_frames > 0:
        segment_at = {i: n for n, (i, _) in enumerate(segments)}
        for c in changes:
            n = segment_at.get(c + 1)
            if n is None:
                continue  # the change frame is not alone in its segment: nothing after it
            i, j = segments[n]
            change = keyed[c][2]
            if keyed[i][2].target != change.target or keyed[i][0].index != keyed[c][0].index + 1:
                continue  # the next stretch is another subtask or another episode
            half = i + max(1, (j - i) // 2)
            late[c] = [Candidate('subtask', prompts.subtask_messages(
                *language[c], templates, keyed[k][0].joints), change.target, keyed[k][0].index,
                True) for k in _spread(i, half, change_frames)]
    out: list[Candidate] = []
    for i, j in segments:
        for k in _spread(i, j, frames_per_segment):
            out.append(keyed[k][2])
            out.extend(late.get(k, ()))
    return out


def memory_candidates(frames: Sequence[Frame], templates: Any) -> list[Candidate]:
    """Each memory change: previous memory + completed subtask -> the new memory.

    The planner also asks for a memory at a task's first subtask, with the task alone
    (LanguageState.set_task cleared the memory; nothing is completed yet). Where an episode
    starts its task, that turn is taught to answer the memory row written with the task's
    first subtask, or none (an empty answer, which the planner drops and counts): without it
    a model answers that turn with another episode's memory, and the subtask turns quote it.
    Other rows at or before an episode's first frame are left out: they were generated before
    the episode (inherited across a split), so their prompt is unknown.
    """
    from lerobot_lang_nodes.core import prompts

    first: dict[int, Frame] = {}
    for frame in frames:
        first.setdefault(frame.episode, frame)
    starts = task_start_episodes(frames)
    seen: set[str] = set()
    out = []

    def add(messages: list[dict], content: str) -> None:
        key = json.dumps([messages, content], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(Candidate('memory', messages, content, -1))

    for episode, frame in first.items():
        memory_rows = rows_of(frame.persistent, 'memory')
        subtask_rows = rows_of(frame.persistent, 'subtask')
        t_first = float(subtask_rows[0]['timestamp']) if subtask_rows else None
        if episode in starts and t_first is not None and frame.task:
            content = next((str(r.get('content') or '').strip() for r in memory_rows
                            if float(r['timestamp']) == t_first), '')
            add(prompts.memory_messages(frame.task, '', '', templates), content)
        for row in memory_rows:
            t = float(row['timestamp'])
            content = str(row.get('content') or '').strip()
            if not content or t <= frame.timestamp or (t == t_first and episode in starts):
                continue
            add(prompts.memory_messages(frame.task, previous_row(frame.persistent, t, 'memory'),
                                        previous_row(frame.persistent, t, 'subtask'),
                                        templates), content)
    return out


def interjection_candidates(frames: Sequence[Frame], templates: Any) -> list[Candidate]:
    """Each interjection event: (task, interjection, plan before) -> 'plan <say>speech</say>'.

    The exporter stores the planner's reply (its speech and new plan) on the interjection's
    frame, so the answer is the plan row at that frame and the speech event beside it.
    """
    from lerobot_lang_nodes.core import prompts

    out = []
    for frame in frames:
        users = [e for e in frame.events if e.get('style') == 'interjection'
                 and e.get('role') == 'user' and e.get('content')]
        if not users:
            continue
        plan = language_at(frame.persistent, frame.timestamp).plan
        if not plan:
            continue
        speech = ''
        for event in frame.events:
            for call in event.get('tool_calls') or []:
                function = call.get('function') if isinstance(call, dict) else None
                if isinstance(function, dict) and function.get('name') == 'say':
                    args = function.get('arguments') or {}
                    if isinstance(args, str):
                        args = json.loads(args or '{}')
                    speech = str(args.get('text') or '')
        before = previous_row(frame.persistent, frame.timestamp, 'plan')
        target = f'{plan} <say>{speech}</say>' if speech else plan
        for user in users:
            messages = prompts.interjection_messages(frame.task, str(user['content']), before,
                                                     templates)
            out.append(Candidate('interjection', messages, target, frame.index))
    return out


def cap_examples(candidates: Sequence[Candidate], max_examples: int) -> list[Candidate]:
    """At most ``max_examples``, each kind spread evenly over its own candidates.

    The memory and interjection turns (text answers that subtask turns then quote) keep up to
    a quarter of the budget: spread over all candidates together, the few distinct memory
    turns drown among thousands of subtask frames.
    """
    if len(candidates) <= max_examples:
        return list(candidates)
    subtask = [c for c in candidates if c.kind == 'subtask']
    others = [c for c in candidates if c.kind != 'subtask']
    n_others = min(len(others), max(max_examples // 4, max_examples - len(subtask)))
    n_subtask = min(len(subtask), max_examples - n_others)

    def spread(group: list[Candidate], n: int) -> list[Candidate]:
        return [group[k] for k in _spread(0, len(group), n)] if n else []

    return spread(subtask, n_subtask) + spread(others, n_others)


def _rgb(image: Any) -> Any:
    """(3, H, W) float [0, 1] from the dataset -> H x W x 3 uint8, as a camera publishes."""
    import torch
    rgb = (image.clamp(0, 1) * 255).round().to(torch.uint8)
    return rgb.permute(1, 2, 0).contiguous().numpy()


def _attach_frames(candidates: Sequence[Candidate], dataset: Any,
                   cameras: Sequence[str]) -> list[tuple[list[dict], str]]:
    """(messages, target) with each candidate's camera frames, attached as the backend does."""
    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersPlanner

    view = _PlannerView(tuple(cameras))
    decoded: dict[int, dict[str, Any]] = {}
    out = []
    for cand in candidates:
        messages = cand.messages
        if cand.frame >= 0 and cameras:
            if cand.frame not in decoded:
                item = dataset[cand.frame]
                decoded[cand.frame] = {c: _rgb(item[IMAGE_PREFIX + c]) for c in cameras}
            messages = TransformersPlanner._with_frames(view, cand.kind, messages,
                                                        {'images': decoded[cand.frame]})
        out.append((messages, cand.target))
    return out


def example_loss(model_dir: Path, examples: Sequence[tuple[list[dict], str]],
                 system_prompt: str, image_size: int) -> float:
    """Mean per-example loss on the answers (teacher forcing), encoded as vlm.train does."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from lerobot_lang_nodes.tiny_models import vlm

    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    losses = []
    with torch.no_grad():
        for messages, target in examples:
            enc = vlm._encode(processor, messages, target, system_prompt, image_size)
            ids = torch.tensor([enc['prompt'] + enc['tail']])
            labels = torch.full_like(ids, -100)
            labels[0, len(enc['prompt']):] = torch.tensor(enc['tail'])
            extra = {'pixel_values': enc['pixel_values']} if enc['n_images'] else {}
            losses.append(float(model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                      labels=labels, **extra).loss))
    return sum(losses) / max(1, len(losses))


def train_planner(dataset_dir: str | Path, output_dir: str | Path, *, steps: int = 300,
                  seed: int = 0, cameras: Sequence[str] = ('front',), image_size: int = 0,
                  frames_per_segment: int = 3, change_frames: int = 0,
                  max_examples: int = 256, kinds: Sequence[str] = KINDS,
                  prompts_file: str | Path = '',
                  system_prompt: str | None = None, lr: float = 3e-3,
                  check_examples: int = 8, vision_size: int = VISION_SIZE,
                  calibration: str = '') -> dict[str, Any]:
    """Train the tiny VLM planner on the dataset in ``dataset_dir``; save it to ``output_dir``.

    ``cameras`` and ``image_size`` must be the deploying planner's ``image_cameras`` and
    ``image_size`` (the node's defaults: front, 0 = frames as they come). ``max_examples``
    bounds the examples (spread evenly over the dataset): tiny_models/vlm.py fits all examples
    of a step at once, so it is also the batch. ``check_examples`` subtask examples are then
    answered by the `transformers` backend itself (greedy) and the exact matches counted.
    ``vision_size`` is the side the model's vision tower sees a frame at, a multiple of 32:
    (vision_size / 32)^2 image tokens per frame. ``change_frames``: see subtask_candidates.
    ``calibration``: the export's, for a ``--units lerobot`` dataset whose joint state the
    templates quote (data.state_in_radians).
    Raises DatasetError (bad dataset or output folder) and SettingsError (bad settings).
    """
    if steps < 1 or frames_per_segment < 1 or max_examples < 1:
        raise SettingsError(f'steps ({steps}), frames_per_segment ({frames_per_segment}) and '
                            f'max_examples ({max_examples}) must be >= 1')
    if change_frames < 0:
        raise SettingsError(f'change_frames must be >= 0, got {change_frames}')
    bad = [k for k in kinds if k not in KINDS]
    if bad or 'subtask' not in kinds:
        raise SettingsError(f'kinds {list(kinds)}: expected subtask plus any of {list(KINDS)}')
    if vision_size < 32 or vision_size % 32:
        raise SettingsError(f'vision_size must be a multiple of 32, got {vision_size}')
    if image_size < 0:
        raise SettingsError(f'image_size must be >= 0 (0 = frames as they come), got '
                            f'{image_size}')
    info = check_dataset(dataset_dir, need_cameras=bool(cameras), need_language=True)
    missing = [c for c in cameras if c not in info.cameras]
    if missing:
        raise DatasetError(f'dataset folder {str(info.root)!r} has no camera {missing}; its '
                           f'cameras are {list(info.cameras)}')
    out = check_output_dir(output_dir)
    templates, templates_path = _templates(prompts_file, system_prompt)
    # Before anything heavy: a dataset whose state units are unknown is refused at once.
    joints = state_in_radians(info, calibration) if templates.uses('joints') else None

    t0 = time.monotonic()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from lerobot_lang_nodes.tiny_models import vlm

    dataset = LeRobotDataset(REPO_ID, root=info.root, video_backend='pyav')
    frames = read_frames(dataset, joints)
    candidates = subtask_candidates(frames, templates, frames_per_segment, change_frames)
    if not candidates:
        raise DatasetError(f'dataset folder {str(info.root)!r} has no frame with both a task '
                           'and an active subtask in language_persistent; nothing to learn')
    if 'memory' in kinds:
        candidates += memory_candidates(frames, templates)
    if 'interjection' in kinds:
        candidates += interjection_candidates(frames, templates)
    candidates = cap_examples(candidates, max_examples)
    examples = _attach_frames(candidates, dataset, cameras)
    counts = {k: sum(c.kind == k for c in candidates) for k in KINDS}
    load_s = time.monotonic() - t0
    logger.info('%d examples (%s) from %d frames of %d episodes in %.1f s', len(examples),
                counts, len(frames), len({f.episode for f in frames}), load_s)

    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f'.{out.name}.partial-', dir=out.parent))
    try:
        model_dir = work / 'model'
        vlm.build_tiny_vlm(model_dir, vlm.example_texts(examples, templates.system_prompt),
                           image_size=vision_size, seed=seed)
        loss_start = example_loss(model_dir, examples, templates.system_prompt, image_size)
        train_start = time.monotonic()
        vlm.train(model_dir, examples, system_prompt=templates.system_prompt,
                  image_size=image_size, steps=steps, lr=lr, seed=seed)
        train_s = time.monotonic() - train_start
        loss_end = example_loss(model_dir, examples, templates.system_prompt, image_size)
        _write_templates(model_dir / PROMPTS_FILE, templates)
        checked, matched = _check(model_dir, examples, candidates, cameras, image_size,
                                  check_examples)
        summary = {
            'model_type': 'idefics3', 'dataset': str(info.root), 'output_dir': str(out),
            'frames': len(frames), 'frames_used': len({c.frame for c in candidates
                                                       if c.frame >= 0}),
            'episodes': len({f.episode for f in frames}), 'examples': counts,
            'subtasks': sorted({c.target for c in candidates if c.kind == 'subtask'}),
            'steps': steps, 'seed': seed, 'lr': lr, 'vision_size': vision_size,
            'frames_per_segment': frames_per_segment, 'change_frames': change_frames,
            # The prompt's joint state: the dataset's state names, and the calibration that
            # took a --units lerobot state back to radians ('' = the simulator's nominal).
            'joints': {'names': joints[0], 'calibration': calibration} if joints else None,
            'subtask_examples_moving_on': sum(c.moves_on for c in candidates),
            'loss_start': loss_start,
            'loss_end': loss_end, 'checked': checked, 'exact_matches': matched,
            'load_s': round(load_s, 2), 'train_s': round(train_s, 2),
            # What the planner node must be given to render prompts as they were trained.
            # Keyed by the planner node's parameter names.
            'planner_parameters': {'backend': 'transformers', 'model_path': str(out),
                                   'transformers.image_cameras': list(cameras),
                                   'transformers.image_size': image_size,
                                   'prompts_file': str(out / PROMPTS_FILE),
                                   'templates_from': str(templates_path)},
        }
        summary['wall_s'] = round(time.monotonic() - t0, 2)
        (model_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + '\n')
        if out.exists():
            out.rmdir()
        os.replace(model_dir, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summary


def _templates(prompts_file: str | Path, system_prompt: str | None) -> tuple[Any, Path]:
    """The planner's prompt templates (its default file unless one is given)."""
    from lerobot_lang_nodes import paths
    from lerobot_lang_nodes.core import prompts
    from lerobot_lang_nodes.core.errors import ConfigError

    path = Path(prompts_file) if prompts_file else paths.config_path(PROMPTS_FILE)
    try:
        return prompts.load_templates(path, system_prompt), path
    except ConfigError as exc:
        raise SettingsError(str(exc)) from exc


def _write_templates(path: Path, templates: Any) -> None:
    """Save the templates used, so the planner can be pointed at exactly them."""
    import yaml
    data = dataclasses.asdict(templates)
    path.write_text('# Prompt templates this planner was trained with (its prompts_file).\n'
                    + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def _check(model_dir: Path, examples: Sequence[tuple[list[dict], str]],
           candidates: Sequence[Candidate], cameras: Sequence[str], image_size: int,
           count: int) -> tuple[int, int]:
    """Answer up to ``count`` subtask examples with the `transformers` backend; (asked, right)."""
    if count <= 0:
        return 0, 0
    from lerobot_lang_nodes.backends.planners.transformers_planner import (TransformersConfig,
                                                                        TransformersPlanner)

    picks = [i for i, c in enumerate(candidates) if c.kind == 'subtask']
    picks = [picks[k] for k in _spread(0, len(picks), count)] if picks else []
    planner = TransformersPlanner(SimpleNamespace(
        model_path=str(model_dir), device='cpu', dtype='float32', max_new_tokens=48,
        system_prompt='', prompts_file=str(model_dir / PROMPTS_FILE), min_new_tokens=0,
        temperature=0.0, top_p=1.0,
        transformers=TransformersConfig(model_kind='vlm', image_cameras=tuple(cameras),
                                        image_size=image_size, generation_timeout_s=0.0)))
    right = 0
    for i in picks:
        cand = candidates[i]
        images = _images_of(examples[i][0])
        answer = planner.generate('subtask', cand.messages, {'images': images})
        right += answer == cand.target
    planner.close()
    return len(picks), right


def _images_of(messages: Sequence[dict]) -> dict[str, Any]:
    """Camera name -> frame of the image parts of a message list."""
    out = {}
    for message in messages:
        content = message.get('content')
        if isinstance(content, list):
            for part in content:
                if part.get('type') == 'image':
                    out[part.get('camera', '')] = part['image']
    return out


# --- command line -----------------------------------------------------------------------------
