"""FeetechBus against the emulator over a real pty: requests, faults, disconnect/reconnect."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from so101_helpers import MARGIN_MS, wait_for

from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.bus import FeetechBus
from lerobot_lang_nodes.so101.emulator import FaultKind, parse_ids
from lerobot_lang_nodes.so101.errors import (
    BusTimeout,
    ChecksumError,
    PortDisconnected,
    ServoError,
)
from lerobot_lang_nodes.so101.protocol import ErrorBit, Instruction

IDS = list(range(1, 7))


def test_port_is_a_real_pty_behind_a_symlink(emulator) -> None:
    assert os.path.islink(emulator.port)
    assert os.readlink(emulator.port).startswith('/dev/pts/')


def test_ping_read_write(emulator, bus) -> None:
    assert [bus.ping(i) for i in IDS] == [0] * 6
    assert bus.read(3, 'Model_Number') == 777
    bus.write(3, 'Lock', 0)
    bus.write(3, 'Homing_Offset', -100)
    assert emulator.register(3, 'Homing_Offset') == -100
    assert bus.read(3, 'Homing_Offset') == -100  # sign-magnitude round trip over the wire
    with pytest.raises(BusTimeout, match=r'\[9\]'):
        bus.ping(9)


def test_sync_write_moves_servos_and_sync_read_sees_it(emulator, bus) -> None:
    for i in IDS:
        bus.write(i, 'Torque_Enable', 1)
    goals = {i: 1500 + 100 * i for i in IDS}
    bus.sync_write('Goal_Position', goals)
    wait_for(lambda: bus.sync_read(IDS, 'Present_Position') == goals, what='servos at goals')
    assert emulator.instructions[Instruction.SYNC_WRITE] == 1
    assert all(emulator.present_position(i) == g for i, g in goals.items())
    block = bus.sync_read_bytes(IDS, 56, 8)
    assert set(block) == set(IDS) and all(len(b) == 8 for b in block.values())


def test_torque_off_servo_does_not_move(emulator, bus) -> None:
    bus.sync_write('Goal_Position', {1: 3000})
    assert bus.read(1, 'Goal_Position') == 3000
    assert bus.read(1, 'Present_Position') == 2048


def test_locked_eeprom_ignores_writes(emulator, bus) -> None:
    bus.write(2, 'Return_Delay_Time', 0)  # factory Lock = 1
    assert emulator.register(2, 'Return_Delay_Time') == 250
    bus.write(2, 'Lock', 0)
    bus.write(2, 'Return_Delay_Time', 0)
    assert emulator.register(2, 'Return_Delay_Time') == 0


def test_timeout_is_computed_from_baud_and_length() -> None:
    bus = FeetechBus('/dev/null', 1_000_000, timeout_margin_ms=0.0, return_delay_us=0.0)
    assert bus.transaction_timeout_s(14, 48, 6) == pytest.approx(62 * 10e-6)
    slow = FeetechBus('/dev/null', 115_200, timeout_margin_ms=2.0, return_delay_us=500.0)
    assert slow.transaction_timeout_s(8, 8, 1) == pytest.approx(16 * 10 / 115_200 + 0.5e-3
                                                                + 2e-3)


def test_no_reply_is_retried_and_counted(emulator, bus) -> None:
    emulator.inject(FaultKind.NO_REPLY, ids=[4], count=1)
    assert bus.sync_read(IDS, 'Present_Position')[4] == 2048
    assert (bus.stats.timeouts, bus.stats.retries, bus.stats.failures) == (1, 1, 0)


def test_no_reply_beyond_retries_raises_timeout(emulator, bus) -> None:
    emulator.inject(FaultKind.NO_REPLY, ids=[2], count=3)
    with pytest.raises(BusTimeout, match=r'servo id\(s\) \[2\].*after 3 attempts'):
        bus.read(2, 'Present_Position')
    assert (bus.stats.timeouts, bus.stats.retries, bus.stats.failures) == (3, 2, 1)
    assert bus.read(2, 'Present_Position') == 2048  # healthy again


def test_corrupted_checksum_is_retried_and_counted(emulator, bus) -> None:
    emulator.inject(FaultKind.CORRUPT_CHECKSUM, ids=[5], count=1)
    assert bus.read(5, 'Model_Number') == 777
    assert (bus.stats.checksum_errors, bus.stats.retries) == (1, 1)
    emulator.inject(FaultKind.CORRUPT_CHECKSUM, count=3)
    with pytest.raises(ChecksumError, match='wrong checksum'):
        bus.ping(1)


def test_partial_packet_is_retried(emulator, bus) -> None:
    emulator.inject(FaultKind.PARTIAL, ids=[3], count=1)
    assert bus.sync_read(IDS, 'Present_Position') == {i: 2048 for i in IDS}
    # A cut-off frame followed by the next servo's reply reads as a bad checksum; a cut-off
    # last frame as a timeout. Either way: counted, retried once, right data.
    assert bus.stats.retries == 1
    assert bus.stats.timeouts + bus.stats.checksum_errors == 1
    emulator.inject(FaultKind.PARTIAL, ids=[3], count=3)
    with pytest.raises(BusTimeout, match='partial packet'):
        bus.read(3, 'Present_Position')


def test_garbage_before_reply_is_skipped_without_retry(emulator, bus) -> None:
    emulator.inject(FaultKind.GARBAGE, count=6)
    assert bus.sync_read(IDS, 'Present_Position') == {i: 2048 for i in IDS}
    assert bus.stats.garbage_bytes > 0
    assert bus.stats.retries + bus.stats.checksum_errors <= 1  # junk may mimic a header


def test_duplicate_reply_is_ignored_not_fatal(emulator, bus) -> None:
    emulator.inject(FaultKind.DUPLICATE, ids=[1, 2], count=2)
    assert bus.sync_read(IDS, 'Present_Position') == {i: 2048 for i in IDS}
    assert bus.read(3, 'Model_Number') == 777
    assert bus.stats.retries == 0 and bus.stats.stale_replies >= 1


def test_error_bits_are_surfaced_with_the_data(emulator, bus) -> None:
    emulator.set_error_bits(2, ErrorBit.OVERLOAD | ErrorBit.VOLTAGE)
    with pytest.raises(ServoError, match='id 2: VOLTAGE|OVERLOAD') as info:
        bus.sync_read(IDS, 'Present_Position')
    assert info.value.errors == {2: 0x21}
    assert info.value.values[2] == 2048
    values = bus.sync_read(IDS, 'Present_Position', check_errors=False)
    assert values[2] == 2048 and bus.last_errors[2] == 0x21 and bus.last_errors[1] == 0
    assert bus.stats.retries == 0  # error bits are not a transport fault
    emulator.set_error_bits(2, ErrorBit.OVERHEAT)
    assert bus.read(2, 'Present_Temperature', check_errors=False) > 70


def test_disconnect_then_reconnect_same_path(emulator, bus) -> None:
    emulator.disconnect()
    with pytest.raises(PortDisconnected, match='disconnected'):
        bus.ping(1)
    with pytest.raises(PortDisconnected, match='reopen'):
        bus.ping(1)  # still a disconnect, not "not connected"
    with pytest.raises(PortDisconnected, match='cannot open'):
        bus.reopen()  # the device node is gone
    emulator.reconnect()
    bus.reopen()
    assert bus.ping(1) == 0
    assert bus.stats.disconnects == 1 and bus.stats.reconnects == 1


def test_emulator_cli_subprocess_dry_run(tmp_path) -> None:
    link = tmp_path / 'arm'
    log = (tmp_path / 'emu.log').open('w')
    proc = subprocess.Popen([sys.executable, '-m', 'lerobot_lang_nodes.so101.emulator',
                             '--link', str(link), '--ids', '1..3'], stdout=log, stderr=log)
    try:
        wait_for(lambda: link.is_symlink() or proc.poll() is not None, what='emulator link')
        assert proc.poll() is None, (tmp_path / 'emu.log').read_text()
        bus = FeetechBus.open(str(link), timeout_margin_ms=MARGIN_MS)
        assert [bus.ping(i) for i in (1, 2, 3)] == [0, 0, 0]
        with pytest.raises(BusTimeout):
            bus.ping(4)
        bus.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
    assert proc.returncode == 0
    assert not link.exists()


def test_parse_ids() -> None:
    assert parse_ids('1..6') == [1, 2, 3, 4, 5, 6]
    assert parse_ids('1,3,5-6') == [1, 3, 5, 6]
    with pytest.raises(ValueError, match='bad servo ids'):
        parse_ids('300')


def test_bus_stats_count_bytes(emulator, bus) -> None:
    before = bus.stats.tx_bytes
    bus.sync_read(IDS, 'Present_Position')
    assert bus.stats.tx_bytes - before == len(protocol.sync_read_packet(IDS, 56, 2))
    assert bus.stats.rx_packets >= 6
