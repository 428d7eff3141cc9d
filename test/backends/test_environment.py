"""The model environment honours what the libraries we build on declare.

`pip check` sees only the requirements of extras that were asked for by name, so LeRobot's
`smolvla`, `pi`, `groot` and `xvla` extras (transformers >= 5.4, < 5.6; num2words; scipy;
dm-tree, peft, timm, diffusers, decord) are checked here from LeRobot's own metadata: a pin that
drifts outside them (transformers 5.24 broke every SmolVLA inference) fails CI instead of a
user's first run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata

import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml('torch', 'transformers', 'lerobot')

from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

# The policy families the README says run, by LeRobot extra.
EXTRAS = ('dataset', 'smolvla', 'pi', 'groot', 'xvla')


def declared(dist: str, extras: tuple[str, ...]) -> list[Requirement]:
    """Every requirement ``dist`` declares for ``extras``, its self-references
    (``lerobot[transformers-dep]``) expanded."""
    reqs = [Requirement(r) for r in metadata.requires(dist) or ()]
    out: list[Requirement] = []
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in reqs:
            if req.marker is None or not req.marker.evaluate({'extra': extra}):
                continue
            if canonicalize_name(req.name) == canonicalize_name(dist):
                todo.extend(req.extras)
            else:
                out.append(req)
    return out


def test_pip_check_is_clean() -> None:
    out = subprocess.run([sys.executable, '-m', 'pip', 'check', '--disable-pip-version-check'],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_lerobots_vla_extras_are_satisfied() -> None:
    assert metadata.version('lerobot') == '0.6.1'
    reqs = declared('lerobot', EXTRAS)
    names = {canonicalize_name(r.name) for r in reqs}
    # The extras are the ones we think.
    assert {'transformers', 'num2words', 'scipy', 'dm-tree', 'peft', 'timm', 'diffusers'} <= names
    problems = []
    for req in reqs:
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f'{req} (not installed)')
            continue
        if not req.specifier.contains(version, prereleases=True):
            problems.append(f'{req} (installed {version})')
    assert not problems, f"lerobot 0.6.1's extras {EXTRAS} are not satisfied: {problems}"


@pytest.mark.parametrize('name', ['transformers', 'num2words', 'scipy', 'dm-tree', 'peft', 'timm'])
def test_the_requirement_files_pin_what_is_installed(name) -> None:
    """requirements/ml.txt (what a user installs) and the lock agree with the environment."""
    from lerobot_lang_nodes import paths
    pins = {}
    for fname in ('ml.txt', 'constraints.txt'):
        text = (paths.source_root() / 'requirements' / fname).read_text()
        found = re.search(rf'^{re.escape(name)}==(\S+)', text, re.MULTILINE | re.IGNORECASE)
        assert found, f'requirements/{fname} does not pin {name}'
        pins[fname] = found.group(1)
    assert set(pins.values()) == {metadata.version(name)}, pins
