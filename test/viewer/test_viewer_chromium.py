"""The live view page as a person sees it: a headless Chromium screenshot of `/`."""

import os
import shutil

import numpy as np
import pytest
from PIL import Image

from lerobot_lang_nodes.testing import CHROMIUM, chromium_screenshot
from lerobot_lang_nodes.viewer.compose import Annotation, Composer
from lerobot_lang_nodes.viewer.mjpeg import MjpegServer

HOST = '127.0.0.1'
GREEN = (20, 200, 40)
MAGENTA = (210, 30, 200)


def chromium_or_skip() -> str:
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    reason = (f'{CHROMIUM} not found: install the Debian package with '
              '`apt-get update && apt-get install -y chromium`')
    if os.environ.get('LEROBOT_LANG_REQUIRE_CHROMIUM') == '1':
        pytest.fail(f'LEROBOT_LANG_REQUIRE_CHROMIUM=1 but {reason}')
    pytest.skip(reason)


def screenshot(url: str, out_png, user_data_dir, size=(1000, 520), timeout=90.0) -> str:
    """Run headless Chromium once against ``url``; returns its combined output."""
    chromium_or_skip()
    return chromium_screenshot(url, out_png, user_data_dir, size, timeout)


def colour_pixels(img: np.ndarray, colour, tol=25) -> int:
    return int((np.abs(img.astype(int) - colour).max(axis=2) < tol).sum())


def test_chromium_screenshot_shows_annotated_views(tmp_path):
    chromium_or_skip()
    composer = Composer()
    frame = composer.compose(
        [('front', np.full((240, 320, 3), GREEN, np.uint8)),
         ('wrist', np.full((240, 320, 3), MAGENTA, np.uint8))],
        Annotation('put the red cube in the bowl', 'grasp the red cube', 'bowl is empty'))
    profile = tmp_path / 'profile'
    profile.mkdir()
    shot = tmp_path / 'shot.png'
    with MjpegServer(HOST, 0) as server:
        server.publish(frame)
        server.set_status('subtask: grasp the red cube')
        output = screenshot(server.url, shot, profile)
    assert shot.exists(), f'no screenshot written; chromium said:\n{output[-2000:]}'
    keep = os.environ.get('LEROBOT_LANG_KEEP_SCREENSHOT')
    if keep:  # lets a person look at what the browser showed
        shutil.copy(shot, keep)
    img = np.asarray(Image.open(shot).convert('RGB'))
    assert img.shape[:2] == (520, 1000)
    # Both views, not the grey placeholder: large green and magenta areas.
    green, magenta = colour_pixels(img, GREEN), colour_pixels(img, MAGENTA)
    assert green > 30000 and magenta > 30000, (green, magenta)
    # The translucent header darkens the top of the views and carries light text.
    ys, xs = np.nonzero(np.abs(img.astype(int) - GREEN).max(axis=2) < 25)
    top, left = ys.min(), xs.min()
    header = img[max(0, top - 60):top, left:left + 300].astype(int)
    assert header.shape[0] > 20 and header.std() > 20
    assert (header.min(axis=2) > 180).sum() > 50, 'expected header text pixels'
