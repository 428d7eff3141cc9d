"""Environment factories behind the bridge's ``simulator`` parameter (lazy imports).

* ``robocasa``: a RoboCasa kitchen (``robocasa.utils.env_utils.create_env``). Needs RoboCasa and
  its kitchen assets (about 10 GB) installed in the bridge's environment; both are probed before
  anything is built, and their absence raises SimulatorUnavailable with the commands to run.
* ``robosuite``: a stock robosuite environment with the same robot and cameras, which runs
  offline without RoboCasa's assets (for machines and tests without them).
* ``standin``: standin.StandInKitchen, no simulator at all.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_lang_nodes.robocasa.host import KitchenSpec

SIMULATORS = ('robocasa', 'robosuite', 'standin')
SPLITS = ('all', 'pretrain', 'target')
INSTALL_HELP = (
    'Install RoboCasa into the bridge\'s environment (.venv-robocasa, made by '
    'scripts/setup.sh --robocasa): clone robosuite (master branch; RoboCasa needs it) and '
    'robocasa from GitHub and `pip install --no-deps -e` both into .venv-robocasa (the README '
    'section "RoboCasa kitchens" lists the steps), then run `.venv-robocasa/bin/python -m '
    'robocasa.scripts.setup_macros` and download the kitchen assets (about 10 GB) with '
    '`.venv-robocasa/bin/python -m robocasa.scripts.download_kitchen_assets`. Without them, '
    'run the bridge with simulator:=robosuite (a stock robosuite scene) or simulator:=standin.')
# Folders under robocasa/models/assets that only the asset download fills (the git checkout
# has other fixtures/ and objects/ entries); without them a kitchen's reset fails with
# FileNotFoundError deep inside the scene's XML.
ASSET_FOLDERS = ('textures', 'fixtures/cabinets', 'objects/objaverse')


class SimulatorUnavailable(ImportError):
    """The chosen simulator cannot run here; the message says what to install."""


def probe_robocasa() -> Path:
    """The assets folder of an importable RoboCasa with its kitchen assets, else raise."""
    spec = importlib.util.find_spec('robocasa')
    if spec is None or not spec.submodule_search_locations:
        raise SimulatorUnavailable(f'RoboCasa is not installed in this environment. '
                                   f'{INSTALL_HELP}')
    root = Path(next(iter(spec.submodule_search_locations)))
    assets = root / 'models' / 'assets'
    missing = [name for name in ASSET_FOLDERS
               if not (assets / name).is_dir() or not any((assets / name).iterdir())]
    if missing:
        raise SimulatorUnavailable(
            f'RoboCasa is installed ({root}) but its kitchen assets are missing: '
            f'{[str(assets / m) for m in missing]} absent or empty. {INSTALL_HELP}')
    return assets


def _check_split(split: str) -> str | None:
    if split not in SPLITS:
        raise ValueError(f'split {split!r} is not one of {list(SPLITS)}')
    return None if split == 'all' else split


def make_robocasa(spec: KitchenSpec, seed: int) -> Any:
    """A RoboCasa kitchen: one persistent scene, success does not end it."""
    probe_robocasa()
    from robocasa.utils.env_utils import create_env
    size = int(spec.image_size)
    return create_env(env_name=spec.task, robots=spec.robot, camera_names=list(spec.cameras),
                      camera_widths=size, camera_heights=size, seed=seed,
                      split=_check_split(spec.split), horizon=int(spec.horizon),
                      control_freq=spec.control_hz)


def make_standin(spec: KitchenSpec, seed: int) -> Any:
    from lerobot_lang_nodes.robocasa.standin import StandInKitchen
    _check_split(spec.split)
    size = int(spec.image_size)
    return StandInKitchen(env_name=spec.task, robots=spec.robot, camera_names=spec.cameras,
                          camera_widths=size, camera_heights=size, seed=seed,
                          split=spec.split, horizon=int(spec.horizon),
                          control_freq=spec.control_hz)


def make_robosuite(spec: KitchenSpec, seed: int) -> Any:
    from lerobot_lang_nodes.robocasa.stock import make_stock_env
    _check_split(spec.split)
    return make_stock_env(spec, seed)


def reseed_rng(env: Any, seed: int) -> None:
    """Make the next ``env.reset()`` draw its layout from ``seed``.

    robosuite environments draw from ``env.rng`` (RoboCasa rebuilds its samplers from it at
    every reset, as its gym wrapper relies on); a stock environment's object sampler keeps the
    generator it was built with, so it gets the new one too.
    """
    env.rng = np.random.default_rng(seed)
    sampler = getattr(env, 'placement_initializer', None)
    if sampler is not None and hasattr(sampler, 'rng'):
        sampler.rng = env.rng


FACTORIES: dict[str, Callable[[KitchenSpec, int], Any]] = {
    'robocasa': make_robocasa, 'robosuite': make_robosuite, 'standin': make_standin}


def factory(simulator: str) -> Callable[[KitchenSpec, int], Any]:
    try:
        return FACTORIES[simulator]
    except KeyError:
        raise ValueError(f'simulator {simulator!r} is not one of {list(SIMULATORS)}') from None
