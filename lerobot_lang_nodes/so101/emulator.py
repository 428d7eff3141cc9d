"""Byte-level emulator of STS3215 servos behind a pseudo-terminal, with fault injection."""

# The driver opens the pty's slave side (through a stable symlink) exactly like a USB serial
# adapter, so nothing in the driver knows it is talking to an emulator.

from __future__ import annotations

import argparse
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
import enum
import logging
import os
from pathlib import Path
import random
import select
import signal
import sys
import threading
import time
import tty

from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.protocol import BROADCAST_ID, Instruction, Packet, PacketParser
from lerobot_lang_nodes.so101.registers import (
    CONTROL_TABLE,
    CONTROL_TABLE_SIZE,
    EEPROM_END,
    FACTORY_DEFAULTS,
    RESOLUTION_STEPS,
    RETURN_DELAY_UNIT_US,
)

logger = logging.getLogger(__name__)

# STS3215 at 7.4 V: 0.222 s/60 deg no-load, ~4500 steps/s; loaded arms move slower.
MAX_SPEED_STEPS_S = 3000.0
POSITION_TIME_CONSTANT_S = 0.04  # first-order approach to the goal, then the speed cap
PHYSICS_SUBSTEP_S = 0.005
LOAD_PER_STEP_ERROR = 2.0  # 0.1 % stall torque per step of position error
MAX_LOAD = 1000  # 0.1 % units = 100 % stall torque
CURRENT_PER_LOAD = 0.5  # Present_Current counts (6.5 mA) per load count
MOVING_THRESHOLD_STEPS_S = 5.0
POLL_S = 0.01  # emulator loop wake-up when idle
GOAL_LOG_SIZE = 4096  # goal-register writes kept by ServoBusEmulator.goal_writes


class FaultKind(enum.Enum):
    """Faults the emulator can inject into its replies."""

    NO_REPLY = 'no_reply'  # the servo stays silent
    CORRUPT_CHECKSUM = 'corrupt_checksum'  # last byte flipped
    PARTIAL = 'partial'  # only the first half of the status packet is sent
    GARBAGE = 'garbage'  # random bytes before the status packet
    DUPLICATE = 'duplicate'  # the status packet twice, like a late reply to a retried request


@dataclass(frozen=True)
class GoalWrite:
    """One write reaching a servo's Goal_Position register, as the emulator applied it."""

    stamp: float  # time.monotonic() when the write was applied
    servo_id: int
    goal: int  # the new Goal_Position (steps)
    present: int  # Present_Position just before the write (steps)
    # Present_Position as the servo last answered a read of it: what a driver clamping to
    # the freshly read position clamped against (the horn moves on between read and write).
    read_present: int | None = None

    def step_from_present(self) -> int:
        """How far (steps) the goal is from the position a clamping driver may have clamped
        to: the nearer of Present_Position at the write and at the driver's last read."""
        read = self.present if self.read_present is None else self.read_present
        return min(abs(self.goal - self.present), abs(self.goal - read))


@dataclass
class _Fault:
    kind: FaultKind
    ids: frozenset[int] | None  # None = any servo
    remaining: int


class VirtualServo:
    """One STS3215: control table bytes plus a simple position/load model."""

    def __init__(self, servo_id: int, position: int = RESOLUTION_STEPS // 2) -> None:
        self.table = bytearray(CONTROL_TABLE_SIZE)
        for name, value in FACTORY_DEFAULTS.items():
            self._put(name, value)
        self._put('ID', servo_id)
        self.actual = float(position)  # physical encoder angle (before Homing_Offset)
        self.velocity = 0.0  # steps/s
        self.error_bits = 0  # injected status error bits
        self.eeprom_writes_ignored = 0  # EEPROM writes sent while Lock == 1
        self.reg_write: tuple[int, bytes] | None = None
        self.last_read_present: int | None = None  # see GoalWrite.read_present
        self._sync_present()
        self._put('Goal_Position', self.get('Present_Position'))

    @property
    def id(self) -> int:
        """Current bus id (the ID register)."""
        return self.table[CONTROL_TABLE['ID'].address]

    def _put(self, name: str, value: int) -> None:
        reg = CONTROL_TABLE[name]
        self.table[reg.address:reg.address + reg.size] = protocol.encode_register(reg, value)

    def get(self, name: str) -> int:
        """Decoded value of a register."""
        reg = CONTROL_TABLE[name]
        return protocol.decode_register(reg, bytes(self.table[reg.address:reg.address + reg.size]))

    def set(self, name: str, value: int) -> None:
        """Set a register directly (test back door, ignores Lock and read-only)."""
        self._put(name, value)

    @property
    def torque_enabled(self) -> bool:
        """True when Torque_Enable is set."""
        return self.get('Torque_Enable') != 0

    def present_position(self) -> int:
        """Present_Position as the servo reports it (after Homing_Offset)."""
        return (round(self.actual) - self.get('Homing_Offset')) % RESOLUTION_STEPS

    def set_present_position(self, present: int) -> None:
        """Move the horn so Present_Position reads `present` (a hand move with torque off)."""
        self.actual = float((present + self.get('Homing_Offset')) % RESOLUTION_STEPS)
        self.velocity = 0.0
        self._sync_present()

    def _goal_actual(self) -> float:
        goal = self.get('Goal_Position')
        lo, hi = self.get('Min_Position_Limit'), self.get('Max_Position_Limit')
        if lo < hi:  # 0/0 would mean multi-turn mode; the servo then ignores limits
            goal = min(max(goal, lo), hi)
        return float(goal + self.get('Homing_Offset'))

    def step(self, dt: float) -> None:
        """Advance the motion model by `dt` seconds."""
        while dt > 1e-9:
            h = min(dt, PHYSICS_SUBSTEP_S)
            dt -= h
            if self.torque_enabled:
                err = self._goal_actual() - self.actual
                v = err / POSITION_TIME_CONSTANT_S
                v = max(-MAX_SPEED_STEPS_S, min(MAX_SPEED_STEPS_S, v))
                if abs(v * h) > abs(err):
                    v = err / h
                self.actual += v * h
                self.velocity = v
            else:
                self.velocity = 0.0
        self._sync_present()

    def _sync_present(self) -> None:
        self._put('Present_Position', self.present_position())
        self._put('Present_Velocity', int(max(-32767, min(32767, round(self.velocity)))))
        if self.torque_enabled:
            err = self._goal_actual() - self.actual
            load = int(max(-MAX_LOAD, min(MAX_LOAD, round(err * LOAD_PER_STEP_ERROR))))
        else:
            load = 0
        self._put('Present_Load', load)
        self._put('Present_Current', int(abs(load) * CURRENT_PER_LOAD))
        self._put('Moving', int(abs(self.velocity) > MOVING_THRESHOLD_STEPS_S))

    def write(self, address: int, data: bytes) -> None:
        """Apply a WRITE as the firmware does: read-only bytes and locked EEPROM are skipped."""
        locked = self.get('Lock') != 0
        for offset, byte in enumerate(data):
            addr = address + offset
            if addr >= CONTROL_TABLE_SIZE or addr in _READ_ONLY_ADDRESSES:
                continue
            if addr < EEPROM_END and locked:
                self.eeprom_writes_ignored += 1
                continue
            self.table[addr] = byte
        if not self.torque_enabled:
            self.velocity = 0.0
        self._sync_present()

    def read(self, address: int, size: int) -> bytes:
        """Bytes of the control table (zeros past its end)."""
        chunk = bytes(self.table[address:address + size])
        reg = CONTROL_TABLE['Present_Position']
        if address <= reg.address and address + size >= reg.address + reg.size:
            self.last_read_present = self.get('Present_Position')
        return chunk + bytes(size - len(chunk))


_READ_ONLY_ADDRESSES = frozenset(
    a for r in CONTROL_TABLE.values() if not r.writable
    for a in range(r.address, r.address + r.size))


class ServoBusEmulator:
    """N virtual STS3215 servos on a pty; `port` is what a driver opens.

    With `link`, the slave device is published as a symlink at that path and re-pointed after
    `reconnect()`, so a driver can reopen the same name, as with /dev/serial/by-id/.
    """

    def __init__(self, ids: Iterable[int] = range(1, 7),
                 link: str | os.PathLike[str] | None = None, *, seed: int = 0,
                 positions: Sequence[int] | None = None) -> None:
        ids = list(ids)
        if positions is None:
            positions = [RESOLUTION_STEPS // 2] * len(ids)
        positions = list(positions)
        if len(positions) != len(ids):
            raise ValueError(f'{len(positions)} positions for {len(ids)} ids; give one per id')
        self.servos: dict[int, VirtualServo] = {
            i: VirtualServo(i, p) for i, p in zip(ids, positions)}
        self.link = Path(link) if link is not None else None
        self.requests = 0  # instruction packets handled
        self.replies = 0  # status packets sent
        self.instructions: dict[int, int] = {}  # instruction code -> count
        self._rng = random.Random(seed)
        self._faults: list[_Fault] = []
        self._goal_log: deque[GoalWrite] = deque(maxlen=GOAL_LOG_SIZE)
        self._parser = PacketParser()
        self._lock = threading.RLock()
        self._master: int | None = None
        self._slave: int | None = None
        self._slave_name = ''
        self._last_step = time.monotonic()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------

    @property
    def port(self) -> str:
        """Device path to open: the symlink when given, else the pty slave name."""
        return str(self.link) if self.link is not None else self._slave_name

    @property
    def connected(self) -> bool:
        """True while the pty exists (between disconnect() and reconnect() it does not)."""
        return self._master is not None

    def start(self) -> ServoBusEmulator:
        """Create the pty and serve requests on a daemon thread."""
        self._open_pty()
        self._thread = threading.Thread(target=self._run, name='so101-emulator', daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the pty and symlink."""
        self._stop.set()
        os.write(self._wake_w, b'x')
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._close_pty()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> ServoBusEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def disconnect(self) -> None:
        """Make the device vanish, like an unplugged USB adapter."""
        with self._lock:
            self._close_pty()
        os.write(self._wake_w, b'x')
        logger.info('emulator disconnected')

    def reconnect(self) -> None:
        """Bring the device back (new pty, same symlink path)."""
        with self._lock:
            if self._master is None:
                self._open_pty()
        os.write(self._wake_w, b'x')
        logger.info('emulator reconnected at %s', self.port)

    def _open_pty(self) -> None:
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo or line discipline until the driver configures it
        os.set_blocking(master, False)
        self._master, self._slave = master, slave
        self._slave_name = os.ttyname(slave)
        self._parser.reset()
        if self.link is not None:
            tmp = self.link.with_name(f'.{self.link.name}.{os.getpid()}.tmp')
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
            tmp.symlink_to(self._slave_name)
            os.replace(tmp, self.link)  # atomic: a reader never sees a missing link mid-swap

    def _close_pty(self) -> None:
        if self.link is not None and self.link.is_symlink():
            self.link.unlink()
        for fd in (self._master, self._slave):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._master = self._slave = None

    # ---- fault injection -------------------------------------------------------------------

    def inject(self, kind: FaultKind, ids: Iterable[int] | None = None, count: int = 1) -> None:
        """Apply `kind` to the next `count` replies of `ids` (any servo when None)."""
        with self._lock:
            self._faults.append(_Fault(kind, frozenset(ids) if ids is not None else None, count))

    def clear_faults(self) -> None:
        """Drop pending injected faults and error bits."""
        with self._lock:
            self._faults.clear()
            for servo in self.servos.values():
                servo.error_bits = 0

    def set_error_bits(self, servo_id: int, bits: int) -> None:
        """Report `bits` in every status packet of `servo_id` until set back to 0."""
        with self._lock:
            servo = self.servos[servo_id]
            servo.error_bits = bits
            if bits & protocol.ErrorBit.OVERHEAT:
                servo.set('Present_Temperature', servo.get('Max_Temperature_Limit') + 5)
            if bits & protocol.ErrorBit.VOLTAGE:
                servo.set('Present_Voltage', servo.get('Min_Voltage_Limit') - 5)

    def pending_faults(self) -> int:
        """Injected faults not yet consumed."""
        with self._lock:
            return sum(f.remaining for f in self._faults)

    def _take_fault(self, servo_id: int) -> FaultKind | None:
        for fault in self._faults:
            if fault.remaining > 0 and (fault.ids is None or servo_id in fault.ids):
                fault.remaining -= 1
                kind = fault.kind
                self._faults = [f for f in self._faults if f.remaining > 0]
                return kind
        return None

    # ---- state access (thread-safe helpers for tests and dry runs) ---------------------------

    def present_position(self, servo_id: int) -> int:
        """Present_Position of one servo, after advancing the model."""
        with self._lock:
            self._advance()
            return self.servos[servo_id].present_position()

    def set_present_position(self, servo_id: int, present: int) -> None:
        """Move one horn by hand."""
        with self._lock:
            self._advance()
            self.servos[servo_id].set_present_position(present)

    def register(self, servo_id: int, name: str) -> int:
        """Decoded register value of one servo."""
        with self._lock:
            self._advance()
            return self.servos[servo_id].get(name)

    def set_register(self, servo_id: int, name: str, value: int) -> None:
        """Back-door register write (ignores Lock)."""
        with self._lock:
            self.servos[servo_id].set(name, value)

    def goal_writes(self, clear: bool = False) -> list[GoalWrite]:
        """The last GOAL_LOG_SIZE Goal_Position writes (WRITE/ACTION/SYNC_WRITE), oldest first."""
        with self._lock:
            out = list(self._goal_log)
            if clear:
                self._goal_log.clear()
            return out

    def _write(self, servo: VirtualServo, address: int, data: bytes) -> None:
        """Apply a write to one servo, logging it when it touches Goal_Position."""
        reg = CONTROL_TABLE['Goal_Position']
        touches = address < reg.address + reg.size and address + len(data) > reg.address
        present = servo.present_position()
        servo.write(address, data)
        if touches:
            self._goal_log.append(GoalWrite(time.monotonic(), servo.id,
                                            servo.get('Goal_Position'), present,
                                            servo.last_read_present))

    def _advance(self) -> None:
        now = time.monotonic()
        dt, self._last_step = now - self._last_step, now
        for servo in self.servos.values():
            servo.step(dt)

    # ---- serving -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            fd = self._master
            watch = [self._wake_r] + ([fd] if fd is not None else [])
            try:
                ready, _, _ = select.select(watch, [], [], POLL_S)
            except (OSError, ValueError):  # fd closed by disconnect() while selecting
                continue
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            if fd is None or fd not in ready:
                continue
            with self._lock:
                if fd != self._master:
                    continue
                try:
                    data = os.read(fd, 4096)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    logger.debug('emulator read: %s', exc)
                    continue
                for packet in self._parser.feed(data):
                    reply = self._handle(packet)
                    if reply:
                        self._send(fd, reply)

    def _send(self, fd: int, data: bytes) -> None:
        try:
            os.write(fd, data)
        except BlockingIOError:  # nobody reads the slave side: drop, as a bus would
            logger.debug('emulator dropped %s reply bytes', len(data))
        except OSError as exc:
            logger.debug('emulator write: %s', exc)

    def _status(self, servo: VirtualServo, params: bytes = b'') -> bytes:
        frame = protocol.status_packet(servo.id, servo.error_bits, params)
        fault = self._take_fault(servo.id)
        if fault is FaultKind.NO_REPLY:
            return b''
        if fault is FaultKind.CORRUPT_CHECKSUM:
            return frame[:-1] + bytes(((frame[-1] ^ 0x5A),))
        if fault is FaultKind.PARTIAL:
            return frame[:len(frame) // 2]
        if fault is FaultKind.GARBAGE:
            junk = bytes(self._rng.randrange(256) for _ in range(self._rng.randrange(1, 12)))
            return junk + frame
        if fault is FaultKind.DUPLICATE:
            self.replies += 2
            return frame + frame
        self.replies += 1
        return frame

    def _by_id(self, servo_id: int) -> VirtualServo | None:
        for servo in self.servos.values():
            if servo.id == servo_id:
                return servo
        return None

    def _handle(self, packet: Packet) -> bytes:
        self._advance()
        self.requests += 1
        self.instructions[packet.code] = self.instructions.get(packet.code, 0) + 1
        targets = (list(self.servos.values()) if packet.id == BROADCAST_ID
                   else [s for s in [self._by_id(packet.id)] if s is not None])
        if not targets:
            return b''
        code, params = packet.code, packet.params
        reply = b''
        if code == Instruction.PING:
            reply = b''.join(self._status(s) for s in targets)
        elif code == Instruction.READ and len(params) == 2 and packet.id != BROADCAST_ID:
            servo = targets[0]
            reply = self._status(servo, servo.read(params[0], params[1]))
        elif code in (Instruction.WRITE, Instruction.REG_WRITE) and params:
            for servo in targets:
                if code == Instruction.WRITE:
                    self._write(servo, params[0], params[1:])
                else:
                    servo.reg_write = (params[0], params[1:])
            if packet.id != BROADCAST_ID and targets[0].get('Response_Status_Level'):
                reply = self._status(targets[0])
        elif code == Instruction.ACTION:
            for servo in targets:
                if servo.reg_write is not None:
                    self._write(servo, *servo.reg_write)
                    servo.reg_write = None
            if packet.id != BROADCAST_ID:
                reply = self._status(targets[0])
        elif code == Instruction.SYNC_READ and len(params) >= 2:
            address, size = params[0], params[1]
            parts = []
            for servo_id in params[2:]:
                servo = self._by_id(servo_id)
                if servo is not None:
                    parts.append(self._status(servo, servo.read(address, size)))
            reply = b''.join(parts)
        elif code == Instruction.SYNC_WRITE and len(params) >= 2:
            address, size = params[0], params[1]
            body = params[2:]
            for k in range(0, len(body) - size, size + 1):
                servo = self._by_id(body[k])
                if servo is not None:
                    self._write(servo, address, body[k + 1:k + 1 + size])
        if reply:
            delay_us = max(s.get('Return_Delay_Time') for s in targets) * RETURN_DELAY_UNIT_US
            if delay_us > 0:
                time.sleep(delay_us * 1e-6)  # models the servo's configured reply delay
        return reply


def parse_ids(text: str) -> list[int]:
    """Parse '1..6', '1-6' or '1,2,5' into a list of servo ids."""
    ids: list[int] = []
    for part in text.split(','):
        part = part.strip()
        for sep in ('..', '-'):
            if sep in part:
                lo, hi = (int(x) for x in part.split(sep, 1))
                ids.extend(range(lo, hi + 1))
                break
        else:
            if part:
                ids.append(int(part))
    bad = [i for i in ids if not 0 <= i <= protocol.MAX_ID]
    if not ids or bad:
        raise ValueError(f'bad servo ids {text!r}; expected e.g. "1..6" or "1,2,3" within '
                         f'0..{protocol.MAX_ID}')
    return ids


def main(argv: list[str] | None = None) -> int:
    """Run an emulator until SIGINT/SIGTERM (for dry runs of the driver)."""
    parser = argparse.ArgumentParser(
        prog='python -m lerobot_lang_nodes.so101.emulator',
        description='Emulate STS3215 servos of an SO-101 arm on a pseudo-terminal.')
    parser.add_argument('--link', required=True,
                        help='symlink path to publish the pty at, e.g. /tmp/so101; pass it as '
                             'the driver port')
    parser.add_argument('--ids', default='1..6', help='servo ids, e.g. "1..6" or "1,2,3"')
    parser.add_argument('--seed', type=int, default=0, help='seed of the garbage generator')
    parser.add_argument('--log-level', default='INFO')
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format='%(asctime)s %(name)s %(levelname)s %(message)s')
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emu = ServoBusEmulator(parse_ids(args.ids), link=args.link, seed=args.seed).start()
    logger.info('emulating ids %s at %s', sorted(emu.servos), emu.port)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        emu.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())

__all__ = ['FaultKind', 'GoalWrite', 'ServoBusEmulator', 'VirtualServo', 'main', 'parse_ids']
