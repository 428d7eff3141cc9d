"""GR00T N1.7 checkpoints (LeRobot 0.6.1's ``groot``) built offline with LeRobot's own classes.

What a GR00T checkpoint needs besides its own files. LeRobot 0.6.1 wraps NVIDIA's GR00T N1.7:
a Qwen3-VL vision-language backbone (``nvidia/Cosmos-Reason2-2B``, its first 16 layers) and a
flow-matching DiT action head. A LeRobot GR00T checkpoint names two other models:

* ``base_model_path`` (default ``nvidia/GR00T-N1.7-3B``): ``GrootPolicy`` loads this base
  model (``GR00TN17.from_pretrained``: its ``config.json`` and weights) every time it is
  constructed, and the checkpoint's own ``model.safetensors`` then overwrites the weights. The
  base model's config names the backbone (``model_name``), whose Qwen3-VL config it builds
  the backbone from (the backbone's own weights are not loaded).
* The Qwen3-VL processor (tokenizer, image and video processors) of
  ``nvidia/Cosmos-Reason2-2B``: LeRobot's ``groot_n1_7_vlm_encode_v1`` preprocessor step
  loads it by that hub id (the saved ``policy_preprocessor.json`` names the id, not files).
  Offline (``HF_HUB_OFFLINE=1``) it is found only in the Hugging Face cache.

So a test checkpoint comes with three things written beside it or for it: a tiny Qwen3-VL
backbone directory (config, tokenizer trained locally with Qwen's special tokens and a
Qwen-VL-like chat template, processor with small pixel bounds: a camera image becomes 4
image tokens), a tiny base model directory (``GR00TN17Config`` naming that backbone,
random weights, ``save_pretrained``), and, for inference, the backbone's processor files
installed into a dedicated ``HF_HOME``'s cache as ``nvidia/Cosmos-Reason2-2B``
(``install_cosmos_processor``; never the user's own cache, where it would take the place of
the real one).

Packages: GR00T's model needs ``diffusers`` (its DiT blocks) and ``dm-tree`` (``import tree``
in ``GR00TN17.prepare_input``), both in LeRobot's ``groot`` extra (with ``peft``, ``timm`` and,
on x86_64, ``decord``, which inference does not import). Nothing is CUDA-only:
``use_flash_attention`` is off by default (SDPA), and the bf16 autocast of ``use_bf16`` runs
on a CPU.

Statistics: GR00T normalises state and action with min / max to [-1, 1] in its own
processor steps and clips the decoded actions to [-1, 1]: random weights give actions
anywhere in [min, max]. The action's min / max here are the mean -/+ the small
``ACTION_STATS`` std (as pi.py's quantiles), so the actions stay near the mean, inside the
SO-101's joint limits. Weights are random.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

from lerobot_lang_nodes.tiny_models.policies import CAMERAS, IMAGE_SHAPE, _features, _stats
from lerobot_lang_nodes.tiny_models.vla import ACTION_STATS, INSTRUCTIONS

# The hub id LeRobot 0.6.1's GR00T preprocessor loads its Qwen3-VL processor from.
PROCESSOR_REPO = 'nvidia/Cosmos-Reason2-2B'
# The snapshot revision of the installed test processor (any 40 hex digits serve offline).
PROCESSOR_REVISION = hashlib.sha1(b'lerobot_lang_nodes tiny cosmos processor').hexdigest()
# Qwen's special tokens the Qwen3-VL processor and model read.
SPECIAL_TOKENS: tuple[str, ...] = ('<|endoftext|>', '<|im_start|>', '<|im_end|>',
                                   '<|vision_start|>', '<|vision_end|>', '<|image_pad|>',
                                   '<|video_pad|>')
# A Qwen-VL-like template: each image as <|vision_start|><|image_pad|><|vision_end|> (the
# processor repeats <|image_pad|> once per merged patch).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PATCH, MERGE = 16, 2  # Qwen3-VL's patch size and spatial merge (as the published backbone)
# Image pixels between these bounds (multiples of PATCH * MERGE on each side): 64x64 at most,
# 4x4 patches, 2x2 = 4 image tokens per camera.
MIN_PIXELS, MAX_PIXELS = 32 * 32, 64 * 64
WIDTH = 32  # the tiny backbone's text width = GR00T's backbone_embedding_dim
STATE_ACTION_DIM = 8  # max_state_dim / max_action_dim (the SO-101's 6 are zero-padded to it)
FILES_TO_CACHE = ('tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja',
                  'processor_config.json', 'preprocessor_config.json',
                  'video_preprocessor_config.json', 'config.json')


def build_qwen3vl_backbone(out: str | Path, texts: tuple[str, ...] = INSTRUCTIONS) -> Path:
    """Write a tiny Qwen3-VL backbone directory: ``Qwen3VLConfig`` (2 text layers 32 wide, a
    2-block vision tower), a byte-level BPE tokenizer trained on ``texts`` (any text still
    encodes) and a ``Qwen3VLProcessor``. No weights: GR00T builds the backbone from the
    config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (PreTrainedTokenizerFast, Qwen2VLImageProcessor, Qwen3VLConfig,
                              Qwen3VLProcessor)
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([*texts, 'user assistant'], trainers.BpeTrainer(
        vocab_size=400, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token='<|endoftext|>',
                                        eos_token='<|im_end|>', chat_template=CHAT_TEMPLATE)
    geometry = dict(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2)
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            **geometry, size={'shortest_edge': MIN_PIXELS, 'longest_edge': MAX_PIXELS}),
        video_processor=Qwen3VLVideoProcessor(
            **geometry, size={'shortest_edge': MIN_PIXELS, 'longest_edge': 2 * MAX_PIXELS}),
        tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(out)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    head_dim = 16
    config = Qwen3VLConfig(
        image_token_id=ids['<|image_pad|>'], video_token_id=ids['<|video_pad|>'],
        vision_start_token_id=ids['<|vision_start|>'],
        vision_end_token_id=ids['<|vision_end|>'], tie_word_embeddings=True,
        text_config={
            'hidden_size': WIDTH, 'intermediate_size': 2 * WIDTH, 'num_hidden_layers': 2,
            'num_attention_heads': WIDTH // head_dim, 'num_key_value_heads': 1,
            'head_dim': head_dim, 'vocab_size': len(tokenizer),
            'max_position_embeddings': 4096, 'tie_word_embeddings': True,
            'bos_token_id': ids['<|endoftext|>'], 'eos_token_id': ids['<|im_end|>'],
            # Multimodal RoPE: the (time, height, width) sections cover head_dim / 2.
            'rope_parameters': {'rope_type': 'default', 'rope_theta': 5_000_000,
                                'mrope_section': [4, 2, 2], 'mrope_interleaved': True}},
        vision_config={
            'depth': 2, 'hidden_size': WIDTH, 'intermediate_size': 2 * WIDTH, 'num_heads': 2,
            'out_hidden_size': WIDTH, 'patch_size': PATCH, 'spatial_merge_size': MERGE,
            'temporal_patch_size': 2, 'num_position_embeddings': 64,
            'deepstack_visual_indexes': [1]})
    config.save_pretrained(out)
    return out


def install_cosmos_processor(hf_home: str | Path, backbone: str | Path) -> Path:
    """Install ``backbone``'s tokenizer and processor files into ``hf_home``'s hub cache as
    ``PROCESSOR_REPO``, where LeRobot's GR00T preprocessor looks for them offline. Returns
    the snapshot directory.

    Refuses a cache whose ``refs/main`` names another snapshot: that is the real processor,
    which this one must never replace."""
    repo = Path(hf_home) / 'hub' / ('models--' + PROCESSOR_REPO.replace('/', '--'))
    ref = repo / 'refs' / 'main'
    if ref.is_file() and ref.read_text().strip() != PROCESSOR_REVISION:
        raise FileExistsError(f'{ref} names snapshot {ref.read_text().strip()}, not the test '
                              f'processor\'s: {hf_home} holds a real {PROCESSOR_REPO}; '
                              'install the test one into another HF_HOME')
    snapshot = repo / 'snapshots' / PROCESSOR_REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    for name in FILES_TO_CACHE:
        if (Path(backbone) / name).is_file():
            shutil.copyfile(Path(backbone) / name, snapshot / name)
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(PROCESSOR_REVISION)
    return snapshot


def base_model_config(backbone: str | Path, *, action_horizon: int = 10,
                      num_inference_timesteps: int = 2, **overrides: Any) -> Any:
    """A tiny ``GR00TN17Config`` on the backbone directory ``backbone``: the DiT action head
    (2 layers) and the VL self-attention (1 layer) are 32 wide like the backbone's text."""
    from lerobot.policies.groot.groot_n1_7 import GR00TN17Config
    heads, head_dim = 2, WIDTH // 2
    settings: dict[str, Any] = dict(
        model_name=str(Path(backbone).resolve()), backbone_embedding_dim=WIDTH,
        select_layer=2, max_state_dim=STATE_ACTION_DIM, max_action_dim=STATE_ACTION_DIM,
        action_horizon=action_horizon, hidden_size=WIDTH, input_embedding_dim=WIDTH,
        max_seq_len=64, num_inference_timesteps=num_inference_timesteps,
        diffusion_model_cfg={'positional_embeddings': None, 'num_layers': 2,
                             'num_attention_heads': heads, 'attention_head_dim': head_dim,
                             'norm_type': 'ada_norm', 'dropout': 0.2, 'final_dropout': True,
                             'output_dim': WIDTH, 'interleave_self_attention': True},
        vl_self_attention_cfg={'positional_embeddings': None, 'num_layers': 1,
                               'num_attention_heads': heads, 'attention_head_dim': head_dim,
                               'dropout': 0.2, 'final_dropout': True})
    settings.update(overrides)
    return GR00TN17Config(**settings)


def build_groot_base(out: str | Path, backbone: str | Path, *, action_horizon: int = 10,
                     num_inference_timesteps: int = 2, seed: int = 0) -> Path:
    """Write a tiny GR00T N1.7 base model directory (``config.json``, ``model.safetensors``,
    random weights), the stand-in for ``nvidia/GR00T-N1.7-3B`` that a checkpoint's
    ``base_model_path`` names."""
    import torch
    from lerobot.policies.groot.groot_n1_7 import GR00TN17
    torch.manual_seed(seed)
    config = base_model_config(backbone, action_horizon=action_horizon,
                               num_inference_timesteps=num_inference_timesteps)
    GR00TN17(config, load_backbone_weights=False).save_pretrained(Path(out))
    return Path(out)


def groot_stats(inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The SO-101 statistics, the action's min / max narrowed to the mean -/+ its std (see
    the module docstring)."""
    stats = _stats(inputs, outputs, {'action': ACTION_STATS})
    action = stats['action']
    action['min'], action['max'] = action['mean'] - action['std'], action['mean'] + action['std']
    return stats


def build_groot(out: str | Path, *, base: str | Path | None = None,
                backbone: str | Path | None = None, chunk_size: int = 10,
                n_action_steps: int | None = None, num_inference_timesteps: int = 2,
                cameras: tuple[str, ...] = CAMERAS,
                image_shape: tuple[int, int, int] = IMAGE_SHAPE, seed: int = 0) -> Path:
    """A GR00T checkpoint directory with SO-101 features (two cameras, 6-D state and action in
    degrees), built and saved as lerobot-train saves one (``config.json``,
    ``model.safetensors``, the pre/post-processors with their statistics); about 0.4 M
    parameters, a chunk in well under a second on a CPU.

    ``backbone`` (default ``<out>_backbone``) and ``base`` (default ``<out>_base``) are the
    directories the checkpoint names, written when missing. Inference needs the backbone's
    processor in the Hugging Face cache: ``install_cosmos_processor(HF_HOME, backbone)`` and
    run with that ``HF_HOME`` and ``HF_HUB_OFFLINE=1``.
    """
    import torch
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.groot.configuration_groot import GrootConfig
    from lerobot.policies.groot.modeling_groot import GrootPolicy
    out = Path(out)
    backbone_dir = Path(backbone) if backbone else out.with_name(out.name + '_backbone')
    base_dir = Path(base) if base else out.with_name(out.name + '_base')
    if not (backbone_dir / 'config.json').is_file():
        build_qwen3vl_backbone(backbone_dir)
    if not (base_dir / 'config.json').is_file():
        build_groot_base(base_dir, backbone_dir, action_horizon=chunk_size,
                         num_inference_timesteps=num_inference_timesteps, seed=seed)
    inputs, outputs = _features(image_shape, cameras, 6, 6)
    cfg = GrootConfig(input_features=inputs, output_features=outputs, device='cpu',
                      base_model_path=str(base_dir.resolve()), chunk_size=chunk_size,
                      n_action_steps=n_action_steps or chunk_size,
                      max_state_dim=STATE_ACTION_DIM, max_action_dim=STATE_ACTION_DIM,
                      push_to_hub=False)
    torch.manual_seed(seed)
    policy = GrootPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=groot_stats(cfg.input_features,
                                                                        cfg.output_features))
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out


__all__ = ['PROCESSOR_REPO', 'PROCESSOR_REVISION', 'base_model_config', 'build_groot',
           'build_groot_base', 'build_qwen3vl_backbone', 'groot_stats',
           'install_cosmos_processor']
