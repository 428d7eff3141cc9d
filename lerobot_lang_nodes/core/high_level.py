"""The hierarchical language loop (subtask, memory, interjection, VQA) that a planner node wraps.

The planner never raises because of the text generator: a generator exception is logged,
counted in ``failures[kind]`` and turned into "no new text", so the control loop keeps running.
Generator calls are serialised by a lock, since one model may serve several callers.

A generation that took long is applied only if the language context did not change while it
ran (``expected_revision``): a subtask computed for the previous task must not overwrite the
new task's context.

A generator signals a generation that hit its time limit by raising ``TimeoutError``: it is
counted in ``timeouts[kind]`` as well as in ``failures[kind]``. ``stats()`` gathers every
counter (and the generation latency per kind) for the node's diagnostics.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from . import prompts
from .errors import config_error
from .language import LanguageSnapshot, LanguageState, RegenThrottle, split_say

logger = logging.getLogger(__name__)

KINDS = ('subtask', 'memory', 'interjection', 'vqa')
LATENCY_WINDOW = 100  # generations per kind kept for the latency statistics


@runtime_checkable
class TextGenerator(Protocol):
    """Generates one text of ``kind`` from chat ``messages`` and the current observation."""

    def generate(self, kind: str, messages: list[dict], observation: Mapping | None) -> str:
        """Return the decoded text ('' when the model produced nothing)."""
        ...


@dataclass
class HighLevelConfig:
    """Settings of the high-level loop; the generation settings are passed to the generator."""

    chunks_per_regen: int = 1
    high_level_hz: float = 1.0
    # Looks in a row that must answer the same new subtask before the planner leaves the
    # current one (1 = at the first). A model that moves on too early now and then on single
    # frames does so far less often when it must agree with itself on the next frames.
    subtask_confirmations: int = 1
    enable_memory: bool = True
    direct_subtask: bool = False
    min_new_tokens: int = 0
    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        # RegenThrottle validates chunks_per_regen and high_level_hz with the same messages.
        RegenThrottle(self.chunks_per_regen, self.high_level_hz)
        if isinstance(self.subtask_confirmations, bool) \
                or not isinstance(self.subtask_confirmations, int) \
                or self.subtask_confirmations < 1:
            raise config_error('subtask_confirmations', self.subtask_confirmations,
                               'an integer >= 1', 'use 1 to move on at the first answer')
        if isinstance(self.min_new_tokens, bool) or not isinstance(self.min_new_tokens, int) \
                or self.min_new_tokens < 0:
            raise config_error('min_new_tokens', self.min_new_tokens, 'an integer >= 0')
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) \
                or self.temperature < 0:
            raise config_error('temperature', self.temperature, 'a number >= 0 (0 = greedy)')
        if not isinstance(self.top_p, (int, float)) or not 0.0 < self.top_p <= 1.0:
            raise config_error('top_p', self.top_p, 'a number in (0, 1]', 'use 1.0 to disable')

    def generation_kwargs(self) -> dict[str, Any]:
        """The decoding settings as keyword arguments for a generator backend."""
        return {'min_new_tokens': self.min_new_tokens, 'temperature': self.temperature,
                'top_p': self.top_p}


class HighLevelPlanner:
    """Throttled subtask/memory regeneration plus interjection and VQA handling."""

    def __init__(self, generator: TextGenerator, state: LanguageState | None = None,
                 cfg: HighLevelConfig | None = None,
                 templates: prompts.PromptTemplates | None = None) -> None:
        self.generator = generator
        self.state = state if state is not None else LanguageState()
        self.cfg = cfg or HighLevelConfig()
        self.templates = templates or prompts.DEFAULT_TEMPLATES
        self.throttle = RegenThrottle(self.cfg.chunks_per_regen, self.cfg.high_level_hz)
        self.failures: dict[str, int] = {}
        self.timeouts: dict[str, int] = {}
        self.latency_s: dict[str, deque[float]] = {}  # the last LATENCY_WINDOW per kind
        self.discarded: dict[str, int] = {}  # generations dropped because the context moved
        self.last_raw: dict[str, str] = {}
        # The text of the last subtask turn, on /diagnostics: what the prompt templates made of
        # the language and joint state (a prompts file is checked against it).
        self.last_prompt: dict[str, str] = {}
        self.last_outcome = ''
        self.unconfirmed = 0  # looks whose new subtask awaited confirmation
        # (revision, new subtask, looks in a row that answered it) under subtask_confirmations
        self._pending: tuple[int, str, int] | None = None
        self._direct = self.cfg.direct_subtask
        self._gen_lock = threading.RLock()
        # (what the generator saw, time) at the first boundary not yet answered: its look
        # waits for a newer observation.
        self._waiting: tuple[Hashable, float] | None = None
        # Called (on the generating thread) as soon as the subtask changed, before the memory
        # is generated: the node publishes the new subtask at once instead of one generation
        # later (a model's memory note costs as long as the subtask did).
        self.on_subtask_changed: Callable[[], None] | None = None

    @property
    def direct(self) -> bool:
        """True while the operator's text is the subtask (no subtask generation)."""
        return self._direct

    def set_task(self, task: str, direct_subtask: bool = False, restate: bool = True,
                 restart: bool = False, subtask: str = '') -> bool:
        """Set the operator's task; in direct mode it (or ``subtask``) becomes the subtask.

        The same task again restarts it when an interjection re-planned meanwhile
        (``restate``), or always with ``restart`` (LanguageState.set_task). ``subtask``: the
        operator's direct subtask under the task, set in one step (the previous subtask, not
        the task, becomes its prior).
        """
        self._direct = bool(direct_subtask or self.cfg.direct_subtask)
        changed = self.state.set_task(task, source='operator', restate=restate,
                                      restart=restart)
        if changed:
            self.throttle.reset()
        if self._direct and self.state.task:
            changed = self.state.set_subtask(subtask or self.state.task,
                                             source='operator') == 'changed' or changed
        return changed

    def on_chunk_boundary(self, now_s: float, observation: Mapping | None = None,
                          observed: Hashable | None = None) -> bool:
        """Note an action-chunk boundary; regenerate when the throttle allows (see ``look``).

        ``observed`` names what the generator would see now (e.g. how many observations the
        node has received; None = unknown). With it, the boundary's regeneration waits for
        the next observation: the caller calls ``look`` when one arrives. Returns whether a
        regeneration ran (whatever its outcome; see ``last_outcome``). Nothing runs in direct
        mode, while paused, or without a task (in teleop it runs: a demonstration gets its
        language too).
        """
        self.throttle.note_chunk()
        if observed is not None and self._waiting is None:
            self._waiting = (observed, float(now_s))
        return self.look(now_s, observation, observed)

    def look(self, now_s: float, observation: Mapping | None = None,
             observed: Hashable | None = None) -> bool:
        """Regenerate if a boundary is pending, the throttle allows and there is news.

        A boundary's regeneration runs on an observation newer than the one current at the
        boundary (``observed`` differs), so the subtask is decided on what the world shows
        after the boundary rather than on a frame that may be most of an observation period
        old; the boundary stays pending (the throttle is not marked) meanwhile, and it waits
        at most one ``1 / high_level_hz`` (observations that stopped coming). Without
        ``observed`` (None) it runs at once. ``chunks_per_regen`` and ``high_level_hz`` bound
        the regenerations as before.
        """
        # In teleop a human demonstrates: the subtasks still follow what the cameras show.
        if self._direct or self.state.mode == 'paused' or not self.state.task:
            return False
        if not self.throttle.due(now_s):
            return False
        waiting = self._waiting
        if (observed is not None and waiting is not None and observed == waiting[0]
                and 0.0 <= now_s - waiting[1] < self.throttle.min_interval_s):
            return False
        self.regenerate(now_s, observation)
        return True

    def regenerate(self, now_s: float, observation: Mapping | None = None,
                   flush: bool = False) -> str:
        """Unthrottled: generate the subtask, then memory if the subtask changed.

        ``flush``: the regeneration answers an operator's interjection, so a changed subtask
        is an operator change (executors drop the queued actions); otherwise it is the
        planner's own progression and queued actions keep running.
        Returns 'changed', 'repeat', 'empty', 'failed', 'stale', 'unconfirmed' (a new subtask
        still short of ``subtask_confirmations`` looks in a row) or 'skipped' (no task).
        """
        self.throttle.mark(now_s)
        self._waiting = None  # the pending boundary is answered
        with self._gen_lock:
            snap = self.state.snapshot()
            if not snap.task:
                self.last_outcome = 'skipped'
                return self.last_outcome
            messages = prompts.subtask_messages(snap.task, snap.plan, snap.memory, snap.subtask,
                                                snap.prior_subtask, self.templates,
                                                prompts.observed_joints(observation))
            self.last_prompt['subtask'] = messages[0]['content']
            text = self._generate('subtask', messages, observation)
            if text is None:
                self.last_outcome = 'failed'
                return self.last_outcome
            if not flush and not self._confirmed(snap, text):
                self.unconfirmed += 1
                self.last_outcome = 'unconfirmed'
                return self.last_outcome
            outcome = self.state.set_subtask(text, source='planner',
                                             expected_revision=snap.revision,
                                             flush=True if flush else None)
            if outcome == 'stale':
                self._count(self.discarded, 'subtask')
            if outcome == 'changed' and self.on_subtask_changed is not None:
                self.on_subtask_changed()
            if outcome == 'changed' and self.cfg.enable_memory:
                self._regenerate_memory(observation)
            self.last_outcome = outcome
            return outcome

    def _confirmed(self, snap: LanguageSnapshot, text: str) -> bool:
        """Whether a generated subtask may replace the current one (subtask_confirmations).

        A task's first subtask, a repeat and an empty answer pass at once; a new subtask
        must be the answer of ``subtask_confirmations`` looks in a row within one revision.
        An operator's change (flush) never waits: it does not come through here.
        """
        text = (text or '').strip()
        need = self.cfg.subtask_confirmations
        if need <= 1 or not snap.subtask or not text or text == snap.subtask:
            self._pending = None
            return True
        pending = self._pending
        count = pending[2] + 1 if pending and pending[:2] == (snap.revision, text) else 1
        if count >= need:
            self._pending = None
            return True
        self._pending = (snap.revision, text, count)
        return False

    def _regenerate_memory(self, observation: Mapping | None) -> None:
        snap = self.state.snapshot()
        messages = prompts.memory_messages(snap.task, snap.memory, snap.prior_subtask,
                                           self.templates)
        text = self._generate('memory', messages, observation)
        if text is None:
            return
        if not text.strip():
            self.state.record_empty('memory')
            return
        if snap.revision != self.state.revision:
            self._count(self.discarded, 'memory')
            return
        self.state.set_memory(text, expected_revision=snap.revision)

    def interject(self, text: str, observation: Mapping | None = None) -> tuple[str, str]:
        """Regenerate the plan from a user interjection; returns ``(plan, speech)``.

        The plan (without the ``<say>`` part) is stored in the state; the speech is for the
        caller to publish. ``('', '')`` on failure or empty output.
        """
        if not (text or '').strip():
            return '', ''
        with self._gen_lock:
            snap = self.state.snapshot()
            messages = prompts.interjection_messages(snap.task, text.strip(), snap.plan,
                                                     self.templates)
            out = self._generate('interjection', messages, observation)
            if out is None:
                return '', ''
            plan, speech = split_say(out)
            if not plan and not speech:
                self.state.record_empty('interjection')
                return '', ''
            if plan and not self.state.set_plan(plan, expected_revision=snap.revision) \
                    and self.state.revision != snap.revision:
                self._count(self.discarded, 'interjection')
            return plan, speech

    def answer_vqa(self, question: str, image: Any, camera: str = '',
                   observation: Mapping | None = None) -> str:
        """Answer a question about ``image``; '' on failure or empty output (counted)."""
        with self._gen_lock:
            out = self._generate('vqa', prompts.vqa_messages(question, image, camera,
                                                             self.templates), observation)
        if out is None:
            return ''
        answer = out.strip()
        if not answer:
            self.state.record_empty('vqa')
        return answer

    def _generate(self, kind: str, messages: list[dict], observation: Mapping | None
                  ) -> str | None:
        """Call the generator; None (and a counted failure) when it raised or returned junk."""
        start = time.monotonic()
        try:
            out = self.generator.generate(kind, messages, observation)
        except TimeoutError as exc:
            self._note_latency(kind, start)
            self._count(self.failures, kind)
            self._count(self.timeouts, kind)
            logger.warning('%s generation timed out (%s timeouts in total): %s', kind,
                           self.timeouts[kind], exc)
            return None
        except Exception as exc:  # noqa: BLE001 - generation failures must not stop the loop
            self._note_latency(kind, start)
            self._count(self.failures, kind)
            logger.warning('%s generation failed (%s in total): %s: %s', kind,
                           self.failures[kind], type(exc).__name__, exc)
            return None
        self._note_latency(kind, start)
        if out is None:
            out = ''
        if not isinstance(out, str):
            self._count(self.failures, kind)
            logger.warning('%s generation returned %s, expected str', kind, type(out).__name__)
            return None
        self.last_raw[kind] = out
        return out

    def _note_latency(self, kind: str, start: float) -> None:
        window = self.latency_s.setdefault(kind, deque(maxlen=LATENCY_WINDOW))
        window.append(time.monotonic() - start)

    def stats(self) -> dict[str, Any]:
        """Every counter of the loop, flat ``'<counter>.<kind>'`` keys (for diagnostics).

        Latency is of the generator call, per kind: the last one and the mean / median over
        the last LATENCY_WINDOW calls (failed ones included: a timeout is a latency too).
        """
        with self.state.lock:
            out: dict[str, Any] = {'repeats': self.state.repeats,
                                   'total_repeats': self.state.total_repeats,
                                   'unconfirmed_subtasks': self.unconfirmed}
            tables = {'empty': dict(self.state.empty)}
        tables.update(failures=self.failures, timeouts=self.timeouts, discarded=self.discarded)
        for name, table in tables.items():
            for kind in KINDS:
                out[f'{name}.{kind}'] = table.get(kind, 0)
        for kind in KINDS:
            window = list(self.latency_s.get(kind, ()))
            if window:
                out[f'latency_last_s.{kind}'] = window[-1]
                out[f'latency_mean_s.{kind}'] = statistics.fmean(window)
                out[f'latency_p50_s.{kind}'] = statistics.median(window)
            if kind in self.last_raw:
                out[f'last_raw.{kind}'] = self.last_raw[kind]
            if kind in self.last_prompt:
                out[f'last_prompt.{kind}'] = self.last_prompt[kind]
        return out

    @staticmethod
    def _count(table: dict[str, int], kind: str) -> None:
        table[kind] = table.get(kind, 0) + 1
