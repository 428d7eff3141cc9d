"""LeRobot policy `two_head`: one small model with a text head and an action head.

The trunk is a transformers GPT-2 over bytes (no tokenizer files to ship or download). Its LM
head is the text head (``select_message``: subtask, memory, interjection replies); the mean of
its last hidden states over an instruction conditions the action head, an MLP that maps
[state, a coarse grid of each camera image, instruction embedding] to an (H, joints) chunk.
Prompts are part of the model contract, so they are rendered here (``render_prompt``) for both
the trainer and the runtime adapter.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn
from transformers import GPT2Config, GPT2LMHeadModel

from lerobot.policies.pretrained import PreTrainedPolicy
from lerobot.utils.constants import ACTION, OBS_STATE

from .configuration_two_head import POLICY_TYPE, TwoHeadConfig

TEXT_KINDS = ('subtask', 'memory', 'interjection')


class ByteTokenizer:
    """UTF-8 bytes are token ids 0-255; BOS, SEP (prompt end), EOS and PAD follow."""

    BOS, SEP, EOS, PAD = 256, 257, 258, 259
    vocab_size = 260

    def encode(self, text: str) -> list[int]:
        return list(text.encode('utf-8'))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode('utf-8', errors='replace')


def render_prompt(kind: str, task: str, *, plan: str = '', memory: str = '',
                  completed: str = '', user_text: str = '') -> str:
    """The text-head prompt of one ``kind``; the model is trained on exactly these.

    ``completed`` is the subtask that just ended (the memory note summarises progress).
    """
    if kind == 'subtask':
        return f'task: {task}\nplan: {plan}\nmemory: {memory}\nsubtask:'
    if kind == 'memory':
        return f'task: {task}\nmemory: {memory}\ncompleted: {completed}\nnew memory:'
    if kind == 'interjection':
        return f'task: {task}\nuser: {user_text}\nplan:'
    raise ValueError(f'two_head has no text prompt for kind {kind!r}; kinds: {list(TEXT_KINDS)}')


class TwoHeadPolicy(PreTrainedPolicy):
    """Text head (byte GPT-2) + action head (MLP on the trunk's instruction embedding)."""

    config_class = TwoHeadConfig
    name = POLICY_TYPE

    def __init__(self, config: TwoHeadConfig, **kwargs) -> None:
        super().__init__(config)
        config.validate_features()
        self.config = config
        self.tokenizer = ByteTokenizer()
        self.text = GPT2LMHeadModel(GPT2Config(
            vocab_size=ByteTokenizer.vocab_size, n_positions=config.max_text_len,
            n_embd=config.text_embed_dim, n_layer=config.text_layers, n_head=config.text_heads,
            bos_token_id=ByteTokenizer.BOS, eos_token_id=ByteTokenizer.EOS,
            pad_token_id=ByteTokenizer.PAD, tie_word_embeddings=False))
        self.image_keys = sorted(config.image_features)
        n_joints = len(config.joint_names)
        n_in = n_joints + len(self.image_keys) * 3 * config.image_pool ** 2 \
            + config.text_embed_dim
        self.action_head = nn.Sequential(
            nn.Linear(n_in, config.hidden_dim), nn.GELU(),
            nn.Linear(config.hidden_dim, config.hidden_dim), nn.GELU(),
            nn.Linear(config.hidden_dim, config.chunk_size * n_joints))
        self._queue: deque[Tensor] = deque()

    # --- LeRobot policy API ---------------------------------------------------------------
    def get_optim_params(self) -> dict:
        return self.parameters()

    def reset(self) -> None:
        self._queue.clear()

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict]:
        """Action MSE on a preprocessed batch (normalised ``action`` of shape (B, H, joints))."""
        loss = F.mse_loss(self.predict_action_chunk(batch), batch[ACTION])
        return loss, {'action_loss': float(loss.detach())}

    def predict_action_chunk(self, batch: dict[str, Tensor], **kwargs) -> Tensor:
        """(B, H, joints) normalised actions for the batch's state, images and ``task`` text."""
        dtype = self._dtype()
        state = batch[OBS_STATE].to(dtype)
        if state.dim() == 1:
            state = state.unsqueeze(0)
        parts = [state]
        for key in self.image_keys:
            image = batch[key].to(dtype)
            if image.dim() == 3:
                image = image.unsqueeze(0)
            parts.append(F.adaptive_avg_pool2d(image, self.config.image_pool).flatten(1))
        tasks = batch.get('task', '')
        tasks = [tasks] if isinstance(tasks, str) else list(tasks)
        if len(tasks) == 1 and state.shape[0] > 1:
            tasks = tasks * state.shape[0]
        parts.append(self.instruction_embedding(tasks))
        out = self.action_head(torch.cat(parts, dim=1))
        return out.view(state.shape[0], self.config.chunk_size, len(self.config.joint_names))

    @torch.no_grad()
    def select_action(self, batch: dict[str, Tensor], **kwargs) -> Tensor:
        if not self._queue:
            chunk = self.predict_action_chunk(batch)[:, :self.config.n_action_steps]
            self._queue.extend(chunk.transpose(0, 1))
        return self._queue.popleft()

    # --- shared trunk -----------------------------------------------------------------------
    def _dtype(self) -> torch.dtype:
        return next(self.action_head.parameters()).dtype

    def _device(self) -> torch.device:
        return next(self.action_head.parameters()).device

    def _pad(self, rows: list[list[int]]) -> tuple[Tensor, Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), ByteTokenizer.PAD, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, :len(row)] = 1
        return ids.to(self._device()), mask.to(self._device())

    def _clip(self, ids: list[int], room: int = 0) -> list[int]:
        limit = self.config.max_text_len - room
        return ids if len(ids) <= limit else ids[:1] + ids[len(ids) - limit + 1:]

    def instruction_embedding(self, texts: list[str]) -> Tensor:
        """(B, text_embed_dim): mean of the trunk's last hidden states over each instruction."""
        rows = [self._clip([ByteTokenizer.BOS, *self.tokenizer.encode(t)]) for t in texts]
        ids, mask = self._pad(rows)
        hidden = self.text.transformer(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1)

    # --- text head --------------------------------------------------------------------------
    def text_loss(self, prompts: list[str], targets: list[str]) -> Tensor:
        """Next-token cross-entropy on the targets (and EOS) given their prompts."""
        rows, labels = [], []
        for prompt, target in zip(prompts, targets):
            head = [ByteTokenizer.BOS, *self.tokenizer.encode(prompt), ByteTokenizer.SEP]
            tail = [*self.tokenizer.encode(' ' + target), ByteTokenizer.EOS]
            row = head + tail
            if len(row) > self.config.max_text_len:
                raise ValueError(f'prompt + target is {len(row)} tokens, over max_text_len='
                                 f'{self.config.max_text_len}')
            rows.append(row)
            labels.append([-100] * len(head) + tail)
        ids, mask = self._pad(rows)
        lab = torch.full_like(ids, -100)
        for i, row in enumerate(labels):
            lab[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        return self.text(input_ids=ids, attention_mask=mask, labels=lab).loss

    @torch.no_grad()
    def select_message(self, prompt: str, *, max_new_tokens: int | None = None,
                       min_new_tokens: int = 0, temperature: float = 0.0,
                       top_p: float = 1.0) -> str:
        """Generate the text head's answer to ``prompt`` (greedy when temperature is 0)."""
        max_new = int(max_new_tokens or self.config.max_new_tokens)
        head = self._clip([ByteTokenizer.BOS, *self.tokenizer.encode(prompt),
                           ByteTokenizer.SEP], room=max_new)
        ids, mask = self._pad([head])
        sampling = temperature > 0
        extra = {'temperature': float(temperature), 'top_p': float(top_p)} if sampling else {}
        out = self.text.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new,
                                 min_new_tokens=int(min_new_tokens), do_sample=sampling,
                                 eos_token_id=ByteTokenizer.EOS, pad_token_id=ByteTokenizer.PAD,
                                 **extra)
        return self.tokenizer.decode(out[0, ids.shape[1]:].tolist()).strip()
