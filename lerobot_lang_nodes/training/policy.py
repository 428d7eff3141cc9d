"""Train the language-conditioned action policy (`lang_chunk`) from an exported dataset, on CPU.

``lerobot-lang train-policy DATASET OUT_DIR --steps 3000`` (arguments: cli/train.py)

Input: a LeRobot v3.0 dataset written by `lerobot-lang export ... --units lerobot` (camera
videos, ``observation.state`` / ``action`` in LeRobot's SO-101 units, the ``task`` and the
``language_persistent`` rows). Only the dataset is read, never simulator ground truth.

Output: a LeRobot checkpoint directory (config.json, model.safetensors, the saved pre- and
post-processors with their normalisation statistics, plus ``training_summary.json``) that the
`lerobot` policy backend loads as it loads a user's checkpoint (``--policy-path OUT_DIR``).

LeRobot's own training pieces do the work, as lerobot-train uses them: ``LeRobotDataset`` with
the delta timestamps of the policy config (action chunks and their ``action_is_pad``),
``make_pre_post_processors`` with the dataset's statistics, the config's optimizer and
scheduler presets, gradient clipping at the preset's norm, ``save_pretrained``. Two things
differ, on purpose:

* The instruction. Each sample's ``task`` is replaced by the text the policy node sends at run
  time for that moment: ``action_instruction(task, subtask)`` (core/prompts.py), i.e. the
  subtask active at the frame (LeRobot's ``active_at`` over ``language_persistent``), else
  the task. Trained on the episode task alone, the policy would never see the subtask texts it
  is conditioned on when deployed under the planner.
* Frames are decoded once. Every frame is read through the dataset once, its images resized
  to the policy's small input size (the bilinear, antialiased resize the backend applies to
  camera frames) and kept in memory as uint8; the steps then sample from that cache. Decoding
  AV1 video for every sample of every step would cost far more than the model on a CPU.

Corrections (DAgger): a dataset recorded with a human or the virtual operator taking over
has an ``intervention`` column. ``intervention_weight`` samples those frames that many times
as often as a plain frame; ``learner_weight`` weighs the other frames of an episode that holds
a correction, i.e. what the learned policy commanded itself before and after it was taken
over (0: never trained on, HG-DAgger's choice: its own drift, up to the takeover, is what the
correction replaces). Episodes without any intervention (plain demonstrations) keep weight 1.
With every weight 1 (the defaults) the steps walk shuffled epochs as before.

torch and LeRobot are imported only inside the functions; importing this module is cheap.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lerobot_lang_nodes.training.data import (ACTION_KEY, IMAGE_PREFIX, PERSISTENT_KEY,
                                              STATE_KEY, DatasetInfo,
                                              SettingsError, check_dataset, check_output_dir,
                                              check_so101_units, language_at)

logger = logging.getLogger(__name__)

INSTRUCTIONS = ('subtask', 'task')
INTERVENTION_KEY = 'intervention'  # recording/dataset.py's column (not imported: it is heavy)
SUMMARY_FILE = 'training_summary.json'
# A placeholder name: LeRobot needs a repo id, and the dataset is read from its folder only.
REPO_ID = 'local/lerobot_lang_dataset'


def small_image_shape(height: int, width: int, longest_edge: int) -> tuple[int, int]:
    """(h, w) with the longer side ``longest_edge`` and the aspect ratio kept (>= 8 pixels)."""
    if longest_edge <= 0 or max(height, width) <= longest_edge:
        return height, width
    scale = longest_edge / max(height, width)
    return max(8, round(height * scale)), max(8, round(width * scale))


def train_policy(dataset_dir: str | Path, output_dir: str | Path, *, steps: int = 3000,
                 batch_size: int = 32, seed: int = 0, chunk_size: int = 20,
                 n_action_steps: int | None = None, image_size: int = 64,
                 instruction: str = 'subtask', lr: float | None = None, device: str = 'cpu',
                 num_threads: int = 0, eval_frames: int = 256, log_every: int = 200,
                 keypoints: bool = True, shift_pixels: int = 4,
                 relative_actions: bool = False, intervention_weight: float = 1.0,
                 learner_weight: float = 1.0) -> dict[str, Any]:
    """Train `lang_chunk` on the dataset in ``dataset_dir``; save it to ``output_dir``.

    ``image_size`` is the longest image side the policy runs at; ``instruction`` 'subtask'
    conditions on the active subtask (else the task), 'task' on the episode task only (for a
    policy node with ``condition_on: task``). ``num_threads`` 0 keeps torch's default.
    ``keypoints`` gives the model spatial-softmax keypoints on a feature map at 1/8 of the
    image (else the plain 1/16 grid). ``shift_pixels`` > 0 shifts each training image by up to
    that many pixels (edge-padded random crop, per frame and camera; DrQ and Diffusion Policy
    train this way): a few dozen demonstrations otherwise let the model memorise pixels.
    ``relative_actions`` predicts each step as an offset from the current state (the model's
    ``relative_actions``). ``intervention_weight`` / ``learner_weight``: the sampling weights
    of corrections and of the learner's own frames in corrected episodes (module docstring;
    ``frame_weights``).
    ``loss_start`` / ``loss_end`` in the summary are the loss on a fixed set of up to
    ``eval_frames`` frames, in eval mode, before the first and after the last step.
    Raises DatasetError (bad dataset or output folder) and SettingsError (bad settings).
    """
    t0 = time.monotonic()
    if steps < 1 or batch_size < 1:
        raise SettingsError(f'steps ({steps}) and batch_size ({batch_size}) must be >= 1')
    if shift_pixels < 0:
        raise SettingsError(f'shift_pixels must be >= 0, got {shift_pixels}')
    if not (intervention_weight > 0 and learner_weight >= 0):
        raise SettingsError(f'intervention_weight ({intervention_weight}) must be > 0 and '
                            f'learner_weight ({learner_weight}) >= 0')
    if instruction not in INSTRUCTIONS:
        raise SettingsError(f'instruction is {instruction!r}; expected one of '
                            f'{list(INSTRUCTIONS)}')
    info = check_dataset(dataset_dir, need_cameras=True)
    check_so101_units(info)
    out = check_output_dir(output_dir)
    import torch

    threads = torch.get_num_threads()
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    try:
        summary = _train(info, out, steps=steps, batch_size=batch_size, seed=seed,
                         chunk_size=chunk_size, n_action_steps=n_action_steps or chunk_size,
                         image_size=image_size, instruction=instruction, lr=lr, device=device,
                         eval_frames=eval_frames, log_every=log_every, t0=t0,
                         keypoints=keypoints, shift_pixels=shift_pixels,
                         relative_actions=relative_actions,
                         intervention_weight=intervention_weight,
                         learner_weight=learner_weight)
    finally:
        torch.set_num_threads(threads)
    return summary


def _config(info: DatasetInfo, *, chunk_size: int, n_action_steps: int, image_size: int,
            lr: float | None, device: str, keypoints: bool = False,
            relative_actions: bool = False) -> Any:
    from lerobot.configs import FeatureType, PolicyFeature

    from lerobot_lang_nodes.training.configuration_lang_chunk import LangChunkConfig

    inputs = {STATE_KEY: PolicyFeature(FeatureType.STATE, (len(info.state_names),))}
    for camera in info.cameras:
        height, width, _ = info.image_shape(camera)
        h, w = small_image_shape(height, width, image_size)
        inputs[IMAGE_PREFIX + camera] = PolicyFeature(FeatureType.VISUAL, (3, h, w))
    extra: dict[str, Any] = {'optimizer_lr': lr} if lr else {}
    if keypoints:
        extra.update(image_keypoints=True, conv_strides=[2, 2, 2, 1])
    if relative_actions:
        extra['relative_actions'] = True
    try:
        return LangChunkConfig(
            device=device, chunk_size=chunk_size, n_action_steps=n_action_steps,
            action_feature_names=info.action_names, input_features=inputs,
            output_features={ACTION_KEY: PolicyFeature(FeatureType.ACTION,
                                                       (len(info.action_names),))}, **extra)
    except ValueError as exc:  # the config's own checks (chunk sizes, ...)
        raise SettingsError(str(exc)) from exc


class FrameCache:
    """Every frame of the dataset once: small uint8 images, state, action chunk, instruction."""

    def __init__(self, dataset: Any, config: Any, instruction: str) -> None:
        import torch
        import torch.nn.functional as F  # noqa: N812 - the usual torch alias

        from lerobot_lang_nodes.core.prompts import action_instruction

        n = len(dataset)
        self.image_keys = sorted(config.image_features)
        shapes = {k: tuple(config.image_features[k].shape) for k in self.image_keys}
        self.images = {k: torch.empty((n, *shapes[k]), dtype=torch.uint8)
                       for k in self.image_keys}
        n_state = config.robot_state_feature.shape[0]
        n_act = config.action_feature.shape[0]
        self.state = torch.empty((n, n_state), dtype=torch.float32)
        self.action = torch.empty((n, config.chunk_size, n_act), dtype=torch.float32)
        self.action_is_pad = torch.zeros((n, config.chunk_size), dtype=torch.bool)
        self.texts: list[str] = []
        self.episodes: set[int] = set()
        self.episode_of: list[int] = []
        self.intervention: list[bool] = []  # a human (or the virtual operator) commanded
        start = time.monotonic()
        for i in range(n):
            item = dataset[i]
            for key in self.image_keys:
                _, h, w = shapes[key]
                img = item[key].to(torch.float32).unsqueeze(0)
                if tuple(img.shape[-2:]) != (h, w):
                    # The resize the lerobot backend applies to camera frames.
                    img = F.interpolate(img, size=(h, w), mode='bilinear', antialias=True,
                                        align_corners=False)
                self.images[key][i] = (img[0] * 255).round().clamp(0, 255).to(torch.uint8)
            self.state[i] = item[STATE_KEY]
            self.action[i] = item[ACTION_KEY].reshape(config.chunk_size, n_act)
            if 'action_is_pad' in item:
                self.action_is_pad[i] = item['action_is_pad']
            task = str(item.get('task') or '')
            if instruction == 'subtask':
                lang = language_at(item.get(PERSISTENT_KEY), float(item['timestamp']))
                task = action_instruction((task, lang.subtask))
            self.texts.append(task)
            self.episodes.add(int(item['episode_index']))
            self.episode_of.append(int(item['episode_index']))
            flag = item.get(INTERVENTION_KEY)
            self.intervention.append(flag is not None and bool(torch.as_tensor(flag).any()))
            if (i + 1) % 1000 == 0:
                logger.info('decoded %d / %d frames (%.0f s)', i + 1, n,
                            time.monotonic() - start)

    def __len__(self) -> int:
        return len(self.texts)

    def offset_std(self) -> Any:
        """Per joint, the spread of (action at t + k) - (state at t) over every frame and
        chunk step that is not padding."""
        offsets = self.action - self.state[:, None, :]
        return offsets[~self.action_is_pad].std(dim=0)

    def batch(self, index: Any, shift_pixels: int = 0, generator: Any = None) -> dict[str, Any]:
        """The raw (unnormalised) batch of the frames ``index``, as a dataloader gives it;
        images randomly shifted by up to ``shift_pixels`` when > 0 (training only)."""
        out: dict[str, Any] = {STATE_KEY: self.state[index], ACTION_KEY: self.action[index],
                               'action_is_pad': self.action_is_pad[index],
                               'task': [self.texts[int(i)] for i in index]}
        for key in self.image_keys:
            images = self.images[key][index]
            if shift_pixels > 0:
                images = random_shift(images, shift_pixels, generator)
            out[key] = images.to(out[STATE_KEY].dtype) / 255.0
        return out


def frame_weights(intervention: Sequence[bool], episode_of: Sequence[int],
                  intervention_weight: float = 1.0, learner_weight: float = 1.0) -> list[float]:
    """The sampling weight of each frame: ``intervention_weight`` under a correction,
    ``learner_weight`` for the other frames of an episode holding a correction, 1 elsewhere."""
    corrected = {e for e, flag in zip(episode_of, intervention) if flag}
    return [intervention_weight if flag else learner_weight if e in corrected else 1.0
            for e, flag in zip(episode_of, intervention)]


class FrameSampler:
    """Batches of frame indices: shuffled epochs when every weight is equal (each frame once
    per epoch), else drawn with replacement in proportion to the weights."""

    def __init__(self, weights: Sequence[float], batch_size: int, generator: Any) -> None:
        import torch
        self.weights = torch.as_tensor(list(weights), dtype=torch.float64)
        if len(self.weights) == 0 or float(self.weights.sum()) <= 0:
            raise SettingsError('no frame has a sampling weight above 0 (learner_weight 0 on '
                                'a dataset whose every episode holds a correction, with no '
                                'intervention frame?)')
        self.uniform = bool((self.weights == self.weights[0]).all())
        self.batch_size = batch_size
        self.gen = generator
        self._order = None
        self._cursor = 0

    def next(self) -> Any:
        import torch
        n, b = len(self.weights), self.batch_size
        if not self.uniform:
            return torch.multinomial(self.weights, b, replacement=True, generator=self.gen)
        if self._order is None or self._cursor + b > n:
            self._order, self._cursor = torch.randperm(n, generator=self.gen), 0
        index = self._order[self._cursor:self._cursor + b]
        self._cursor += b
        return index


def random_shift(images: Any, pad: int, generator: Any = None) -> Any:
    """(B, C, H, W) images each moved by a random whole-pixel offset in [-pad, pad] on both
    axes; the uncovered border repeats the edge pixels."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - the usual torch alias

    b, _, h, w = images.shape
    padded = F.pad(images.float(), (pad, pad, pad, pad), mode='replicate').to(images.dtype)
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator)
    return torch.stack([padded[i, :, y:y + h, x:x + w]
                        for i, (y, x) in enumerate(offsets.tolist())])


def _train(info: DatasetInfo, out: Path, *, steps: int, batch_size: int, seed: int,
           chunk_size: int, n_action_steps: int, image_size: int, instruction: str,
           lr: float | None, device: str, eval_frames: int, log_every: int,
           t0: float, keypoints: bool, shift_pixels: int,
           relative_actions: bool, intervention_weight: float = 1.0,
           learner_weight: float = 1.0) -> dict[str, Any]:
    import torch

    from lerobot.datasets.factory import resolve_delta_timestamps
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.factory import make_pre_post_processors

    from lerobot_lang_nodes.training.modeling_lang_chunk import LangChunkPolicy

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = _config(info, chunk_size=chunk_size, n_action_steps=n_action_steps,
                     image_size=image_size, lr=lr, device=device, keypoints=keypoints,
                     relative_actions=relative_actions)
    meta = LeRobotDatasetMetadata(REPO_ID, root=info.root)
    dataset = LeRobotDataset(REPO_ID, root=info.root,
                             delta_timestamps=resolve_delta_timestamps(config, meta),
                             video_backend='pyav')
    cache = FrameCache(dataset, config, instruction)
    load_s = time.monotonic() - t0
    logger.info('%d frames of %d episodes decoded in %.1f s; %d distinct instructions',
                len(cache), len(cache.episodes), load_s, len(set(cache.texts)))

    preprocessor, postprocessor = make_pre_post_processors(config,
                                                           dataset_stats=dataset.meta.stats)
    policy = LangChunkPolicy(config)
    if relative_actions:
        stats = dataset.meta.stats
        policy.set_action_reference(stats[STATE_KEY]['mean'], stats[STATE_KEY]['std'],
                                    stats[ACTION_KEY]['mean'], stats[ACTION_KEY]['std'],
                                    cache.offset_std())
    policy = policy.to(device)
    optimizer_cfg = config.get_optimizer_preset()
    optimizer = optimizer_cfg.build(policy.get_optim_params())
    scheduler = config.get_scheduler_preset().build(optimizer, steps)

    n = len(cache)
    eval_index = torch.linspace(0, n - 1, min(n, max(1, eval_frames))).round().long().unique()

    def eval_loss() -> float:
        policy.eval()
        with torch.no_grad():
            loss, _ = policy.forward(preprocessor(cache.batch(eval_index)))
        return float(loss)

    loss_start = eval_loss()
    train_start = time.monotonic()
    weights = frame_weights(cache.intervention, cache.episode_of, intervention_weight,
                            learner_weight)
    sampler = FrameSampler(weights, batch_size, gen)
    losses: list[float] = []
    for step in range(steps):
        index = sampler.next()
        policy.train()
        loss, _ = policy.forward(preprocessor(cache.batch(index, shift_pixels, gen)))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), optimizer_cfg.grad_clip_norm)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
        if log_every > 0 and ((step + 1) % log_every == 0 or step == 0):
            logger.info('step %d / %d: loss %.4f, lr %.2e', step + 1, steps, losses[-1],
                        scheduler.get_last_lr()[0])
    train_s = time.monotonic() - train_start
    loss_end = eval_loss()
    policy.eval()

    summary = {
        'policy_type': config.type, 'dataset': str(info.root), 'output_dir': str(out),
        'frames': n, 'episodes': len(cache.episodes), 'fps': info.fps,
        'cameras': list(info.cameras), 'image_shape': list(config.image_features[
            cache.image_keys[0]].shape) if cache.image_keys else [],
        'instruction': instruction, 'instructions': sorted(set(cache.texts)),
        'steps': steps, 'batch_size': batch_size, 'seed': seed, 'chunk_size': chunk_size,
        'n_action_steps': n_action_steps, 'image_keypoints': keypoints,
        'shift_pixels': shift_pixels, 'relative_actions': relative_actions,
        'intervention_frames': sum(cache.intervention),
        'intervention_weight': intervention_weight, 'learner_weight': learner_weight,
        'sampled_share_intervention': round(sum(w for w, f in zip(weights, cache.intervention)
                                                if f) / sum(weights), 4),
        'parameters': sum(p.numel() for p in policy.parameters()),
        'loss_start': loss_start, 'loss_end': loss_end,
        'train_loss_first': losses[0], 'train_loss_last': sum(losses[-10:]) / len(losses[-10:]),
        'load_s': round(load_s, 2), 'train_s': round(train_s, 2),
    }
    _save(out, policy, preprocessor, postprocessor, summary, t0)
    return summary


def _save(out: Path, policy: Any, preprocessor: Any, postprocessor: Any,
          summary: dict[str, Any], t0: float) -> None:
    """Write into a hidden sibling folder, renamed to ``out`` only once complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f'.{out.name}.partial-', dir=out.parent))
    try:
        target = work / 'checkpoint'
        policy.save_pretrained(target)
        preprocessor.save_pretrained(target)
        postprocessor.save_pretrained(target)
        summary['wall_s'] = round(time.monotonic() - t0, 2)
        (target / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + '\n')
        if out.exists():
            out.rmdir()
        os.replace(target, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- command line -----------------------------------------------------------------------------
