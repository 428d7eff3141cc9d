"""A tiny `two_head` checkpoint (text head + action head), trained offline in seconds on a CPU.

Its text head answers the subtask, memory and interjection prompts of ``TEXTS`` exactly (one
task, an interjection that re-plans it), and its action head maps each instruction of
``POSES`` to a constant joint pose, so tests can check that the chunk executed is the one the
generated subtask asked for. Saved with LeRobot's
``save_pretrained`` plus the policy's pre/post-processors, like any LeRobot checkpoint.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

logger = logging.getLogger(__name__)


TASK = 'put the red cube in the bowl'
SUBTASK = 'pick up the red cube'
MEMORY = 'reaching for the red cube'
INTERJECTION = 'use the blue cube instead'
SPEECH = 'switching to the blue cube'
NEW_PLAN = 'pick up the blue cube'  # the interjection reply without its <say> part
NEW_SUBTASK = 'pick up the blue cube'
NEW_MEMORY = 'red cube left; reaching for the blue cube'
# Every action of a chunk is this pose (radians, SO-101 joint order) for the instruction.
POSES: dict[str, tuple[float, ...]] = {
    SUBTASK: (0.30, -0.40, 0.50, 0.60, 0.00, 0.80),
    TASK: (0.30, -0.40, 0.50, 0.60, 0.00, 0.80),
    NEW_SUBTASK: (-0.40, -0.20, 0.30, 0.90, 0.20, 0.20),
}
# (kind, prompt fields) -> text, following the core's hierarchy: the subtask of the task, a
# memory note when it changes, a re-plan on the interjection, then the new plan's subtask.
TEXTS: tuple[tuple[str, dict[str, str], str], ...] = (
    ('subtask', {}, SUBTASK),
    ('subtask', {'memory': MEMORY}, SUBTASK),
    ('memory', {}, MEMORY),
    ('interjection', {'user_text': INTERJECTION}, f'{NEW_PLAN} <say>{SPEECH}</say>'),
    ('subtask', {'plan': NEW_PLAN, 'memory': MEMORY}, NEW_SUBTASK),
    ('subtask', {'plan': NEW_PLAN}, NEW_SUBTASK),
    ('memory', {'memory': MEMORY, 'completed': SUBTASK}, NEW_MEMORY),
    ('subtask', {'plan': NEW_PLAN, 'memory': NEW_MEMORY}, NEW_SUBTASK),
)
CAMERA = 'front'
IMAGE_SHAPE = (3, 240, 320)  # what the sim's cameras publish (config/sim.yaml)


def build_two_head(out_dir: str | Path, *, steps: int = 250, seed: int = 0,
                   chunk_size: int = 10) -> Path:
    """Create, train and save the tiny checkpoint into ``out_dir``; returns the directory."""
    import torch

    t0 = time.monotonic()
    # One thread: for a model this small, thread hand-offs cost more than they save, and much
    # more on a busy machine (measured 4x slower with two threads while other work ran).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_and_save(Path(out_dir), steps, seed, chunk_size, t0)
    finally:
        torch.set_num_threads(threads)


def _train_and_save(out: Path, steps: int, seed: int, chunk_size: int, t0: float) -> Path:
    import torch

    from lerobot.configs import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors

    from lerobot_lang_nodes.hierarchical.configuration_two_head import TwoHeadConfig
    from lerobot_lang_nodes.hierarchical.modeling_two_head import TwoHeadPolicy, render_prompt

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    n = 6
    cfg = TwoHeadConfig(
        device='cpu', chunk_size=chunk_size, n_action_steps=chunk_size,
        input_features={'observation.state': PolicyFeature(FeatureType.STATE, (n,)),
                        f'observation.images.{CAMERA}': PolicyFeature(FeatureType.VISUAL,
                                                                     IMAGE_SHAPE)},
        output_features={'action': PolicyFeature(FeatureType.ACTION, (n,))})
    policy = TwoHeadPolicy(cfg)
    instructions = list(POSES)
    poses = torch.tensor([POSES[i] for i in instructions], dtype=torch.float32)
    stats = {'observation.state': {'mean': torch.zeros(n), 'std': torch.full((n,), 0.8)},
             'action': {'mean': poses.mean(0), 'std': poses.std(0).clamp_min(0.05)}}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    prompts = [render_prompt(kind, TASK, **fields) for kind, fields, _ in TEXTS]
    targets = [text for _, _, text in TEXTS]

    optim = torch.optim.AdamW(policy.parameters(), lr=cfg.optimizer_lr, weight_decay=0.0)
    policy.train()
    batch_size = 16
    for _ in range(steps):
        pick = torch.randint(len(instructions), (batch_size,), generator=gen)
        # Coarse random colour grids stand in for camera frames: the action head learns to
        # follow the instruction whatever the pooled image looks like.
        grid = torch.rand(batch_size, 3, cfg.image_pool, cfg.image_pool, generator=gen)
        images = torch.nn.functional.interpolate(grid, size=(24, 32), mode='nearest')
        batch = pre({
            'observation.state': (torch.rand(batch_size, n, generator=gen) * 2 - 1) * 1.5,
            f'observation.images.{CAMERA}': images,
            'action': poses[pick].unsqueeze(1).expand(batch_size, chunk_size, n).clone(),
            'task': [instructions[i] for i in pick]})
        action_loss, _ = policy(batch)
        loss = action_loss + policy.text_loss(prompts, targets)
        optim.zero_grad()
        loss.backward()
        optim.step()
    policy.eval()
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    logger.info('two_head checkpoint: %d steps, final loss %.4f, %.1f s -> %s', steps,
                loss.item(), time.monotonic() - t0, out)
    return out

