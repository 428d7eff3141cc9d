"""The tiny two-headed checkpoint, built and trained once per test run (offline, ~10-30 s)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope='session')
def two_head_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lerobot_lang_nodes.tiny_models.two_head import build_two_head
    return build_two_head(tmp_path_factory.mktemp('two_head') / 'checkpoint')
