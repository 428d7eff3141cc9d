"""EmulatorProcess: the servo emulator in a child process, driven through its proxy.

A real FeetechBus talks to the child over the pty while the test reads and writes the servos
through the proxy, as the hardware tests do next to a driver process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from so101_helpers import MARGIN_MS, wait_for

from lerobot_lang_nodes.so101.bus import FeetechBus
from lerobot_lang_nodes.so101.emulator import FaultKind, GoalWrite
from lerobot_lang_nodes.so101.errors import BusTimeout, PortDisconnected
from lerobot_lang_nodes.so101.protocol import Instruction
from lerobot_lang_nodes.testing import EmulatorProcess, EmulatorProcessError, process_gone

IDS = list(range(1, 7))


@pytest.fixture
def emu(tmp_path) -> Iterator[EmulatorProcess]:
    with EmulatorProcess(IDS, link=tmp_path / 'so101') as e:
        yield e


@pytest.fixture
def bus(emu: EmulatorProcess) -> Iterator[FeetechBus]:
    b = FeetechBus.open(emu.port, retries=2, timeout_margin_ms=MARGIN_MS)
    try:
        yield b
    finally:
        b.close()


def test_bus_pings_and_reads_the_child_process(emu: EmulatorProcess, bus: FeetechBus) -> None:
    assert emu.alive and emu.pid != os.getpid()
    assert os.readlink(emu.port).startswith('/dev/pts/')
    assert [bus.ping(i) for i in IDS] == [0] * 6
    assert bus.read(3, 'Model_Number') == 777
    assert bus.sync_read(IDS, 'Present_Position') == {i: 2048 for i in IDS}
    assert emu.instructions[Instruction.PING] == 6
    assert emu.requests == 8 and emu.replies == 13  # one SYNC_READ, six status packets
    assert emu.connected


def test_positions_and_registers_cross_the_process_boundary(tmp_path) -> None:
    with EmulatorProcess([1, 2], link=tmp_path / 'arm', positions=[1000, 3000]) as emu:
        bus = FeetechBus.open(emu.port, retries=2, timeout_margin_ms=MARGIN_MS)
        try:
            assert bus.sync_read([1, 2], 'Present_Position') == {1: 1000, 2: 3000}
            emu.set_register(2, 'Goal_Position', 1234)
            assert bus.read(2, 'Goal_Position') == 1234
            emu.set_present_position(1, 1500)
            assert bus.read(1, 'Present_Position') == 1500
            bus.write(1, 'Lock', 0)
            bus.write(1, 'Homing_Offset', -100)
            assert emu.register(1, 'Homing_Offset') == -100
            assert emu.present_position(1) == 1600
        finally:
            bus.close()


def test_goal_written_over_the_bus_is_logged(emu: EmulatorProcess, bus: FeetechBus) -> None:
    bus.write(1, 'Torque_Enable', 1)
    bus.sync_write('Goal_Position', {1: 2100, 2: 1900})  # no reply: wait for the child
    wait_for(lambda: len(emu.goal_writes()) == 2, what='both goal writes logged')
    writes = emu.goal_writes(clear=True)
    assert [(w.servo_id, w.goal, w.present) for w in writes] == [(1, 2100, 2048),
                                                                 (2, 1900, 2048)]
    assert all(isinstance(w, GoalWrite) for w in writes)
    assert emu.goal_writes() == []
    wait_for(lambda: emu.present_position(1) == 2100, what='servo 1 at its goal')
    assert emu.present_position(2) == 2048  # torque off: the goal is stored, nothing moves


def test_faults_are_injected_through_the_proxy(emu: EmulatorProcess, bus: FeetechBus) -> None:
    emu.inject(FaultKind.NO_REPLY, ids=(i for i in [4]), count=3)  # a generator is fine
    assert emu.pending_faults() == 3
    with pytest.raises(BusTimeout):
        bus.ping(4)
    assert emu.pending_faults() == 0
    emu.set_error_bits(2, 0x20)
    assert bus.ping(2, check_errors=False) == 0x20
    emu.clear_faults()
    assert bus.ping(2) == 0


def test_exceptions_keep_their_type(emu: EmulatorProcess, tmp_path) -> None:
    with pytest.raises(KeyError, match='9') as info:
        emu.register(9, 'Goal_Position')
    assert 'raised in the emulator process' in info.value.__notes__[0]
    with pytest.raises(KeyError):
        emu.set_register(1, 'No_Such_Register', 1)
    assert emu.alive  # an error in a call does not end the child
    with pytest.raises(ValueError, match='one per id'):
        EmulatorProcess([1, 2], link=tmp_path / 'bad', positions=[0]).start()
    assert not (tmp_path / 'bad').exists()


def test_disconnect_and_reconnect(emu: EmulatorProcess, bus: FeetechBus) -> None:
    link = emu.port
    emu.disconnect()
    assert not emu.connected and not os.path.lexists(link)
    with pytest.raises(PortDisconnected):
        bus.ping(1)
    emu.reconnect()
    assert emu.connected and emu.port == link
    bus.reopen()
    assert bus.ping(1) == 0


def test_calls_from_many_threads_get_their_own_answers(emu: EmulatorProcess) -> None:
    for i in IDS:
        emu.set_register(i, 'Goal_Position', 1000 + i)
    wrong: list[tuple[int, int]] = []

    def reader(servo_id: int) -> None:
        for _ in range(200):
            got = emu.register(servo_id, 'Goal_Position')
            if got != 1000 + servo_id:
                wrong.append((servo_id, got))

    threads = [threading.Thread(target=reader, args=(i,)) for i in IDS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30.0)
    assert not wrong


def test_stop_removes_the_link_and_is_idempotent(tmp_path) -> None:
    link = tmp_path / 'so101'
    emu = EmulatorProcess(IDS, link=link).start()
    assert link.is_symlink()
    emu.stop()
    assert not emu.alive and not os.path.lexists(link)
    emu.stop()
    with pytest.raises(EmulatorProcessError, match='not running'):
        emu.register(1, 'ID')


def test_wedged_child_times_out_and_only_it_is_killed(tmp_path) -> None:
    bystander = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    link = tmp_path / 'so101'
    emu = EmulatorProcess(IDS, link=link, call_timeout_s=0.5).start()
    try:
        os.kill(emu.pid, signal.SIGSTOP)  # wedged: alive, but answers nothing
        with pytest.raises(EmulatorProcessError, match='did not answer register'):
            emu.register(1, 'ID')
        emu.stop(timeout_s=0.5)  # SIGKILL by PID once it does not exit
        assert not emu.alive and process_gone(emu.pid)
        assert not os.path.lexists(link), 'the killed child left its link behind'
        assert bystander.poll() is None
    finally:
        emu.stop(timeout_s=0.5)  # a no-op unless an assertion failed first
        bystander.kill()
        bystander.wait(5.0)


def test_dead_child_is_reported_with_its_exit_code(tmp_path) -> None:
    emu = EmulatorProcess(IDS, link=tmp_path / 'so101').start()
    try:
        os.kill(emu.pid, signal.SIGKILL)
        with pytest.raises(EmulatorProcessError, match=r'exited \(code -9\)'):
            emu.present_position(1)
        assert not emu.alive
    finally:
        emu.stop()
    assert not os.path.lexists(tmp_path / 'so101')


def test_child_ends_by_itself_when_its_parent_dies(tmp_path) -> None:
    link = tmp_path / 'so101'
    script = ('import sys, time\n'
              'from lerobot_lang_nodes.testing import EmulatorProcess\n'
              f'emu = EmulatorProcess([1], link={str(link)!r}).start()\n'
              'print(emu.pid, flush=True)\n'
              'time.sleep(60)\n')
    parent = subprocess.Popen([sys.executable, '-c', script], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert link.is_symlink()
        parent.kill()
        parent.wait(5.0)
        wait_for(lambda: process_gone(child), timeout_s=10.0, what='the orphaned emulator gone')
        assert not os.path.lexists(link), 'the orphaned emulator did not remove its link'
    finally:
        parent.kill()
        parent.wait(5.0)
        parent.stdout.close()
        if child is not None and not process_gone(child):
            os.kill(child, signal.SIGKILL)
