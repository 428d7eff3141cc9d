"""Observation ages judged on the robot side's clock only (issue 31): core/freshness.py, the
policy session's max_observation_age_s and the executor's max_observation_age_s.

The policy's clock here is the test's and disagrees with the robot's by seconds, as a GPU
computer's may: nothing it decides may depend on that offset.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from lerobot_lang_nodes.core.executor import Chunk, ChunkExecutor, ExecutorConfig
from lerobot_lang_nodes.core.freshness import RobotClock
from lerobot_lang_nodes.core.policy_session import (Joints, PolicySession, SessionConfig,
                                                    StatusReport)

P = 0.1  # control period (s)
NAMES = ('a', 'b')


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Hosts:
    """The robot's clock and the policy computer's, ``offset`` seconds apart, stepped together."""

    def __init__(self, offset: float, **cfg) -> None:
        self.robot = Clock(1000.0)
        self.policy = Clock(1000.0 + offset)
        self.mono = Clock(5.0)
        self.logs: list[tuple[int, str]] = []
        self.session = PolicySession(
            SessionConfig(**{'max_inference_hz': 1000.0, **cfg}), monotonic=self.mono,
            clock=self.policy, emit=lambda level, text: self.logs.append((level, text)))
        self.session.on_context('tidy', 'pick red', 1, 1)
        self.joints()
        self.status()

    def step(self, seconds: float) -> None:
        for clock in (self.robot, self.policy, self.mono):
            clock.t += seconds

    def joints(self, age: float = 0.0) -> None:
        """A joint state the robot stamped ``age`` ago arrives now."""
        self.session.on_joints(Joints(NAMES, np.zeros(2), stamp_s=self.robot.t - age))

    def status(self, **kw) -> None:
        base = {'acting': True, 'needs_refill': True, 'revision': 1, 'flush_revision': 1,
                'control_period_s': P, 'stamp_s': self.robot.t}
        self.session.on_status(StatusReport(**{**base, **kw}))

    def values(self) -> dict:
        return self.session.diagnostics()[2]


def test_robot_clock_is_the_newest_robot_stamp_advanced_by_the_local_clock():
    local = Clock(50.0)  # 950 s behind the robot
    clock = RobotClock(local)
    assert not clock.known and clock.now() == 50.0  # nothing from the robot: its own clock
    clock.observe(1000.0)
    local.t += 0.25
    assert clock.known and clock.now() == pytest.approx(1000.25)
    clock.observe(999.9)  # an older stamp arriving late does not pull the estimate back
    assert clock.now() == pytest.approx(1000.25)
    clock.observe(1000.3)
    assert clock.now() == pytest.approx(1000.3)
    local.t = 10.0  # the local clock went back (a simulator reset under use_sim_time)
    assert clock.now() == 10.0
    clock.observe(0.5)
    local.t += 0.1
    assert clock.now() == pytest.approx(0.6)


@pytest.mark.parametrize('offset', [-7.0, 0.0, 7.0])
def test_a_policy_clock_seconds_off_changes_nothing(offset):
    """Fresh observations are inferred on, and the chunk is published (not taken for expired)
    with the robot's stamp, whatever the policy computer's clock says."""
    hosts = Hosts(offset)
    for sequence in (1, 2, 3):
        job = hosts.session.start()
        assert job is not None, hosts.logs
        assert job.observation['stamp_s'] == hosts.robot.t
        hosts.step(0.05)
        chunk = hosts.session.finished(job, np.ones((10, 2)))
        assert chunk is not None and chunk.sequence == sequence
        assert chunk.stamp_s == pytest.approx(hosts.robot.t - 0.05)
        hosts.joints()
        hosts.status(last_accepted_sequence=sequence)
    values = hosts.values()
    assert values['stale_observations'] == 0 and values['expired_chunks'] == 0
    assert hosts.session.diagnostics()[0] == 'ok'


def test_an_observation_older_than_the_bound_is_refused_counted_once_and_reported():
    hosts = Hosts(offset=30.0, max_observation_age_s=0.2)
    hosts.joints(age=0.5)  # delayed on the link: the robot's status is newer by 0.5 s
    assert hosts.session.start() is None
    assert hosts.session.start() is None  # the same observation again: counted once
    level, message, values = hosts.session.diagnostics()
    assert values['stale_observations'] == 1
    assert values['observation_age_last_ms'] == pytest.approx(500.0)
    assert level == 'warn' and 'max_observation_age_s' in message
    assert [lvl for lvl, text in hosts.logs if 'not inferring' in text] == [logging.WARNING]
    hosts.joints()  # a fresh one
    job = hosts.session.start()
    assert job is not None and hosts.session.diagnostics()[0] == 'ok'


def test_nothing_new_from_the_robot_ages_the_observation_on_the_local_clock():
    """A stalled link: the last joint state grows old though no newer stamp arrives."""
    hosts = Hosts(offset=-3.0, max_observation_age_s=0.2)
    hosts.step(0.15)
    assert hosts.values()['stale_observations'] == 0
    hosts.step(0.1)  # 0.25 s since anything left the robot
    assert hosts.session.start() is None
    assert hosts.values()['stale_observations'] == 1


def test_zero_disables_the_bound_and_a_negative_one_is_refused():
    hosts = Hosts(offset=0.0, max_observation_age_s=0.0)
    hosts.joints(age=100.0)
    assert hosts.session.start() is not None
    with pytest.raises(ValueError, match='max_observation_age_s'):
        SessionConfig(max_observation_age_s=-1.0)


# --- the executor: the chunk's observation stamp against its own clock ----------------------
def _chunk(sequence: int, stamp: float) -> Chunk:
    return Chunk(np.zeros((30, 2)), NAMES, revision=1, sequence=sequence, stamp_s=stamp,
                 period_s=P)


def test_executor_discards_a_chunk_whose_observation_is_older_than_the_bound():
    ex = ChunkExecutor(ExecutorConfig(NAMES, ctrl_hz=1 / P, max_observation_age_s=1.0))
    assert ex.submit(_chunk(1, 99.5), now_s=100.0).accepted
    result = ex.submit(_chunk(2, 98.8), now_s=100.0)  # 1.2 s old; 18 of its 30 rows ahead
    assert not result.accepted and result.kind == 'stale'
    assert 'observation too old' in result.reason
    st = ex.status()
    assert st.discarded_old_observation == 1 and st.discarded_stale == 1
    assert 'max_observation_age_s' in st.last_reject_reason
    off = ChunkExecutor(ExecutorConfig(NAMES, ctrl_hz=1 / P))  # 0: only expiry applies
    assert off.submit(_chunk(2, 98.8), now_s=100.0).accepted


def test_frames_the_model_needs_older_than_their_bound_are_refused_too():
    """Joint states fresh, the camera's frames late (a congested link): no inference."""
    hosts = Hosts(offset=9.0, max_image_age_s=0.5)
    late = {'front': hosts.robot.t - 0.1, 'wrist': hosts.robot.t - 0.8}
    assert hosts.session.start(observe=lambda: {'image_stamps': late}) is None
    level, message, values = hosts.session.diagnostics()
    assert values['stale_observations'] == 1 and level == 'warn'
    assert any("camera wrist's frame 0.800 s old" in text for _, text in hosts.logs)
    fresh = {'front': hosts.robot.t - 0.1, 'wrist': hosts.robot.t - 0.2}
    job = hosts.session.start(observe=lambda: {'image_stamps': fresh})
    assert job is not None and job.observation['image_stamps'] == fresh
    off = Hosts(offset=0.0, max_image_age_s=0.0)  # 0 disables
    assert off.session.start(observe=lambda: {'image_stamps': late}) is not None
