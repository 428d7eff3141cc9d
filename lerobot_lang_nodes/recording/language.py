"""LeRobot language rows (`language_persistent`, `language_events`) from a session; ROS-free.

Rows follow LeRobot 0.6's definitions (`lerobot.datasets.language`) and the rules its loader,
recipe resolvers and annotation validator enforce:

* persistent rows (styles subtask, plan, memory) carry the frame timestamp from which they are
  active; the state active when an episode starts is a row at its first frame, and every row
  is repeated on every frame of the episode (LeRobot's column writer broadcasts them);
* event rows sit on exactly one frame: the first frame at or after the event (never between
  frames); interjections are user rows, speech is an assistant row with no content and a `say`
  tool call, a VQA exchange is a user question and an assistant answer whose `camera` is the
  camera's feature key (and only VQA rows carry a camera);
* the planner's reply to an interjection (its speech and its new plan), when it comes within
  ``reply_window_s`` and before the next interjection, is stored at the interjection's frame,
  and a plan row is repeated there if the reply did not change the plan: LeRobot's validator
  expects a speech and a plan row at the time of each interjection;
* at most one VQA row per (frame, camera, role): a second question on the same frame moves to
  the next free frame, or is dropped with a warning at the end of the episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_lang_nodes.recording.timeline import snap_forward

PERSISTENT = ('subtask', 'plan', 'memory')


def say_call(text: str) -> list[dict[str, Any]]:
    """The `tool_calls` of a speech row (LeRobot's `say` tool, OpenAI function-call shape)."""
    return [{'type': 'function', 'function': {'name': 'say', 'arguments': {'text': text}}}]


@dataclass
class LanguageLog:
    """What the planner and the operator said, on the session clock (seconds)."""

    states: list[tuple[float, str, str]] = field(default_factory=list)  # (t, style, content)
    interjections: list[tuple[float, str]] = field(default_factory=list)
    speech: list[tuple[float, str]] = field(default_factory=list)
    vqa: list[tuple[float, str, str, str]] = field(default_factory=list)  # t, cam, q, a

    def add_state(self, t: float, style: str, content: str) -> None:
        if style not in PERSISTENT:
            raise ValueError(f'style {style!r} is not persistent; expected one of {PERSISTENT}')
        self.states.append((t, style, content))


def _row(role: str, content: str | None, style: str | None, ts: float,
         camera: str | None = None, tool_calls: list | None = None) -> dict[str, Any]:
    return {'role': role, 'content': content, 'style': style, 'timestamp': float(ts),
            'camera': camera, 'tool_calls': tool_calls}


def episode_rows(log: LanguageLog, frame_times: np.ndarray,
                 episodes: Sequence[tuple[int, int]], frame_ts: Sequence[Sequence[float]],
                 reply_window_s: float = 10.0) -> tuple[list[dict[str, list]], list[str]]:
    """Staged rows per episode ({'plan': [...], 'interjections': [...], 'vqa': [...]}).

    ``frame_times``: session-clock time of every exported frame, all episodes in order;
    ``episodes``: half-open ranges into it; ``frame_ts``: each episode's frame timestamps as
    written in the dataset (the exact float32 values events must equal).
    Returns the rows and warnings.
    """
    warnings: list[str] = []
    inter = sorted(log.interjections)
    speech = sorted(log.speech)
    states = sorted(log.states, key=lambda s: s[0])

    # Pair each interjection with the reply that follows it.
    speech_t = [t for t, _ in speech]
    state_t = [t for t, _, _ in states]
    paired_plan: set[int] = set()
    for i, (t_i, _text) in enumerate(inter):
        end = min(t_i + reply_window_s, inter[i + 1][0] if i + 1 < len(inter) else np.inf)
        for j, t in enumerate(speech_t):
            if t_i <= t < end and speech_t[j] == speech[j][0]:
                speech_t[j] = t_i
        for j, (t, style, _c) in enumerate(states):
            if style == 'plan' and t_i <= t < end and j not in paired_plan:
                state_t[j] = t_i
                paired_plan.add(j)
                break

    def locate(t: float) -> tuple[int, int] | None:
        g = snap_forward(frame_times, t)
        for e, (a, b) in enumerate(episodes):
            if a <= g < b:
                return e, g - a
        return None

    out: list[dict[str, list]] = [{'plan': [], 'interjections': [], 'vqa': []}
                                  for _ in episodes]
    # Persistent rows: the state at each episode's start, then each change inside it.
    for e, (a, b) in enumerate(episodes):
        rows: dict[str, dict[int, str]] = {s: {} for s in PERSISTENT}
        initial: dict[str, str] = {}
        for (t, style, content), t_eff in zip(states, state_t):
            g = snap_forward(frame_times, t_eff)
            if t_eff <= frame_times[a] or g < a:
                initial[style] = content
            elif g < b:
                rows[style][g - a] = content
        for style in PERSISTENT:
            if initial.get(style):
                rows[style].setdefault(0, initial[style])
            prev = None
            for idx in sorted(rows[style]):
                content = rows[style][idx]
                if content and content != prev:
                    out[e]['plan'].append(_row('assistant', content, style, frame_ts[e][idx]))
                prev = content

    # Events.
    vqa_taken: set[tuple[int, int, str]] = set()
    for t, text in inter:
        where = locate(t)
        if where is None:
            continue
        e, idx = where
        ts = frame_ts[e][idx]
        out[e]['interjections'].append(_row('user', text, 'interjection', ts))
        plans = [r for r in out[e]['plan'] if r['style'] == 'plan']
        if not any(r['timestamp'] == ts for r in plans):
            active = [r for r in plans if r['timestamp'] <= ts]
            if active:
                out[e]['plan'].append(_row('assistant', active[-1]['content'], 'plan', ts))
            else:
                warnings.append(f'interjection {text!r} at t={t:.3f} s: no plan is active, so '
                                'no plan row accompanies it')
    for (_t, text), t_eff in zip(speech, speech_t):
        where = locate(t_eff)
        if where is None:
            continue
        e, idx = where
        out[e]['interjections'].append(
            _row('assistant', None, None, frame_ts[e][idx], tool_calls=say_call(text)))
    for t, camera, question, answer in sorted(log.vqa):
        where = locate(t)
        if where is None:
            continue
        e, idx = where
        n = len(frame_ts[e])
        while idx < n and (e, idx, camera) in vqa_taken:
            idx += 1
        if idx >= n:
            warnings.append(f'VQA {question!r} at t={t:.3f} s dropped: every later frame of its '
                            f'episode already holds a VQA exchange for {camera}')
            continue
        vqa_taken.add((e, idx, camera))
        ts = frame_ts[e][idx]
        out[e]['vqa'].append(_row('user', question, 'vqa', ts, camera=camera))
        out[e]['vqa'].append(_row('assistant', answer, 'vqa', ts, camera=camera))
    for rows in out:
        rows['plan'].sort(key=lambda r: (r['timestamp'], r['style']))
    return out, warnings
