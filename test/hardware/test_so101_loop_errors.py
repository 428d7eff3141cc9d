"""An exception injected into the driver's control loop, over DDS against the emulated arm.

Once: the arm holds, /diagnostics says ERROR with the exception, the loop stays alive and a
resume clears it. Every cycle: the loop gives up, disables torque and the process exits 70 so
the bring-up reports it (never a dead thread with torque on).
"""

from __future__ import annotations

import sys

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger

from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration, save_calibration
from lerobot_lang_nodes.testing import EmulatorProcess, NodeProcess, RosProbe, wait_until

WAIT_S = 30.0
LOOP_FAILURE_EXIT = 70

# The node as shipped, with a cycle that raises from active cycle FIRST on (every cycle when
# EVERY, else once).
FAULTY_DRIVER = '''
import sys
from lerobot_lang_nodes.nodes import runner, so101_driver_node
from lerobot_lang_nodes.testing import with_cycle_fault

FIRST, EVERY = int(sys.argv[1]), sys.argv[2] == 'every'
cycles = 0

def fault(node):
    global cycles
    if node.host.active:
        cycles += 1
    if cycles == FIRST or (EVERY and cycles > FIRST):
        raise KeyError('injected fault')

sys.exit(runner.run(with_cycle_fault(so101_driver_node.So101DriverNode, fault), sys.argv[3:],
                    name='so101_driver'))
'''


def start(tmp, first: int, every: bool) -> tuple[EmulatorProcess, NodeProcess]:
    emu = EmulatorProcess(range(1, 7), link=tmp / 'so101').start()
    cal = tmp / 'calibration.json'
    save_calibration({j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else 1000,
                                          4095 if j == 'wrist_roll' else 3000)
                      for i, j in enumerate(JOINT_NAMES)}, path=cal)
    argv = [sys.executable, '-c', FAULTY_DRIVER, str(first), 'every' if every else 'once',
            '--ros-args', '-p', f'port:={tmp / "so101"}', '-p', f'calibration_path:={cal}',
            '-p', 'timeout_margin_ms:=100.0', '-p', 'diagnostics_hz:=5.0']
    return emu, NodeProcess('so101_driver', argv, tmp / 'so101_driver.log')


def arm_status(arr: DiagnosticArray) -> DiagnosticStatus | None:
    return next((s for s in arr.status if s.name == 'so101_driver: arm'), None)


def test_one_exception_holds_reports_error_and_the_loop_goes_on(tmp_path,
                                                               fault_report) -> None:
    row = fault_report.row('control-loop exception (driver)',
                           note='held, ERROR on /diagnostics, loop alive')
    row.injections += 1  # the driver raises in its 30th cycle
    emu, node = start(tmp_path, first=30, every=False)
    probe = RosProbe('loop_error_probe')
    try:
        diags = probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
        joints = probe.subscribe(JointState, 'joint_states', qos.SENSOR)
        err = diags.wait_for(lambda a: (s := arm_status(a)) is not None
                             and s.level == DiagnosticStatus.ERROR
                             and 'injected fault' in s.message, timeout_s=WAIT_S,
                             what='ERROR with the injected fault')
        values = {kv.key: kv.value for kv in arm_status(err).values}
        assert values['loop_errors'] == '1' and values['torque_enabled'] == 'true'
        # Holding: the goal is the present position; the loop still reads the servos.
        wait_until(lambda: abs(emu.register(1, 'Goal_Position')
                               - emu.present_position(1)) <= 1, WAIT_S, 'goal := present',
                   [node])
        n = len(joints)
        joints.wait_for(lambda m: True, timeout_s=WAIT_S, what='joint states after the error',
                        since=n + 5)
        assert node.alive
        assert probe.call(Trigger, 'resume', Trigger.Request(), timeout_s=WAIT_S).success
        diags.wait_for(lambda a: (s := arm_status(a)) is not None
                       and s.level == DiagnosticStatus.OK, timeout_s=WAIT_S,
                       what='OK after resume', since=len(diags))
        row.survived += 1
    except AssertionError:
        print(node.log_text(tail=3000))
        raise
    finally:
        node.stop()
        probe.close()
        emu.stop()


def test_an_exception_in_every_cycle_disables_torque_and_exits_70(tmp_path,
                                                                   fault_report) -> None:
    row = fault_report.row('control-loop exception in every cycle (driver)',
                           note='torque off, exit 70 (no dead thread with torque on)')
    row.injections += 1  # the driver raises in every cycle from its 5th
    emu, node = start(tmp_path, first=5, every=True)
    try:
        wait_until(lambda: not node.alive, 60.0, 'the driver to give up', [])
        assert node.returncode == LOOP_FAILURE_EXIT, node.log_text(tail=3000)
        assert [emu.register(i, 'Torque_Enable') for i in range(1, 7)] == [0] * 6
        assert 'control loop cannot continue' in node.log_text()
        row.survived += 1
    finally:
        node.stop()
        emu.stop()
