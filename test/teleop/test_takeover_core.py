"""The takeover sequence without ROS: hold first, drive the leader when it can be, release it,
then teleop from the follower's pose; a leader that cannot be driven is slid to instead."""

from __future__ import annotations

import numpy as np

from lerobot_lang_nodes.core.takeover import TakeoverPorts, run_handback, run_takeover


class Arms:
    """A follower at a pose and a leader elsewhere that moves to where it is driven."""

    def __init__(self, drivable: bool = True, arrives: bool = True) -> None:
        self.follower = np.array([0.1, 0.2])
        self.leader = np.array([0.8, -0.4])
        self.drivable, self.arrives = drivable, arrives
        self.calls: list[str] = []

    def ports(self) -> TakeoverPorts:
        return TakeoverPorts(
            hold=lambda: self.calls.append('hold'),
            follower_pose=lambda: self.follower.copy(),
            leader_pose=lambda: self.leader.copy(),
            teleop=lambda pose: self.calls.append(f'teleop from {pose.tolist()}'),
            handback=lambda: self.calls.append('handback'),
            drive_leader=self.drive, release_leader=lambda: self.calls.append('release') or '')

    def drive(self) -> str:
        self.calls.append('drive')
        if not self.drivable:
            return 'no motors'
        if self.arrives:
            self.leader = self.follower + 0.01
        return ''


def polls(predicate, _timeout_s) -> bool:
    return predicate()


def test_takeover_holds_drives_the_leader_releases_it_then_teleop():
    arms = Arms()
    result = run_takeover(arms.ports(), polls)
    assert result.ok and result.leader_driven
    assert arms.calls == ['hold', 'drive', 'release', 'teleop from [0.1, 0.2]']


def test_a_leader_that_cannot_be_driven_is_slid_to():
    arms = Arms(drivable=False)
    result = run_takeover(arms.ports(), polls)
    assert result.ok and not result.leader_driven and 'slides' in result.message
    assert arms.calls == ['hold', 'drive', 'teleop from [0.1, 0.2]']  # nothing to release


def test_a_leader_that_does_not_arrive_is_released_and_slid_to():
    arms = Arms(arrives=False)
    result = run_takeover(arms.ports(), polls)
    assert not result.leader_driven and 'largest gap 0.700' in result.message
    assert arms.calls == ['hold', 'drive', 'release', 'teleop from [0.1, 0.2]']


def test_handback():
    arms = Arms()
    assert run_handback(arms.ports()).ok and arms.calls == ['handback']
