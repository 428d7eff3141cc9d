"""Run mode teleop in the core executor, with injected time: the follower tracks the leader
through the same rules as a policy (limits, watchdog), takeover drops the policy's queue and
hand-back plays nothing the policy computed before it."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_lang_nodes.core.executor import (CONTROL_HUMAN, CONTROL_NONE, CONTROL_POLICY,
                                              MODE_ACTION, MODE_TELEOP, Chunk, ChunkExecutor,
                                              ExecutorConfig)
from lerobot_lang_nodes.core.teleop import LeaderTracker

NAMES = ('shoulder_pan', 'elbow_flex')
HZ = 30.0
P = 1.0 / HZ


def executor(**kw) -> ChunkExecutor:
    return ChunkExecutor(ExecutorConfig(action_names=NAMES, ctrl_hz=HZ,
                                        lower_limits=[-2.0, -2.0], upper_limits=[2.0, 2.0],
                                        **kw))


def chunk(seq: int, stamp: float, value: float = 0.1, revision: int = 0, n: int = 10) -> Chunk:
    return Chunk(values=np.full((n, 2), value), action_names=NAMES, revision=revision,
                 sequence=seq, stamp_s=stamp)


def test_teleop_tracks_the_leader_by_joint_name():
    ex = executor()
    ex.teleop(0.0)
    # The leader publishes its joints in its own order, with extra ones: matched by name.
    assert ex.set_leader(['elbow_flex', 'gripper', 'shoulder_pan'], [0.3, 0.9, -0.2], 0.0) == ''
    np.testing.assert_allclose(ex.tick(P), [-0.2, 0.3])
    assert ex.mode == MODE_TELEOP and ex.control_source == CONTROL_HUMAN
    st = ex.status()
    assert st.teleop_dispatched == 1 and st.control_source == CONTROL_HUMAN
    assert st.needs_refill is False  # the policy is not asked for chunks


def test_a_silent_leader_holds_the_follower_and_says_nobody_commands():
    ex = executor(leader_timeout_s=0.2)
    ex.teleop(0.0)
    ex.set_leader(NAMES, [0.1, 0.1], 0.0)
    assert ex.tick(0.1) is not None
    assert ex.tick(0.25) is None  # 0.25 s without a sample > 0.2 s: hold
    assert ex.control_source == CONTROL_NONE and ex.status().leader_silent_ticks == 1
    ex.set_leader(NAMES, [0.2, 0.2], 0.3)  # it speaks again: tracked again
    np.testing.assert_allclose(ex.tick(0.3 + P), [0.2, 0.2])
    assert ex.control_source == CONTROL_HUMAN


def test_never_heard_leader_holds():
    ex = executor()
    ex.teleop(0.0)
    assert ex.tick(P) is None and ex.control_source == CONTROL_NONE


@pytest.mark.parametrize('names, positions, why', [
    (['shoulder_pan'], [0.1], 'missing'),
    (list(NAMES), [0.1, float('nan')], 'non-finite'),
    (list(NAMES), [0.1, 2.5], 'above upper'),  # a leader calibrated for another arm
])
def test_garbage_from_the_leader_is_refused_not_tracked(names, positions, why):
    ex = executor()
    ex.teleop(0.0)
    ex.set_leader(NAMES, [0.1, 0.1], 0.0)
    assert why in ex.set_leader(names, positions, 0.01)
    np.testing.assert_allclose(ex.tick(P), [0.1, 0.1])
    assert ex.status().leader_refused == 1


def test_takeover_drops_the_policy_queue_and_refuses_its_chunks():
    ex = executor()
    assert ex.submit(chunk(1, 0.0), 0.0).accepted and len(ex) == 10
    assert ex.control_source == CONTROL_POLICY
    ex.teleop(0.1)
    assert len(ex) == 0
    result = ex.submit(chunk(2, 0.1), 0.1)
    assert not result.accepted and result.reason.startswith('teleop')
    assert ex.tick(0.1 + P) is None  # no leader yet: hold, nothing of the policy plays


def test_handback_plays_nothing_the_policy_observed_before_it():
    ex = executor()
    ex.teleop(1.0)
    ex.set_leader(NAMES, [0.1, 0.1], 1.0)
    ex.tick(1.0 + P)
    ex.resume(2.0)  # hand-back
    assert ex.mode == MODE_ACTION and ex.control_source == CONTROL_POLICY
    # Computed from an observation during teleop (or before the takeover): stale.
    late = ex.submit(chunk(3, 2.0), 2.0)  # even one of the hand-back's own instant
    assert not late.accepted and 'before pause' in late.reason
    fresh = ex.submit(chunk(4, 2.001, value=0.4), 2.001)
    assert fresh.accepted
    np.testing.assert_allclose(ex.tick(2.001 + P), [0.4, 0.4])


def test_handover_slides_the_follower_to_the_leader_within_the_speed():
    ex = executor(teleop_align_speed_rad_s=0.6, teleop_align_tolerance_rad=0.01)
    ex.teleop(0.0, follower=[0.0, 0.0])
    ex.set_leader(NAMES, [0.3, -0.1], 0.0)
    targets, t = [], 0.0
    for _ in range(30):
        t += P
        ex.set_leader(NAMES, [0.3, -0.1], t)
        targets.append(ex.tick(t))
    steps = np.abs(np.diff(np.vstack([[0.0, 0.0], *targets]), axis=0))
    assert steps.max() <= 0.6 * P + 1e-9  # never faster than the handover speed
    np.testing.assert_allclose(targets[-1], [0.3, -0.1])  # then it tracks the leader
    assert ex.status().handover_aligned


def test_leader_already_at_the_follower_pose_tracks_at_once():
    ex = executor()
    ex.teleop(0.0, follower=[0.2, 0.2])
    ex.set_leader(NAMES, [0.205, 0.2], 0.0)  # within the tolerance
    np.testing.assert_allclose(ex.tick(P), [0.205, 0.2])
    assert ex.status().handover_aligned


def test_pause_from_teleop_holds_and_resume_returns_to_the_policy():
    ex = executor()
    ex.teleop(0.0)
    ex.set_leader(NAMES, [0.1, 0.1], 0.0)
    ex.pause(0.1)
    assert ex.tick(0.1 + P) is None and ex.control_source == CONTROL_NONE
    ex.resume(0.2)
    assert ex.mode == MODE_ACTION


def test_dry_run_teleop_sends_nothing():
    ex = executor(dry_run=True)
    ex.teleop(0.0)
    ex.set_leader(NAMES, [0.1, 0.1], 0.0)
    assert ex.tick(P) is None and ex.control_source == CONTROL_NONE
    assert ex.status().planned_target == (0.1, 0.1)


def test_tracker_rejects_bad_configuration():
    with pytest.raises(ValueError):
        LeaderTracker(NAMES, timeout_s=0.0)
