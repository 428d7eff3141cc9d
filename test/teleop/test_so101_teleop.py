"""Takeover on the real-arm graph over DDS: so101_driver (follower) and so101_leader, each on its
own servo emulator (real bytes through a pty), under one namespace. The takeover drives the
leader to the follower's pose, releases it, and the follower's servos then follow the leader's
horn as the test moves it, through the driver's clamps; a hand-back returns to the policy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import RuntimeStatus
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.so101.units import RAD_PER_STEP
from lerobot_lang_nodes.testing import EmulatorProcess, NodeProcess, node_command, wait_until

IDS = range(1, 7)
NS = '/arm'
WAIT_S = 20.0
FOLLOWER_AT = [2300, 1800, 2200, 2100, 2048, 2500]  # follower ranges 1000..3000, mid 2000
LEADER_MID = 2100  # leader ranges 1100..3100


def calibration(lo: int, hi: int) -> dict[str, MotorCalibration]:
    return {j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else lo,
                                4095 if j == 'wrist_roll' else hi)
            for i, j in enumerate(JOINT_NAMES)}


def test_takeover_and_handback_on_two_emulated_buses(tmp_path: Path, probe) -> None:
    procs: list[NodeProcess] = []
    emus = [EmulatorProcess(IDS, link=tmp_path / 'follower', positions=FOLLOWER_AT).start()]
    try:
        emus.append(EmulatorProcess(IDS, link=tmp_path / 'leader').start())
        follower_emu, leader_emu = emus
        save_calibration(calibration(1000, 3000), path=tmp_path / 'follower.json')
        save_calibration(calibration(1100, 3100), path=tmp_path / 'leader.json')
        follower = probe.subscribe(JointState, f'{NS}/joint_states', qos.SENSOR)
        status = probe.subscribe(RuntimeStatus, f'{NS}/runtime_status', qos.STATUS)
        procs.append(NodeProcess('so101_driver', node_command(
            'lerobot_lang_nodes.nodes.so101_driver_node', '-r', f'__ns:={NS}', params={
                'port': str(tmp_path / 'follower'),
                'calibration_path': str(tmp_path / 'follower.json'),
                'timeout_margin_ms': 100.0, 'reconnect_period_s': 0.2,
                'leader_joint_states_topic': f'{NS}/leader/joint_states',
                'leader_node': f'{NS}/so101_leader'}), tmp_path / 'so101_driver.log'))
        procs.append(NodeProcess('so101_leader', node_command(
            'lerobot_lang_nodes.nodes.so101_leader_node', '-r', f'__ns:={NS}', params={
                'port': str(tmp_path / 'leader'),
                'calibration_path': str(tmp_path / 'leader.json'),
                'timeout_margin_ms': 100.0, 'reconnect_period_s': 0.2, 'hold_speed_rad_s': 1.0,
                'joint_states_topic': 'leader/joint_states',
                'follower_joint_states_topic': 'joint_states'}), tmp_path / 'so101_leader.log'))
        wait_until(lambda: follower_emu.register(1, 'Torque_Enable') == 1 and len(follower) > 0,
                   60.0, 'the follower active (torque on) and publishing', procs)
        pose = np.array(follower.last.position)

        def call(service: str) -> Trigger.Response:
            return probe.call(Trigger, f'{NS}/{service}', Trigger.Request(), timeout_s=WAIT_S)

        answer = call('takeover')
        assert answer.success and 'leader driven' in answer.message, answer.message
        assert [leader_emu.register(i, 'Torque_Enable') for i in IDS] == [0] * 6  # released
        status.wait_for(lambda m: m.mode == 'teleop' and m.control_source == 'human',
                        timeout_s=WAIT_S, what='teleop, a human in control')
        # The follower did not jump at the takeover.
        assert np.max(np.abs(np.array(follower.last.position) - pose)) < 0.06
        # The hand moves the leader's shoulder_pan by 0.2 rad: the follower's servo follows.
        pan = int(round(leader_emu.present_position(1) + 0.2 / RAD_PER_STEP))
        leader_emu.set_present_position(1, pan)
        target = (pan - LEADER_MID) * RAD_PER_STEP
        follower.wait_for(lambda m: abs(m.position[0] - target) < 0.01, timeout_s=WAIT_S,
                          what="the follower's shoulder_pan at the leader's", since=len(follower))
        answer = call('handback')
        assert answer.success, answer.message
        status.wait_for(lambda m: m.mode == 'action' and m.control_source == 'policy',
                        timeout_s=WAIT_S, what='the policy in control again', since=len(status))
        assert all(p.alive for p in procs)
    except BaseException:
        for p in procs:
            print(p.log_text(3000))
        raise
    finally:
        for p in reversed(procs):
            p.stop()
        for emu in reversed(emus):
            emu.stop()
