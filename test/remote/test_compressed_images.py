"""Compressed images for a policy on another computer (issue 31).

The robot side publishes ``<image topic>/compressed`` (JPEG), and the policy's image intake
(nodes/observations.py, ``image_transport`` compressed) decodes it into the arrays the raw
path gives the checkpoint: same shape, dtype and channel order, within JPEG's loss.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.core import images
from lerobot_lang_nodes.core.images import ImageFormatError
from lerobot_lang_nodes.testing import wait_until

TOLERANCE = 4.0  # mean absolute difference (of 255) allowed for JPEG at quality 85


def _scene_like(h: int = 240, w: int = 320) -> np.ndarray:
    """Smooth gradients and flat coloured blocks, like a rendered table top."""
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 // w, y * 255 // h, np.full_like(x, 90)], axis=2).astype(np.uint8)
    img[40:100, 60:140] = (220, 30, 30)  # a red cube
    img[150:210, 200:300] = (30, 40, 200)  # a blue bowl
    return img


def test_jpeg_round_trip_keeps_shape_dtype_and_channel_order():
    raw = _scene_like()
    data = images.encode_jpeg(raw, quality=85)
    assert data[:2] == b'\xff\xd8' and len(data) < raw.nbytes / 5
    decoded = images.decode_compressed(data)
    assert decoded.shape == raw.shape and decoded.dtype == np.uint8
    assert decoded.flags.c_contiguous
    assert np.abs(decoded.astype(int) - raw).mean() < TOLERANCE
    red = decoded[50:90, 70:130].reshape(-1, 3).mean(axis=0)
    assert red[0] > 180 and red[2] < 80  # RGB, not BGR
    lower = images.decode_compressed(images.encode_jpeg(raw, quality=20))
    assert len(images.encode_jpeg(raw, quality=20)) < len(data)
    assert np.abs(lower.astype(int) - raw).mean() > np.abs(decoded.astype(int) - raw).mean()
    with pytest.raises(ImageFormatError, match='cannot be decoded'):
        images.decode_compressed(b'not an image')


@pytest.mark.slow
def test_policy_intake_decodes_the_sims_jpeg_into_the_raw_arrays(launch_node, probe):
    from lerobot_lang_nodes.nodes.observations import LatestObservations
    params = graph.default_params_file('sim')
    sim = launch_node('lerobot_lang_nodes.nodes.sim_bridge_node',
                      *graph.ros_args(graph.SIM[0], params)[1:],
                      '-p', 'publish_compressed:=true', '-p', 'camera_hz:=5.0')
    probe.wait_for_node('sim_bridge', timeout_s=60.0, processes=[sim])
    lock = threading.Lock()
    frames: dict[str, dict[tuple[str, float], np.ndarray]] = {'raw': {}, 'compressed': {}}

    def keep(kind: str, intake: list) -> callable:
        def on_update(camera: str) -> None:
            obs = intake[0]
            with lock:
                frames[kind][(camera, obs.stamps()[camera])] = obs.image(camera)
        return on_update

    intakes: dict[str, list] = {'raw': [], 'compressed': []}
    for kind in intakes:
        intakes[kind].append(LatestObservations(
            probe.node, ('front', 'wrist'), 'cameras/{name}/image_raw',
            on_update=keep(kind, intakes[kind]), transport=kind))

    def common() -> list:
        with lock:
            return sorted(set(frames['raw']) & set(frames['compressed']))

    wait_until(lambda: {cam for cam, _ in common()} == {'front', 'wrist'}, 60.0,
               'the same frames of both cameras raw and compressed', processes=[sim])
    for key in common():
        raw, decoded = frames['raw'][key], frames['compressed'][key]
        assert decoded.shape == raw.shape == (240, 320, 3)
        assert decoded.dtype == raw.dtype == np.uint8
        assert np.abs(decoded.astype(int) - raw).mean() < TOLERANCE, key
    assert sim.alive
