"""Optional packages: which requirement file brings a missing one, and an error that says so.

The scripted graph runs without the model stack (requirements/ml.txt: torch, LeRobot,
transformers); a learned backend, the export and the trainers need it. Without it they fail
with one line naming the package, the requirement file and the command, not with a bare
`No module named 'torch'` or a traceback.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
from collections.abc import Iterator

# Import names of requirements/ml.txt's packages (and of the LeRobot dependencies it brings).
# A policy type's own optional packages (num2words, scipy, peft, ...) are LeRobot extras: the
# lerobot backend names the extra of the checkpoint's type (lerobot_policy.
# missing_dependency_error) rather than the whole stack.
ML_STACK = frozenset({'torch', 'torchvision', 'lerobot', 'transformers', 'safetensors',
                      'tokenizers', 'accelerate', 'gguf', 'diffusers', 'datasets',
                      'huggingface_hub'})
ML_REQUIREMENTS = 'requirements/ml.txt'
CONSTRAINTS = 'requirements/constraints.txt'
INSTALL_ML = f'pip install -c {CONSTRAINTS} -r {ML_REQUIREMENTS}'
# How Python, transformers and LeRobot name a package that is not installed.
_MISSING = re.compile(r"No module named '([\w.-]+)'|[Pp]ackage `([\w.-]+)` is required"
                      r"|'([\w.-]+)' is required")


class MissingDependency(ImportError):
    """A package this feature needs is not installed; the message says how to install it."""


def missing_module(exc: ImportError) -> str | None:
    """The top-level name of the module ``exc`` could not import (None when it does not say)."""
    name = getattr(exc, 'name', None)
    if not name and 'requires the PyTorch library' in str(exc):  # transformers' own check
        name = 'torch'
    if not name:
        found = _MISSING.search(str(exc))
        name = next((g for g in found.groups() if g), None) if found else None
    return name.partition('.')[0] if name else None


def model_stack_message(what: str, exc: ImportError) -> str | None:
    """The message for ``what`` failing on a missing model-stack package; None for any other
    import error (that one keeps its own message)."""
    name = missing_module(exc)
    # Installed but failing inside (a submodule it lacks, a broken install): not this message.
    if name not in ML_STACK or importlib.util.find_spec(name) is not None:
        return None
    return (f"{what} needs the package {name!r}, which is not installed for {sys.executable}: "
            f'install the model stack ({ML_REQUIREMENTS}: torch, LeRobot, transformers) with '
            f'scripts/setup.sh --ml (the pip-only .venv), or from the lerobot_lang_nodes '
            f'source folder into this environment: {INSTALL_ML}')


@contextlib.contextmanager
def model_stack_required(what: str) -> Iterator[None]:
    """Turn a missing model-stack package inside the block into MissingDependency."""
    try:
        yield
    except MissingDependency:
        raise
    except ImportError as exc:
        message = model_stack_message(what, exc)
        if message is None:
            raise
        raise MissingDependency(message, name=exc.name) from exc


def require_model_stack(what: str, *modules: str) -> None:
    """Raise MissingDependency now, before any work, when one of ``modules`` is missing."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            exc = ModuleNotFoundError(f'No module named {module!r}', name=module)
            raise MissingDependency(model_stack_message(what, exc) or str(exc), name=module)
