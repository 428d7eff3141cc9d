"""Vision-language-action checkpoints (SmolVLA) built offline with LeRobot's own classes.

A SmolVLA checkpoint names its vision-language backbone by ``vlm_model_name``: LeRobot builds
the model from that directory's config (``load_vlm_weights=False``) and tokenizes the
instruction with that directory's tokenizer (its ``TokenizerProcessorStep`` saves the name,
not the tokenizer). A user's checkpoint names ``HuggingFaceTB/SmolVLM2-500M-Video-Instruct``,
found in the Hugging Face cache; the ones built here name a local backbone directory written
first: a SmolVLM config (``SmolVLMConfig``), a byte-level BPE tokenizer trained locally with
the named special tokens SmolVLA reads (``fake_image_token_id``, ``global_image_token_id``)
and a ``SmolVLMProcessor`` (image and video processors; it needs ``num2words``, LeRobot's
``smolvla`` extra). Sizes: ``TINY`` for tests (a few hundred thousand parameters, a chunk in
well under a second on a CPU) and ``SMOLVLM2_500M``, the published backbone's numbers, for
the real-size benchmark. Weights are random.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot_lang_nodes.tiny_models.policies import (CAMERAS, IMAGE_SHAPE, STATE_MAX, STATE_MEAN,
                                                     STATE_MIN, _features, _save, _stats)

# The words the tiny tokenizer is trained on (byte-level BPE: any other text still encodes).
INSTRUCTIONS: tuple[str, ...] = (
    'put the red cube in the bowl', 'put the green cube in the bowl',
    'put the blue cube in the bowl', 'pick up the red cube', 'pick up the blue cube',
    'reach the red cube', 'grasp the red cube', 'lift the red cube',
    'move the red cube over the bowl', 'release the red cube', 'open the gripper',
)
# SmolVLM's named special tokens (the published tokenizer's names and strings).
NAMED_TOKENS = {'fake_image_token': '<fake_token_around_image>', 'image_token': '<image>',
                'global_image_token': '<global-img>',
                'end_of_utterance_token': '<end_of_utterance>'}


@dataclass(frozen=True)
class SmolVLMSize:
    """The backbone's sizes (SmolVLMConfig's text and vision towers)."""
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    vision_hidden: int
    vision_intermediate: int
    vision_layers: int
    vision_heads: int
    image_size: int
    scale_factor: int
    vocab_size: int = 0  # 0: the trained tokenizer's length


TINY = SmolVLMSize(hidden_size=64, intermediate_size=128, layers=2, heads=4, kv_heads=2,
                   vision_hidden=32, vision_intermediate=64, vision_layers=1, vision_heads=2,
                   image_size=64, scale_factor=2)
# SmolVLM2-500M-Video-Instruct as its model card's config.json publishes it: a 32-layer
# 960-wide Llama text model (15 heads, 5 KV heads), a 12-layer SigLIP-B/16 at 512 px, pixel
# shuffle 4 (64 image tokens), a 49280-token vocabulary. SmolVLA keeps its first 16 layers.
SMOLVLM2_500M = SmolVLMSize(hidden_size=960, intermediate_size=2560, layers=32, heads=15,
                            kv_heads=5, vision_hidden=768, vision_intermediate=3072,
                            vision_layers=12, vision_heads=12, image_size=512, scale_factor=4,
                            vocab_size=49280)
PATCH = 16
# The action statistics of the built checkpoints: a flow-matching policy starts each chunk
# from unit noise, which random weights barely move, so the unnormalised actions spread by
# about the action std around the mean. 5 degrees (5 % of the gripper's range) keeps them
# well inside the SO-101's joint limits, as a trained policy's would be.
ACTION_STATS = {'mean': STATE_MEAN, 'std': (5.0,), 'min': STATE_MIN, 'max': STATE_MAX}


def build_smolvlm_backbone(out: str | Path, size: SmolVLMSize = TINY,
                           texts: tuple[str, ...] = INSTRUCTIONS) -> Path:
    """Write a SmolVLM backbone directory (config, tokenizer, processor; no weights)."""
    from transformers import (SmolVLMConfig, SmolVLMImageProcessorPil, SmolVLMProcessor,
                              SmolVLMVideoProcessor)

    from lerobot_lang_nodes.tiny_models.vlm import CHAT_TEMPLATE, SPECIAL_TOKENS, _train_tokenizer
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer([*texts, CHAT_TEMPLATE], 400, **NAMED_TOKENS)
    image_processor = SmolVLMImageProcessorPil(
        do_image_splitting=False, size={'longest_edge': size.image_size},
        max_image_size={'longest_edge': size.image_size})
    image_seq_len = (size.image_size // PATCH) ** 2 // size.scale_factor ** 2
    processor = SmolVLMProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                 video_processor=SmolVLMVideoProcessor(),
                                 image_seq_len=image_seq_len, chat_template=CHAT_TEMPLATE)
    tokenizer = processor.tokenizer
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = SmolVLMConfig(
        vision_config={'hidden_size': size.vision_hidden,
                       'intermediate_size': size.vision_intermediate,
                       'num_hidden_layers': size.vision_layers,
                       'num_attention_heads': size.vision_heads,
                       'image_size': size.image_size, 'patch_size': PATCH},
        text_config={'model_type': 'llama', 'vocab_size': size.vocab_size or len(tokenizer),
                     'hidden_size': size.hidden_size,
                     'intermediate_size': size.intermediate_size,
                     'num_hidden_layers': size.layers, 'num_attention_heads': size.heads,
                     'num_key_value_heads': size.kv_heads, 'max_position_embeddings': 8192,
                     'pad_token_id': ids['<pad>'], 'tie_word_embeddings': False},
        scale_factor=size.scale_factor, image_token_id=ids['<image>'],
        pad_token_id=ids['<pad>'])
    config.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_smolvla(out: str | Path, *, backbone: str | Path | None = None,
                  size: SmolVLMSize = TINY, chunk_size: int = 20,
                  n_action_steps: int | None = None, num_steps: int = 3,
                  cameras: tuple[str, ...] = CAMERAS,
                  image_shape: tuple[int, int, int] = IMAGE_SHAPE, action_scale: float = 0.1,
                  seed: int = 0) -> Path:
    """A SmolVLA checkpoint directory with SO-101 features (two cameras, 6-D state and action
    in degrees), built and saved as lerobot-train saves one.

    ``backbone`` is the SmolVLM directory the checkpoint names (written with ``size`` when
    missing; default ``<out>_vlm`` beside the checkpoint). ``num_steps`` is the flow-matching
    denoising step count (LeRobot's default is 10; 3 keeps a test chunk cheap).
    ``action_scale`` shrinks the random velocity head, so each chunk stays near the noise
    the flow starts from, which ``ACTION_STATS`` keeps inside the joint limits.
    """
    import torch
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    torch.manual_seed(seed)
    out = Path(out)
    vlm = Path(backbone) if backbone else out.with_name(out.name + '_vlm')
    if not (vlm / 'config.json').is_file():
        build_smolvlm_backbone(vlm, size)
    inputs, outputs = _features(image_shape, cameras, 6, 6)
    cfg = SmolVLAConfig(input_features=inputs, output_features=outputs, device='cpu',
                        vlm_model_name=str(vlm.resolve()), load_vlm_weights=False,
                        chunk_size=chunk_size, n_action_steps=n_action_steps or chunk_size,
                        num_steps=num_steps,
                        resize_imgs_with_padding=(size.image_size, size.image_size),
                        push_to_hub=False)
    policy = SmolVLAPolicy(cfg)
    with torch.no_grad():
        policy.model.action_out_proj.weight.mul_(action_scale)
        policy.model.action_out_proj.bias.zero_()
    return _save(policy, cfg, _stats(inputs, outputs, {'action': ACTION_STATS}), out)


def bimodal_chunks(state: Any, chunk: int, rng: Any, *, amplitude: float = 8.0,
                   pull_steps: float = 60.0, centre: tuple[float, ...] = STATE_MEAN) -> Any:
    """Target chunks (B, chunk, 6), checkpoint units, for a flow-matching policy whose
    consecutive chunks disagree where they meet: from the state, a slow pull towards
    ``centre`` plus a bump of ``amplitude`` that starts at the chunk's first row and peaks at
    its middle, to one side or the other, drawn per example (two modes, as a path around an
    obstacle on the left or the right). A chunk computed while half of the previous one is
    left starts its bump again where the previous one is at its peak: the jump real-time
    chunking exists to remove. (A small model fitted to it may settle on one side.)"""
    import numpy as np
    state = np.asarray(state, dtype=np.float32)
    k = np.arange(1, chunk + 1, dtype=np.float32)[None, :, None]
    towards = (np.asarray(centre, dtype=np.float32) - state)[:, None, :]
    side = rng.choice([-1.0, 1.0], size=(len(state), 1, 1)).astype(np.float32)
    bump = side * amplitude * np.sin(np.pi * k / chunk)
    return state[:, None, :] + towards * np.minimum(k / pull_steps, 1.0) + bump


def train_bimodal(checkpoint: str | Path, *, steps: int = 600, batch_size: int = 32,
                  lr: float = 1e-3, spread: float = 25.0, seed: int = 0) -> list[float]:
    """Fit a SmolVLA checkpoint (build_smolvla) to ``bimodal_chunks`` with LeRobot's own
    flow-matching loss (``policy.forward``) and processors, then save it in place.

    States are drawn within ``spread`` degrees of the statistics' mean, images are grey and
    the instruction one of INSTRUCTIONS (the targets ignore both): a benchmark policy whose
    chunks move the arm smoothly within a chunk and may switch sides between chunks. Returns
    the loss of every step.
    """
    import numpy as np
    import torch
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    path = Path(checkpoint)
    policy = SmolVLAPolicy.from_pretrained(path)
    pre, _ = make_pre_post_processors(policy.config, pretrained_path=str(path))
    cfg = policy.config
    chunk = cfg.chunk_size
    images = [k for k in cfg.input_features if k.startswith('observation.images.')]
    optimiser = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr)
    policy.train()
    losses = []
    for _ in range(steps):
        state = np.asarray(STATE_MEAN, dtype=np.float32) + rng.uniform(
            -spread, spread, (batch_size, 6)).astype(np.float32)
        batch: dict[str, Any] = {
            'observation.state': torch.from_numpy(state),
            'action': torch.from_numpy(bimodal_chunks(state, chunk, rng)),
            'task': [INSTRUCTIONS[i] for i in rng.integers(0, len(INSTRUCTIONS), batch_size)]}
        for key in images:
            batch[key] = torch.full((batch_size, *cfg.input_features[key].shape), 0.5)
        loss, _ = policy.forward(pre(batch))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(float(loss))
    policy.eval()
    policy.save_pretrained(path)
    return losses


def parameter_count(policy: Any) -> int:
    return sum(p.numel() for p in policy.parameters())


__all__ = ['INSTRUCTIONS', 'SMOLVLM2_500M', 'SmolVLMSize', 'TINY', 'bimodal_chunks',
           'build_smolvla', 'build_smolvlm_backbone', 'parameter_count', 'train_bimodal']
