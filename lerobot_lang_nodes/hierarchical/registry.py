"""Adapter registry: LeRobot policy type (config.json ``type``) -> 'module:Class', imported lazily.

Built-in entries are in ``ADAPTERS``. Other packages register theirs through the Python entry
point group ``lerobot_lang_nodes.adapters`` (name: the policy type, value: 'module:Class'), e.g.
in pyproject.toml::

    [project.entry-points."lerobot_lang_nodes.adapters"]
    my_policy = "my_package.adapter:MyPolicyAdapter"

An entry point for a type that is also built in replaces the built-in entry (logged), so a
package can ship a better adapter for a policy it knows. The module is imported only when a
checkpoint of that type is loaded.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = 'lerobot_lang_nodes.adapters'
_DIRECT = 'lerobot_lang_nodes.hierarchical.adapter:DirectTaskPolicyAdapter'

ADAPTERS: dict[str, str] = {
    'two_head': 'lerobot_lang_nodes.hierarchical.two_head_adapter:TwoHeadAdapter',
    # Flat LeRobot policies: the instruction conditions the action chunk directly.
    'act': _DIRECT,
    'diffusion': _DIRECT,
    'vqbet': _DIRECT,
    'smolvla': _DIRECT,
    'pi0': _DIRECT,
    'pi05': _DIRECT,
    'pi0_fast': _DIRECT,
    'xvla': _DIRECT,
    'molmoact2': _DIRECT,
}


class AdapterNotFound(LookupError):
    """No adapter is registered for the policy type (or its entry names a missing module)."""


class AdapterUnavailable(ImportError):
    """The adapter is registered, but a package it needs is not installed."""


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def registered(entry_points: Iterable[importlib.metadata.EntryPoint] | None = None
               ) -> dict[str, str]:
    """Policy type -> 'module:Class': the built-ins, then the installed entry points."""
    table = dict(ADAPTERS)
    for ep in _entry_points() if entry_points is None else entry_points:
        if ep.name in ADAPTERS and ep.value != ADAPTERS[ep.name]:
            logger.info('adapter for policy type %r: %s (entry point of %s) replaces the '
                        'built-in %s', ep.name, ep.value, _dist_name(ep), ADAPTERS[ep.name])
        table[ep.name] = ep.value
    return table


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, 'dist', None)
    return dist.name if dist is not None else 'an installed package'


def adapter_class(policy_type: str,
                  entry_points: Iterable[importlib.metadata.EntryPoint] | None = None) -> type:
    """Import and return the adapter class registered for ``policy_type``."""
    table = registered(entry_points)
    target = table.get(policy_type)
    if target is None:
        raise AdapterNotFound(
            f'no runtime adapter for LeRobot policy type {policy_type!r}; registered types: '
            f'{sorted(table)}. Register one in lerobot_lang_nodes/hierarchical/registry.py or '
            f'through the entry point group {ENTRY_POINT_GROUP!r} (see the README)')
    module_path, _, attr = target.partition(':')
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        missing = exc.name or ''
        if module_path == missing or module_path.startswith(f'{missing}.'):
            raise AdapterNotFound(f'the adapter of policy type {policy_type!r} names module '
                                  f'{module_path!r}, which does not exist') from exc
        raise AdapterUnavailable(f'the adapter of policy type {policy_type!r} needs the Python '
                                 f'package {missing!r}, which is not installed') from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise AdapterNotFound(f'{module_path} has no {attr!r} (adapter entry of policy type '
                              f'{policy_type!r})') from exc


def read_policy_type(model_path: str | Path) -> str:
    """The ``type`` of a LeRobot checkpoint directory's config.json."""
    path = Path(model_path)
    config = path / 'config.json'
    if not path.is_dir():
        raise FileNotFoundError(f'model_path {str(path)!r} is not a directory; point it at a '
                                'LeRobot checkpoint (config.json + model.safetensors)')
    if not config.is_file():
        raise FileNotFoundError(f'{path} has no config.json: not a LeRobot checkpoint (save '
                                'one with policy.save_pretrained)')
    try:
        data = json.loads(config.read_text())
    except ValueError as exc:
        raise ValueError(f'{config} is not valid JSON: {exc}') from exc
    policy_type = data.get('type') if isinstance(data, dict) else None
    if not isinstance(policy_type, str) or not policy_type:
        raise ValueError(f'{config} has no "type" (the LeRobot policy type, e.g. "act")')
    return policy_type
