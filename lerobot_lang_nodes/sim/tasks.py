"""Language tasks of the tabletop scene: parsing, subtask decomposition and success checks."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any

_LOG = logging.getLogger(__name__)

COLOURS: tuple[str, ...] = ('red', 'green', 'blue')
# Subtask verbs in plan order; the scripted expert has one controller per verb.
SUBTASK_ACTIONS: tuple[str, ...] = ('reach', 'grasp', 'lift', 'move_over', 'release')
# Skills that name no cube, for an operator's `direct:` subtask.
SKILL_ACTIONS: tuple[str, ...] = ('open_gripper', 'close_gripper', 'home')
# Cube centre must be this far above the table for "lifted".
LIFT_HEIGHT = 0.05
# Grasp point must be this close to the cube centre (horizontal, vertical) for "reached".
REACH_TOL_XY = 0.008
REACH_TOL_Z = 0.005
# Held cube centre must be this far inside the bowl's inner wall for "over the bowl".
OVER_BOWL_MARGIN = 0.01
# Gripper joint angle (rad) above which the jaws count as open.
OPEN_RAD = 0.5

_OBJECT_WORDS = r'(?:cube|block|box|brick|one)s?'
_BOWL_WORDS = r'(?:bowl|dish|container|basin|pot|target)'
_PLACE_VERBS = r'(?:put|place|drop|move|set|transfer|bring|carry|stick|throw|toss|get|lay)'
_PICK_VERBS = r'(?:pick|lift|grab|grasp|raise|take|hold)'
_PREP_INTO = r'(?:in|into|inside|to|onto|on|in to)'


@dataclass(frozen=True)
class TaskSpec:
    """A parsed scene task: ``kind`` is 'place' (cube into the bowl) or 'pick' (lift it)."""

    kind: str
    colour: str
    target: str | None = None

    @property
    def text(self) -> str:
        """Canonical phrasing of the task."""
        if self.kind == 'place':
            return f'put the {self.colour} cube in the bowl'
        return f'pick up the {self.colour} cube'


@dataclass(frozen=True)
class Subtask:
    """One step of a plan: ``action`` in SUBTASK_ACTIONS applied to the ``colour`` cube."""

    action: str
    colour: str

    @property
    def text(self) -> str:
        """Canonical phrasing, the string the planner publishes and the expert parses."""
        return {
            'reach': f'reach the {self.colour} cube',
            'grasp': f'grasp the {self.colour} cube',
            'lift': f'lift the {self.colour} cube',
            'move_over': f'move the {self.colour} cube over the bowl',
            'release': f'release the {self.colour} cube',
            'open_gripper': 'open the gripper',
            'close_gripper': 'close the gripper',
            'home': 'go to the home pose',
        }[self.action]


def _normalise(text: str) -> str:
    text = text.lower().replace('-', ' ')
    text = re.sub(r'[^a-z ]+', ' ', text)
    return re.sub(r'\s+', ' ', text).strip()


def _colours_in(text: str) -> list[str]:
    return [c for c in COLOURS if re.search(rf'\b{c}\b', text)]


def explain_task(text: str) -> tuple[TaskSpec | None, str]:
    """Parse ``text`` into a TaskSpec; returns (spec, '') or (None, reason naming the fix)."""
    norm = _normalise(text or '')
    if not norm:
        return None, 'empty task text; say e.g. "put the red cube in the bowl"'
    colours = _colours_in(norm)
    if not colours:
        return None, (f'no cube colour in {text!r}; name one of {", ".join(COLOURS)} '
                      '(e.g. "put the red cube in the bowl")')
    if len(set(colours)) > 1:
        return None, (f'{text!r} names several colours {colours}; name exactly one cube')
    colour = colours[0]
    mentions_bowl = re.search(rf'\b{_BOWL_WORDS}\b', norm) is not None
    if mentions_bowl and (re.search(rf'\b{_PLACE_VERBS}\b', norm)
                          or re.search(rf'\b{_PREP_INTO} (?:the )?{_BOWL_WORDS}\b', norm)):
        return TaskSpec('place', colour, 'bowl'), ''
    if re.search(rf'\b{_PICK_VERBS}\b', norm) and not mentions_bowl:
        return TaskSpec('pick', colour), ''
    if re.search(rf'\b{_OBJECT_WORDS}\b', norm) and mentions_bowl:
        return TaskSpec('place', colour, 'bowl'), ''
    return None, (f'unsupported task {text!r}; supported: "put the <colour> cube in the bowl", '
                  '"pick up the <colour> cube" / "lift the <colour> cube"')


def parse_task(text: str) -> TaskSpec | None:
    """TaskSpec for ``text``, or None (the reason is logged; see ``explain_task``)."""
    spec, reason = explain_task(text)
    if spec is None:
        _LOG.debug('task not understood: %s', reason)
    return spec


def parse_subtask(text: str) -> Subtask | None:
    """Subtask for a planner subtask string (tolerant of phrasing), or None."""
    norm = _normalise(text or '')
    colours = _colours_in(norm)
    if not colours:
        return _parse_skill(norm)
    if len(set(colours)) != 1:
        return None
    colour = colours[0]
    if re.search(r'\b(?:release|let go|open)\b', norm):
        return Subtask('release', colour)
    if re.search(r'\b(?:over|above)\b', norm) and re.search(rf'\b{_BOWL_WORDS}\b', norm):
        return Subtask('move_over', colour)
    if re.search(r'\b(?:grasp|grip|close|grab)\b', norm):
        return Subtask('grasp', colour)
    if re.search(r'\b(?:reach|approach|go to)\b', norm):
        return Subtask('reach', colour)
    if re.search(r'\b(?:lift|raise)\b', norm) and not re.search(rf'\b{_BOWL_WORDS}\b', norm):
        return Subtask('lift', colour)
    return None


def _parse_skill(norm: str) -> Subtask | None:
    """A skill that names no cube: open / close the gripper (or jaw), go home."""
    if re.search(r'\b(?:gripper|jaws?|hand)\b', norm):
        if re.search(r'\b(?:open|release|let go)\b', norm):
            return Subtask('open_gripper', '')
        if re.search(r'\b(?:close|shut|grip)\b', norm):
            return Subtask('close_gripper', '')
    if re.search(r'\bhome\b', norm):
        return Subtask('home', '')
    return None


def decompose(spec: TaskSpec) -> list[Subtask]:
    """Deterministic subtask plan of a task."""
    steps = ('reach', 'grasp', 'lift') if spec.kind == 'pick' else SUBTASK_ACTIONS
    return [Subtask(action, spec.colour) for action in steps]


def _cube(gt: dict[str, Any], colour: str) -> dict[str, Any]:
    try:
        return gt['objects'][f'{colour}_cube']
    except KeyError as exc:
        raise KeyError(f'ground truth has no {colour} cube; scene colours are '
                       f'{[o["colour"] for o in gt.get("objects", {}).values()]}') from exc


def is_lifted(gt: dict[str, Any], colour: str) -> bool:
    """Cube held by both jaws with its centre LIFT_HEIGHT above the table."""
    cube = _cube(gt, colour)
    return cube['in_gripper'] and cube['position'][2] >= gt['table_height'] + LIFT_HEIGHT


def is_over_bowl(gt: dict[str, Any], colour: str) -> bool:
    """Held cube centred over the bowl with its bottom above the rim."""
    cube = _cube(gt, colour)
    bowl = gt['bowl']
    dist = math.hypot(cube['position'][0] - bowl['position'][0],
                      cube['position'][1] - bowl['position'][1])
    rim_top = bowl['position'][2] + bowl['rim_height']
    return (cube['in_gripper']
            and dist < bowl['inner_radius'] - cube['size'] / 2 - OVER_BOWL_MARGIN
            and cube['position'][2] - cube['size'] / 2 > rim_top)


def subtask_done(subtask: Subtask, gt: dict[str, Any]) -> bool:
    """Whether ``subtask`` is complete in the ground-truth state (used to advance the plan)."""
    grip = gt['gripper']
    if subtask.action == 'open_gripper':
        return grip['opening_rad'] > OPEN_RAD
    if subtask.action == 'close_gripper':
        return grip['opening_rad'] <= OPEN_RAD and abs(grip['opening_speed']) < 0.2
    if subtask.action == 'home':
        return abs(grip['opening_speed']) < 0.2  # ground truth has no joint angles
    cube = _cube(gt, subtask.colour)
    if subtask.action == 'reach':
        gp = grip['grasp_point']
        pos = cube['position']
        return (grip['opening_rad'] > OPEN_RAD and not cube['in_gripper']
                and math.hypot(gp[0] - pos[0], gp[1] - pos[1]) < REACH_TOL_XY
                and abs(gp[2] - pos[2]) < REACH_TOL_Z)
    if subtask.action == 'grasp':
        return cube['in_gripper'] and abs(grip['opening_speed']) < 0.2
    if subtask.action == 'lift':
        return is_lifted(gt, subtask.colour)
    if subtask.action == 'move_over':
        return is_over_bowl(gt, subtask.colour)
    if subtask.action == 'release':
        return cube['in_bowl'] and grip['opening_rad'] > OPEN_RAD
    raise ValueError(f'unknown subtask action {subtask.action!r}; use one of {SUBTASK_ACTIONS}')


def check_success(spec: TaskSpec, gt: dict[str, Any]) -> bool:
    """Task success from ground truth: cube resting in the bowl, or held lifted (pick)."""
    cube = _cube(gt, spec.colour)
    if spec.kind == 'place':
        return bool(cube['in_bowl'])
    return is_lifted(gt, spec.colour)


def infer_subtask_index(plan: list[Subtask], gt: dict[str, Any]) -> int:
    """Index of the first plan step the world state still needs (len(plan) when all done).

    Stateless: derived from ground truth only, so it also re-plans after a drop (a cube that
    left the gripper outside the bowl sends the plan back to 'reach').
    """
    if not plan:
        return 0
    colour = plan[0].colour
    cube = _cube(gt, colour)
    actions = [s.action for s in plan]
    if cube['in_bowl'] and 'release' in actions:
        return len(plan)
    if cube['in_gripper']:
        if 'move_over' in actions and is_over_bowl(gt, colour):
            return actions.index('release')
        if is_lifted(gt, colour):
            return actions.index('move_over') if 'move_over' in actions else len(plan)
        return actions.index('lift')
    if subtask_done(Subtask('reach', colour), gt):
        return actions.index('grasp')
    return 0


def _plan_complete(plan: list[Subtask], gt: dict[str, Any]) -> bool:
    return bool(plan) and infer_subtask_index(plan, gt) >= len(plan)


def advance(plan: list[Subtask], index: int, gt: dict[str, Any]) -> int:
    """Next plan index for a planner at ``index``: past every completed step, back on a drop."""
    if index >= len(plan):
        # Past the last step: stay done only while the world agrees (a reset or a knocked-out
        # cube means the plan starts again from what the world shows).
        return index if _plan_complete(plan, gt) else infer_subtask_index(plan, gt)
    if subtask_done(plan[index], gt):
        index += 1
    # A step after 'grasp' needs the cube in hand; losing it restarts from what the world says.
    if index >= len(plan):
        return index
    cube = _cube(gt, plan[0].colour)
    action = plan[index].action
    opening = gt['gripper']['opening_rad']
    lost = (
        (action in ('lift', 'move_over') and not cube['in_gripper'])
        # Jaws closed on nothing: the grasp missed.
        or (action == 'grasp' and not cube['in_gripper'] and opening < 0.12)
        # Released but the cube came to rest outside the bowl.
        or (action == 'release' and not cube['in_gripper'] and not cube['in_bowl']
            and cube['on_table']))
    return infer_subtask_index(plan, gt) if lost else index


def subtask_progress(subtask: Subtask, gt: dict[str, Any]) -> float | None:
    """A measure toward ``subtask``'s goal that shrinks as the arm gets there (None: none).

    Metres for the cube subtasks (reach: grasp point to cube; lift: the cube's height still
    missing; move over: the held cube's horizontal distance to the bowl plus its height below
    the rim), radians of the gripper's opening for grasp / close (closing) and release / open
    (opening). A watcher judges progress by its drops (core/virtual_operator.py).
    """
    grip = gt['gripper']
    opening = float(grip['opening_rad'])
    if subtask.action in ('grasp', 'close_gripper'):
        return opening
    if subtask.action in ('release', 'open_gripper'):
        return -opening
    if subtask.action == 'home':
        return None
    cube = _cube(gt, subtask.colour)
    pos = cube['position']
    if subtask.action == 'reach':
        return math.dist(grip['grasp_point'], pos)
    if subtask.action == 'lift':
        return max(0.0, gt['table_height'] + LIFT_HEIGHT - pos[2])
    if subtask.action == 'move_over':
        bowl = gt['bowl']
        rim_top = bowl['position'][2] + bowl['rim_height']
        return (math.hypot(pos[0] - bowl['position'][0], pos[1] - bowl['position'][1])
                + max(0.0, rim_top - (pos[2] - cube['size'] / 2)))
    raise ValueError(f'unknown subtask action {subtask.action!r}; use one of {SUBTASK_ACTIONS}')


def cube_dropped(before: dict[str, Any] | None, gt: dict[str, Any]) -> str:
    """The colour of a cube held in ``before`` that has left the gripper and lies on the table
    in ``gt`` ('' when none): a drop, not a release over the bowl. ``before`` is the last state
    with a cube held, so a contact flickering for one step while carrying is no drop."""
    if not before:
        return ''
    held = before['gripper'].get('holding')
    if not held or gt['gripper'].get('holding') == held:
        return ''
    cube = gt['objects'].get(f'{held}_cube')
    if cube is None or cube['in_gripper'] or cube['in_bowl'] or not cube['on_table']:
        return ''
    return held
