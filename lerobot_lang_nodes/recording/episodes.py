"""The timing of an episodic recording, as `lerobot-record` runs one; ROS-free, time injected.

An episode runs for ``episode_s``, then a reset phase for ``reset_s`` (none after the last
episode), until ``num_episodes`` episodes are kept. The operator can end the current phase
early, re-record the current (or just finished) episode, label the last episode a success or
failure, and stop. Every change is an event (a dict, JSON on the `episode_event` topic) that
the recorder writes into the bag and the export cuts at (recording.dataset, episodes_by marks):
``episode`` (index, task), ``reset`` (index), ``label`` (index, success), ``discard`` (index),
``stop``. Indices count every episode started; a discarded one is not counted as kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodePlan:
    """What `lerobot-lang record-episodes` asks for."""

    tasks: tuple[str, ...]       # the task of each episode; the last one repeats
    num_episodes: int = 1
    episode_s: float = 60.0
    reset_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.tasks or not all(t.strip() for t in self.tasks):
            raise ValueError('give the task of the episodes (--task)')
        if self.num_episodes < 1:
            raise ValueError(f'num_episodes must be >= 1, got {self.num_episodes}')
        if self.episode_s <= 0 or self.reset_s < 0:
            raise ValueError('episode time must be > 0 and reset time >= 0')

    def task(self, kept: int) -> str:
        return self.tasks[min(kept, len(self.tasks) - 1)]


class EpisodeSchedule:
    """Phases and events of one episodic recording; call ``tick(now)`` often."""

    def __init__(self, plan: EpisodePlan) -> None:
        self.plan = plan
        self.phase = ''          # '', 'episode', 'reset', 'stopped'
        self.index = -1          # mark index of the current / last episode
        self.kept = 0            # episodes finished and not discarded
        self._phase_end = 0.0

    @property
    def done(self) -> bool:
        return self.phase == 'stopped'

    def remaining(self, now: float) -> float:
        return max(0.0, self._phase_end - now) if self.phase in ('episode', 'reset') else 0.0

    def start(self, now: float) -> list[dict]:
        if self.phase:
            return []
        return self._episode(now)

    def tick(self, now: float) -> list[dict]:
        if self.phase in ('episode', 'reset') and now >= self._phase_end:
            return self.next(now)
        return []

    def next(self, now: float) -> list[dict]:
        """End the current phase now (the operator's 'end early'; also the timer's)."""
        if self.phase == 'episode':
            self.kept += 1
            if self.kept >= self.plan.num_episodes:
                return self.stop(now)
            if self.plan.reset_s <= 0:
                return self._episode(now)
            self.phase, self._phase_end = 'reset', now + self.plan.reset_s
            return [{'event': 'reset', 'index': self.index}]
        if self.phase == 'reset':
            return self._episode(now)
        return []

    def rerecord(self, now: float) -> list[dict]:
        """Discard the current episode (or the one whose reset runs) and record it again."""
        if self.phase not in ('episode', 'reset') or self.index < 0:
            return []
        if self.phase == 'reset':
            self.kept -= 1
        events = [{'event': 'discard', 'index': self.index}]
        return events + self._episode(now)

    def label(self, success: bool) -> list[dict]:
        """Label the current or last episode."""
        if self.index < 0:
            return []
        return [{'event': 'label', 'index': self.index, 'success': bool(success)}]

    def stop(self, _now: float) -> list[dict]:
        if self.phase == 'stopped':
            return []
        self.phase = 'stopped'
        return [{'event': 'stop'}]

    def _episode(self, now: float) -> list[dict]:
        self.index += 1
        self.phase, self._phase_end = 'episode', now + self.plan.episode_s
        return [{'event': 'episode', 'index': self.index, 'task': self.plan.task(self.kept)}]


def run_schedule(plan: EpisodePlan, commands: Sequence[tuple[float, str]], step: float = 0.1,
                 until: float = 1e6) -> list[tuple[float, dict]]:
    """Events of ``plan`` with operator ``commands`` ((time, key), keys as the CLI's) on a
    clock stepped by ``step``: what the CLI publishes, without ROS (tests, dry runs)."""
    schedule = EpisodeSchedule(plan)
    out = [(0.0, e) for e in schedule.start(0.0)]
    pending = sorted(commands)
    t = 0.0
    while not schedule.done and t < until:
        t = round(t + step, 9)
        while pending and pending[0][0] <= t:
            out += [(t, e) for e in apply_key(schedule, pending.pop(0)[1], t)]
        out += [(t, e) for e in schedule.tick(t)]
    return out


KEYS = {'n': 'end the phase now', 'r': 're-record the episode', 's': 'label it a success',
        'f': 'label it a failure', 'q': 'stop recording'}


def apply_key(schedule: EpisodeSchedule, key: str, now: float) -> list[dict]:
    """One operator key (a line on the CLI's stdin; empty = 'n')."""
    key = (key.strip() or 'n')[0].lower()
    if key == 'n':
        return schedule.next(now)
    if key == 'r':
        return schedule.rerecord(now)
    if key in 'sf':
        return schedule.label(key == 's')
    if key == 'q':
        return schedule.stop(now)
    return []
