"""so101_leader in its own process against the servo emulator acting as a leader arm, over DDS.

The emulator runs in a child process of the test (EmulatorProcess: a ServoBusEmulator on a pty
at a --link path under tmp); the test moves its horns as a hand would and reads its registers
(Torque_Enable, Goal_Position) and the instructions it was sent; the node cannot tell it from a
real leader. One leader node serves the module's first tests; the last one runs a follower
driver and a leader node side by side, each on its own emulated bus.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.so101.protocol import Instruction
from lerobot_lang_nodes.so101.units import RAD_PER_STEP
from lerobot_lang_nodes.testing import (EmulatorProcess, NodeProcess, node_command, RosProbe,
                                        wait_until)

MODULE = 'lerobot_lang_nodes.nodes.so101_leader_node'
IDS = range(1, 7)
READ_HZ = 60.0
WAIT_S = 15.0  # generous: two shared, loaded cores
LEADER_MID = 2100.0  # the leader's ranges 1100..3100
FOLLOWER_MID = 2000.0  # the follower's 1000..3000


def calibration(lo: int, hi: int) -> dict[str, MotorCalibration]:
    return {j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else lo,
                                4095 if j == 'wrist_roll' else hi)
            for i, j in enumerate(JOINT_NAMES)}


def leader_params(port: Path, cal: Path, **extra) -> dict:
    return {'port': str(port), 'calibration_path': str(cal), 'read_hz': READ_HZ,
            'timeout_margin_ms': 100.0, 'reconnect_period_s': 0.2, 'diagnostics_hz': 5.0,
            'hold_speed_rad_s': 1.0, **extra}


def rad(steps: float, mid: float = LEADER_MID) -> float:
    return (steps - mid) * RAD_PER_STEP


class Leader:
    """A leader's emulator, node process and the probe's view of it (topics under ``ns``)."""

    def __init__(self, tmp: Path, probe: RosProbe, ns: str = '', **params) -> None:
        self.tmp = tmp
        self.emu = EmulatorProcess(IDS, link=tmp / 'leader').start()
        cal = tmp / 'leader_calibration.json'
        save_calibration(calibration(1100, 3100), path=cal)
        ros_args = ('-r', f'__ns:={ns}') if ns else ()
        self.proc = NodeProcess('so101_leader', node_command(
            MODULE, *ros_args, params=leader_params(tmp / 'leader', cal, **params)),
            tmp / 'so101_leader.log')
        self.ns = ns
        self.probe = probe
        topic = params.get('joint_states_topic', '/leader/joint_states')
        topic = topic if topic.startswith('/') else f'{ns}/{topic}'
        self.joints = probe.subscribe(JointState, topic, qos.SENSOR)
        self.diag = probe.subscribe(DiagnosticArray, f'{ns}/diagnostics', qos.STATUS)
        wait_until(lambda: self.values().get('health') == 'ok', 30.0,
                   'the leader configured (health ok)', [self.proc])

    def close(self) -> None:
        self.proc.stop()
        self.emu.stop()

    def arm(self) -> DiagnosticStatus | None:
        for msg in reversed(self.diag.snapshot()):
            for s in msg.status:
                if s.name == 'so101_leader: arm':
                    return s
        return None

    def values(self) -> dict[str, str]:
        arm = self.arm()
        return {kv.key: kv.value for kv in arm.values} if arm is not None else {}

    def reads_at(self, msg: DiagnosticArray) -> tuple[float, int] | None:
        """(stamp, reads so far) of one diagnostics message of the leader."""
        for s in msg.status:
            if s.name == 'so101_leader: arm':
                reads = next(kv.value for kv in s.values if kv.key == 'reads')
                return convert.stamp_to_s(msg.header.stamp), int(reads)
        return None

    def torque(self) -> list[int]:
        return [self.emu.register(i, 'Torque_Enable') for i in IDS]

    def call(self, service: str) -> Trigger.Response:
        return self.probe.call(Trigger, f'{self.ns}/so101_leader/{service}', Trigger.Request(),
                               timeout_s=WAIT_S)

    def wait(self, predicate, what: str, timeout_s: float = WAIT_S):
        return wait_until(predicate, timeout_s, what, [self.proc])

    def wait_joints(self, predicate, what: str) -> JointState:
        return self.joints.wait_for(predicate, timeout_s=WAIT_S, what=what,
                                    since=len(self.joints))

    def barrier(self) -> None:
        """Two more diagnostics: every earlier read cycle has finished."""
        n = len(self.diag)
        self.wait(lambda: len(self.diag) >= n + 2, 'two more diagnostics messages')


@pytest.fixture(scope='module')
def leader(tmp_path_factory) -> Iterator[Leader]:
    probe = RosProbe('leader_probe')
    try:
        rig = Leader(tmp_path_factory.mktemp('so101_leader'), probe)
    except BaseException:
        probe.close()
        raise
    try:
        yield rig
    finally:
        rig.close()
        probe.close()


@pytest.fixture
def idle_leader(leader: Leader) -> Iterator[Leader]:
    """Each test must leave the leader alive, passive (released) and connected."""
    yield leader
    assert leader.proc.alive, leader.proc.log_text(3000)
    assert leader.call('release').success


def close(a: list[float], b: list[float], tol: float) -> bool:
    return len(a) == len(b) and bool(np.all(np.abs(np.array(a) - np.array(b)) <= tol))


def test_horns_moved_by_hand_appear_in_radians_and_torque_stays_off(idle_leader) -> None:
    lead = idle_leader
    moved = [1300, 2900, 2500, 1750, 3000, 2600]
    for servo, steps in zip(IDS, moved):
        lead.emu.set_present_position(servo, steps)
    expected = [rad(s) for s in moved]
    expected[4] = rad(3000, 2047.5)  # wrist_roll: the full turn 0..4095
    msg = lead.wait_joints(lambda m: close(m.position, expected, 1e-9),
                           'the moved horns on /leader/joint_states')
    assert list(msg.name) == list(JOINT_NAMES)
    before = lead.emu.instructions
    lead.barrier()
    after = lead.emu.instructions
    # Reading is one SYNC_READ per cycle: nothing is written, torque is never touched.
    for code in (Instruction.WRITE, Instruction.SYNC_WRITE, Instruction.REG_WRITE):
        assert after.get(code, 0) == before.get(code, 0), code
    assert after[Instruction.SYNC_READ] > before[Instruction.SYNC_READ]
    assert lead.torque() == [0] * 6
    values = lead.values()
    assert values['torque_enabled'] == 'false' and values['handover'] == 'idle'
    assert float(values['read_rate_hz']) > 0
    # Reads per second over two seconds of diagnostics: the configured rate, with room for a
    # loaded machine's skipped slots.
    first = lead.reads_at(lead.diag.wait_for(lambda m: lead.reads_at(m) is not None,
                                             timeout_s=WAIT_S, since=len(lead.diag)))
    last = lead.reads_at(lead.diag.wait_for(
        lambda m: (lead.reads_at(m) or (0.0, 0))[0] >= first[0] + 2.0, timeout_s=WAIT_S,
        what='diagnostics two seconds later', since=len(lead.diag)))
    rate = (last[1] - first[1]) / (last[0] - first[0])
    assert READ_HZ / 2 <= rate <= READ_HZ * 1.1, (first, last)
    lead.emu.set_present_position(1, 1900)  # the hand goes on moving
    lead.wait_joints(lambda m: abs(m.position[0] - rad(1900)) < 1e-9, 'the next move')


def test_unplug_reports_disconnected_and_replug_recovers(idle_leader) -> None:
    lead = idle_leader
    reconnects = int(lead.values()['reconnects'])
    lead.emu.disconnect()
    lead.wait(lambda: lead.values().get('health') == 'disconnected',
              'health disconnected in diagnostics')
    assert lead.arm().level == DiagnosticStatus.ERROR
    seen = len(lead.joints)
    lead.barrier()
    assert len(lead.joints) <= seen + 1, 'positions published while the port was gone'
    assert lead.proc.alive
    lead.emu.reconnect()
    lead.wait(lambda: lead.values().get('health') == 'ok'
              and int(lead.values()['reconnects']) == reconnects + 1, 'the reconnect')
    assert lead.arm().level == DiagnosticStatus.OK
    assert lead.proc.log_text().count('PORT DISCONNECTED') == 1, 'not one clear report'
    lead.emu.set_present_position(2, 2700)
    lead.wait_joints(lambda m: abs(m.position[1] - rad(2700)) < 1e-9,
                     'positions after the reconnect')
    assert lead.torque() == [0] * 6


def test_hold_pose_drives_the_servos_and_release_turns_torque_off(idle_leader) -> None:
    lead = idle_leader
    refused = lead.call('hold_pose')  # nobody publishes the follower's joint states here
    assert not refused.success and '/joint_states' in refused.message
    target = lead.probe.publisher(JointState, '/so101_leader/hold_pose_target', qos.COMMAND)
    lead.wait(lambda: target.get_subscription_count() > 0, 'the leader on hold_pose_target')
    pose = [0.3, -0.2, 0.25, 0.1, 0.4, 0.2]
    # By name, in any order: a JointState as another node would send it.
    target.publish(JointState(name=list(reversed(JOINT_NAMES)), position=pose[::-1]))
    lead.wait(lambda: lead.torque() == [1] * 6, 'torque on for the hold')
    lead.wait(lambda: lead.values().get('handover') == 'holding', 'the pose reached')
    steps = [round(p / RAD_PER_STEP + (2047.5 if j == 'wrist_roll' else LEADER_MID))
             for p, j in zip(pose, JOINT_NAMES)]
    lead.wait(lambda: [lead.emu.register(i, 'Goal_Position') for i in IDS] == steps,
              'the pose in the servos\' Goal_Position')
    assert all(abs(lead.emu.present_position(i) - s) <= 0.05 / RAD_PER_STEP
               for i, s in zip(IDS, steps))
    lead.wait_joints(lambda m: close(m.position, pose, 0.05), 'the held pose on joint_states')
    released = lead.call('release')
    assert released.success and 'torque off' in released.message, released.message
    assert lead.torque() == [0] * 6
    lead.wait(lambda: lead.values().get('handover') == 'idle', 'handover idle')
    assert lead.values()['holds'] == '1' and lead.values()['holds_refused'] == '1'


def test_unknown_parameter_and_missing_leader_calibration_exit_2(launch_node, tmp_path) -> None:
    proc = launch_node(MODULE, params={'port': str(tmp_path / 'none'), 'read_hzz': 10.0})
    wait_until(lambda: not proc.alive, 30.0, 'the leader to exit')
    assert proc.returncode == 2
    assert "unknown parameter(s) ['read_hzz']" in proc.log_text()
    proc = launch_node(MODULE, name='no_calibration', params={
        'port': str(tmp_path / 'none'), 'calibration_id': 'my_leader'},
        env={'HF_LEROBOT_CALIBRATION': str(tmp_path / 'calib')})
    wait_until(lambda: not proc.alive, 30.0, 'the leader to exit')
    assert proc.returncode == 2
    # LeRobot's leader file, named with the command that makes it.
    assert 'teleoperators/so_leader/my_leader.json does not exist' in proc.log_text()
    assert '--teleop.type=so101_leader' in proc.log_text()


def test_follower_and_leader_side_by_side_on_two_emulated_buses(tmp_path, probe,
                                                                launch_node) -> None:
    ns = '/pair'
    follower_at = [2300, 1800, 2200, 2100, 2048, 2500]  # where the follower arm stands
    follower_emu = EmulatorProcess(IDS, link=tmp_path / 'follower', positions=follower_at)
    follower_emu.start()
    lead = None
    try:
        cal = tmp_path / 'follower_calibration.json'
        save_calibration(calibration(1000, 3000), path=cal)
        follower = probe.subscribe(JointState, f'{ns}/joint_states', qos.SENSOR)
        driver = launch_node('lerobot_lang_nodes.nodes.so101_driver_node', '-r', f'__ns:={ns}',
                             name='so101_driver', params={
                                 'port': str(tmp_path / 'follower'), 'calibration_path': str(cal),
                                 'timeout_margin_ms': 100.0, 'reconnect_period_s': 0.2})
        lead = Leader(tmp_path, probe, ns=ns, joint_states_topic='leader/joint_states',
                      follower_joint_states_topic='joint_states')
        pose = [rad(s, FOLLOWER_MID) for s in follower_at]
        pose[4] = rad(2048, 2047.5)
        follower.wait_for(lambda m: close(m.position, pose, 1e-9), timeout_s=30.0,
                          what='the follower pose from so101_driver')
        wait_until(lambda: follower_emu.register(1, 'Torque_Enable') == 1, WAIT_S,
                   'the follower active (torque on, holding)', [driver])
        # The leader's horn moves its own topic only.
        lead.emu.set_present_position(1, 1500)
        lead.wait_joints(lambda m: abs(m.position[0] - rad(1500)) < 1e-9,
                         f'the leader move on {ns}/leader/joint_states')
        assert close(follower.last.position, pose, 1e-9), 'the follower moved with the leader'
        # Handover: the leader goes to the follower's pose, through each arm's calibration.
        answer = lead.call('hold_pose')
        assert answer.success and 'driving to the pose' in answer.message, answer.message
        lead.wait(lambda: lead.values().get('handover') == 'holding', 'the leader at the pose')
        lead.wait_joints(lambda m: close(m.position, pose, 0.05),
                         "the leader's joint states at the follower's pose")
        # The same radians are 100 steps further on the leader (ranges centred on 2100).
        wanted = [s + 100 for s in follower_at[:4]] + [2048, follower_at[5] + 100]
        lead.wait(lambda: [lead.emu.register(i, 'Goal_Position') for i in IDS] == wanted,
                  "the follower's pose in the leader's Goal_Position")
        assert lead.torque() == [1] * 6
        assert lead.call('release').success
        assert lead.torque() == [0] * 6
        assert [follower_emu.register(i, 'Torque_Enable') for i in IDS] == [1] * 6
        assert close(follower.last.position, pose, 1e-9)
        assert driver.alive and lead.proc.alive
    finally:
        if lead is not None:
            lead.close()
        for proc in launch_node.processes:
            proc.stop()  # the driver, before its bus goes
        follower_emu.stop()
