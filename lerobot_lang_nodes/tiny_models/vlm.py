"""A tiny Idefics3 (SmolVLM family) vision-language model, and a tiny Llama text model.

``build_tiny_vlm`` writes a real checkpoint directory that ``AutoProcessor`` +
``AutoModelForImageTextToText`` load: random weights, a byte-level BPE tokenizer trained from
scratch on the given texts with ``tokenizers``, a chat template, and an Idefics3 processor with
the PIL image processor (no torchvision needed). ``train`` then fits it for a few hundred CPU
steps to answer a list of prompts with exact target strings, rendering every prompt through the
same chat conversion and template the `transformers` planner uses, so the trained answers come
back through save_pretrained -> from_pretrained -> chat template -> generate.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

END = '<end_of_utterance>'
SPECIAL_TOKENS = ('<pad>', '<|im_start|>', END, '<image>', '<fake_token_around_image>',
                  '<global-img>')
# A SmolVLM-like template that also takes plain-string contents (text-only turns).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# One example: (core chat messages, target text). Images in messages are HxWx3 uint8 arrays.
Example = tuple[list[dict], str]


def _train_tokenizer(texts: Iterable[str], vocab_size: int, **named_tokens: str) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``; ``named_tokens`` become the model's
    named special tokens (SmolVLM's ``fake_image_token`` and the like: ``<name>_id`` then
    resolves on the tokenizer, as on the published ones)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token='<pad>', eos_token=END,
                                   bos_token='<|im_start|>', unk_token=None,
                                   chat_template=CHAT_TEMPLATE,
                                   **({'extra_special_tokens': named_tokens} if named_tokens
                                      else {}))


def build_tiny_vlm(out_dir: str | Path, texts: Iterable[str], *, image_size: int = 32,
                   vocab_size: int = 600, hidden_size: int = 64, layers: int = 2,
                   seed: int = 0) -> Path:
    """Write an untrained tiny Idefics3 checkpoint whose tokenizer knows ``texts``' words.

    One 32x32 image becomes one image token (patch 16, pixel-shuffle scale 2), so prompts stay
    short and a CPU step takes milliseconds.
    """
    import torch
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration,
                              Idefics3ImageProcessorPil, Idefics3Processor)

    torch.manual_seed(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(list(texts) + [CHAT_TEMPLATE], vocab_size)
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False, size={'longest_edge': image_size},
        max_image_size={'longest_edge': image_size})
    patch, scale = 16, 2
    image_seq_len = (image_size // patch) ** 2 // scale ** 2
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                  image_seq_len=image_seq_len, chat_template=CHAT_TEMPLATE)
    tokenizer = processor.tokenizer
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = Idefics3Config(
        vision_config={'hidden_size': 32, 'intermediate_size': 64, 'num_hidden_layers': 1,
                       'num_attention_heads': 2, 'image_size': image_size,
                       'patch_size': patch},
        text_config={'model_type': 'llama', 'vocab_size': len(tokenizer),
                     'hidden_size': hidden_size, 'intermediate_size': hidden_size * 2,
                     'num_hidden_layers': layers, 'num_attention_heads': 4,
                     'num_key_value_heads': 4, 'max_position_embeddings': 1024,
                     'pad_token_id': ids['<pad>'], 'bos_token_id': ids['<|im_start|>'],
                     'eos_token_id': ids[END], 'tie_word_embeddings': False},
        scale_factor=scale, image_token_id=ids['<image>'], pad_token_id=ids['<pad>'])
    model = Idefics3ForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids[END]
    model.generation_config.pad_token_id = ids['<pad>']
    model.generation_config.bos_token_id = ids['<|im_start|>']
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def example_texts(examples: Sequence[Example], system_prompt: str = '') -> list[str]:
    """Every text of the examples (for the tokenizer's vocabulary)."""
    texts = [system_prompt] if system_prompt else []
    for messages, target in examples:
        texts.append(target)
        for m in messages:
            content = m['content']
            texts += [content] if isinstance(content, str) else \
                [p['text'] for p in content if p.get('type') == 'text']
    return texts


def _encode(processor: Any, messages: list[dict], target: str, system_prompt: str,
            image_size: int) -> dict[str, Any]:
    from lerobot_lang_nodes.backends.planners.transformers_planner import to_chat

    chat, images = to_chat(messages, system_prompt, image_size)
    prompt = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[prompt], images=[images] if images else None, return_tensors='pt')
    # Target tokens are appended as ids, as the planner's candidate scoring does, so the
    # prompt/answer token boundary is the same in training, generation and scoring.
    tail = processor.tokenizer(target, add_special_tokens=False)['input_ids']
    tail.append(processor.tokenizer.convert_tokens_to_ids(END))
    return {'prompt': inputs['input_ids'][0].tolist(), 'tail': tail,
            'pixel_values': inputs.get('pixel_values'), 'n_images': len(images)}


def train(model_dir: str | Path, examples: Sequence[Example], *, system_prompt: str = '',
          image_size: int = 32, steps: int = 300, lr: float = 3e-3, seed: int = 0) -> float:
    """Fit the checkpoint in ``model_dir`` to answer each example's prompt with its target.

    Full-batch AdamW per group of examples with the same number of images; the result is saved
    back into ``model_dir``. Returns the final mean loss.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    torch.manual_seed(seed)
    random.seed(seed)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    pad = processor.tokenizer.pad_token_id
    groups: dict[int, list[dict]] = {}
    for messages, target in examples:
        enc = _encode(processor, messages, target, system_prompt, image_size)
        groups.setdefault(enc['n_images'], []).append(enc)
    batches = []
    for n_images, encs in groups.items():
        width = max(len(e['prompt']) + len(e['tail']) for e in encs)
        ids = torch.full((len(encs), width), pad, dtype=torch.long)
        labels = torch.full((len(encs), width), -100, dtype=torch.long)
        mask = torch.zeros((len(encs), width), dtype=torch.long)
        for i, e in enumerate(encs):
            seq = e['prompt'] + e['tail']
            ids[i, :len(seq)] = torch.tensor(seq)
            labels[i, len(e['prompt']):len(seq)] = torch.tensor(e['tail'])
            mask[i, :len(seq)] = 1
        batch = {'input_ids': ids, 'attention_mask': mask, 'labels': labels}
        if n_images:
            batch['pixel_values'] = torch.cat([e['pixel_values'] for e in encs])
        batches.append(batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    start = time.monotonic()
    threads = torch.get_num_threads()
    # These tensors are tiny: one thread is several times faster than two that synchronise
    # on every op (and far faster on a machine that is busy with other processes).
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            losses = []
            for batch in batches:
                optimizer.zero_grad()
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            if max(losses) < 2e-3:
                break
    finally:
        torch.set_num_threads(threads)
    final = sum(losses) / len(losses)
    logger.info('trained %d examples in %.1f s, final loss %.4f', len(examples),
                time.monotonic() - start, final)
    model.eval()
    model.save_pretrained(model_dir)
    return final


def build_trained_vlm(out_dir: str | Path, examples: Sequence[Example], *,
                      system_prompt: str = '', image_size: int = 32, steps: int = 300,
                      seed: int = 0) -> Path:
    """``build_tiny_vlm`` + ``train`` on ``examples``: a checkpoint that answers them."""
    out = build_tiny_vlm(out_dir, example_texts(examples, system_prompt),
                         image_size=image_size, seed=seed)
    train(out, examples, system_prompt=system_prompt, image_size=image_size, steps=steps,
          seed=seed)
    return out


def build_tiny_text_lm(out_dir: str | Path, texts: Iterable[str], *, vocab_size: int = 400,
                       hidden_size: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """An untrained tiny Llama causal LM with the same tokenizer recipe (text-only mode)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(list(texts) + [CHAT_TEMPLATE], vocab_size)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size,
                         intermediate_size=hidden_size * 2, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=1024, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# --- training data for the project's tabletop scene ------------------------------------------
SCENE_TASK = 'put the red cube in the bowl'
SCENE_INTERJECTION = 'use the blue cube instead'
SCENE_REPLY = 'put the blue cube in the bowl <say>OK, I will use the blue cube.</say>'
VQA_QUESTION = 'which cube is in the bowl?'
_STEPS = ('reach the {c} cube', 'grasp the {c} cube', 'lift the {c} cube',
          'move the {c} cube over the bowl', 'release the {c} cube')
_FACTS = ('reached the {c} cube', 'grasped the {c} cube', 'lifted the {c} cube',
          'moved the {c} cube over the bowl', 'released the {c} cube')
FIRST_MEMORY = 'nothing done yet'


def scene_steps(colour: str) -> list[str]:
    """The subtask sequence of "put the <colour> cube in the bowl"."""
    return [s.format(c=colour) for s in _STEPS]


def scene_memory(done: str) -> str:
    """The memory note once subtask ``done`` completed ('' = none yet): one fact."""
    if not done:
        return FIRST_MEMORY
    for colour in ('red', 'blue'):
        steps = scene_steps(colour)
        if done in steps:
            return _FACTS[steps.index(done)].format(c=colour)
    raise ValueError(f'unknown subtask {done!r}; known: {scene_steps("red")} (any colour)')


def _oracle(state: Any) -> Any:
    """Answers a perfect planner would give, read from the language state."""
    def answer(kind: str, messages: list[dict], _obs: Any) -> str:
        if kind == 'subtask':
            colour = 'blue' if 'blue' in state.plan else 'red'
            steps = scene_steps(colour)
            if state.subtask in steps:
                return steps[min(steps.index(state.subtask) + 1, len(steps) - 1)]
            return steps[0]
        if kind == 'memory':
            return scene_memory(state.prior_subtask)
        if kind == 'interjection':
            return SCENE_REPLY
        raise ValueError(kind)
    return answer


def scene_planner_examples(templates: Any = None, interject_after: int = 2) -> list[Example]:
    """(prompt, answer) pairs for the scene's planner runs, recorded from the real core loop.

    Two runs of HighLevelPlanner with an oracle generator: the red task to its end, and the
    red task interrupted after ``interject_after`` subtasks by "use the blue cube instead",
    then the blue cube to its end. The prompts are exactly what the planner node sends (same
    templates, same turn order), so a model trained on them replays the runs.
    """
    from lerobot_lang_nodes.core.high_level import HighLevelPlanner
    from lerobot_lang_nodes.core.language import LanguageState

    examples: dict[str, Example] = {}
    for interject in (False, True):
        state = LanguageState()
        answer = _oracle(state)

        class Recorder:
            def generate(self, kind: str, messages: list[dict], obs: Any) -> str:
                out = answer(kind, messages, obs)
                examples.setdefault(repr(messages), (messages, out))
                return out

        planner = HighLevelPlanner(Recorder(), state, templates=templates)
        planner.set_task(SCENE_TASK)
        planner.regenerate(0.0)
        for step in range(1, 8):
            if interject and step == interject_after:
                planner.interject(SCENE_INTERJECTION)
            planner.regenerate(float(step))
    return list(examples.values())


def scene_image(colour_in_bowl: str, height: int = 48, width: int = 64) -> Any:
    """A rendered tabletop: grey table, dark bowl, the named cube inside it, another beside."""
    import numpy as np
    rgb = {'red': (200, 30, 30), 'green': (30, 170, 40), 'blue': (30, 60, 210)}
    img = np.full((height, width, 3), 150, np.uint8)
    yy, xx = np.mgrid[:height, :width]
    bowl = (yy - height * 0.5) ** 2 + (xx - width * 0.7) ** 2 < (height * 0.3) ** 2
    img[bowl] = (60, 50, 40)
    s = height // 6
    cy, cx = int(height * 0.5), int(width * 0.7)
    img[cy - s:cy + s, cx - s:cx + s] = rgb[colour_in_bowl]
    other = next(c for c in rgb if c != colour_in_bowl)
    img[cy - s:cy + s, int(width * 0.2) - s:int(width * 0.2) + s] = rgb[other]
    return img


def scene_vqa_examples(templates: Any = None) -> list[Example]:
    """VQA on two scenes that differ only in which cube is in the bowl."""
    from lerobot_lang_nodes.core import prompts
    kw = {'templates': templates} if templates is not None else {}
    return [(prompts.vqa_messages(VQA_QUESTION, scene_image(c), 'front', **kw),
             f'the {c} cube') for c in ('red', 'blue')]
