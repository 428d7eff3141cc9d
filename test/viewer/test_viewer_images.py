"""sensor_msgs/Image field conversion used by the viewer node (no ROS needed)."""

import numpy as np
import pytest

from lerobot_lang_nodes.viewer.images import ImageEncodingError, image_to_rgb


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
