"""Prompt builders: OpenAI-style chat message lists for the high-level text head.

A message is ``{'role': 'user' | 'assistant', 'content': str | list[part]}``; a part is
``{'type': 'text', 'text': str}`` or ``{'type': 'image', 'image': <any>, 'camera': str}``.
The model's processor decides how the turns are serialised; these builders only fix the turn
structure, which must match the training recipes.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


def _user(content: Any) -> Message:
    return {'role': 'user', 'content': content}


def subtask_messages(task: str) -> list[Message]:
    """``[user: task]`` -> the model answers with the current subtask."""
    return [_user(task or '')]


def memory_messages(task: str, prior_memory: str, prior_subtask: str) -> list[Message]:
    """``[user: task, assistant: 'Previous memory: ...', user: 'Completed subtask: ...']``.

    As in the training recipes (``if_present``), a turn whose value is empty is left out:
    the first memory after the first subtask has no previous memory to quote.
    """
    messages = [_user(task or '')]
    if prior_memory:
        messages.append({'role': 'assistant', 'content': f'Previous memory: {prior_memory}'})
    if prior_subtask:
        messages.append(_user(f'Completed subtask: {prior_subtask}'))
    return messages


def interjection_messages(task: str, interjection: str) -> list[Message]:
    """``[user: task, user: interjection]`` -> ``plan text <say>speech</say>``."""
    return [_user(task or ''), _user(interjection or '')]


def vqa_messages(question: str, image: Any, camera: str = '') -> list[Message]:
    """``[user: [image of camera, text: question]]`` -> the answer."""
    return [_user([{'type': 'image', 'image': image, 'camera': camera or ''},
                   {'type': 'text', 'text': question or ''}])]


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
