"""`/so101_driver/reset_fault` as a ROS user calls it, against the emulated servo bus.

Without a latched fault the call succeeds (there is nothing to clear: the state the caller
asks for holds) and says that there was no fault, instead of "fault cleared". With a fault
it clears it once no servo reports it (more of that in test_so101_driver_node.py, whose rig
this module starts once more: a driver process on the emulator, a probe over DDS).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_so101_driver_node import Rig

from lerobot_lang_nodes.so101.protocol import ErrorBit


@pytest.fixture(scope='module')
def arm(tmp_path_factory) -> Iterator[Rig]:
    rig = Rig(tmp_path_factory.mktemp('so101_reset_fault'))
    try:
        yield rig
    finally:
        rig.close()


def test_reset_fault_without_a_fault_says_there_was_none(arm: Rig) -> None:
    assert arm.arm_values().get('health') == 'ok'
    reply = arm.call('so101_driver/reset_fault')
    assert reply.success, reply.message
    assert reply.message.startswith('no fault latched'), reply.message
    assert 'cleared' not in reply.message
    arm.barrier()
    assert arm.arm_values().get('health') == 'ok'
    assert arm.call('resume').success  # nothing was in the way


def test_reset_fault_after_a_fault_still_clears_it(arm: Rig) -> None:
    arm.emu.set_error_bits(1, int(ErrorBit.OVERLOAD))
    arm.wait(lambda: arm.arm_values().get('health') == 'fault', 'health fault')
    arm.emu.clear_faults()
    reply = arm.wait(lambda: (r := arm.call('so101_driver/reset_fault')).success and r,
                     'reset_fault to succeed once no servo reports the overload')
    assert reply.message.startswith('fault cleared'), reply.message
    assert arm.call('so101_driver/reset_fault').message.startswith('no fault latched')
