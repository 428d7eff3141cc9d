"""A JSON-lines record of every action a control loop sent to its robot.

One line per dispatch: ``t`` (the loop's clock: sim time in the simulator, ROS time on the
arm), ``wall`` (time.monotonic() right after the action was applied or written, the instant
jitter is measured from), ``sequence``/``revision``/``step`` (which chunk and which of its
actions) and ``action`` (what was actually applied, after the safety clamps). Line-buffered,
so a killed process loses at most the line being written.

``JsonLinesFile`` / ``read_json_lines`` are the format itself, shared with the policy's
inference log (``core/inference_file.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class JsonLinesFile:
    """Appends one JSON object per line to ``path`` (its folder is created), line-buffered."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open('a', buffering=1)

    def write_record(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + '\n')

    def close(self) -> None:
        self._file.close()


class DispatchFile(JsonLinesFile):
    """Dispatch records; executor.DispatchLog is the in-memory counterpart used by tests."""

    def write(self, t: float, wall: float, sequence: int, revision: int, step: int,
              action: Sequence[float]) -> None:
        self.write_record({
            't': round(float(t), 6), 'wall': round(float(wall), 6), 'sequence': int(sequence),
            'revision': int(revision), 'step': int(step),
            'action': [round(float(a), 6) for a in action]})


def read_json_lines(path: str | Path) -> list[dict[str, Any]]:
    """The complete records of a JSON-lines log (a torn last line is left out)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith('}')]


read_dispatch_file = read_json_lines
