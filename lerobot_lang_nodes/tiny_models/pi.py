"""PI0 and PI0.5 checkpoints (LeRobot 0.6.1) with random weights, built offline and fast.

Why they are full size. LeRobot 0.6.1 builds PI0 / PI0.5 from named Gemma variants, and only
``paligemma_variant='gemma_2b'`` (with ``action_expert_variant='gemma_300m'``) runs: a
``gemma_300m`` backbone fails at inference (its 1024-wide prefix meets 2048-wide projections in
``embed_prefix``). So a test checkpoint has the published model's ~4 B parameters (PaliGemma
3B with its untied LM head and a 300 M action expert). What can be made cheap is everything
around them: ``image_resolution`` (14, 14) (one SigLIP patch, one token per camera), two
denoising steps, a short chunk and a short ``tokenizer_max_length`` (PI0.5 writes the
discretised state into its prompt, so it needs a few more tokens than PI0).

The fast build. Constructing the policy the ordinary way draws every weight in float32 (a
minute or more and twice the model's memory). Here the policy is constructed on the ``meta``
device (shapes and dtypes, no storage), and ``model.safetensors`` is written tensor by tensor
straight to disk: small N(0, 0.02) values (slices of one seeded block, at memcpy speed),
biases 0, LayerNorm weights 1, Gemma RMSNorm weights 0 (Gemma scales by 1 + w). The action
output projection is shrunk (``action_scale``) and the action statistics are tight
(``ACTION_STATS``, q01 / q99 for PI0.5's QUANTILES normalisation): a flow-matching policy starts
each chunk from unit noise, which the small velocity barely moves, so the actions spread by
about the action std around the mean, well inside the SO-101's joint limits. Building takes
well under a minute and little memory.

fp8 storage. The large tensors are stored as ``float8_e4m3fn`` (about 4 GB instead of 8-9 GB
in bfloat16 / float32); loading casts them back to the model's dtypes (``load_state_dict``
copies), so the checkpoint loads with LeRobot's own ``from_pretrained`` unchanged. LeRobot
reads the whole file before copying it into the model: loading takes about 10 GB of anonymous
memory plus the file's pages, which fits a 24 GB machine only when nothing else that size runs
(build, load and infer in separate processes, one at a time).

The tokenizer. LeRobot's PI0 / PI0.5 processors load the tokenizer by its hub id
``google/paligemma-3b-pt-224`` (the saved ``policy_preprocessor.json`` names the id, not a
file). Offline (``HF_HUB_OFFLINE=1``) it is found only in the Hugging Face cache:
``$HF_HOME/hub/models--google--paligemma-3b-pt-224/snapshots/<40 hex>/`` holding the tokenizer
files (plus a minimal ``config.json``), with ``refs/main`` naming that snapshot. A user runs a
real PI0 checkpoint offline after downloading the real tokenizer into that cache once.
``install_paligemma_tokenizer`` writes a small byte-level BPE tokenizer there instead, for
tests: only ever into a dedicated ``HF_HOME``, never the user's own cache, where it would take
the place of the real one.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from lerobot_lang_nodes.tiny_models.policies import CAMERAS, IMAGE_SHAPE, _features, _stats
from lerobot_lang_nodes.tiny_models.vla import ACTION_STATS, INSTRUCTIONS

KINDS: tuple[str, ...] = ('pi0', 'pi05')
TOKENIZER_REPO = 'google/paligemma-3b-pt-224'
# The snapshot revision of the installed test tokenizer (any 40 hex digits serve offline).
TOKENIZER_REVISION = hashlib.sha1(b'lerobot_lang_nodes tiny paligemma tokenizer').hexdigest()
# PaliGemma's special tokens and their ids.
TOKENIZER_SPECIALS: tuple[str, ...] = ('<pad>', '<eos>', '<bos>', '<unk>')
# Language tokens: PI0's prompt is the instruction; PI0.5's is "Task: <instruction>, State:
# <6 numbers 0..255>;\nAction: " (about 22 tokens with the test tokenizer).
TOKENIZER_MAX_LENGTH = {'pi0': 16, 'pi05': 32}
# Tensors with at least this many values are stored as STORE_DTYPE; smaller ones (norms,
# projections of the state and actions) keep the model's dtype, and their exact values.
LARGE = 1 << 20
STORE_DTYPE = 'float8_e4m3fn'
_SAFETENSORS_DTYPES = {'float32': 'F32', 'float16': 'F16', 'bfloat16': 'BF16',
                       'float8_e4m3fn': 'F8_E4M3', 'int64': 'I64'}


def pi_stats(inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tiny policies' statistics (SO-101 units, ``ACTION_STATS`` for the action) with the
    1 % / 99 % quantiles PI0.5 normalises with: the state's min / max; for the action mean
    -/+ std, so that QUANTILES unnormalisation spreads unit noise as MEAN_STD does."""
    import torch
    stats = _stats(inputs, outputs, {'action': ACTION_STATS})
    for key, s in stats.items():
        if key.startswith('observation.images.'):
            s['q01'], s['q99'] = torch.zeros_like(s['min']), torch.ones_like(s['max'])
        elif key == 'action':
            s['q01'], s['q99'] = s['mean'] - s['std'], s['mean'] + s['std']
        else:
            s['q01'], s['q99'] = s['min'].clone(), s['max'].clone()
    return stats


def pi_config(kind: str = 'pi0', *, chunk_size: int = 10, n_action_steps: int | None = None,
              num_inference_steps: int = 2, image_resolution: tuple[int, int] = (14, 14),
              tokenizer_max_length: int | None = None, cameras: tuple[str, ...] = CAMERAS,
              image_shape: tuple[int, int, int] = IMAGE_SHAPE, **overrides: Any) -> Any:
    """A PI0Config / PI05Config with SO-101 features (two cameras, 6-D state and action in
    degrees) and the cheapest settings that run (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f'kind {kind!r} is not one of {list(KINDS)}')
    if kind == 'pi0':
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
    else:
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
    inputs, outputs = _features(image_shape, cameras, 6, 6)
    return Config(input_features=inputs, output_features=outputs, device='cpu',
                  paligemma_variant='gemma_2b', action_expert_variant='gemma_300m',
                  dtype='bfloat16', image_resolution=tuple(image_resolution),
                  chunk_size=chunk_size, n_action_steps=n_action_steps or chunk_size,
                  num_inference_steps=num_inference_steps,
                  tokenizer_max_length=tokenizer_max_length or TOKENIZER_MAX_LENGTH[kind],
                  push_to_hub=False, **overrides)


def _fill(module: Any, name: str) -> str:
    """How a tensor of a random checkpoint is filled: 'zero', 'one' or 'random'."""
    import torch
    leaf = name.rsplit('.', 1)[-1]
    if leaf == 'bias':
        return 'zero'
    if isinstance(module, torch.nn.LayerNorm):
        return 'one'  # SigLIP's LayerNorm: y = w * x_hat
    if 'RMSNorm' in type(module).__name__:
        return 'zero'  # Gemma's RMSNorm: y = (1 + w) * x_hat
    return 'random'


def write_random_safetensors(policy: Any, path: Path, *, std: float = 0.02,
                             scaled: dict[str, float] | None = None, seed: int = 0,
                             store_dtype: str = STORE_DTYPE, large: int = LARGE) -> int:
    """Write ``policy``'s state dict (a model on the ``meta`` device: only names, shapes and
    dtypes) as a safetensors file of random values, one tensor at a time; returns the number
    of values. ``scaled`` multiplies the std of the named tensors."""
    import numpy as np
    import torch
    gen = torch.Generator().manual_seed(seed)
    store = getattr(torch, store_dtype)
    block_len = (1 << 24) + 7919  # seeded N(0, std) values the large tensors are sliced from
    block = (torch.randn(block_len, generator=gen) * std).to(store).view(torch.uint8).numpy()
    itemsize = store.itemsize
    entries = []  # (name, dtype, shape, fill, nbytes)
    for name, tensor in policy.state_dict(keep_vars=True).items():
        module = policy.get_submodule(name.rsplit('.', 1)[0]) if '.' in name else policy
        fill = _fill(module, name)
        dtype = store if tensor.numel() >= large and tensor.is_floating_point() else tensor.dtype
        if str(dtype).removeprefix('torch.') not in _SAFETENSORS_DTYPES:
            raise TypeError(f'{name}: no safetensors name for {dtype}')
        entries.append((name, dtype, tuple(tensor.shape), fill,
                        tensor.numel() * dtype.itemsize))
    header: dict[str, Any] = {'__metadata__': {'format': 'pt'}}
    offset = 0
    for name, dtype, shape, _, nbytes in entries:
        header[name] = {'dtype': _SAFETENSORS_DTYPES[str(dtype).removeprefix('torch.')],
                        'shape': list(shape), 'data_offsets': [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(',', ':')).encode()
    raw += b' ' * (-len(raw) % 8)  # the data starts 8-byte aligned
    total = 0
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(raw)))
        f.write(raw)
        for name, dtype, shape, fill, nbytes in entries:
            n = nbytes // dtype.itemsize
            total += n
            if fill == 'random' and dtype == store:
                done = 0
                while done < nbytes:
                    start = int(torch.randint(0, block_len // 2, (1,), generator=gen)) * itemsize
                    k = min(nbytes - done, block.nbytes - start)
                    f.write(memoryview(block[start:start + k]))
                    done += k
                continue
            if fill == 'random':
                values = torch.randn(n, generator=gen) * (std * (scaled or {}).get(name, 1.0))
            else:
                values = torch.full((n,), 1.0 if fill == 'one' else 0.0)
            f.write(np.ascontiguousarray(values.to(dtype).view(torch.uint8).numpy()).data)
    return total


def build_pi(out: str | Path, kind: str = 'pi0', *, chunk_size: int = 10,
             n_action_steps: int | None = None, num_inference_steps: int = 2,
             image_resolution: tuple[int, int] = (14, 14),
             tokenizer_max_length: int | None = None, action_scale: float = 0.1,
             init_std: float = 0.02, seed: int = 0, cameras: tuple[str, ...] = CAMERAS,
             image_shape: tuple[int, int, int] = IMAGE_SHAPE,
             store_dtype: str = STORE_DTYPE) -> Path:
    """Write a PI0 (``kind='pi0'``) or PI0.5 (``'pi05'``) checkpoint directory as lerobot-train
    saves one: ``config.json``, ``model.safetensors`` (random weights, large tensors in
    ``store_dtype``), ``policy_preprocessor.json`` / ``policy_postprocessor.json`` and their
    normaliser state files.

    The processors load the PaliGemma tokenizer by its hub id: run with ``HF_HOME`` holding
    it (``install_paligemma_tokenizer``) and ``HF_HUB_OFFLINE=1``. ``action_scale`` shrinks the
    random action output projection (see the module docstring). Meant to run in a process of
    its own (a test's child process): loading the checkpoint takes ~10 GB on its own.
    """
    import torch
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    out = Path(out)
    cfg = pi_config(kind, chunk_size=chunk_size, n_action_steps=n_action_steps,
                    num_inference_steps=num_inference_steps, image_resolution=image_resolution,
                    tokenizer_max_length=tokenizer_max_length, cameras=cameras,
                    image_shape=image_shape)
    # The processors first: they fail fast (no tokenizer) before the file is written.
    pre, post = make_pre_post_processors(cfg, dataset_stats=pi_stats(cfg.input_features,
                                                                     cfg.output_features))
    cfg.device = 'meta'  # the policy's __init__ ends with .to(config.device)
    with torch.device('meta'):
        policy = get_policy_class(kind)(cfg)
    cfg.device = 'cpu'
    out.mkdir(parents=True, exist_ok=True)
    write_random_safetensors(policy, out / 'model.safetensors', std=init_std, seed=seed,
                             scaled={'model.action_out_proj.weight': action_scale},
                             store_dtype=store_dtype)
    cfg.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out


def install_paligemma_tokenizer(hf_home: str | Path,
                                texts: tuple[str, ...] = INSTRUCTIONS) -> Path:
    """Write a small byte-level BPE tokenizer (PaliGemma's special tokens, a ``<bos>`` before
    every text; any text encodes) into ``hf_home``'s hub cache as ``TOKENIZER_REPO``, where
    LeRobot's PI0 / PI0.5 processors look for it offline. Returns the snapshot directory.

    Refuses a cache whose ``refs/main`` names another snapshot: that is a real tokenizer,
    which this one must never replace."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    repo = Path(hf_home) / 'hub' / ('models--' + TOKENIZER_REPO.replace('/', '--'))
    ref = repo / 'refs' / 'main'
    if ref.is_file() and ref.read_text().strip() != TOKENIZER_REVISION:
        raise FileExistsError(f'{ref} names snapshot {ref.read_text().strip()}, not the test '
                              f'tokenizer\'s: {hf_home} holds a real {TOKENIZER_REPO} '
                              'tokenizer; install the test one into another HF_HOME')
    snapshot = repo / 'snapshots' / TOKENIZER_REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token='<unk>'))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [*texts, 'Task: , State: ;\nAction: ', ' '.join(str(i) for i in range(256))]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=list(TOKENIZER_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single='<bos> $A', pair='<bos> $A $B',
        special_tokens=[('<bos>', tok.token_to_id('<bos>'))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token='<pad>', eos_token='<eos>',
                                   bos_token='<bos>', unk_token='<unk>')
    fast.save_pretrained(snapshot)
    (snapshot / 'config.json').write_text(json.dumps({'model_type': 'paligemma'}) + '\n')
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(TOKENIZER_REVISION)
    return snapshot


def main(argv: list[str] | None = None) -> None:
    """``python -m lerobot_lang_nodes.tiny_models.pi tokenizer HF_HOME`` installs the test
    tokenizer; then ``HF_HOME=... HF_HUB_OFFLINE=1 python -m lerobot_lang_nodes.tiny_models.pi
    pi0|pi05 OUT [--chunk-size N] [--n-action-steps N]`` builds a checkpoint."""
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('kind', choices=(*KINDS, 'tokenizer'))
    parser.add_argument('out', type=Path, help='checkpoint directory (HF_HOME for tokenizer)')
    parser.add_argument('--chunk-size', type=int, default=10)
    parser.add_argument('--n-action-steps', type=int, default=None)
    args = parser.parse_args(argv)
    if args.kind == 'tokenizer':
        print(install_paligemma_tokenizer(args.out))
    else:
        print(build_pi(args.out, args.kind, chunk_size=args.chunk_size,
                       n_action_steps=args.n_action_steps))


__all__ = ['KINDS', 'TOKENIZER_REPO', 'TOKENIZER_REVISION',
           'build_pi', 'install_paligemma_tokenizer', 'pi_config', 'pi_stats',
           'write_random_safetensors']


if __name__ == '__main__':
    main()
