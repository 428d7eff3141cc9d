"""`scripted` planner: a deterministic TextGenerator for the MuJoCo tabletop scene.

It reads the same chat prompts a model would and answers from the simulator's ground truth
(observation['ground_truth'], published by sim_bridge), so it follows the runtime semantics
exactly (throttle, repeats, memory on change, <say> speech) and a model backend drops in.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any

from lerobot_lang_nodes.sim import tasks

logger = logging.getLogger(__name__)

# Past-tense facts the memory note records when a subtask completes.
_FACTS = {
    'reach': 'reached the {c} cube',
    'grasp': 'the {c} cube is grasped',
    'lift': 'the {c} cube is lifted',
    'move_over': 'the {c} cube is over the bowl',
    'release': 'the {c} cube was released',
    'open_gripper': 'the gripper was opened',
    'close_gripper': 'the gripper was closed',
    'home': 'the arm went home',
}
MEMORY_FACTS_KEPT = 4


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get('content', '')
    if isinstance(content, str):
        return content
    return ' '.join(p.get('text', '') for p in content if p.get('type') == 'text')


def _strip_prefix(text: str, prefix: str) -> str:
    return text[len(prefix):].strip() if text.startswith(prefix) else text.strip()


class ScriptedPlanner:
    """Decomposes scene tasks into subtasks and answers from ground truth."""

    # What it decides from: the planner node looks again when a newer ground truth arrives.
    observes = ('ground_truth',)

    def __init__(self, cfg: Any = None) -> None:
        self._plan: list[tasks.Subtask] = []
        self._goal: tasks.TaskSpec | None = None
        self._index = 0

    # The TextGenerator protocol.
    def generate(self, kind: str, messages: list[dict], observation: Mapping | None) -> str:
        obs = observation or {}
        handler = {'subtask': self._subtask, 'memory': self._memory,
                   'interjection': self._interjection, 'vqa': self._vqa}.get(kind)
        if handler is None:
            raise ValueError(f'scripted planner cannot generate {kind!r}; kinds: subtask, '
                             'memory, interjection, vqa')
        return handler(messages, obs)

    def vqa_problem(self, question: str, observation: Mapping | None) -> str:
        """Why no answer can come ('' if one can), checked before the robot is paused."""
        if not (observation or {}).get('ground_truth'):
            return ('the scripted planner answers only from the simulator\'s ground truth '
                    '(none here: a real arm, or ground_truth_topic empty); for questions '
                    'about camera images run a VLM planner (backend transformers with a VLM '
                    'checkpoint, see the README\'s "Backends")')
        if not self._vqa([{'content': question}], observation or {}):
            return ('the scripted planner cannot answer that: it answers what is in the '
                    'gripper or the bowl, where a cube is, whether a cube is in the bowl, how '
                    'many cubes there are and which colours')
        return ''

    def _goal_for(self, task: str, obs: Mapping) -> tasks.TaskSpec | None:
        language = obs.get('language')
        plan = getattr(language, 'plan', '') if language is not None else ''
        return (tasks.parse_task(plan) if plan else None) or tasks.parse_task(task)

    def _subtask(self, messages: list[dict], obs: Mapping) -> str:
        # The task is the first line: the subtask template (config/prompts.yaml) may add lines
        # such as the plan, which the scripted planner reads from the observation instead.
        goal = self._goal_for(_text_of(messages[0]).split('\n', 1)[0], obs)
        if goal is None:
            return ''  # not a task of this scene: an empty generation, counted by the core
        truth = obs.get('ground_truth')
        language = obs.get('language')
        # No subtask yet: the task (re)starts (a new task, or the same one on a new scene or
        # episode), so the plan starts from what the world shows, not from the last index.
        fresh = language is not None and not getattr(language, 'subtask', '')
        if goal != self._goal or fresh:
            self._goal = goal
            self._plan = tasks.decompose(goal)
            self._index = tasks.infer_subtask_index(self._plan, truth) if truth else 0
        elif truth:
            index = tasks.advance(self._plan, self._index, truth)
            if index >= self._index:
                # Skip ahead to what the world already shows (e.g. a cube handed over), but
                # keep advance()'s step back after a drop.
                index = max(index, tasks.infer_subtask_index(self._plan, truth))
            self._index = index
        # Past the last step the goal is met: keep the last subtask (a repeat, not a change).
        return self._plan[min(self._index, len(self._plan) - 1)].text

    def _memory(self, messages: list[dict], obs: Mapping) -> str:
        # Turns whose value is empty are left out of the prompt, so read them by prefix.
        prior, done = '', None
        for message in messages[1:]:
            text = _text_of(message)
            if text.startswith('Previous memory:'):
                prior = _strip_prefix(text, 'Previous memory:')
            elif text.startswith('Completed subtask:'):
                done = tasks.parse_subtask(_strip_prefix(text, 'Completed subtask:'))
        facts = [f for f in prior.split('; ') if f] if prior else []
        if done is not None:
            facts.append(_FACTS[done.action].format(c=done.colour))
        return '; '.join(facts[-MEMORY_FACTS_KEPT:])

    def _interjection(self, messages: list[dict], obs: Mapping) -> str:
        task = _text_of(messages[0])
        said = _text_of(messages[-1])
        norm = said.lower()
        current = self._goal_for(task, obs) or tasks.parse_task(task)
        colours = [c for c in tasks.COLOURS if re.search(rf'\b{c}\b', norm)]
        spec, _reason = tasks.explain_task(said)
        if spec is None and len(colours) == 1 and current is not None:
            spec = tasks.TaskSpec(current.kind, colours[0], current.target)
        if spec is None:
            return ('<say>Sorry, I can only change which cube to use, e.g. "use the blue cube '
                    'instead".</say>')
        truth = obs.get('ground_truth')
        if truth and f'{spec.colour}_cube' in truth.get('objects', {}) and \
                tasks.check_success(spec, truth):
            # Nothing to do for it: say so and keep the current plan, instead of re-planning
            # onto a goal that is met (the arm would only open its gripper and stop).
            done = ('is already in the bowl' if spec.kind == 'place' else
                    'is already held up')
            return f'<say>The {spec.colour} cube {done}; I will carry on as before.</say>'
        return f'{spec.text} <say>OK, I will {spec.text} instead.</say>'

    def _vqa(self, messages: list[dict], obs: Mapping) -> str:
        question = _text_of(messages[-1]).lower()
        truth = obs.get('ground_truth')
        if not truth:
            return ''
        objects = truth.get('objects', {})
        held = [o['colour'] for o in objects.values() if o.get('in_gripper')]
        if re.search(r'\b(gripper|holding|hold|grasp\w*|hand)\b', question) and \
                not re.search(r'\bwhere\b', question):
            return f'the {held[0]} cube' if held else 'nothing'
        if re.search(r'\bhow many\b', question):
            return str(len(objects))
        colours = [c for c in tasks.COLOURS if re.search(rf'\b{c}\b', question)]
        if colours:
            cube = objects.get(f'{colours[0]}_cube')
            if cube is None:
                return f'there is no {colours[0]} cube'
            if re.search(r'\bin the bowl\b', question) and re.search(r'^\s*is\b', question):
                return 'yes' if cube['in_bowl'] else 'no'
            return f'the {colours[0]} cube is {self._where(cube, truth)}'
        if re.search(r'\bin the bowl\b', question):
            inside = [o['colour'] for o in objects.values() if o.get('in_bowl')]
            return ' and '.join(f'the {c} cube' for c in inside) if inside else 'nothing'
        if re.search(r'\b(colou?rs?|cubes?|objects?|see)\b', question):
            names = sorted(o['colour'] for o in objects.values())
            return ', '.join(names[:-1]) + f' and {names[-1]}' if len(names) > 1 else names[0]
        return ''

    @staticmethod
    def _where(cube: Mapping[str, Any], truth: Mapping[str, Any]) -> str:
        if cube['in_gripper']:
            return 'in the gripper'
        if cube['in_bowl']:
            return 'in the bowl'
        bowl = truth['bowl']['position']
        dist = math.hypot(cube['position'][0] - bowl[0], cube['position'][1] - bowl[1])
        return f'on the table, {dist * 100:.0f} cm from the bowl'
