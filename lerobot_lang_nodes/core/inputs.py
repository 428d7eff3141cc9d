"""Operator text (tasks, interjections, questions) checked before anything acts on it; ROS-free.

Text reaches the planner from any process on the DDS domain. A very long text would be copied
into every prompt (and every LanguageContext) and control characters (terminal escapes, NUL)
end up in logs, the console and the dataset's language columns; both are refused with a reason
naming the limit instead of being truncated or cleaned silently.
"""

from __future__ import annotations

import unicodedata

DEFAULT_MAX_TEXT_CHARS = 2000
_ALLOWED_CONTROLS = frozenset('\t\n')


def text_problem(text: str, max_chars: int = DEFAULT_MAX_TEXT_CHARS, what: str = 'text') -> str:
    """'' when ``text`` is acceptable operator text, else why not (for a log or a response)."""
    if len(text) > max_chars:
        return (f'{what} refused: {len(text)} characters, the limit is {max_chars} '
                '(parameter max_text_chars)')
    for i, ch in enumerate(text):
        if ch in _ALLOWED_CONTROLS:
            continue
        if unicodedata.category(ch) in ('Cc', 'Cs'):  # C0/C1 controls, DEL, lone surrogates
            return (f'{what} refused: control character U+{ord(ch):04X} at position {i}; '
                    'send plain text')
    return ''


__all__ = ['DEFAULT_MAX_TEXT_CHARS', 'text_problem']
