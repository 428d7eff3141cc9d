"""Raw image buffers (sensor_msgs/Image fields) to RGB arrays, without ROS."""

import numpy as np
import pytest

from lerobot_lang_nodes.core.images import ImageFormatError as ImageEncodingError
from lerobot_lang_nodes.core.images import from_rgb, to_rgb as image_to_rgb


def test_rgb_bgr_mono_and_row_padding():
    rgb = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    assert (image_to_rgb('rgb8', 4, 5, 15, rgb.tobytes()) == rgb).all()
    assert (image_to_rgb('bgr8', 4, 5, 15, rgb[:, :, ::-1].tobytes()) == rgb).all()
    padded = np.zeros((4, 20), np.uint8)
    padded[:, :15] = rgb.reshape(4, 15)
    out = image_to_rgb('rgb8', 4, 5, 20, bytearray(padded.tobytes()))
    assert (out == rgb).all() and out.flags.c_contiguous and out.flags.writeable
    mono = np.arange(12, dtype=np.uint8).reshape(3, 4)
    out = image_to_rgb('mono8', 3, 4, 4, mono.tobytes())
    assert out.shape == (3, 4, 3) and (out[:, :, 1] == mono).all()


def test_rejects_bad_images():
    with pytest.raises(ImageEncodingError, match='unsupported image encoding'):
        image_to_rgb('32FC1', 2, 2, 8, bytes(16))
    with pytest.raises(ImageEncodingError, match='data bytes'):
        image_to_rgb('rgb8', 2, 2, 6, bytes(7))
    with pytest.raises(ImageEncodingError, match='step'):
        image_to_rgb('rgb8', 2, 2, 4, bytes(16))


def test_from_rgb_round_trip():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    h, w, step, data = from_rgb(rgb)
    assert (h, w, step) == (2, 3, 9)
    assert (image_to_rgb('rgb8', h, w, step, data) == rgb).all()
    with pytest.raises(ImageEncodingError, match='HxWx3 uint8'):
        from_rgb(rgb.astype(np.float32))
