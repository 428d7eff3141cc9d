"""The virtual operator's rules: when a scripted expert takes the arm from a learned policy, and
when it gives it back, without ROS.

DAgger in simulation: the learned policy acts, an expert watching the same ground truth takes
over through the takeover path a human uses when the policy strays, and the corrections are
recorded as a human's would be. ``VirtualOperator.step`` is fed one ``Observation`` per tick
(the node measures progress, deviation and drops from the simulator's ground truth) and
answers what to do now. The rules (``OperatorRules``):

* **stall**: while the policy commands the arm (run mode action), its progress toward the
  current subtask's goal (a distance the node measures, e.g. grasp point to cube) has not
  dropped by ``progress_epsilon`` below its best for ``stall_s``. A new subtask, a pause or a
  hand-back starts the measure again, so the policy always gets ``stall_s`` of its own.
* **deviation**: the follower has been farther than ``max_deviation_rad`` (largest joint gap)
  from the expert's own plan for ``deviation_s`` without a break.
* **drop**: the ground truth says a cube held in the gripper left it outside the bowl.
* **hand-back**: once the subtask the operator took over for is done (the expert's current
  subtask differs from it, or the task is done), and never before ``min_takeover_s``. A
  takeover the operator did not make (a human's) is never handed back by it.
* **no flapping**: no takeover within ``cooldown_s`` of a hand-back.

Time is injected (``now_s`` in every observation), so the rules are tested with a stepped clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

STALL, DEVIATION, DROP = 'stall', 'deviation', 'drop'
REASONS = (STALL, DEVIATION, DROP)
TAKEOVER, HANDBACK = 'takeover', 'handback'


def _positive(name: str, value: float, zero_ok: bool = False) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value)
            and (value >= 0 if zero_ok else value > 0)):
        raise ValueError(f'{name}: got {value!r}, expected a finite number '
                         f'{">= 0" if zero_ok else "> 0"}')


@dataclass(frozen=True)
class OperatorRules:
    """When the virtual operator takes over and hands back (seconds, metres, radians)."""

    stall_s: float = 3.0            # no progress for this long: take over
    progress_epsilon: float = 0.005  # progress counts from this drop of the measure on
    max_deviation_rad: float = 0.5  # largest joint gap from the expert's plan ...
    deviation_s: float = 1.5        # ... for this long without a break: take over
    take_over_on_drop: bool = True  # a held cube dropped outside the bowl: take over
    min_takeover_s: float = 1.0     # hold the arm at least this long
    cooldown_s: float = 2.0         # no takeover this soon after a hand-back

    def __post_init__(self) -> None:
        for name in ('stall_s', 'progress_epsilon', 'max_deviation_rad', 'deviation_s'):
            _positive(name, getattr(self, name))
        for name in ('min_takeover_s', 'cooldown_s'):
            _positive(name, getattr(self, name), zero_ok=True)


@dataclass(frozen=True)
class Observation:
    """What the operator sees at one tick.

    ``subtask``: the expert's current subtask ('' when there is no task it can run, None when
    the task is done); ``progress``: the measure toward that subtask's goal (smaller is
    closer; None: none); ``deviation_rad``: the follower's largest joint gap from the expert's
    plan (None: no plan yet); ``dropped``: a held cube just left the gripper outside the bowl;
    ``policy_acting``: the policy commands the arm (run mode action, control source policy);
    ``human_acting``: run mode teleop (someone, maybe this operator, commands the arm).
    """

    now_s: float
    subtask: str | None
    progress: float | None = None
    deviation_rad: float | None = None
    dropped: bool = False
    policy_acting: bool = False
    human_acting: bool = False


@dataclass(frozen=True)
class Decision:
    action: str  # TAKEOVER or HANDBACK
    reason: str
    subtask: str | None = None


@dataclass
class OperatorCounts:
    """What the operator did: takeovers by reason, hand-backs, seconds holding the arm."""

    takeovers: dict[str, int] = field(default_factory=lambda: {r: 0 for r in REASONS})
    handbacks: int = 0
    intervention_s: float = 0.0

    @property
    def total_takeovers(self) -> int:
        return sum(self.takeovers.values())


class VirtualOperator:
    """Decides, tick by tick, when to take the arm and when to give it back."""

    def __init__(self, rules: OperatorRules | None = None) -> None:
        self.rules = rules or OperatorRules()
        self.counts = OperatorCounts()
        self.holding = False          # this operator commands the arm
        self.corrected: str | None = None  # the subtask it took over for
        self.reason = ''
        self._taken_at: float | None = None
        self._released_at: float | None = None
        self._last_s: float | None = None
        self._watch_subtask: str | None = None
        self._best: float | None = None
        self._best_at: float | None = None
        self._deviating_since: float | None = None

    # ------------------------------------------------------------------ the node's feedback
    def took_over(self, now_s: float, reason: str, subtask: str | None) -> None:
        """The takeover service said yes: the operator commands the arm from ``now_s``."""
        self.holding = True
        self.corrected = subtask
        self.reason = reason
        self._taken_at = float(now_s)
        self.counts.takeovers[reason] = self.counts.takeovers.get(reason, 0) + 1

    def handed_back(self, now_s: float) -> None:
        """The hand-back service said yes (or someone else ended the takeover)."""
        if self.holding:
            self.counts.handbacks += 1
        self.holding = False
        self.corrected = None
        self._released_at = float(now_s)
        self._watch(None)

    # ------------------------------------------------------------------ the rules
    def step(self, obs: Observation) -> Decision | None:
        """One tick: a takeover or hand-back to ask for, or None."""
        now = float(obs.now_s)
        if self.holding and self._last_s is not None and now > self._last_s:
            self.counts.intervention_s += now - self._last_s
        self._last_s = now
        if self.holding:
            return self._while_holding(obs, now)
        return self._while_watching(obs, now)

    def _while_holding(self, obs: Observation, now: float) -> Decision | None:
        if not obs.human_acting:  # someone handed back (or paused) behind the operator's back
            self.handed_back(now)
            return None
        taken_at = now if self._taken_at is None else self._taken_at
        if now - taken_at < self.rules.min_takeover_s:
            return None
        if obs.subtask != self.corrected:
            done = 'the task is done' if obs.subtask is None else f'next: {obs.subtask}'
            return Decision(HANDBACK, f'{self.corrected or "the task"} done ({done})',
                            obs.subtask)
        return None

    def _while_watching(self, obs: Observation, now: float) -> Decision | None:
        if not obs.policy_acting or not obs.subtask:
            # Paused, a human in control, no task or the task done: nothing to judge.
            self._watch(None)
            return None
        if obs.subtask != self._watch_subtask:
            self._watch(obs.subtask)
        rules = self.rules
        if self._released_at is not None and now - self._released_at < rules.cooldown_s:
            self._watch(obs.subtask)  # the policy's time starts after the cooldown
            return None
        if obs.dropped and rules.take_over_on_drop:
            return Decision(TAKEOVER, DROP, obs.subtask)
        if obs.progress is not None:
            if self._best is None or obs.progress <= self._best - rules.progress_epsilon:
                self._best, self._best_at = float(obs.progress), now
            elif now - self._best_at >= rules.stall_s:
                return Decision(TAKEOVER, STALL, obs.subtask)
        if obs.deviation_rad is not None and obs.deviation_rad > rules.max_deviation_rad:
            if self._deviating_since is None:
                self._deviating_since = now
            elif now - self._deviating_since >= rules.deviation_s:
                return Decision(TAKEOVER, DEVIATION, obs.subtask)
        else:
            self._deviating_since = None
        return None

    def _watch(self, subtask: str | None) -> None:
        """Start judging ``subtask`` afresh."""
        self._watch_subtask = subtask
        self._best = self._best_at = None
        self._deviating_since = None
