"""Takeover (policy -> human) and hand-back (human -> policy), without ROS.

A takeover happens in three steps, so the operator takes the arm without a jump:

1. ``hold``: the policy's queued actions are dropped and the follower holds where it is.
2. ``drive_leader``: when the leader can be driven (its servos have motors: the leader node's
   hold_pose service), it is driven to the follower's pose and the sequence waits until the
   leader's pose is within ``tolerance_rad`` of the follower's (at most ``drive_timeout_s``),
   then ``release`` hands it back to the operator's hand. A leader that cannot be driven, or
   does not get there in time, is left where it is.
3. ``teleop``: the executor tracks the leader from the follower's pose: whatever gap remains
   is closed by the handover slide (core/teleop.py), within the node's safety limits.

The hand-back resumes the executor, which refuses every chunk observed before that instant;
the planner follows the executor's mode change with a new revision (core/language.py), so
nothing the policy computed before is played.

Every action goes through a callable the node gives, so the sequence is tested with plain
functions and an injected clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

Pose = np.ndarray


@dataclass
class TakeoverPorts:
    """What a takeover acts on (the node supplies each)."""

    hold: Callable[[], None]  # drop the policy's queue, hold the follower
    follower_pose: Callable[[], Pose | None]  # action order, radians
    leader_pose: Callable[[], Pose | None]  # the leader's latest pose, action order (None: none)
    teleop: Callable[[Pose | None], None]  # start tracking the leader from this pose
    handback: Callable[[], None]  # resume the policy
    # The leader's hold_pose: '' when it started driving, else why not (None: no such leader).
    drive_leader: Callable[[], str] | None = None
    release_leader: Callable[[], str] | None = None  # '' or why not


@dataclass(frozen=True)
class TakeoverResult:
    ok: bool
    message: str
    leader_driven: bool = False


def run_takeover(ports: TakeoverPorts, wait: Callable[[Callable[[], bool], float], bool],
                 tolerance_rad: float = 0.05, drive_timeout_s: float = 5.0) -> TakeoverResult:
    """Policy -> human. ``wait(predicate, timeout_s)`` polls until true (False on timeout)."""
    ports.hold()
    follower = ports.follower_pose()
    driven = False
    notes = []
    if ports.drive_leader is not None and follower is not None:
        problem = ports.drive_leader()
        if problem:
            notes.append(f'leader not driven ({problem}): the follower slides to it')
        else:
            def arrived() -> bool:
                leader = ports.leader_pose()
                return leader is not None and float(
                    np.max(np.abs(np.asarray(leader) - follower))) <= tolerance_rad
            driven = wait(arrived, drive_timeout_s)
            if not driven:
                leader = ports.leader_pose()
                gap = ('no leader pose' if leader is None else
                       f'largest gap {float(np.max(np.abs(np.asarray(leader) - follower))):.3f} '
                       f'rad at joint {int(np.argmax(np.abs(np.asarray(leader) - follower)))}')
                notes.append(f'the leader did not reach the follower\'s pose within '
                             f'{drive_timeout_s:g} s ({gap}): the follower slides to it')
            if ports.release_leader is not None:  # torque off: the hand moves it now
                problem = ports.release_leader()
                if problem:
                    notes.append(f'leader release failed: {problem}')
    elif follower is None:
        notes.append('no follower pose yet: tracking the leader at once')
    ports.teleop(follower)
    message = ('takeover: a human commands the arm'
               + (' (leader driven to the follower first)' if driven else '')
               + (': ' + '; '.join(notes) if notes else ''))
    logger.info(message)
    return TakeoverResult(True, message, driven)


def run_handback(ports: TakeoverPorts) -> TakeoverResult:
    """Human -> policy: chunks observed before now are stale; the planner starts a revision."""
    ports.handback()
    message = 'hand-back: the policy commands the arm (nothing computed before is played)'
    logger.info(message)
    return TakeoverResult(True, message)
