"""`transformers` planner: a Hugging Face vision-language or causal LM as the text head.

A checkpoint directory (or a hub id when online) is loaded as ``AutoModelForImageTextToText`` +
``AutoProcessor`` (SmolVLM / Idefics3, Qwen2-VL, PaliGemma fine-tunes) or as
``AutoModelForCausalLM`` + ``AutoTokenizer`` (text-only, also a GGUF file through
``gguf_file=``). The core's chat messages are serialised by the checkpoint's own chat template
(``add_generation_prompt=True``); camera frames travel as images to the processor.

Constrained mode: with ``candidates`` set, a subtask is not generated but chosen among the
candidates by their mean per-token log-likelihood under the model (candidate tokens plus the
end-of-turn token, so a candidate that is only the start of the model's answer does not win);
the mean, not the sum, so longer skills are not penalised for their length.

torch and transformers are imported only when the backend is built.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransformersConfig:
    """The transformers planner's own parameters (planner node: ``transformers.*``).

    Light to import (no torch): the planner node declares them whatever its backend, so a
    params file is checked the same way for every backend.
    """

    model_kind: str = field(default='auto', metadata={
        'doc': 'vlm (AutoModelForImageTextToText + AutoProcessor), text '
               '(AutoModelForCausalLM + AutoTokenizer), or auto (from config.json model_type; '
               'GGUF files are text).', 'choices': ('auto', 'vlm', 'text')})
    gguf_file: str = field(default='', metadata={
        'doc': 'GGUF file name inside model_path (or give the .gguf path as '
               'model_path); empty = not GGUF.'})
    image_cameras: tuple[str, ...] = field(default=('front',), metadata={
        'doc': 'Vision-language models: cameras whose latest frame goes into the '
               'subtask and interjection prompts (VQA uses the camera asked about); each must '
               'be in `cameras`; empty = text-only prompts.'})
    image_size: int = field(default=0, metadata={
        'doc': 'Resize frames to image_size x image_size pixels before the '
               'processor; 0 keeps the frame size (the processor still resizes as the model '
               'needs).', 'range': (0, 4096)})
    generation_timeout_s: float = field(default=30.0, metadata={
        'doc': 'Stop a generation after this long (generate(max_time=...)); it '
               'counts as a timeout and a failure, the previous text stays. 0 disables.',
        'range': (0.0, 3600.0)})
    candidates: tuple[str, ...] = field(default=(), metadata={
        'doc': 'Constrained mode: allowed subtasks (e.g. the skills the policy '
               'was trained on); the subtask is the candidate the model scores highest instead '
               'of free text. Empty (and no candidates_file) = free generation.'})
    candidates_file: str = field(default='', metadata={
        'doc': 'Constrained mode: a text file with one more candidate per line '
               '(# comments allowed); empty = none.'})

MODEL_KINDS = ('auto', 'vlm', 'text')
DEVICES_HELP = 'cpu, cuda, cuda:N or auto'
DTYPES = ('auto', 'float32', 'bfloat16', 'float16')
# Kinds whose prompt gets the latest frames of `image_cameras` (VQA carries its own image;
# memory only summarises text that was already generated).
IMAGE_KINDS = ('subtask', 'interjection')
_WEIGHT_GLOBS = ('*.safetensors', 'pytorch_model*.bin', '*.safetensors.index.json',
                 'pytorch_model.bin.index.json')
_TOKENIZER_FILES = ('tokenizer.json', 'tokenizer_config.json', 'tokenizer.model', 'vocab.json')
_PROCESSOR_FILES = ('processor_config.json', 'preprocessor_config.json')


class ModelLoadError(RuntimeError):
    """The checkpoint cannot be loaded; the message names what is missing or wrong."""


class GenerationTimeout(TimeoutError):
    """A generation was stopped by ``generation_timeout_s`` before it ended."""


@dataclass(frozen=True)
class Checkpoint:
    """Where and what a checkpoint is, found before any weights are read."""

    source: str  # directory or hub id handed to from_pretrained
    gguf_file: str  # file name inside ``source`` ('' unless GGUF)
    kind: str  # 'vlm' or 'text'
    model_type: str


def _mapping_names() -> tuple[Mapping[str, str], Mapping[str, str]]:
    from transformers.models.auto import modeling_auto
    return (modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
            modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _is_offline() -> bool:
    return os.environ.get('HF_HUB_OFFLINE', '').strip().lower() in ('1', 'true', 'yes', 'on')


def inspect_checkpoint(model_path: str, gguf_file: str = '', model_kind: str = 'auto'
                       ) -> Checkpoint:
    """Check the files of a checkpoint and decide vlm / text; ModelLoadError names the gap."""
    if model_kind not in MODEL_KINDS:
        raise ModelLoadError(f'model_kind is {model_kind!r}; expected one of {list(MODEL_KINDS)}')
    if not model_path:
        raise ModelLoadError('model_path is empty; set it to a checkpoint directory (with '
                             'config.json) or a .gguf file')
    path = Path(model_path).expanduser()
    if path.is_file() and path.suffix == '.gguf':
        path, gguf_file = path.parent, path.name
    if gguf_file:
        return _inspect_gguf(path, gguf_file, model_kind)
    if not path.exists():
        if '/' in model_path and not model_path.startswith(('/', '.', '~')) \
                and not _is_offline():
            return _inspect_hub(model_path, model_kind)
        raise ModelLoadError(f'model_path {model_path!r} does not exist; expected a checkpoint '
                             'directory (config.json, weights, tokenizer) or a .gguf file'
                             + (' (hub ids need network access; HF_HUB_OFFLINE is set)'
                                if _is_offline() else ''))
    if not path.is_dir():
        raise ModelLoadError(f'model_path {model_path!r} is a file but not a .gguf file; point '
                             'it at the checkpoint directory')
    files = sorted(p.name for p in path.iterdir())
    config_file = path / 'config.json'
    if not config_file.is_file():
        raise ModelLoadError(f'no config.json in {str(path)!r} (files: {files[:20]}); this is '
                             'not a transformers checkpoint directory (save_pretrained writes '
                             'one)')
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f'{str(config_file)!r} is not valid JSON ({exc}); the checkpoint '
                             'is corrupt, save it again') from exc
    if not any(any(path.glob(g)) for g in _WEIGHT_GLOBS):
        raise ModelLoadError(f'no weights in {str(path)!r}: expected model.safetensors (or '
                             f'sharded *.safetensors / pytorch_model.bin); files: {files[:20]}')
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):
        raise ModelLoadError(f'no tokenizer in {str(path)!r}: expected one of '
                             f'{list(_TOKENIZER_FILES)}; save the tokenizer (or processor) '
                             'next to the model')
    model_type = str(config.get('model_type', ''))
    kind = _kind_of(model_type, model_kind, str(path))
    if kind == 'vlm' and not any((path / f).is_file() for f in _PROCESSOR_FILES):
        raise ModelLoadError(f'no image processor in {str(path)!r}: expected one of '
                             f'{list(_PROCESSOR_FILES)} for the vision-language model '
                             f'{model_type!r}; save the processor with save_pretrained, or set '
                             "model_kind to 'text'")
    return Checkpoint(str(path), '', kind, model_type)


def _kind_of(model_type: str, model_kind: str, where: str) -> str:
    vlm_types, text_types = _mapping_names()
    if not model_type:
        raise ModelLoadError(f'config.json in {where!r} has no model_type; the checkpoint is '
                             'incomplete')
    if model_kind in ('auto', 'vlm') and model_type in vlm_types:
        return 'vlm'
    if model_kind in ('auto', 'text') and model_type in text_types:
        return 'text'
    wanted = {'auto': 'image-text-to-text or causal LM', 'vlm': 'image-text-to-text',
              'text': 'causal LM'}[model_kind]
    raise ModelLoadError(f'unsupported architecture {model_type!r} in {where!r}: this '
                         f'transformers has no {wanted} model for it (model_kind='
                         f'{model_kind!r}); use a supported checkpoint or another model_kind')


def _inspect_gguf(path: Path, gguf_file: str, model_kind: str) -> Checkpoint:
    if model_kind == 'vlm':
        raise ModelLoadError('model_kind is vlm, but GGUF files load as text-only models; set '
                             "model_kind to 'text' or 'auto'")
    if not (path / gguf_file).is_file():
        raise ModelLoadError(f'GGUF file {gguf_file!r} not found in {str(path)!r}; set '
                             'model_path to the .gguf file or to its directory + gguf_file')
    return Checkpoint(str(path), gguf_file, 'text', 'gguf')


def _inspect_hub(model_id: str, model_kind: str) -> Checkpoint:
    from transformers import AutoConfig
    try:
        config = AutoConfig.from_pretrained(model_id)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f'{model_id!r} is neither a local path nor a loadable hub model: '
                             f'{exc}') from exc
    model_type = getattr(config, 'model_type', '')
    return Checkpoint(model_id, '', _kind_of(model_type, model_kind, model_id), model_type)


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when available, else 'cpu'; other values are checked."""
    import torch
    device = (device or 'auto').strip()
    if device == 'auto':
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    if device == 'cpu':
        return device
    if device == 'cuda' or (device.startswith('cuda:') and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ModelLoadError(f'device is {device!r} but CUDA is not available here; use '
                                 "'cpu' or 'auto'")
        return device
    raise ModelLoadError(f'device is {device!r}; expected {DEVICES_HELP}')


def resolve_dtype(dtype: str, device: str) -> Any:
    """'auto' -> bfloat16 on a GPU that supports it, else float32 (CPU half is slow)."""
    import torch
    if dtype not in DTYPES:
        raise ModelLoadError(f'dtype is {dtype!r}; expected one of {list(DTYPES)}')
    if dtype == 'auto':
        if device.startswith('cuda') and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, dtype)


def to_pil(image: Any, image_size: int = 0) -> Any:
    """HxWx3 uint8 RGB (or a PIL image) -> PIL RGB, resized to image_size^2 when > 0."""
    from PIL import Image
    import numpy as np
    if not isinstance(image, Image.Image):
        array = np.asarray(image)
        if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
            raise ValueError(f'image has shape {array.shape} and dtype {array.dtype}; expected '
                             'HxWx3 uint8 RGB')
        image = Image.fromarray(array, 'RGB')
    image = image.convert('RGB')
    if image_size > 0 and image.size != (image_size, image_size):
        image = image.resize((image_size, image_size), Image.BILINEAR)
    return image


def to_chat(messages: Sequence[Mapping[str, Any]], system_prompt: str = '',
            image_size: int = 0, with_images: bool = True) -> tuple[list[dict], list[Any]]:
    """The core's messages -> (chat messages for apply_chat_template, PIL images in order).

    Every content becomes a list of parts (``{'type': 'image'}`` placeholders and text), the
    form vision-language chat templates expect. Without images (text-only models) each
    content is a plain string.
    """
    chat: list[dict] = []
    images: list[Any] = []
    if system_prompt:
        chat.append({'role': 'system', 'content': ([{'type': 'text', 'text': system_prompt}]
                                                   if with_images else system_prompt)})
    for message in messages:
        content = message.get('content', '')
        parts = [{'type': 'text', 'text': content}] if isinstance(content, str) else content
        out: list[dict] = []
        for part in parts:
            if part.get('type') == 'image':
                if not with_images:
                    raise ValueError('this model is text-only and cannot look at images; use a '
                                     'vision-language checkpoint for questions about the scene')
                images.append(to_pil(part['image'], image_size))
                out.append({'type': 'image'})
            elif part.get('type') == 'text':
                out.append({'type': 'text', 'text': str(part.get('text', ''))})
        if with_images:
            chat.append({'role': message['role'], 'content': out})
        else:
            chat.append({'role': message['role'],
                         'content': ''.join(p['text'] for p in out)})
    return chat, images


def read_candidates(candidates: Sequence[str], candidates_file: str = '') -> list[str]:
    """The constrained-mode subtasks: the list plus one per non-empty line of the file."""
    out = [c.strip() for c in candidates if c and c.strip()]
    if candidates_file:
        try:
            text = Path(candidates_file).expanduser().read_text()
        except OSError as exc:
            raise ModelLoadError(f'candidates_file {candidates_file!r} cannot be read ({exc}); '
                                 'give a text file with one subtask per line') from exc
        out += [line.strip() for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith('#')]
    return list(dict.fromkeys(out))  # keep order, drop duplicates


class TransformersPlanner:
    """TextGenerator over a transformers model; built as ``TransformersPlanner(cfg)``."""

    def __init__(self, cfg: Any) -> None:
        from lerobot_lang_nodes import dependencies, paths
        from lerobot_lang_nodes.core import prompts

        own: TransformersConfig = cfg.transformers
        self.model_path = str(cfg.model_path)
        self.image_cameras = tuple(own.image_cameras)
        self.image_size = int(own.image_size)
        self.max_new_tokens = int(cfg.max_new_tokens)
        self.timeout_s = float(own.generation_timeout_s)
        self.min_new_tokens = int(cfg.min_new_tokens)
        self.temperature = float(cfg.temperature)
        self.top_p = float(cfg.top_p)
        prompts_file = cfg.prompts_file or paths.config_path('prompts.yaml')
        self.system_prompt = prompts.load_templates(
            prompts_file, cfg.system_prompt or None).system_prompt
        self.candidates = read_candidates(own.candidates, own.candidates_file)
        self.last_scores: dict[str, float] = {}
        self.load_time_s = 0.0
        start = time.monotonic()
        # Without the model stack: one line naming requirements/ml.txt on the planner's log
        # and /diagnostics, not `No module named 'torch'`.
        with dependencies.model_stack_required('the transformers planner backend'):
            self.checkpoint = inspect_checkpoint(self.model_path, own.gguf_file, own.model_kind)
            self.device = resolve_device(cfg.device)
            self.dtype = resolve_dtype(cfg.dtype, self.device)
            self._load()
        self.load_time_s = time.monotonic() - start
        logger.info('planner model ready in %.1f s: %s (%s, %s), %s on %s, %.1fM parameters%s',
                    self.load_time_s, self.model_path, self.checkpoint.kind,
                    self.checkpoint.model_type, str(self.dtype).replace('torch.', ''),
                    self.device, self.parameters / 1e6,
                    f', constrained to {len(self.candidates)} candidates' if self.candidates
                    else '')

    # --- loading ------------------------------------------------------------------------
    def _load(self) -> None:
        import transformers
        ckpt = self.checkpoint
        kwargs: dict[str, Any] = {'gguf_file': ckpt.gguf_file} if ckpt.gguf_file else {}
        what = 'processor' if ckpt.kind == 'vlm' else 'tokenizer'
        logger.info('loading %s model %s%s (%s) on %s: %s...', ckpt.kind, ckpt.source,
                    f'/{ckpt.gguf_file}' if ckpt.gguf_file else '', ckpt.model_type,
                    self.device, what)
        t0 = time.monotonic()
        try:
            if ckpt.kind == 'vlm':
                self.processor = transformers.AutoProcessor.from_pretrained(ckpt.source)
                self.tokenizer = self.processor.tokenizer
            else:
                self.processor = None
                self.tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt.source,
                                                                            **kwargs)
        except (OSError, ValueError, KeyError, TypeError, ImportError) as exc:
            raise ModelLoadError(f'loading the {what} of {ckpt.source!r} failed: '
                                 f'{type(exc).__name__}: {exc}') from exc
        if not getattr(self.tokenizer, 'chat_template', None) and not getattr(
                self.processor, 'chat_template', None):
            raise ModelLoadError(f'the {what} of {ckpt.source!r} has no chat template; save one '
                                 'with the checkpoint (the prompts are chat messages)')
        logger.info('%s loaded in %.1f s; loading weights...', what, time.monotonic() - t0)
        t0 = time.monotonic()
        auto = (transformers.AutoModelForImageTextToText if ckpt.kind == 'vlm'
                else transformers.AutoModelForCausalLM)
        from safetensors import SafetensorError
        try:
            self.model = auto.from_pretrained(ckpt.source, dtype=self.dtype, **kwargs)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError,
                SafetensorError) as exc:
            raise ModelLoadError(f'loading the weights of {ckpt.source!r} failed: '
                                 f'{type(exc).__name__}: {exc}') from exc
        self.model.to(self.device).eval()
        self.parameters = sum(p.numel() for p in self.model.parameters())
        logger.info('weights loaded in %.1f s', time.monotonic() - t0)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = [e for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
        if not self.eos_ids:
            raise ModelLoadError(f'{ckpt.source!r} defines no end-of-sequence token '
                                 '(generation_config.eos_token_id, tokenizer.eos_token)')
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]

    # --- the TextGenerator protocol -----------------------------------------------------
    def generate(self, kind: str, messages: list[dict], observation: Mapping | None) -> str:
        messages = self._with_frames(kind, messages, observation)
        if self.candidates and kind == 'subtask':
            return self.choose(messages)
        inputs = self.encode(messages)
        import torch
        kwargs: dict[str, Any] = {'max_new_tokens': self.max_new_tokens,
                                  'min_new_tokens': self.min_new_tokens,
                                  'pad_token_id': self.pad_id, 'eos_token_id': self.eos_ids}
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:  # greedy; sampling knobs are left out so generate() does not warn about them
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if self.timeout_s > 0:
            kwargs['max_time'] = self.timeout_s
        start = time.monotonic()
        with torch.inference_mode():
            out = self.model.generate(**inputs, **kwargs)
        elapsed = time.monotonic() - start
        new = out[0, inputs['input_ids'].shape[1]:].tolist()
        ended = any(t in self.eos_ids for t in new) or len(new) >= self.max_new_tokens
        if self.timeout_s > 0 and not ended and elapsed >= self.timeout_s:
            raise GenerationTimeout(f'{kind} generation stopped by generation_timeout_s='
                                    f'{self.timeout_s:g} after {len(new)} tokens '
                                    f'({elapsed:.2f} s)')
        return self.tokenizer.decode(new, skip_special_tokens=True).strip()

    def _with_frames(self, kind: str, messages: list[dict], observation: Mapping | None
                     ) -> list[dict]:
        """Attach the latest frames of ``image_cameras`` to the first user turn (VLM only)."""
        if self.checkpoint.kind != 'vlm' or kind not in IMAGE_KINDS or not messages:
            return messages
        frames = (observation or {}).get('images') or {}
        parts = [{'type': 'image', 'image': frames[c], 'camera': c}
                 for c in self.image_cameras if frames.get(c) is not None]
        if not parts:
            return messages
        first = messages[0]
        content = first.get('content', '')
        if not isinstance(content, str):
            return messages  # the builder placed images itself
        return [{**first, 'content': parts + [{'type': 'text', 'text': content}]},
                *messages[1:]]

    def encode(self, messages: list[dict]) -> dict[str, Any]:
        """Chat template (with generation prompt) -> model inputs on the device."""
        vlm = self.checkpoint.kind == 'vlm'
        chat, images = to_chat(messages, self.system_prompt, self.image_size, with_images=vlm)
        if vlm:
            prompt = self.processor.apply_chat_template(chat, add_generation_prompt=True,
                                                        tokenize=False)
            inputs = self.processor(text=[prompt], images=[images] if images else None,
                                    return_tensors='pt')
        else:
            prompt = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True,
                                                        tokenize=False)
            inputs = self.tokenizer([prompt], return_tensors='pt', add_special_tokens=False)
        return {k: v.to(self.device) for k, v in inputs.items()}

    # --- constrained mode ---------------------------------------------------------------
    def score(self, messages: list[dict], candidates: Sequence[str]) -> dict[str, float]:
        """Mean log-probability per token of each candidate (+ end of turn) after the prompt.

        One batched forward pass: the prompt is shared, candidates are right-padded.
        """
        import torch
        inputs = self.encode(messages)
        prompt = inputs['input_ids'][0]
        n, p = len(candidates), prompt.shape[0]
        tails = [self.tokenizer(c, add_special_tokens=False)['input_ids'] + [self.eos_ids[0]]
                 for c in candidates]
        width = max(len(t) for t in tails)
        ids = torch.full((n, p + width), self.pad_id, dtype=prompt.dtype, device=self.device)
        mask = torch.zeros((n, p + width), dtype=torch.long, device=self.device)
        for i, tail in enumerate(tails):
            ids[i, :p] = prompt
            ids[i, p:p + len(tail)] = torch.tensor(tail, dtype=prompt.dtype)
            mask[i, :p + len(tail)] = 1
        extra = {k: v.repeat(n, *([1] * (v.dim() - 1))) for k, v in inputs.items()
                 if k not in ('input_ids', 'attention_mask')}
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, **extra).logits
        logp = torch.log_softmax(logits[:, p - 1:-1].float(), dim=-1)
        picked = logp.gather(-1, ids[:, p:].unsqueeze(-1)).squeeze(-1)
        scores = {}
        for i, (cand, tail) in enumerate(zip(candidates, tails)):
            scores[cand] = float(picked[i, :len(tail)].mean())
        return scores

    def choose(self, messages: list[dict]) -> str:
        """The candidate with the highest score; the scores are kept in ``last_scores``."""
        scores = self.score(messages, self.candidates)
        self.last_scores = scores
        best = max(scores, key=scores.get)
        logger.info('constrained subtask %r; scores (mean log-prob per token): %s', best,
                    ', '.join(f'{c!r}: {s:.3f}' for c, s in
                              sorted(scores.items(), key=lambda kv: -kv[1])))
        return best

    # --- node hooks ---------------------------------------------------------------------
    def diagnostics(self) -> dict[str, Any]:
        """Backend facts for /diagnostics."""
        out: dict[str, Any] = {
            'model_kind': self.checkpoint.kind, 'model_type': self.checkpoint.model_type,
            'device': self.device, 'dtype': str(self.dtype).replace('torch.', ''),
            'parameters': self.parameters, 'load_time_s': self.load_time_s,
            'constrained': bool(self.candidates)}
        if self.candidates:
            out['candidates'] = len(self.candidates)
            out['last_scores'] = json.dumps({c: round(s, 4) for c, s in
                                             self.last_scores.items()})
        return out

    def close(self) -> None:
        """Drop the model so its (GPU) memory is freed before the process exits."""
        self.model = None
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # torch gone at interpreter shutdown: nothing to free
            pass
