"""Side-by-side composition of camera views with labels and a Task/Subtask/Memory header."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np
from PIL import Image, ImageDraw, ImageFont

logger = logging.getLogger(__name__)

# (camera name, HxWx3 uint8 RGB image or None while the camera has not delivered a frame).
View = Tuple[str, Optional[np.ndarray]]

_ELLIPSIS = '...'  # ASCII, so Pillow's bitmap fallback font can draw it too
_EMPTY_VALUE = '-'
_CACHE_SIZE = 64


class ComposeError(ValueError):
    """A view cannot be composed (wrong shape or dtype, or a bad composer setting)."""


@dataclass(frozen=True)
class Annotation:
    """Language state shown in the header; empty strings are drawn as a dash."""

    task: str = ''
    subtask: str = ''
    memory: str = ''
    # Dry run: what the executor would have sent (drawn as a row only when set).
    dry_run: str = ''


def as_rgb8(image: np.ndarray, name: str = 'view') -> np.ndarray:
    """Return ``image`` as a contiguous HxWx3 uint8 array (mono and RGBA are converted)."""
    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        raise ComposeError(f'{name}: expected dtype uint8, got {arr.dtype}')
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    elif arr.ndim == 3 and arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    elif arr.ndim == 3 and arr.shape[2] == 4:
        arr = arr[:, :, :3]
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ComposeError(f'{name}: expected an HxWx3 RGB image, got shape {arr.shape}')
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ComposeError(f'{name}: empty image of shape {arr.shape}')
    return np.ascontiguousarray(arr)


def load_font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """Pillow's bundled default font at ``size`` px (bitmap fallback without FreeType)."""
    try:
        return ImageFont.load_default(size=size)
    except (ImportError, OSError, TypeError):  # Pillow built without FreeType
        return ImageFont.load_default()


class _Overlay:
    """A pre-rendered RGBA patch stored as (alpha, premultiplied rgb) for a fast blend."""

    __slots__ = ('alpha', 'premult', 'height', 'width')

    def __init__(self, rgba: Image.Image) -> None:
        arr = np.asarray(rgba, dtype=np.float32)
        self.alpha = arr[:, :, 3:4] / 255.0
        self.premult = arr[:, :, :3] * self.alpha
        self.height, self.width = arr.shape[:2]

    def blend_into(self, canvas: np.ndarray, x: int, y: int) -> None:
        h = min(self.height, canvas.shape[0] - y)
        w = min(self.width, canvas.shape[1] - x)
        if h <= 0 or w <= 0:
            return
        region = canvas[y:y + h, x:x + w]
        alpha = self.alpha[:h, :w]
        mixed = region * (1.0 - alpha) + self.premult[:h, :w]
        # +0.5 rounds instead of truncating, so an opaque-free pixel keeps its exact value.
        region[...] = (mixed + 0.5).astype(np.uint8)


class Composer:
    """Composes views side by side at a common height with labels and an annotation header."""

    def __init__(self, height: Optional[int] = None, *, font_size: Optional[int] = None,
                 header_alpha: float = 0.6, max_lines_per_field: int = 2,
                 placeholder_aspect: float = 4.0 / 3.0) -> None:
        if height is not None and height < 16:
            raise ComposeError(f'height must be >= 16 px or None, got {height}')
        if not 0.0 <= header_alpha <= 1.0:
            raise ComposeError(f'header_alpha must be within [0, 1], got {header_alpha}')
        if max_lines_per_field < 1:
            raise ComposeError(f'max_lines_per_field must be >= 1, got {max_lines_per_field}')
        self.height = height
        self.font_size = font_size
        self.header_alpha = header_alpha
        self.max_lines_per_field = max_lines_per_field
        self.placeholder_aspect = placeholder_aspect
        self._fonts: dict[int, ImageFont.ImageFont | ImageFont.FreeTypeFont] = {}
        # Header and labels change rarely compared to the frame rate; render them once.
        self._header_cache: OrderedDict[tuple, _Overlay] = OrderedDict()
        self._label_cache: OrderedDict[tuple, _Overlay] = OrderedDict()
        self._tile_cache: OrderedDict[tuple, np.ndarray] = OrderedDict()

    # -- public API -------------------------------------------------------------------------

    def compose(self, views: Sequence[View], annotation: Optional[Annotation] = None
                ) -> np.ndarray:
        """Return an HxWx3 uint8 image with even dimensions: views, labels, header."""
        checked = [(str(name), None if img is None else as_rgb8(img, str(name)))
                   for name, img in views]
        height = self._target_height(checked)
        tiles = [(name, self._fit(img, height, name)) for name, img in checked]
        if not tiles:
            tiles = [('', self._no_signal_tile(height, 'no cameras'))]
        width = sum(t.shape[1] for _, t in tiles)
        canvas = np.zeros((height + height % 2, width + width % 2, 3), np.uint8)
        font = self._font(height)
        x = 0
        for name, tile in tiles:
            canvas[:height, x:x + tile.shape[1]] = tile
            if name:
                label = self._label(name, font, tile.shape[1])
                label.blend_into(canvas, x, height - label.height)
            x += tile.shape[1]
        if annotation is not None:
            self._header(annotation, font, canvas.shape[1]).blend_into(canvas, 0, 0)
        return canvas

    # -- geometry ---------------------------------------------------------------------------

    def _target_height(self, views: Sequence[View]) -> int:
        if self.height is not None:
            return self.height
        heights = [img.shape[0] for _, img in views if img is not None]
        return max(heights) if heights else 240

    def _fit(self, img: Optional[np.ndarray], height: int, name: str) -> np.ndarray:
        if img is None:
            return self._no_signal_tile(height, 'waiting...')
        if img.shape[0] == height:
            return img
        width = max(1, round(img.shape[1] * height / img.shape[0]))
        resized = Image.fromarray(img).resize((width, height), Image.Resampling.BILINEAR)
        return np.asarray(resized)

    def _no_signal_tile(self, height: int, text: str) -> np.ndarray:
        key = (height, text)
        tile = _cache_get(self._tile_cache, key)
        if tile is None:
            width = max(1, round(height * self.placeholder_aspect))
            img = Image.new('RGB', (width, height), (40, 40, 40))
            draw = ImageDraw.Draw(img)
            font = self._font(height)
            text = truncate_text(text, font, width - 4)
            _, _, tw, th = font.getbbox(text)
            draw.text(((width - tw) / 2, (height - th) / 2), text, fill=(170, 170, 170),
                      font=font)
            tile = np.asarray(img)
            _cache_put(self._tile_cache, key, tile)
        return tile

    # -- text -------------------------------------------------------------------------------

    def _font(self, height: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
        # Scale text with the view height so it stays legible on larger renders.
        size = self.font_size or int(min(28, max(10, round(height / 20))))
        font = self._fonts.get(size)
        if font is None:
            font = self._fonts[size] = load_font(size)
        return font

    def _label(self, name: str, font, tile_width: int) -> _Overlay:
        key = (name, id(font), tile_width)
        overlay = _cache_get(self._label_cache, key)
        if overlay is None:
            pad = 3
            text = truncate_text(name, font, max(1, tile_width - 2 * pad - 4))
            left, top, right, bottom = font.getbbox(text)
            box_w = min(tile_width, int(right) + 2 * pad + 1)
            box_h = int(bottom) + 2 * pad
            rgba = Image.new('RGBA', (box_w, box_h), (0, 0, 0, 160))
            ImageDraw.Draw(rgba).text((pad, pad), text, fill=(255, 255, 255, 255), font=font)
            overlay = _Overlay(rgba)
            _cache_put(self._label_cache, key, overlay)
        return overlay

    def _header(self, annotation: Annotation, font, width: int) -> _Overlay:
        key = (annotation, id(font), width)
        overlay = _cache_get(self._header_cache, key)
        if overlay is None:
            overlay = _Overlay(self._render_header(annotation, font, width))
            _cache_put(self._header_cache, key, overlay)
        return overlay

    def _render_header(self, annotation: Annotation, font, width: int) -> Image.Image:
        margin = 6
        line_h = int(font.getbbox('Ag')[3]) + 3
        fields = (('Task:', annotation.task), ('Subtask:', annotation.subtask),
                  ('Memory:', annotation.memory))
        if annotation.dry_run:
            fields += (('DRY RUN:', annotation.dry_run),)
        key_w = int(max(font.getlength(k) for k, _ in fields)) + 6
        value_w = max(8, width - 2 * margin - key_w)
        rows: list[tuple[str, list[str]]] = []
        for key_text, value in fields:
            rows.append((key_text, wrap_text(value or _EMPTY_VALUE, font, value_w,
                                         self.max_lines_per_field)))
        n_lines = sum(len(lines) for _, lines in rows)
        height = 2 * margin + n_lines * line_h
        rgba = Image.new('RGBA', (width, height), (0, 0, 0, int(round(self.header_alpha * 255))))
        draw = ImageDraw.Draw(rgba)
        y = margin
        for key_text, lines in rows:
            draw.text((margin, y), key_text, fill=(255, 214, 90, 255), font=font)
            for line in lines:
                draw.text((margin + key_w, y), line, fill=(255, 255, 255, 255), font=font)
                y += line_h
        return rgba


# -- helpers ----------------------------------------------------------------------------------

def _cache_get(cache: OrderedDict, key):
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _cache_put(cache: OrderedDict, key, value) -> None:
    cache[key] = value
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


def truncate_text(text: str, font, width: float) -> str:
    """Longest prefix of ``text`` (plus an ellipsis if cut) that fits ``width`` px."""
    if font.getlength(text) <= width:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # binary search for the longest prefix that fits with the ellipsis
        mid = (lo + hi + 1) // 2
        if font.getlength(text[:mid].rstrip() + _ELLIPSIS) <= width:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + _ELLIPSIS


def _fit_prefix(text: str, font, width: float) -> int:
    """Length of the longest prefix of ``text`` no wider than ``width`` px (at least 1)."""
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if font.getlength(text[:mid]) <= width:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _split_long_word(word: str, font, width: float, max_parts: int) -> list[str]:
    parts = []
    while word and len(parts) < max_parts:
        n = _fit_prefix(word, font, width)
        parts.append(word[:n])
        word = word[n:]
    if word:  # the rest can never be shown; keep one marker part so the caller truncates
        parts.append(word)
    return parts


def wrap_text(text: str, font, width: float, max_lines: int) -> list[str]:
    """Greedy word wrap to ``width`` px, at most ``max_lines`` lines, the last one truncated."""
    words: list[str] = []
    for word in ' '.join(text.split()).split(' '):
        if font.getlength(word) > width:
            words.extend(_split_long_word(word, font, width, max_lines))
        else:
            words.append(word)
    lines: list[str] = []
    current = ''
    for i, word in enumerate(words):
        candidate = f'{current} {word}' if current else word
        if font.getlength(candidate) <= width:
            current = candidate
            continue
        lines.append(current)
        current = word
        if len(lines) == max_lines:
            # Out of lines: the rest goes on the last line, cut with an ellipsis.
            rest = ' '.join([lines.pop()] + words[i:])
            lines.append(truncate_text(rest, font, width))
            return lines
    lines.append(current)
    return lines
