"""Post-hoc language: a planner backend run offline over a recorded session; ROS-free.

A teleoperated demonstration (or a session whose planner is not trusted) has frames but no
subtasks. ``annotate`` replays it through the planner's own loop (core/high_level.py's
HighLevelPlanner: subtask, then memory when the subtask changed, subtask_confirmations) at
the planner's rate on the recording's clock, each look seeing what a live planner would have
seen at that time (the latest camera frames, the simulator's ground truth, the joint state,
the language state so far), and returns the language states as (time, style, content) rows:
the rows a recorded /language_context gives the export (recording/language.py). A row is
placed at the time of the observation it was decided from (offline there is no generation
latency to add). The operator's recorded interjections are answered again by this planner
(its plan and speech replace the recorded planner's).

Tasks come from the recording (its /task messages, language contexts or episode marks) or
one given task; a scene reset (a new simulator seed) or a new episode starts the task over
(memory cleared), as the live planner does. The backend is built as the planner node builds
it, ``cls(cfg)`` from the planner's parameters; torch and transformers load only with a model
backend.
"""

from __future__ import annotations

import bisect
import logging
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_lang_nodes.recording.language import PERSISTENT

logger = logging.getLogger(__name__)

IMAGE_PREFIX = 'observation.images.'
# Backends that cannot run without a checkpoint (the scripted one needs none).
MODEL_BACKENDS = ('transformers', 'hierarchical')

# observe(tick index, time, language snapshot) -> the observation the planner sees then.
Observe = Callable[[int, float, Any], Mapping[str, Any]]


class AnnotationError(RuntimeError):
    """The annotation cannot run; the message says why and what to do."""


@dataclass(frozen=True)
class AnnotateOptions:
    """What `lerobot-lang annotate` asks for on top of the export's options."""

    backend: str = 'scripted'
    # The planner's parameters as attributes (the planner node's PlannerConfig): model_path,
    # image_cameras, device, prompts_file, ... ; None: every backend's defaults.
    planner: Any = None
    # Looks per second on the recording's clock; 0: the planner's high_level_hz.
    rate_hz: float = 0.0
    # The task of the whole recording, replacing the recorded ones ('' = as recorded).
    task: str = ''

    def __post_init__(self) -> None:
        if self.rate_hz < 0:
            raise ValueError(f'rate_hz must be >= 0 (0 = the planner\'s high_level_hz), got '
                             f'{self.rate_hz}')

    def cfg(self) -> Any:
        return self.planner if self.planner is not None else types.SimpleNamespace()


@dataclass
class Annotation:
    """What the pass produced: the language states and how the looks went."""

    states: list[tuple[float, str, str]] = field(default_factory=list)
    speech: list[tuple[float, str]] = field(default_factory=list)  # replies to interjections
    looks: int = 0
    failures: dict[str, int] = field(default_factory=dict)


def needs_of(generator: Any) -> tuple[bool, tuple[str, ...]]:
    """(reads the simulator's ground truth, cameras whose frames it looks at) of a backend."""
    observes = getattr(generator, 'observes', None)
    if observes is not None:  # the scripted planner: ground truth only
        return 'ground_truth' in observes, tuple(o for o in observes if o != 'ground_truth')
    if hasattr(generator, 'image_cameras'):  # transformers: a VLM looks, a text model does not
        kind = getattr(getattr(generator, 'checkpoint', None), 'kind', 'vlm')
        return False, tuple(generator.image_cameras) if kind == 'vlm' else ()
    keys = getattr(getattr(generator, 'adapter', None), 'image_keys', ())  # hierarchical
    return False, tuple(k[len(IMAGE_PREFIX):] for k in keys if k.startswith(IMAGE_PREFIX))


def load_generator(opt: AnnotateOptions) -> Any:
    """Build the backend as the planner node does; AnnotationError says what is wrong."""
    from lerobot_lang_nodes.backends.registry import (BackendNotFound, BackendUnavailable,
                                                      known, load_backend)
    cfg = opt.cfg()
    if opt.backend in MODEL_BACKENDS and not str(getattr(cfg, 'model_path', '') or ''):
        raise AnnotationError(f'the {opt.backend} planner backend needs a model: give its '
                              'checkpoint (--planner-model PATH, the planner\'s model_path)')
    try:
        cls = load_backend('planner', opt.backend)
    except BackendNotFound as exc:
        raise AnnotationError(f'unknown planner backend {opt.backend!r}; known: '
                              f"{known('planner')}") from exc
    except BackendUnavailable as exc:
        raise AnnotationError(str(exc)) from exc
    try:
        return cls(cfg)
    except Exception as exc:  # noqa: BLE001 - model loading runs third-party code; report
        where = getattr(cfg, 'model_path', '')
        raise AnnotationError(f'planner backend {opt.backend!r} failed to load'
                              + (f' from {where!r}' if where else '')
                              + f': {type(exc).__name__}: {exc}') from exc


def build_planner(generator: Any, opt: AnnotateOptions) -> Any:
    """The planner's loop over ``generator`` with the planner's settings and templates."""
    from lerobot_lang_nodes import paths
    from lerobot_lang_nodes.core import prompts
    from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
    cfg = opt.cfg()
    d = HighLevelConfig()
    hl = HighLevelConfig(
        high_level_hz=rate_of(opt),
        subtask_confirmations=getattr(cfg, 'subtask_confirmations', d.subtask_confirmations),
        enable_memory=getattr(cfg, 'enable_memory', d.enable_memory),
        min_new_tokens=getattr(cfg, 'min_new_tokens', d.min_new_tokens),
        temperature=getattr(cfg, 'temperature', d.temperature),
        top_p=getattr(cfg, 'top_p', d.top_p))
    templates = prompts.load_templates(
        getattr(cfg, 'prompts_file', '') or paths.config_path('prompts.yaml'),
        getattr(cfg, 'system_prompt', '') or None)
    return HighLevelPlanner(generator, cfg=hl, templates=templates)


def rate_of(opt: AnnotateOptions) -> float:
    from lerobot_lang_nodes.core.high_level import HighLevelConfig
    return float(opt.rate_hz or getattr(opt.cfg(), 'high_level_hz',
                                        HighLevelConfig().high_level_hz))


def annotate(planner: Any, ticks: np.ndarray, tasks: Sequence[tuple[float, str]],
             restarts: Sequence[float], observe: Observe,
             progress: Callable[[int, int], Any] | None = None,
             interjections: Sequence[tuple[float, str]] = ()) -> Annotation:
    """Run ``planner`` (a HighLevelPlanner) once at each tick; the language states it holds.

    ``tasks``: (time, task) sorted, the first one also holds before its time; ``restarts``:
    times at which the task starts over (a new scene, a new episode). ``interjections``: the
    operator's, each answered at the first tick at or after it as the live planner answers
    one (a new plan and speech, then the subtask at once); its speech is at the
    interjection's time. ``observe`` is called once per tick, in order. ``progress(1, n)``
    after each of the n ticks (a model's look can take seconds).
    """
    out = Annotation()
    task_t = [t for t, _ in tasks]
    restarts = sorted(restarts)
    pending = sorted(interjections, key=lambda x: x[0])
    r = i = 0
    current: str | None = None
    prev = dict.fromkeys(PERSISTENT, '')
    for k, t in enumerate(np.asarray(ticks, dtype=np.float64)):
        t = float(t)
        j = bisect.bisect_right(task_t, t) - 1
        task = tasks[max(j, 0)][1].strip() if tasks else ''
        restart = False
        while r < len(restarts) and restarts[r] <= t:
            restart, r = True, r + 1
        if task != current or (restart and current is not None):
            planner.set_task(task, restart=restart)
            current = task
        obs = dict(observe(k, t, planner.state.snapshot()))
        replanned = False
        while i < len(pending) and pending[i][0] <= t:
            t_i, text = pending[i]
            i += 1
            if not task:
                continue
            obs['language'] = planner.state.snapshot()
            plan, speech = planner.interject(text, obs)
            if speech:
                out.speech.append((t_i, speech))
            if plan:
                obs['language'] = planner.state.snapshot()
                planner.regenerate(t, obs, flush=True)
                replanned = True
        if task and not replanned:
            planner.regenerate(t, obs)
        out.looks += bool(task)
        snap = planner.state.snapshot()
        for style in PERSISTENT:
            value = getattr(snap, style)
            if value != prev[style]:
                out.states.append((float(t), style, value))
                prev[style] = value
        if progress is not None:
            progress(1, len(ticks))
    out.failures = {k: v for k, v in planner.failures.items() if v}
    return out
