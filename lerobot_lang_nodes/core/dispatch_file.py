"""A JSON-lines record of every action a control loop sent to its robot.

One line per dispatch: ``t`` (the loop's clock: sim time in the simulator, ROS time on the
arm), ``wall`` (time.monotonic() right after the action was applied or written, the instant
jitter is measured from), ``sequence``/``revision``/``step`` (which chunk and which of its
actions) and ``action`` (what was actually applied, after the safety clamps). Line-buffered,
so a killed process loses at most the line being written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class DispatchFile:
    """Appends dispatch records to ``path`` (its folder is created); executor.DispatchLog is
    the in-memory counterpart used by tests."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open('a', buffering=1)

    def write(self, t: float, wall: float, sequence: int, revision: int, step: int,
              action: Sequence[float]) -> None:
        self._file.write(json.dumps({
            't': round(float(t), 6), 'wall': round(float(wall), 6), 'sequence': int(sequence),
            'revision': int(revision), 'step': int(step),
            'action': [round(float(a), 6) for a in action]}) + '\n')

    def close(self) -> None:
        self._file.close()


def read_dispatch_file(path: str | Path) -> list[dict[str, Any]]:
    """The complete records of a dispatch log (a torn last line is left out)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith('}')]
