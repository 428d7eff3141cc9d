"""X-VLA checkpoints (LeRobot 0.6.1's ``xvla``) built offline with LeRobot's own classes.

X-VLA is a Florence-2 vision-language encoder (a DaViT image tower and the encoder half of a
BART language model, ``transformers``' native ``Florence2Model``) feeding a soft-prompted
transformer that denoises the action chunk. Its config holds the whole Florence-2 config
(``florence_config``), so the backbone is built from the checkpoint alone; only the
instruction's tokenizer is named, by ``tokenizer_name`` (published checkpoints:
``facebook/bart-large``, found in the Hugging Face cache offline), and LeRobot's
``TokenizerProcessorStep`` saves that name, not the tokenizer. The checkpoints built here name
a tokenizer directory written first beside them: a byte-level BPE tokenizer trained locally
with BART's special tokens (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, ``<mask>``) and
its ``<s> text </s>`` template.

X-VLA needs no package beyond transformers (LeRobot's ``xvla`` extra is ``transformers-dep``
only), runs in float32 on a CPU, and has no CUDA-only code path. Its ``predict_action_chunk``
ignores its noise argument (it draws the start of the flow with ``torch.randn``; seed torch
for a repeatable chunk) and it has no real-time chunking (``supports_rtc()`` is false): the
backend plays its chunks as they come.

Choices of these test checkpoints (all are ``XVLAConfig`` fields): ``action_mode='auto'`` (the
model's action width ``max_action_dim``, trimmed to the 6 SO-101 joints on the way out;
LeRobot's default ``ee6d`` is a 20-D end-effector space), state and action normalised with
the dataset statistics (``MEAN_STD``; LeRobot's default is ``IDENTITY``, values as they come)
so that the random outputs (about half a unit: the action decoder's Xavier-initialised
per-domain weights) land within a few degrees of the statistics' mean, inside the joint
limits. Weights are random, as LeRobot initialises them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lerobot_lang_nodes.tiny_models.policies import CAMERAS, IMAGE_SHAPE, _features, _save, _stats
from lerobot_lang_nodes.tiny_models.vla import ACTION_STATS, INSTRUCTIONS

# BART's special tokens in their ids' order (facebook/bart-large: <s> 0, <pad> 1, </s> 2,
# <unk> 3; <mask> is its last id, here the fifth).
BART_SPECIALS: tuple[str, ...] = ('<s>', '<pad>', '</s>', '<unk>', '<mask>')
# A tiny Florence-2: a two-stage DaViT (a 64x64 image -> 8x8 = 64 patch tokens plus one pooled
# token) and a one-layer BART encoder, 32 wide. Florence2Config's own keys (native format).
TINY_VISION = {'depths': [1, 1], 'patch_size': [7, 3], 'patch_stride': [4, 2],
               'patch_padding': [3, 1], 'patch_prenorm': [False, True], 'embed_dim': [16, 32],
               'num_heads': [2, 4], 'num_groups': [2, 4], 'window_size': 4,
               'projection_dim': 32, 'max_position_embeddings': 16,
               'max_temporal_embeddings': 4}
TINY_TEXT = {'model_type': 'bart', 'd_model': 32, 'encoder_layers': 1, 'decoder_layers': 1,
             'encoder_attention_heads': 2, 'decoder_attention_heads': 2,
             'encoder_ffn_dim': 64, 'decoder_ffn_dim': 64, 'max_position_embeddings': 128}
IMAGE_RESOLUTION = (64, 64)  # the resize-with-padding size of every camera image
TOKENIZER_MAX_LENGTH = 16


def build_bart_tokenizer(out: str | Path, texts: tuple[str, ...] = INSTRUCTIONS,
                         vocab_size: int = 400) -> Path:
    """Write a small BART-like tokenizer directory (byte-level BPE trained on ``texts``; any
    text still encodes) that ``AutoTokenizer.from_pretrained`` loads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    out = Path(out)
    tok = Tokenizer(models.BPE(unk_token='<unk>'))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(list(texts), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(BART_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos, eos = tok.token_to_id('<s>'), tok.token_to_id('</s>')
    tok.post_processor = processors.TemplateProcessing(
        single='<s> $A </s>', pair='<s> $A </s> </s> $B </s>',
        special_tokens=[('<s>', bos), ('</s>', eos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token='<s>', eos_token='</s>',
                                   pad_token='<pad>', unk_token='<unk>', mask_token='<mask>',
                                   cls_token='<s>', sep_token='</s>')
    fast.save_pretrained(out)
    return out


def florence_config(vocab_size: int, vision: dict[str, Any] | None = None,
                    text: dict[str, Any] | None = None) -> dict[str, Any]:
    """XVLAConfig's ``florence_config``: the vision and BART text configs with the ids of
    BART_SPECIALS."""
    ids = {'pad_token_id': 1, 'bos_token_id': 0, 'eos_token_id': 2}
    return {'vision_config': dict(vision or TINY_VISION),
            'text_config': {**(text or TINY_TEXT), 'vocab_size': vocab_size, **ids}, **ids}


def xvla_config(tokenizer: str | Path, vocab_size: int, *, chunk_size: int = 10,
                n_action_steps: int | None = None, num_denoising_steps: int = 2,
                cameras: tuple[str, ...] = CAMERAS,
                image_shape: tuple[int, int, int] = IMAGE_SHAPE, **overrides: Any) -> Any:
    """An XVLAConfig with SO-101 features (two cameras, 6-D state and action in degrees), a
    tiny Florence-2 and a tiny action transformer (see the module docstring)."""
    from lerobot.configs import NormalizationMode
    from lerobot.policies.xvla.configuration_xvla import XVLAConfig
    inputs, outputs = _features(image_shape, cameras, 6, 6)
    settings: dict[str, Any] = dict(
        input_features=inputs, output_features=outputs, device='cpu',
        florence_config=florence_config(vocab_size), tokenizer_name=str(Path(tokenizer).resolve()),
        tokenizer_max_length=TOKENIZER_MAX_LENGTH, hidden_size=32, depth=2, num_heads=2,
        num_domains=2, len_soft_prompts=4, dim_time=8, max_len_seq=256, action_mode='auto',
        max_state_dim=8, max_action_dim=8, chunk_size=chunk_size,
        n_action_steps=n_action_steps or chunk_size, num_denoising_steps=num_denoising_steps,
        resize_imgs_with_padding=IMAGE_RESOLUTION,
        normalization_mapping={'VISUAL': NormalizationMode.IDENTITY,
                               'STATE': NormalizationMode.MEAN_STD,
                               'ACTION': NormalizationMode.MEAN_STD},
        push_to_hub=False)
    settings.update(overrides)
    return XVLAConfig(**settings)


def build_xvla(out: str | Path, *, tokenizer: str | Path | None = None, chunk_size: int = 10,
               n_action_steps: int | None = None, num_denoising_steps: int = 2,
               cameras: tuple[str, ...] = CAMERAS,
               image_shape: tuple[int, int, int] = IMAGE_SHAPE, seed: int = 0) -> Path:
    """An X-VLA checkpoint directory with SO-101 features, built and saved as lerobot-train
    saves one (``config.json``, ``model.safetensors``, the pre/post-processors and their
    normaliser statistics); about 0.1 M parameters, a chunk in well under a second on a CPU.

    ``tokenizer`` is the tokenizer directory the checkpoint names (written when missing;
    default ``<out>_tokenizer`` beside the checkpoint). ``num_denoising_steps`` is the flow's
    step count (LeRobot's default is 10; 2 keeps a test chunk cheap).
    """
    import torch
    from lerobot.policies.xvla.modeling_xvla import XVLAPolicy
    from transformers import AutoTokenizer
    torch.manual_seed(seed)
    out = Path(out)
    tok_dir = Path(tokenizer) if tokenizer else out.with_name(out.name + '_tokenizer')
    if not (tok_dir / 'tokenizer.json').is_file():
        build_bart_tokenizer(tok_dir)
    vocab_size = len(AutoTokenizer.from_pretrained(str(tok_dir)))
    cfg = xvla_config(tok_dir, vocab_size, chunk_size=chunk_size, n_action_steps=n_action_steps,
                      num_denoising_steps=num_denoising_steps, cameras=cameras,
                      image_shape=image_shape)
    policy = XVLAPolicy(cfg)
    return _save(policy, cfg, _stats(cfg.input_features, cfg.output_features,
                                     {'action': ACTION_STATS}), out)


__all__ = ['BART_SPECIALS', 'build_bart_tokenizer', 'build_xvla', 'florence_config',
           'xvla_config']
