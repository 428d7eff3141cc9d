"""One loaded model per (model_path, device, dtype) per process, shared by planner and policy.

When the planner and the policy nodes run in one process (the composed bring-up) and name the
same checkpoint, the second ``acquire`` returns the model the first one loaded: the weights
are in memory once. ``load_count`` says how often a checkpoint was actually loaded, for tests
and diagnostics. Loading runs under a per-key lock, so two nodes starting at the same time
still load once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lerobot_lang_nodes import dependencies

from . import registry

logger = logging.getLogger(__name__)

DTYPES = ('auto', 'float32', 'bfloat16', 'float16')

Key = tuple[str, str, str]


@dataclass
class SharedModel:
    """A loaded checkpoint: its adapter and who uses it."""

    key: Key
    policy_type: str
    adapter: Any
    load_s: float
    users: set[str] = field(default_factory=set)
    # One call into the model at a time: the planner's and the policy's threads share its
    # modules, and a policy may keep per-call state (action queues, observation history).
    call_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def model_path(self) -> str:
        return self.key[0]


_lock = threading.Lock()
_key_locks: dict[Key, threading.Lock] = {}
_models: dict[Key, SharedModel] = {}
_loads: dict[Key, int] = {}


def resolve_device(device: str) -> str:
    """'' / 'auto' -> 'cuda' when available, else 'cpu'; anything else as given."""
    if device in ('', 'auto'):
        import torch
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    return device


def resolve_dtype(dtype: str) -> str:
    """'' / 'auto' -> 'float32' (what LeRobot checkpoints are saved in); checks the name."""
    if dtype in ('', 'auto'):
        return 'float32'
    if dtype not in DTYPES:
        raise ValueError(f'dtype {dtype!r} is not supported; use one of {list(DTYPES)}')
    return dtype


def cache_key(model_path: str, device: str = 'auto', dtype: str = 'auto') -> Key:
    """The sharing key: the resolved real path, device and dtype."""
    if not model_path:
        raise ValueError('model_path is empty; set it to a LeRobot checkpoint directory '
                         '(config.json + model.safetensors)')
    return (os.path.realpath(os.path.expanduser(model_path)), resolve_device(device),
            resolve_dtype(dtype))


def acquire(model_path: str, device: str = 'auto', dtype: str = 'auto',
            user: str = '') -> SharedModel:
    """The shared model for this checkpoint, loading it on first use; ``user`` is recorded."""
    with dependencies.model_stack_required('the hierarchical backend'):
        key = cache_key(model_path, device, dtype)
    with _lock:
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        model = _models.get(key)
        if model is None:
            with dependencies.model_stack_required('the hierarchical backend'):
                model = _load(key)
            with _lock:
                _models[key] = model
        model.users.add(user or f'user{len(model.users) + 1}')
        return model


def release(model: SharedModel, user: str = '') -> None:
    """Drop ``user``'s claim; the last one out frees the model (its next acquire reloads)."""
    with _lock:
        model.users.discard(user)
        if not model.users and _models.get(model.key) is model:
            del _models[model.key]


def _load(key: Key) -> SharedModel:
    path, device, dtype = key
    policy_type = registry.read_policy_type(path)
    adapter_cls = registry.adapter_class(policy_type)
    logger.info('loading %s checkpoint %s on %s (%s) with %s', policy_type, path, device, dtype,
                adapter_cls.__name__)
    t0 = time.monotonic()
    adapter = adapter_cls.from_pretrained(path, device=device, dtype=dtype)
    load_s = time.monotonic() - t0
    with _lock:
        _loads[key] = _loads.get(key, 0) + 1
        count = _loads[key]
    logger.info('loaded %s in %.2f s (load %d of this checkpoint in this process)', path,
                load_s, count)
    return SharedModel(key, policy_type, adapter, load_s)


def load_count(model_path: str | None = None) -> int:
    """How often ``model_path`` (any device/dtype; every checkpoint when None) was loaded."""
    real = None if model_path is None else os.path.realpath(os.path.expanduser(model_path))
    with _lock:
        return sum(n for key, n in _loads.items() if real is None or key[0] == real)


def loaded() -> list[SharedModel]:
    """The models held right now."""
    with _lock:
        return list(_models.values())
