"""Every emulator fault kind against so101_driver in its own process, at the node level.

The driver (the Rig of test_so101_driver_node: emulator process, driver process, probe) is
resumed and executing a slow ramp on shoulder_pan when a burst of one fault kind hits that
servo's replies. Each case asserts: the process stays alive; /diagnostics counts the fault in
the bus counter that kind produces; joint_states keep flowing and the arm reports OK once the
burst is over; and no Goal_Position write ever left the max_relative_target band around the
servo's present position at the time of the write (the emulator logs every goal write).
A voltage error bit must WARN on the joint but neither latch a fault nor stop motion.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus

from lerobot_lang_nodes.pytest_plugin import FaultRow
from lerobot_lang_nodes.so101.emulator import FaultKind
from lerobot_lang_nodes.so101.protocol import ErrorBit
from lerobot_lang_nodes.so101.units import RAD_PER_STEP

import test_so101_driver_node as driver_tests
from test_so101_driver_node import MAX_REL, PAN, Rig

# Reuse the module-scoped driver rig and the per-test `arm` fixture (paused, settled and
# fault-free at start; checks the process is alive at teardown).
rig = driver_tests.rig
arm = driver_tests.arm

BURST = 3  # = retries + 1 attempts of one transaction for the retried kinds
RAMP_ACTIONS = 90  # 3 s at 30 Hz
RAMP_RAD = 0.27  # 0.09 rad/s: "slow", ~2 steps of servo motion per control period
# The clamp is applied against a present position read a few ms before the write; the servo
# moves ~2 steps per period on the ramp, so a few steps of slack, not more.
MAX_REL_STEPS = MAX_REL / RAD_PER_STEP
SLACK_STEPS = 8

# kind -> bus counters of which at least one must grow (as /diagnostics names them), and
# whether the burst must have been retried.
FAULTS = {
    FaultKind.NO_REPLY: (('bus.timeouts',), True),
    FaultKind.CORRUPT_CHECKSUM: (('bus.checksum_errors',), True),
    # Half a packet: the next servo's bytes complete it (checksum / size error) or it stays
    # pending until the deadline (timeout) -- either way a retried, counted failure.
    FaultKind.PARTIAL: (('bus.timeouts', 'bus.checksum_errors', 'bus.malformed'), True),
    FaultKind.GARBAGE: (('bus.garbage_bytes',), False),  # resynchronised, no retry needed
    FaultKind.DUPLICATE: (('bus.stale_replies',), False),  # second copy ignored
}


def counters(arm: Rig) -> dict[str, int]:
    return {k: int(v) for k, v in arm.arm_values().items() if k.startswith('bus.')}


def start_slow_ramp(arm: Rig) -> None:
    """Resume and send a slow pan ramp (towards the middle of the range, so runs never drift
    into a limit)."""
    assert arm.call('resume').success
    arm.barrier()
    dispatched = arm.status.last.dispatched
    sign = -1.0 if arm.present() > 2000 else 1.0
    ramp = arm.hold_chunk(0.0, horizon=RAMP_ACTIONS)
    ramp[:, 0] += sign * np.linspace(RAMP_RAD / RAMP_ACTIONS, RAMP_RAD, RAMP_ACTIONS)
    arm.send(ramp)
    arm.wait_status(lambda s: s.dispatched > dispatched + 5, 'the slow ramp dispatching')


def assert_flowing_and_healthy(arm: Rig) -> None:
    n = len(arm.joints)
    arm.wait(lambda: len(arm.joints) >= n + 10, 'joint_states flowing after the burst')
    arm.diag.messages.clear()
    arm.wait(lambda: arm.arm() is not None and arm.arm_values().get('health') == 'ok'
             and arm.arm().level == DiagnosticStatus.OK, 'the arm reported OK after the burst')
    assert arm.status.last.mode == 'action', arm.status.last.mode
    assert arm.proc.alive, arm.proc.log_text(3000)


def assert_goals_within_clamp(arm: Rig, since: float, row: FaultRow | None = None) -> None:
    """Every goal write within the clamp (counted on ``row`` as unsafe dispatches, if given)
    and motion after ``since``."""
    writes = arm.emu.goal_writes()
    # Judged against the position the driver read in that cycle as well as the one when the
    # write landed (the emulated horn moves on in between, more so on a loaded machine).
    bad = [w for w in writes if w.step_from_present() > MAX_REL_STEPS + SLACK_STEPS]
    if row is not None:
        row.record(unsafe=len(bad))
    assert writes, 'the emulator logged no goal write at all'
    assert not bad, f'goal writes beyond max_relative_target ({MAX_REL_STEPS:.0f} steps): ' \
                    f'{bad[:5]}'
    assert any(w.servo_id == PAN and w.stamp > since for w in writes), \
        'no goal written to the pan servo after the burst: motion did not continue'


@pytest.mark.parametrize('kind', list(FAULTS), ids=lambda k: k.value)
def test_fault_burst_is_counted_and_recovered(arm: Rig, kind: FaultKind,
                                              fault_report) -> None:
    row = fault_report.row(f'serial fault while a chunk runs: {kind.value}',
                           note='a burst per run; counted on /diagnostics, motion continued; '
                                'unsafe: goal writes beyond max_relative_target')
    names, retried = FAULTS[kind]
    arm.emu.goal_writes(clear=True)
    start_slow_ramp(arm)
    before = counters(arm)
    with row.injection(BURST):
        arm.emu.inject(kind, [PAN], count=BURST)
        arm.wait(lambda: arm.emu.pending_faults() == 0, f'the {kind.value} burst consumed')
        burst_end = time.monotonic()
        arm.wait(lambda: any(counters(arm)[k] > before[k] for k in names),
                 f'/diagnostics counting {kind.value} in {names}')
        after = counters(arm)
        if retried:
            assert after['bus.retries'] > before['bus.retries'], (before, after)
        assert arm.proc.alive, arm.proc.log_text(3000)
        assert_flowing_and_healthy(arm)
        assert_goals_within_clamp(arm, burst_end, row)
        assert 'Traceback' not in arm.proc.log_text(), arm.proc.log_text(3000)


def test_voltage_error_bit_warns_without_latching(arm: Rig) -> None:
    arm.emu.goal_writes(clear=True)
    start_slow_ramp(arm)
    arm.emu.set_error_bits(PAN, int(ErrorBit.VOLTAGE))
    since = time.monotonic()
    try:
        arm.wait(lambda: arm.joint_diag('shoulder_pan').get('error_bits')
                 == str(int(ErrorBit.VOLTAGE)), 'the voltage bit in the pan diagnostics')
        pan = next(s for s in arm.diag.last.status if s.name == 'so101_driver: shoulder_pan')
        assert pan.level == DiagnosticStatus.WARN, (pan.level, pan.message)
        assert 'volt' in pan.message.lower(), pan.message
        values = arm.arm_values()
        assert values['health'] == 'ok' and not values.get('fault'), values
        # Still moving while the bit is set: the ramp keeps writing goals.
        n = len(arm.emu.goal_writes())
        arm.wait(lambda: len(arm.emu.goal_writes()) > n + 5, 'goal writes with the bit set')
        assert arm.status.last.mode == 'action'
    finally:
        arm.emu.clear_faults()
    arm.wait(lambda: arm.joint_diag('shoulder_pan').get('error_bits') == '0',
             'the pan error bits cleared')
    assert_flowing_and_healthy(arm)
    assert_goals_within_clamp(arm, since)
    assert 'FAULT LATCHED' not in arm.proc.log_text()


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))
