"""LeRobot policy `lang_chunk`: small images + joint state + instruction text -> action chunk.

Text: the instruction (the active subtask, else the task, exactly what the policy node sends as
``task``) becomes word unigrams and n-grams, each hashed with CRC-32 into ``text_buckets``
rows of an ``EmbeddingBag`` (mean). No tokenizer file and no pretrained weight is needed, the
hash is stable across processes (unlike Python's ``hash``), and a word is a feature of its own,
so "red" and "blue" get unrelated embeddings from the first step.

Images: one conv stack shared by the cameras. The text embedding modulates its last feature
map (FiLM: per-channel scale and shift), so the text can select which image features matter
(the cube it names), before the map is pooled to a coarse grid that keeps where things are,
and (``image_keypoints``) reduced to each channel's expected position, which is finer than a
grid cell.

Head: [text, state, per-camera image features] -> MLP -> ``chunk_size`` joint targets (L1 on
normalised actions, padded steps past the episode end masked out, as ACT trains).
"""

from __future__ import annotations

from collections import deque
import re
import zlib

import torch
import torch.nn.functional as F  # noqa: N812 - the usual torch alias
from torch import Tensor, nn

from lerobot.policies.pretrained import PreTrainedPolicy
from lerobot.utils.constants import ACTION, OBS_STATE

from .configuration_lang_chunk import POLICY_TYPE, LangChunkConfig

_WORD = re.compile(r'[a-z0-9]+')


def text_grams(text: str, ngrams: int = 2) -> list[str]:
    """Lower-case words and word n-grams (n = 2..ngrams) of ``text``, in order."""
    words = _WORD.findall(text.lower())
    grams = list(words)
    for n in range(2, ngrams + 1):
        grams += [' '.join(words[i:i + n]) for i in range(len(words) - n + 1)]
    return grams


def text_bucket_ids(text: str, buckets: int, ngrams: int = 2) -> list[int]:
    """Embedding rows of ``text``: CRC-32 of each gram into 1..buckets-1; [0] for no words."""
    ids = [1 + zlib.crc32(g.encode('utf-8')) % (buckets - 1) for g in text_grams(text, ngrams)]
    return ids or [0]


class LangChunkPolicy(PreTrainedPolicy):
    """Language-conditioned chunking policy (see the module docstring)."""

    config_class = LangChunkConfig
    name = POLICY_TYPE

    def __init__(self, config: LangChunkConfig, **kwargs) -> None:
        super().__init__(config)
        config.validate_features()
        self.config = config
        d = config.dim_model
        self.image_keys = sorted(config.image_features)
        self.text_embedding = nn.EmbeddingBag(config.text_buckets, d, mode='mean')
        layers: list[nn.Module] = []
        channels = 3
        strides = config.conv_strides or [2] * len(config.conv_channels)
        for out, stride in zip(config.conv_channels, strides):
            layers += [nn.Conv2d(channels, out, 3, stride=stride, padding=1),
                       nn.GroupNorm(1, out), nn.GELU()]
            channels = out
        self.backbone = nn.Sequential(*layers[:-1])  # FiLM comes before the last activation
        self.film = nn.Linear(d, 2 * channels)
        rows, cols = config.image_grid
        n_image = channels * rows * cols + (2 * channels if config.image_keypoints else 0)
        self.image_proj = nn.ModuleList(nn.Linear(n_image, d) for _ in self.image_keys)
        n_state = config.robot_state_feature.shape[0]
        self.state_proj = nn.Linear(n_state, d)
        self.n_actions = config.action_feature.shape[0]
        n_in = d * (2 + len(self.image_keys))
        self.head = nn.Sequential(
            nn.LayerNorm(n_in), nn.Linear(n_in, config.hidden_dim), nn.GELU(),
            nn.Dropout(config.dropout), nn.Linear(config.hidden_dim, config.hidden_dim),
            nn.GELU(), nn.Linear(config.hidden_dim, config.chunk_size * self.n_actions))
        # Start from "no change": FiLM is the identity until the text learns to modulate.
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)
        if config.relative_actions:
            # The normalisation statistics the processors apply (to turn the normalised state
            # into the action's normalised units) and the spread of action - state; set by
            # the trainer (set_action_reference), saved with the weights.
            for name in ('state_mean', 'state_std', 'action_mean', 'action_std', 'offset_std'):
                self.register_buffer(name, torch.zeros(self.n_actions) if 'mean' in name
                                     else torch.ones(self.n_actions))
        self._queue: deque[Tensor] = deque()

    # --- LeRobot policy API ---------------------------------------------------------------
    def get_optim_params(self) -> dict:
        return self.parameters()

    def reset(self) -> None:
        self._queue.clear()

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict]:
        """Masked L1 loss of a preprocessed batch (normalised ``action``, ``action_is_pad``)."""
        pred = self.predict_action_chunk(batch)
        err = F.l1_loss(pred, batch[ACTION].to(pred.dtype), reduction='none')
        pad = batch.get('action_is_pad')
        if pad is None:
            loss = err.mean()
        else:
            keep = (~pad.bool()).unsqueeze(-1).to(err.dtype)
            loss = (err * keep).sum() / (keep.sum() * err.shape[-1]).clamp_min(1.0)
        return loss, {'l1_loss': float(loss.detach())}

    def predict_action_chunk(self, batch: dict[str, Tensor], **kwargs) -> Tensor:
        """(B, chunk_size, A) normalised actions for the batch's state, images and ``task``."""
        state = batch[OBS_STATE]
        if state.dim() == 1:
            state = state.unsqueeze(0)
        dtype = self.state_proj.weight.dtype
        state = state.to(dtype)
        n = state.shape[0]
        text = self.embed_text(_texts(batch.get('task'), n))
        gamma, beta = self.film(text).chunk(2, dim=-1)
        parts = [text, self.state_proj(state)]
        for key, proj in zip(self.image_keys, self.image_proj):
            image = batch[key].to(dtype)
            if image.dim() == 3:
                image = image.unsqueeze(0)
            _, h, w = self.config.image_features[key].shape
            if tuple(image.shape[-2:]) != (h, w):
                image = F.interpolate(image, size=(h, w), mode='bilinear', antialias=True,
                                      align_corners=False)
            fmap = self.backbone(image)
            fmap = F.gelu(fmap * (1 + gamma[:, :, None, None]) + beta[:, :, None, None])
            features = [F.adaptive_avg_pool2d(fmap, tuple(self.config.image_grid)).flatten(1)]
            if self.config.image_keypoints:
                features.append(spatial_keypoints(fmap))
            parts.append(proj(torch.cat(features, dim=1)))
        out = self.head(torch.cat(parts, dim=1)).view(n, self.config.chunk_size, self.n_actions)
        if self.config.relative_actions:
            raw_state = state * self.state_std + self.state_mean
            base = (raw_state - self.action_mean) / self.action_std
            out = base[:, None, :] + out * (self.offset_std / self.action_std)
        return out

    def set_action_reference(self, state_mean: Tensor, state_std: Tensor, action_mean: Tensor,
                             action_std: Tensor, offset_std: Tensor) -> None:
        """The statistics ``relative_actions`` works with (unnormalised units)."""
        if not self.config.relative_actions:
            raise ValueError('set_action_reference is for a relative_actions policy')
        for name, value in (('state_mean', state_mean), ('state_std', state_std),
                            ('action_mean', action_mean), ('action_std', action_std),
                            ('offset_std', offset_std)):
            value = torch.as_tensor(value, dtype=torch.float32).reshape(self.n_actions)
            if 'std' in name:
                value = value.clamp_min(1e-6)
            getattr(self, name).copy_(value)

    @torch.no_grad()
    def select_action(self, batch: dict[str, Tensor], **kwargs) -> Tensor:
        """One action; a new chunk (its first ``n_action_steps``) whenever the queue is empty."""
        if not self._queue:
            chunk = self.predict_action_chunk(batch)[:, :self.config.n_action_steps]
            self._queue.extend(chunk.transpose(0, 1))
        return self._queue.popleft()

    # --- text -------------------------------------------------------------------------------
    def embed_text(self, texts: list[str]) -> Tensor:
        """(B, dim_model): mean embedding of each text's hashed grams."""
        rows = [text_bucket_ids(t, self.config.text_buckets, self.config.text_ngrams)
                for t in texts]
        device = self.text_embedding.weight.device
        flat = torch.tensor([i for r in rows for i in r], dtype=torch.long, device=device)
        lengths = torch.tensor([0] + [len(r) for r in rows[:-1]], dtype=torch.long)
        offsets = torch.cumsum(lengths, 0).to(device)
        return self.text_embedding(flat, offsets)


def spatial_keypoints(fmap: Tensor) -> Tensor:
    """(B, 2C): each channel's softmax-weighted mean (x, y) over the map, in [-1, 1]."""
    b, c, h, w = fmap.shape
    weights = torch.softmax(fmap.flatten(2), dim=-1).view(b, c, h, w)
    ys = torch.linspace(-1.0, 1.0, h, dtype=fmap.dtype, device=fmap.device)
    xs = torch.linspace(-1.0, 1.0, w, dtype=fmap.dtype, device=fmap.device)
    x = (weights.sum(dim=2) * xs).sum(dim=-1)
    y = (weights.sum(dim=3) * ys).sum(dim=-1)
    return torch.cat([x, y], dim=1)


def _texts(task: object, n: int) -> list[str]:
    """The batch's ``task`` entry as ``n`` strings (a string is repeated; None is empty)."""
    if task is None:
        return [''] * n
    if isinstance(task, str):
        return [task] * n
    texts = [str(t) for t in task]
    if len(texts) == 1 and n > 1:
        return texts * n
    if len(texts) != n:
        raise ValueError(f'the batch has {n} observations but {len(texts)} task texts')
    return texts
