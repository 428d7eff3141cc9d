"""Teleop and takeover over DDS: the MuJoCo sim_bridge follows the real so101_leader node, whose
bus is the servo emulator (a pty, real bytes) with its horns moved by the test as a hand would.

One rig serves the module (the sim, the leader and its emulator start once, in that order of
cost); the tests run in file order but each leaves the rig in action mode with the leader
alive, except the last, which silences the leader.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.so101.units import RAD_PER_STEP
from lerobot_lang_nodes.testing import (EmulatorProcess, NodeProcess, node_command, RosProbe,
                                        wait_until)

LEADER = 'lerobot_lang_nodes.nodes.so101_leader_node'
SIM = 'lerobot_lang_nodes.nodes.sim_bridge_node'
IDS = range(1, 7)
MID = 2100  # the leader's calibrated ranges are 600..3600 (+-2.3 rad): MID reads 0 rad
# The follower's max_relative_target_rad: smaller than what the simulated servo moves in one
# period toward a far goal, so the clamp, not the actuator, bounds the motion.
MAX_REL = 0.01
WAIT_S = 20.0  # generous: two shared, loaded cores
PAN = JOINT_NAMES.index('shoulder_pan')


def steps(rad: float) -> int:
    return int(round(MID + rad / RAD_PER_STEP))


class Rig:
    def __init__(self, tmp: Path, probe: RosProbe) -> None:
        self.probe = probe
        self.sim = NodeProcess('sim_bridge', node_command(SIM, params={
            'cameras': ['front'], 'image_width': 32, 'image_height': 24, 'camera_hz': 2.0,
            'max_relative_target_rad': MAX_REL, 'leader_timeout_s': 0.3,
            'handover_timeout_s': 10.0, 'status_hz': 10.0}), tmp / 'sim_bridge.log')
        self.emu = EmulatorProcess(IDS, link=tmp / 'leader').start()
        cal = tmp / 'leader_calibration.json'
        save_calibration({j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 600,
                                              4095 if j == 'wrist_roll' else 3600)
                          for i, j in enumerate(JOINT_NAMES)}, path=cal)
        self.leader = NodeProcess('so101_leader', node_command(LEADER, params={
            'port': str(tmp / 'leader'), 'calibration_path': str(cal), 'read_hz': 60.0,
            'hold_speed_rad_s': 1.0, 'reconnect_period_s': 0.2}), tmp / 'so101_leader.log')
        self.procs = [self.sim, self.leader]
        self.status = probe.subscribe(RuntimeStatus, '/runtime_status', qos.STATUS)
        self.joints = probe.subscribe(JointState, '/joint_states', qos.SENSOR)
        self.leader_joints = probe.subscribe(JointState, '/leader/joint_states', qos.SENSOR)
        self.chunks = probe.publisher(ActionChunk, '/action_chunk', qos.COMMAND)
        try:  # MuJoCo's start takes a while on loaded cores
            self.wait(lambda: len(self.joints) > 0 and len(self.leader_joints) > 0,
                      'follower and leader joint states', timeout_s=90.0)
        except BaseException:
            self.close()
            raise

    def wait(self, predicate, what: str, timeout_s: float = WAIT_S):
        return wait_until(predicate, timeout_s, what, self.procs)

    def call(self, service: str) -> Trigger.Response:
        return self.probe.call(Trigger, service, Trigger.Request(), timeout_s=WAIT_S)

    def follower(self) -> np.ndarray:
        return np.array(self.joints.snapshot()[-1].position)

    def last_status(self) -> RuntimeStatus:
        return self.status.snapshot()[-1]

    def move_leader(self, pose: np.ndarray) -> None:
        for i, rad in zip(IDS, pose):
            self.emu.set_present_position(i, steps(float(rad)))

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.emu.stop()


@pytest.fixture(scope='module')
def rig(tmp_path_factory) -> Iterator[Rig]:
    probe = RosProbe('teleop_probe')
    try:
        r = Rig(tmp_path_factory.mktemp('teleop'), probe)
    except BaseException:
        probe.close()
        raise
    try:
        yield r
    except BaseException:
        print(r.sim.log_text(4000), r.leader.log_text(2000))
        raise
    finally:
        r.close()
        probe.close()


def chunk(pose: np.ndarray, st: RuntimeStatus, stamp_s: float, sequence: int) -> ActionChunk:
    return convert.chunk_to_msg(np.tile(pose, (30, 1)), JOINT_NAMES,
                                revision=st.context_revision, flush_revision=st.flush_revision,
                                sequence=sequence, stamp_s=stamp_s, period_s=1.0 / 30.0,
                                instruction='test', backend='test')


def take_over(rig: Rig) -> None:
    since = len(rig.status)
    answer = rig.call('/takeover')
    assert answer.success, answer.message
    rig.status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_TELEOP
                        and m.control_source == RuntimeStatus.CONTROL_HUMAN,
                        timeout_s=WAIT_S, what='teleop with a human in control', since=since)


def test_takeover_drives_the_leader_to_the_follower_then_the_follower_tracks_it(rig):
    before = rig.follower()
    answer = rig.call('/takeover')
    leader = np.array(rig.leader_joints.snapshot()[-1].position)
    assert answer.success and 'leader driven' in answer.message, (
        answer.message, before, rig.follower(), leader)
    # The leader came to the follower (not the other way round): the follower barely moved.
    leader = np.array(rig.leader_joints.snapshot()[-1].position)
    assert np.max(np.abs(leader - before)) < 0.06
    rig.status.wait_for(lambda m: m.mode == 'teleop' and m.control_source == 'human',
                        timeout_s=WAIT_S, what='teleop with a human in control')
    assert np.max(np.abs(rig.follower() - before)) < 0.06
    # The hand moves the released leader: the simulated arm follows it.
    target = before.copy()
    target[PAN] += 0.03 * 4
    rig.move_leader(target)
    rig.wait(lambda: abs(rig.follower()[PAN] - target[PAN]) < 0.02,
             'the simulated shoulder_pan at the leader\'s')
    rig.call('/handback')


def test_a_leader_jump_moves_the_follower_no_faster_than_the_safety_bound(rig):
    take_over(rig)
    start = rig.follower()
    target = start.copy()
    target[PAN] = start[PAN] + 0.4  # one jump of 0.4 rad: 40 times the bound per period
    since = len(rig.joints)
    rig.move_leader(target)
    rig.wait(lambda: abs(rig.follower()[PAN] - target[PAN]) < 0.03,
             'the follower at the leader\'s pose after the jump')
    pan = [m.position[PAN] for m in rig.joints.snapshot()[since - 1:]]
    steps_rad = np.abs(np.diff(pan))
    # One control period per joint state: each goal is within MAX_REL of the present
    # position, so the arm never moved much more than that in one period.
    assert steps_rad.max() <= MAX_REL * 1.5, steps_rad.max()
    assert len(pan) >= math.floor(0.4 / MAX_REL)  # it took many periods, not one
    rig.call('/handback')


def test_handback_plays_nothing_the_policy_computed_before(rig):
    take_over(rig)
    during = convert.stamp_to_s(rig.joints.snapshot()[-1].header.stamp)
    since = len(rig.status)
    answer = rig.call('/handback')
    assert answer.success, answer.message
    st = rig.status.wait_for(lambda m: m.mode == 'action' and m.control_source == 'policy',
                             timeout_s=WAIT_S, what='action mode, the policy in control',
                             since=since)
    pose = rig.follower()
    far = np.clip(pose + 0.3, -1.5, 1.5)
    stale_before = st.discarded_stale
    # A chunk computed from an observation taken while the human was in control: stale.
    rig.chunks.publish(chunk(far, st, during, 101))
    rig.status.wait_for(lambda m: m.discarded_stale > stale_before, timeout_s=WAIT_S,
                        what=f'the old chunk discarded as stale (stamp {during})')
    assert np.max(np.abs(rig.follower() - pose)) < 0.02  # and the arm did not move
    # A chunk observed after the hand-back is played.
    now = convert.stamp_to_s(rig.joints.snapshot()[-1].header.stamp)
    rig.chunks.publish(chunk(pose, st, now, 102))
    rig.status.wait_for(lambda m: m.last_chunk_sequence == 102, timeout_s=WAIT_S,
                        what='the new chunk dispatched')


def test_a_silent_leader_holds_the_follower(rig):
    take_over(rig)
    rig.leader.stop()  # the leader goes silent (unplugged, crashed)
    rig.procs.remove(rig.leader)
    st = rig.status.wait_for(lambda m: m.mode == 'teleop' and m.control_source == 'none',
                             timeout_s=WAIT_S, what='control_source none after the leader '
                                                    'fell silent', since=len(rig.status))
    held = rig.follower()
    n = len(rig.joints)
    rig.wait(lambda: len(rig.joints) >= n + 30, 'one more second of joint states')
    assert np.max(np.abs(rig.follower() - held)) < 0.01
    assert rig.last_status().control_source == 'none' and st.mode == 'teleop'
