"""Language state with revisions, the ``<say>`` splitter, and the regeneration throttle.

Revision rule: every change of ``task``, ``subtask`` or run ``mode`` bumps ``revision`` by one;
these are exactly the inputs that change what the action policy is conditioned on (the action
instruction is the subtask, else the task) or whether it may move. ``memory`` and ``plan``
changes do not bump it: they feed the text head only, so in-flight action chunks stay valid.

Flush rule: ``flush_revision`` is the revision of the latest *operator* change - a new task, a
subtask set by the operator (direct mode) or by an interjection's re-plan (``flush=True``), a
run-mode change. The planner's own subtask progression bumps ``revision`` but not
``flush_revision``: executors keep running the queued actions of the previous subtask, while
nothing computed for a revision older than ``flush_revision`` may ever run again.

Empty generations (after stripping whitespace) are dropped - the previous value is kept - and
counted per kind in ``LanguageState.empty``.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field

from .errors import config_error

# teleop: a human's leader arm commands (the executor's run mode); the planner goes on.
MODES = ('action', 'paused', 'teleop')
SOURCES = ('planner', 'operator')

# Whitespace is tolerated inside the tags ("< say >", "</ say>"); DOTALL lets speech span lines.
_SAY_RE = re.compile(r'<\s*say\s*>(.*?)<\s*/\s*say\s*>', re.IGNORECASE | re.DOTALL)
_QUOTES = '"\'\u201c\u201d\u2018\u2019'


def split_say(text: str | None) -> tuple[str, str]:
    """Split ``"plan <say>speech</say>"`` into ``(plan, speech)``.

    Only the first ``<say>`` block is speech; text around it (joined by one space) is the plan.
    Quotes around the speech are removed. Without a complete tag: ``(text.strip(), '')``.
    """
    if not text:
        return '', ''
    match = _SAY_RE.search(text)
    if match is None:
        return text.strip(), ''
    speech = match.group(1).strip().strip(_QUOTES).strip()
    before, after = text[:match.start()].strip(), text[match.end():].strip()
    plan = ' '.join(part for part in (before, after) if part)
    return plan, speech


@dataclass(frozen=True)
class LanguageSnapshot:
    """An immutable, consistent copy of the language state."""

    task: str
    subtask: str
    prior_subtask: str
    memory: str
    plan: str
    revision: int
    mode: str
    source: str
    flush_revision: int = 0


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise config_error(name, value, f'one of {choices}')


@dataclass
class LanguageState:
    """Task, language context and run mode, with a monotonically increasing revision.

    Thread-safe: every mutator and ``snapshot`` holds one re-entrant lock. Read single
    attributes freely, use ``snapshot()`` for a consistent view of several.
    """

    task: str = ''
    subtask: str = ''
    prior_subtask: str = ''
    memory: str = ''
    plan: str = ''
    mode: str = 'action'
    revision: int = 0
    flush_revision: int = 0
    source: str = 'operator'
    repeats: int = 0
    total_repeats: int = 0
    empty: dict[str, int] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_choice('mode', self.mode, MODES)
        _check_choice('source', self.source, SOURCES)

    @property
    def lock(self) -> threading.RLock:
        """The state's lock, for callers that need several operations to be atomic."""
        return self._lock

    def _check_expected(self, expected_revision: int | None) -> bool:
        return expected_revision is None or expected_revision == self.revision

    def set_task(self, task: str, source: str = 'operator', restate: bool = True,
                 restart: bool = False) -> bool:
        """Set the goal; a change bumps revision and resets subtask, prior, memory and plan.

        The reset is deliberate: a context generated for the old goal must not condition
        the new one. Returns whether the task changed. The same task again is no change,
        unless an interjection's plan replaced it meanwhile: restating the task drops the
        plan and starts the task over (``restate=False``: keep it, e.g. a mode change).
        ``restart`` starts the same task over whatever it holds (a new scene), in one step:
        no reader sees an empty task in between.
        """
        _check_choice('source', source, SOURCES)
        task = (task or '').strip()
        with self._lock:
            if task == self.task and not restart and not (restate and self.plan):
                return False
            self.task = task
            self.subtask = self.prior_subtask = self.memory = self.plan = ''
            self.repeats = 0
            self.source = source
            self.revision += 1
            self.flush_revision = self.revision
            return True

    def set_subtask(self, text: str, source: str = 'planner',
                    expected_revision: int | None = None, flush: bool | None = None) -> str:
        """Set the subtask; returns 'changed', 'repeat', 'empty' or 'stale'.

        'stale' only when ``expected_revision`` is given and the revision moved meanwhile
        (the text was generated for a context that no longer exists); nothing is changed.
        A change flushes (advances ``flush_revision``) when ``flush`` is true, by default when
        the operator set it; the planner's own progression does not.
        """
        _check_choice('source', source, SOURCES)
        text = (text or '').strip()
        with self._lock:
            if not self._check_expected(expected_revision):
                return 'stale'
            if not text:
                self._count_empty('subtask')
                return 'empty'
            if text == self.subtask:
                self.repeats += 1
                self.total_repeats += 1
                return 'repeat'
            if self.subtask:
                self.prior_subtask = self.subtask
            self.subtask = text
            self.source = source
            self.repeats = 0
            self.revision += 1
            if source == 'operator' if flush is None else flush:
                self.flush_revision = self.revision
            return 'changed'

    def set_memory(self, text: str, expected_revision: int | None = None) -> bool:
        """Set the running memory (no revision bump); empty text is dropped and counted."""
        return self._set_text('memory', text, expected_revision)

    def set_plan(self, text: str, expected_revision: int | None = None) -> bool:
        """Set the plan (no revision bump); empty text is dropped and counted."""
        return self._set_text('plan', text, expected_revision)

    def _set_text(self, kind: str, text: str, expected_revision: int | None) -> bool:
        text = (text or '').strip()
        with self._lock:
            if not self._check_expected(expected_revision):
                return False
            if not text:
                self._count_empty(kind)
                return False
            if text == getattr(self, kind):
                return False
            setattr(self, kind, text)
            return True

    def set_mode(self, mode: str) -> bool:
        """Switch between 'action', 'paused' and 'teleop'; a change bumps revision (so a
        hand-back from teleop starts a new one: nothing computed before is played)."""
        _check_choice('mode', mode, MODES)
        with self._lock:
            if mode == self.mode:
                return False
            self.mode = mode
            self.revision += 1
            self.flush_revision = self.revision
            return True

    def record_empty(self, kind: str) -> None:
        """Count an empty generation of ``kind`` that was dropped."""
        with self._lock:
            self._count_empty(kind)

    def _count_empty(self, kind: str) -> None:
        self.empty[kind] = self.empty.get(kind, 0) + 1

    def restore(self, snap: LanguageSnapshot) -> None:
        """Take over a saved snapshot (a restarted planner resuming its task and revision)."""
        _check_choice('mode', snap.mode, MODES)
        _check_choice('source', snap.source, SOURCES)
        with self._lock:
            self.task, self.subtask, self.prior_subtask = snap.task, snap.subtask, \
                snap.prior_subtask
            self.memory, self.plan, self.mode, self.source = snap.memory, snap.plan, \
                snap.mode, snap.source
            self.revision = max(self.revision, int(snap.revision))
            self.flush_revision = max(self.flush_revision, int(snap.flush_revision))

    def advance_past(self, revision: int) -> bool:
        """Move past a revision seen elsewhere (the executor's), as an operator change.

        A planner that restarted without its state starts at 0 while the executor is at R:
        its next contexts must be newer than R, or chunks for them would look stale, and
        chunks from before the restart must look stale. True when the revision moved.
        """
        with self._lock:
            if revision < self.revision:
                return False
            self.revision = int(revision) + 1
            self.flush_revision = self.revision
            return True

    def snapshot(self) -> LanguageSnapshot:
        """A consistent immutable copy."""
        with self._lock:
            return LanguageSnapshot(self.task, self.subtask, self.prior_subtask, self.memory,
                                    self.plan, self.revision, self.mode, self.source,
                                    self.flush_revision)


class RegenThrottle:
    """Decides when the high-level text head may regenerate, at action-chunk boundaries.

    ``due(now_s)`` is True when both hold:

    * at least ``chunks_per_regen`` boundaries were noted since the last ``mark`` (before the
      first ``mark``, a single boundary is enough so the first subtask is generated promptly);
    * at least ``1 / high_level_hz`` seconds passed since the last ``mark`` (``inf`` Hz: no time
      limit). A clock that went backwards counts as elapsed, so the loop never stalls.

    ``due`` has no side effects; call ``mark(now_s)`` when a regeneration ran (even one that
    failed: a broken generator is retried at the throttled rate, not at every chunk).
    """

    def __init__(self, chunks_per_regen: int = 1, high_level_hz: float = 1.0) -> None:
        if isinstance(chunks_per_regen, bool) or not isinstance(chunks_per_regen, int) \
                or chunks_per_regen < 1:
            raise config_error('chunks_per_regen', chunks_per_regen, 'an integer >= 1',
                               'use 1 to regenerate at every chunk boundary')
        if not isinstance(high_level_hz, (int, float)) or math.isnan(high_level_hz) \
                or high_level_hz <= 0:
            raise config_error('high_level_hz', high_level_hz, 'a rate > 0 Hz (inf = no limit)',
                               'e.g. 1.0')
        self.chunks_per_regen = chunks_per_regen
        self.high_level_hz = float(high_level_hz)
        self.min_interval_s = 1.0 / self.high_level_hz
        self._boundaries = 0
        self._last_regen_s: float | None = None

    @property
    def boundaries(self) -> int:
        """Chunk boundaries noted since the last mark."""
        return self._boundaries

    @property
    def last_regen_s(self) -> float | None:
        """Time of the last mark, None before the first."""
        return self._last_regen_s

    def note_chunk(self) -> None:
        """Record that an action-chunk boundary happened."""
        self._boundaries += 1

    def due(self, now_s: float, force: bool = False) -> bool:
        """Whether a regeneration may run now (see class docstring)."""
        if force:
            return True
        if self._last_regen_s is None:
            return self._boundaries >= 1
        if self._boundaries < self.chunks_per_regen:
            return False
        elapsed = now_s - self._last_regen_s
        return elapsed < 0 or elapsed >= self.min_interval_s

    def mark(self, now_s: float) -> None:
        """Record that a regeneration ran at ``now_s``."""
        self._last_regen_s = float(now_s)
        self._boundaries = 0

    def reset(self) -> None:
        """Forget history (e.g. on a new task): the next boundary is due again."""
        self._boundaries = 0
        self._last_regen_s = None
