"""Backend registry: name -> 'module:Class', imported only when a node asks for it.

Importing a node therefore never loads torch, transformers or MuJoCo unless the configured
backend needs them. To add a backend, add one line to ``BACKENDS``.
"""

from __future__ import annotations

import importlib

BACKENDS: dict[str, dict[str, str]] = {
    'planner': {
        'scripted': 'lerobot_lang_nodes.backends.planners.scripted:ScriptedPlanner',
        'transformers': 'lerobot_lang_nodes.backends.planners.transformers_planner:'
                        'TransformersPlanner',
        'hierarchical': 'lerobot_lang_nodes.hierarchical.backends:HierarchicalPlanner',
    },
    'policy': {
        'scripted': 'lerobot_lang_nodes.backends.policies.scripted:ScriptedSimExpert',
        'lerobot': 'lerobot_lang_nodes.backends.policies.lerobot_policy:LeRobotPolicy',
        'hierarchical': 'lerobot_lang_nodes.hierarchical.backends:HierarchicalPolicy',
    },
}


class BackendNotFound(LookupError):
    """The backend name is not registered (or its entry names a missing module)."""


class BackendUnavailable(ImportError):
    """The backend is registered but an optional dependency of it is not installed."""


def known(kind: str) -> list[str]:
    return sorted(BACKENDS.get(kind, {}))


def load_backend(kind: str, name: str) -> type:
    """Import and return the class registered as ``name`` for ``kind``."""
    if kind not in BACKENDS:
        raise BackendNotFound(f'unknown backend kind {kind!r}; kinds: {sorted(BACKENDS)}')
    entries = BACKENDS[kind]
    if name not in entries:
        raise BackendNotFound(f'unknown {kind} backend {name!r}; known: {known(kind)}. Fix the '
                              '`backend` parameter or register it in '
                              'lerobot_lang_nodes/backends/registry.py')
    module_path, _, attr = entries[name].partition(':')
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        missing = exc.name or ''
        if module_path == missing or module_path.startswith(f'{missing}.'):
            raise BackendNotFound(f'{kind} backend {name!r} names module {module_path!r}, '
                                  'which does not exist') from exc
        from lerobot_lang_nodes import dependencies
        raise BackendUnavailable(
            dependencies.model_stack_message(f'the {kind} backend {name!r}', exc)
            or f'{kind} backend {name!r} needs the Python package {missing!r}, which is not '
            'installed; install it (see README "Backends")') from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise BackendNotFound(f'{module_path} has no {attr!r} (registry entry of {kind} '
                              f'backend {name!r})') from exc
