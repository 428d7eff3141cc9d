"""Simulator test fixtures: headless EGL rendering and one shared scene per session."""

from __future__ import annotations

import os

# Must be set before mujoco creates a GL context; there is no display here.
os.environ.setdefault('MUJOCO_GL', 'egl')

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope='session')
def sim_scene() -> Iterator:
    """One So101Scene for the session (model compile is the slow part); tests reset it."""
    from lerobot_lang_nodes.sim.scene import So101Scene
    scene = So101Scene(seed=0)
    try:
        yield scene
    finally:
        scene.close()
