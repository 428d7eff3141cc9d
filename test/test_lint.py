"""Static checks of the project's own Python: no unused names or undefined ones, short lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 99
SOURCES = ('lerobot_lang_nodes', 'test', 'bench', 'launch', 'setup.py')


def _python_files() -> list[Path]:
    files = []
    for name in SOURCES:
        path = ROOT / name
        files += [path] if path.is_file() else sorted(path.rglob('*.py'))
    return files


def test_pyflakes_finds_nothing():
    out = subprocess.run([sys.executable, '-m', 'pyflakes', *map(str, _python_files())],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_lines_are_at_most_99_characters():
    long = [f'{p.relative_to(ROOT)}:{n}' for p in _python_files()
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if len(line) > MAX_LINE and 'noqa: E501' not in line]
    assert not long, long
