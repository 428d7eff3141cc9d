"""Typed errors raised by the runtime core."""

from __future__ import annotations

from typing import Any


class CoreError(Exception):
    """Base class of every error the runtime core raises on purpose."""


class InvalidChunk(CoreError):
    """An action chunk cannot be built or executed (wrong size, names, values)."""

    def __init__(self, message: str, *, reason: str = '') -> None:
        super().__init__(message)
        # A short machine-friendly reason, reused as SubmitResult.reason by callers.
        self.reason = reason or message


class ConfigError(CoreError, ValueError):
    """A configuration field or argument has an invalid value."""

    def __init__(self, message: str, *, field: str = '') -> None:
        super().__init__(message)
        self.field = field


def config_error(field: str, value: Any, expected: str, fix: str = '') -> ConfigError:
    """Build a ConfigError that says which field is wrong, the value seen, and the fix."""
    message = f'{field}: got {value!r}, expected {expected}'
    if fix:
        message += f'; {fix}'
    return ConfigError(message, field=field)
