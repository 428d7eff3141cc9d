"""Raw image buffers (as sensor_msgs/Image carries them) to and from RGB numpy arrays."""

from __future__ import annotations

import numpy as np

# The SO-101 graphs' two views (the simulator's, the robot YAML example's, LeRobot SO-101
# datasets' front and wrist): the one default of every node's `cameras` list.
SO101_CAMERAS: tuple[str, ...] = ('front', 'wrist')

# encoding -> (channels, reorder to RGB)
_ENCODINGS = {'rgb8': (3, None), 'bgr8': (3, [2, 1, 0]), 'mono8': (1, None),
              'rgba8': (4, [0, 1, 2]), 'bgra8': (4, [2, 1, 0])}
SUPPORTED_ENCODINGS = tuple(_ENCODINGS)


class ImageFormatError(ValueError):
    """An image buffer cannot be read as the encoding and size it claims."""


def to_rgb(encoding: str, height: int, width: int, step: int, data: bytes | memoryview
           ) -> np.ndarray:
    """Return an HxWx3 uint8 RGB copy of a raw image buffer."""
    if encoding not in _ENCODINGS:
        raise ImageFormatError(f'unsupported image encoding {encoding!r}; publish one of '
                               f'{list(SUPPORTED_ENCODINGS)}')
    channels, order = _ENCODINGS[encoding]
    row = width * channels
    if height <= 0 or width <= 0:
        raise ImageFormatError(f'empty image {width}x{height}')
    if step < row:
        raise ImageFormatError(f'step {step} is shorter than a row of {row} bytes '
                               f'({width} px x {channels} channels of {encoding})')
    buf = np.frombuffer(memoryview(data), dtype=np.uint8)
    if buf.size < step * height:
        raise ImageFormatError(f'{buf.size} data bytes for a {width}x{height} {encoding} image '
                               f'with step {step}; expected {step * height}')
    rows = buf[:step * height].reshape(height, step)[:, :row]
    img = rows.reshape(height, width, channels)
    if channels == 1:
        return np.repeat(img, 3, axis=2)
    if order is not None:
        img = img[:, :, order]
    return np.ascontiguousarray(img)


def from_rgb(image: np.ndarray) -> tuple[int, int, int, bytes]:
    """(height, width, step, data) of an HxWx3 uint8 RGB array, for an rgb8 message."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ImageFormatError(f'expected an HxWx3 uint8 RGB array, got shape {image.shape} '
                               f'dtype {image.dtype}')
    h, w, _ = image.shape
    return h, w, w * 3, np.ascontiguousarray(image).tobytes()


def encode_jpeg(image: np.ndarray, quality: int = 85) -> bytes:
    """Baseline JPEG bytes of an HxWx3 uint8 RGB array (a remote consumer's frames)."""
    import io

    from PIL import Image  # lazy: only the compressed path needs it
    from_rgb(image)  # the same checks as a raw message's
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buf, format='JPEG', quality=int(quality))
    return buf.getvalue()


def decode_compressed(data: bytes | memoryview) -> np.ndarray:
    """HxWx3 uint8 RGB from JPEG or PNG bytes (a sensor_msgs/CompressedImage's data): the
    same array the raw path's ``to_rgb`` gives, up to the codec's loss."""
    import io

    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(bytes(data))) as img:
            return np.ascontiguousarray(np.asarray(img.convert('RGB'), dtype=np.uint8))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageFormatError(f'compressed image cannot be decoded: {exc}') from exc
