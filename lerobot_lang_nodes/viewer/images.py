"""sensor_msgs/Image fields to RGB numpy arrays, without importing ROS."""

from __future__ import annotations

import numpy as np

SUPPORTED_ENCODINGS = ('rgb8', 'bgr8', 'mono8', 'rgba8', 'bgra8')
_CHANNELS = {'rgb8': 3, 'bgr8': 3, 'mono8': 1, 'rgba8': 4, 'bgra8': 4}


class ImageEncodingError(ValueError):
    """An image message has an encoding or layout the viewer cannot show."""


def image_to_rgb(encoding: str, height: int, width: int, step: int, data) -> np.ndarray:
    """Return an HxWx3 uint8 RGB copy of an image given as sensor_msgs/Image fields."""
    channels = _CHANNELS.get(encoding)
    if channels is None:
        raise ImageEncodingError(
            f'unsupported image encoding {encoding!r}; the viewer shows {SUPPORTED_ENCODINGS}')
    row = width * channels
    if height <= 0 or width <= 0:
        raise ImageEncodingError(f'empty image {width}x{height}')
    if step < row:
        raise ImageEncodingError(f'step {step} is shorter than a row of {row} bytes')
    buf = np.frombuffer(memoryview(data), np.uint8)
    if buf.size < step * (height - 1) + row:
        raise ImageEncodingError(f'{buf.size} data bytes for a {width}x{height} {encoding} '
                                 f'image with step {step}')
    # Rows may be padded to ``step`` bytes: view each row's first ``row`` bytes, no copy yet.
    rows = np.lib.stride_tricks.as_strided(buf, (height, row), (step, 1))
    img = rows.reshape(height, width, channels)
    if encoding == 'mono8':
        return np.repeat(img, 3, axis=2)
    if encoding in ('bgr8', 'bgra8'):
        return img[:, :, 2::-1].copy()
    # A copy, so the array does not keep the message buffer alive or alias it.
    return img[:, :, :3].copy()
