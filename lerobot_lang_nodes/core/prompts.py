"""Prompt builders: OpenAI-style chat message lists for the high-level text head.

A message is ``{'role': 'user' | 'assistant', 'content': str | list[part]}``; a part is
``{'type': 'text', 'text': str}`` or ``{'type': 'image', 'image': <any>, 'camera': str}``.
The model's processor decides how the turns are serialised; these builders only fix the turn
structure, which must match the training recipes.

The text of some turns comes from ``PromptTemplates`` (loaded from a YAML file such as
config/prompts.yaml), so a checkpoint trained with other wording, or one that needs the plan in
its subtask prompt to re-plan, is served without code changes. Template rule: ``{name}``
placeholders are filled from the language state; a line whose placeholders all render empty is
left out (an empty plan drops the ``Plan:`` line); a line without placeholders always stays.

The subtask template may also quote the arm's joint state, ``{joints}``: ``render_joints`` is
the one renderer of it, used by the planner node, the planner trainer, its evaluation and the
export's annotation alike, so a model sees at deployment exactly the text it was trained on.
"""

from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

Message = dict[str, Any]

# Placeholders each template may use (anything else is refused when the file is loaded).
PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    'subtask': ('task', 'plan', 'memory', 'subtask', 'prior_subtask', 'joints'),
    'memory_previous': ('memory',),
    'memory_completed': ('prior_subtask',),
    'interjection': ('interjection', 'task', 'plan'),
    'vqa': ('question', 'camera'),
}


@dataclass(frozen=True)
class PromptTemplates:
    """Wording of the prompt turns; the defaults are the spec's turns exactly.

    ``system_prompt`` (empty = none) is prepended as a system turn by model backends that
    serialise chat messages; the turn builders below never add it.
    """

    system_prompt: str = ''
    subtask: str = '{task}'
    memory_previous: str = 'Previous memory: {memory}'
    memory_completed: str = 'Completed subtask: {prior_subtask}'
    interjection: str = '{interjection}'
    vqa: str = '{question}'

    def __post_init__(self) -> None:
        for name, allowed in PLACEHOLDERS.items():
            template = getattr(self, name)
            if not isinstance(template, str):
                raise ConfigError(f'prompt template {name!r}: got {template!r}, expected a '
                                  'string', field=name)
            try:
                used = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
            except ValueError as exc:  # an unmatched brace
                raise ConfigError(f'prompt template {name!r} is malformed ({exc}); write a '
                                  'literal brace as {{ or }}', field=name) from exc
            bad = sorted({f for f in used if f not in allowed})
            if bad:
                raise ConfigError(f'prompt template {name!r} uses unknown placeholder(s) {bad}; '
                                  f'allowed: {list(allowed)}', field=name)
        if not isinstance(self.system_prompt, str):
            raise ConfigError(f'system_prompt: got {self.system_prompt!r}, expected a string',
                              field='system_prompt')

    def uses(self, placeholder: str) -> bool:
        """Whether any template quotes ``placeholder`` (the planner subscribes to the joint
        state only when one quotes ``joints``)."""
        return any(f == placeholder for name in PLACEHOLDERS
                   for _, f, _, _ in string.Formatter().parse(getattr(self, name)))

    def render(self, name: str, **values: str) -> str:
        """Fill template ``name``; lines whose placeholders are all empty are dropped."""
        lines = []
        for line in getattr(self, name).split('\n'):
            fields = [f for _, f, _, _ in string.Formatter().parse(line) if f is not None]
            if fields and not any((values.get(f) or '').strip() for f in fields):
                continue
            lines.append(line.format(**{f: (values.get(f) or '').strip() for f in fields}))
        return '\n'.join(lines).strip()


def load_templates(path: str | Path, system_prompt: str | None = None) -> PromptTemplates:
    """PromptTemplates from a YAML mapping; missing keys keep the spec defaults.

    ``system_prompt`` (when not None) overrides the file's. Raises ConfigError naming the file
    and the bad key.
    """
    import yaml  # PyYAML comes with rclpy; imported here so the core stays light to import

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f'prompts file {str(path)!r} cannot be read ({exc}); set '
                          'prompts_file to an existing YAML file', field='prompts_file') from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f'prompts file {str(path)!r} is not valid YAML: {exc}',
                          field='prompts_file') from exc
    known = [f.name for f in dataclasses.fields(PromptTemplates)]
    if not isinstance(data, dict) or set(data) - set(known):
        extra = sorted(set(data) - set(known)) if isinstance(data, dict) else data
        raise ConfigError(f'prompts file {str(path)!r}: unknown key(s) {extra}; known keys: '
                          f'{known}', field='prompts_file')
    data = {k: ('' if v is None else v) for k, v in data.items()}
    if system_prompt is not None:
        data['system_prompt'] = system_prompt
    try:
        return PromptTemplates(**data)
    except ConfigError as exc:
        raise ConfigError(f'prompts file {str(path)!r}: {exc}', field=exc.field) from exc


JOINT_DECIMALS = 2  # 0.01 rad (0.6 degrees): finer than a tiny model can use, few tokens


def render_joints(names: Sequence[str], positions: Sequence[float]) -> str:
    """The ``{joints}`` text: joint positions (REP-103: radians, metres for a prismatic joint,
    the gripper as the robot's joint state gives it) with ``JOINT_DECIMALS`` decimals, space
    separated, sorted by joint name, so a JointState in any order renders the same and the
    names need no tokens. '' when the state is unknown (no joints, names and positions of
    different lengths, a value that is not finite): the template's joints line is left out.
    """
    names = list(names or ())
    values = [float(v) for v in (positions if positions is not None else ())]
    if not names or len(names) != len(values) or not all(math.isfinite(v) for v in values):
        return ''
    out = []
    for _name, value in sorted(zip(names, values), key=lambda nv: nv[0]):
        text = f'{value:.{JOINT_DECIMALS}f}'
        out.append('0.00' if text == '-0.00' else text)  # no sign the model must learn twice
    return ' '.join(out)


def observed_joints(observation: Mapping[str, Any] | None) -> str:
    """``render_joints`` of an observation's ``joint_names`` and ``joint_positions`` (the keys
    the policy and planner observations use); '' without them."""
    if not observation:
        return ''
    return render_joints(observation.get('joint_names') or (),
                         observation.get('joint_positions'))


def _user(content: Any) -> Message:
    return {'role': 'user', 'content': content}


DEFAULT_TEMPLATES = PromptTemplates()


def subtask_messages(task: str, plan: str = '', memory: str = '', subtask: str = '',
                     prior_subtask: str = '',
                     templates: PromptTemplates = DEFAULT_TEMPLATES,
                     joints: str = '') -> list[Message]:
    """``[user: task ...]`` -> the model answers with the current subtask.

    One user turn: the ``subtask`` template filled with the language state (and ``joints``,
    the ``render_joints`` text of the arm's state). The default template is the task alone;
    config/prompts.yaml adds the plan, so that a model re-plans after an interjection.
    """
    return [_user(templates.render('subtask', task=task, plan=plan, memory=memory,
                                   subtask=subtask, prior_subtask=prior_subtask,
                                   joints=joints))]


def memory_messages(task: str, prior_memory: str, prior_subtask: str,
                    templates: PromptTemplates = DEFAULT_TEMPLATES) -> list[Message]:
    """``[user: task, assistant: 'Previous memory: ...', user: 'Completed subtask: ...']``.

    As in the training recipes (``if_present``), a turn whose value is empty is left out:
    the first memory after the first subtask has no previous memory to quote.
    """
    messages = [_user(task or '')]
    if prior_memory:
        messages.append({'role': 'assistant',
                         'content': templates.render('memory_previous', memory=prior_memory)})
    if prior_subtask:
        messages.append(_user(templates.render('memory_completed',
                                               prior_subtask=prior_subtask)))
    return messages


def interjection_messages(task: str, interjection: str, plan: str = '',
                          templates: PromptTemplates = DEFAULT_TEMPLATES) -> list[Message]:
    """``[user: task, user: interjection]`` -> ``plan text <say>speech</say>``."""
    return [_user(task or ''), _user(templates.render('interjection', interjection=interjection,
                                                      task=task, plan=plan))]


def vqa_messages(question: str, image: Any, camera: str = '',
                 templates: PromptTemplates = DEFAULT_TEMPLATES) -> list[Message]:
    """``[user: [image of camera, text: question]]`` -> the answer."""
    return [_user([{'type': 'image', 'image': image, 'camera': camera or ''},
                   {'type': 'text', 'text': templates.render('vqa', question=question,
                                                             camera=camera)}])]


def action_instruction(context: Any, subtask: str | None = None) -> str:
    """The text the action policy is conditioned on: the subtask if non-empty, else the task.

    ``context`` is a LanguageSnapshot / LanguageState (anything with ``task`` and
    ``subtask``), a ``(task, subtask)`` tuple, or a task string with ``subtask`` given apart.
    """
    if isinstance(context, tuple):
        task, sub = context
    elif isinstance(context, str) or context is None:
        task, sub = context or '', subtask or ''
    else:
        task, sub = getattr(context, 'task', ''), getattr(context, 'subtask', '')
    return (sub or '').strip() or (task or '').strip()
