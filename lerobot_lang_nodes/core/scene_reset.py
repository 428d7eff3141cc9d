"""Which operator commands a simulator reset clears, and which it must keep; ROS-free.

The planner learns of a reset from the simulator's ground truth (its seed changes), which can
reach it after a task the operator sent once the reset service had answered: the two arrive
on different topics, and DDS orders samples per writer only. Clearing "whatever the planner
holds" when the news arrives then wipes the operator's next command (an evaluation harness
that resets and sends the next task back to back lost 4 of 13). So each command keeps the
wall-clock time it was sent (its DDS source timestamp, else when it arrived) and the reset
the time the simulator reset the scene (its ground truth's `reset_ns`): a reset clears what
was sent before it and the commands sent after it are applied again, in order, on the new
scene.

Wall-clock times compare across processes on one host; across hosts they need clocks synced
(NTP) to better than the time between the reset's answer and the next command.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

# A reset's news trails it by at most a ground-truth period or two; a few commands suffice.
DEFAULT_KEEP = 16


@dataclass(frozen=True)
class Command:
    """An operator command that sets the task or the active subtask."""
    kind: str  # 'task' or 'direct' (a `direct:` subtask)
    text: str
    direct: bool  # for 'task': the text is also the subtask (direct mode)
    sent_ns: int  # wall clock, ns since the epoch


class ResetOrdering:
    """The recent task commands, to replay those a reset must not clear."""

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self._commands: collections.deque[Command] = collections.deque(maxlen=keep)
        self.kept = 0  # commands that outlived a reset they arrived before

    def note(self, kind: str, text: str, direct: bool = False,
             sent_ns: int | None = None) -> Command:
        """Record a command as it is applied; ``sent_ns`` None or 0 means now."""
        if kind not in ('task', 'direct'):
            raise ValueError(f"kind must be 'task' or 'direct', not {kind!r}")
        command = Command(kind, text, bool(direct), int(sent_ns or time.time_ns()))
        self._commands.append(command)
        return command

    def reset(self, reset_ns: int | None) -> list[Command]:
        """A reset published at ``reset_ns``: the commands sent after it, oldest first.

        Everything earlier is forgotten. Without a time (None or 0) the reset clears all.
        """
        later = [c for c in self._commands if reset_ns and c.sent_ns >= reset_ns]
        self._commands.clear()
        self.kept += len(later)
        return later
