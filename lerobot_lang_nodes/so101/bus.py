"""FeetechBus: protocol-0 transactions over pyserial with timeouts, retries and counters."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
import logging
import select
import termios
import threading
import time
from typing import Any

from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.errors import (
    BusError,
    BusTimeout,
    ChecksumError,
    MalformedReply,
    NotConnected,
    PortDisconnected,
    ServoError,
)
from lerobot_lang_nodes.so101.protocol import Packet, PacketParser
from lerobot_lang_nodes.so101.registers import (
    CONTROL_TABLE,
    DEFAULT_BAUDRATE,
    FACTORY_RETURN_DELAY,
    Register,
    RETURN_DELAY_UNIT_US,
)

logger = logging.getLogger(__name__)

BITS_PER_BYTE = 10  # 8N1: start + 8 data + stop
DEFAULT_RETRIES = 2  # extra attempts after the first; LeRobot's so_follower default
# USB-serial adapters add ~1 ms latency each way and the OS scheduler more; a shorter margin
# turns load spikes into spurious timeouts, a longer one slows fault detection.
DEFAULT_TIMEOUT_MARGIN_MS = 20.0
DEFAULT_RETURN_DELAY_US = FACTORY_RETURN_DELAY * RETURN_DELAY_UNIT_US  # until configured
READ_CHUNK_BYTES = 4096
DRAIN_QUIET_MS = 2.0  # line silence that ends the discard after a failed attempt


@dataclass
class BusStats:
    """Counters of a FeetechBus since it was created."""

    transactions: int = 0
    tx_packets: int = 0
    tx_bytes: int = 0
    rx_packets: int = 0
    rx_bytes: int = 0
    timeouts: int = 0
    checksum_errors: int = 0
    malformed: int = 0
    stale_replies: int = 0  # packets from ids not (or no longer) waited for; ignored
    drained_bytes: int = 0  # discarded after failed attempts
    retries: int = 0
    servo_errors: int = 0
    garbage_bytes: int = 0
    disconnects: int = 0
    reconnects: int = 0
    failures: int = 0  # transactions that failed after all retries

    def as_dict(self) -> dict[str, int]:
        """Plain dict, for diagnostics."""
        return asdict(self)


def _resolve(register: str | Register) -> Register:
    if isinstance(register, Register):
        return register
    try:
        return CONTROL_TABLE[register]
    except KeyError:
        raise KeyError(f'unknown STS3215 register {register!r}; known: '
                       f'{sorted(CONTROL_TABLE)}') from None


def _serial_module() -> Any:
    import serial  # deferred so the protocol layer imports without pyserial

    return serial


def _port_errors() -> tuple[type[BaseException], ...]:
    # tcflush on a vanished pty/USB device raises termios.error, which is not an OSError.
    return (_serial_module().SerialException, OSError, termios.error)


class FeetechBus:
    """Half-duplex Feetech protocol-0 bus on one serial port; thread-safe.

    Every request waits for its replies for (bytes on the wire at `baudrate`) + return delay
    per reply + `timeout_margin_ms`. Timeouts, checksum errors and malformed replies are
    retried up to `retries` times; servo error bits are reported, never retried.
    """

    def __init__(self, port: str, baudrate: int = DEFAULT_BAUDRATE, *,
                 retries: int = DEFAULT_RETRIES,
                 timeout_margin_ms: float = DEFAULT_TIMEOUT_MARGIN_MS,
                 return_delay_us: float = DEFAULT_RETURN_DELAY_US) -> None:
        if retries < 0:
            raise ValueError(f'retries={retries} is negative; use 0 for no retry')
        self.port = port
        self.baudrate = baudrate
        self.retries = retries
        self.timeout_margin_ms = timeout_margin_ms
        self.return_delay_us = return_delay_us
        self.stats = BusStats()
        self.last_errors: dict[int, int] = {}  # servo id -> error bits of its latest reply
        self._serial: Any = None
        self._lost = False  # closed by a disconnect rather than by close()
        self._parser = PacketParser()
        self._lock = threading.RLock()

    @classmethod
    def open(cls, port: str, baudrate: int = DEFAULT_BAUDRATE, **kwargs: Any) -> FeetechBus:
        """Create a bus and open its port."""
        bus = cls(port, baudrate, **kwargs)
        bus.connect()
        return bus

    # ---- port handling -------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """True while the serial port is open."""
        return self._serial is not None

    def connect(self) -> None:
        """Open the serial port (8N1, non-exclusive reads with a per-call timeout)."""
        serial = _serial_module()
        with self._lock:
            if self._serial is not None:
                return
            try:
                self._serial = serial.Serial(self.port, self.baudrate, timeout=0,
                                             write_timeout=1.0)
            except _port_errors() as exc:
                raise PortDisconnected(
                    f'cannot open serial port {self.port!r} at {self.baudrate} baud ({exc}); '
                    'check the USB cable and the arm power, and that the `port` parameter '
                    'names the bus adapter (see /dev/serial/by-id/)') from exc
            self._lost = False
            logger.info('opened %s at %s baud', self.port, self.baudrate)

    def close(self) -> None:
        """Close the serial port; safe to call twice."""
        with self._lock:
            ser, self._serial = self._serial, None
            if ser is not None:
                try:
                    ser.close()
                except _port_errors() as exc:  # teardown of a vanished device
                    logger.debug('closing %s: %s', self.port, exc)

    def reopen(self) -> None:
        """Close and open the port again (after PortDisconnected)."""
        with self._lock:
            self.close()
            self.connect()
            self.stats.reconnects += 1
            self._parser.reset()

    def _disconnected(self, exc: BaseException) -> PortDisconnected:
        self.stats.disconnects += 1
        self.close()
        self._lost = True
        logger.error('serial port %s disconnected: %s', self.port, exc)
        return PortDisconnected(
            f'serial port {self.port!r} disconnected ({exc}); check the USB cable and the '
            'arm power, then reconnect (the driver retries while the port is missing)')

    # ---- timing ------------------------------------------------------------------------------

    def byte_time_s(self) -> float:
        """Seconds one byte occupies the line at the configured baud rate."""
        return BITS_PER_BYTE / self.baudrate

    def transaction_timeout_s(self, tx_bytes: int, rx_bytes: int, replies: int) -> float:
        """Deadline for a request of `tx_bytes` answered by `replies` packets of `rx_bytes`."""
        wire = (tx_bytes + rx_bytes) * self.byte_time_s()
        return wire + replies * self.return_delay_us * 1e-6 + self.timeout_margin_ms * 1e-3

    # ---- low-level transaction ------------------------------------------------------------

    def _write_bytes(self, data: bytes) -> None:
        if self._serial is None:
            if self._lost:
                raise PortDisconnected(f'serial port {self.port!r} was lost; call reopen() once '
                                       'the device is back (check the USB cable and power)')
            raise NotConnected(f'bus {self.port!r} is not open; call connect() first')
        try:
            self._serial.reset_input_buffer()  # drop late replies of an abandoned request
            self._serial.write(data)
        except _port_errors() as exc:
            raise self._disconnected(exc) from exc
        self.stats.tx_packets += 1
        self.stats.tx_bytes += len(data)

    def _read_packets(self, expected: Sequence[int], data_size: int,
                      timeout_s: float) -> dict[int, Packet]:
        """Collect one status packet from each id in `expected`, or raise."""
        parser = self._parser
        parser.reset()
        checksum_before = parser.checksum_errors
        garbage_before = parser.garbage_bytes
        want = set(expected)
        got: dict[int, Packet] = {}
        odd: dict[int, int] = {}  # id -> data length of replies with the wrong size
        deadline = time.monotonic() + timeout_s
        try:
            while want:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                # select + non-blocking read: changing pyserial's timeout per call would
                # reprogram the tty (tcsetattr) on every chunk.
                ready, _, _ = select.select([self._serial.fileno()], [], [], remaining)
                if not ready:
                    continue
                chunk = self._serial.read(READ_CHUNK_BYTES)
                if not chunk:
                    continue
                self.stats.rx_bytes += len(chunk)
                for packet in parser.feed(chunk):
                    self.stats.rx_packets += 1
                    if packet.id not in want:
                        # A late reply to an abandoned attempt, or a duplicate id: ignoring it
                        # keeps one slow reply from failing every retry after it.
                        self.stats.stale_replies += 1
                        logger.debug('ignored status packet from id %s (waiting for %s)',
                                     packet.id, sorted(want))
                        continue
                    if len(packet.params) != data_size:
                        self.stats.malformed += 1
                        odd[packet.id] = len(packet.params)
                        continue
                    got[packet.id] = packet
                    want.discard(packet.id)
                if want and parser.checksum_errors != checksum_before and not parser.pending:
                    break  # the reply we wait for was corrupted: retry now, not at the deadline
        except _port_errors() as exc:
            raise self._disconnected(exc) from exc
        finally:
            self.stats.garbage_bytes += parser.garbage_bytes - garbage_before
        if want:
            bad = parser.checksum_errors - checksum_before
            if bad:
                self.stats.checksum_errors += bad
                raise ChecksumError(
                    f'{bad} status packet(s) with a wrong checksum while waiting for ids '
                    f'{sorted(want)}; check the cable, the bus power and the baud rate')
            wrong = {i: n for i, n in odd.items() if i in want}
            if wrong:
                raise MalformedReply(
                    f'servo id(s) {sorted(wrong)} answered with {sorted(set(wrong.values()))} '
                    f'data byte(s), expected {data_size}; check the servo model and that no two '
                    'servos share an id')
            self.stats.timeouts += 1
            detail = f' ({parser.pending} byte(s) of a partial packet)' if parser.pending else ''
            raise BusTimeout(
                f'no complete reply from servo id(s) {sorted(want)} within '
                f'{timeout_s * 1e3:.1f} ms{detail}; check that the servos are powered, '
                f'wired and set to {self.baudrate} baud')
        return got

    def _transact(self, request: bytes, expected: Sequence[int],
                  data_size: int) -> dict[int, Packet]:
        rx_bytes = len(expected) * protocol.status_packet_size(data_size)
        timeout_s = self.transaction_timeout_s(len(request), rx_bytes, len(expected))
        with self._lock:
            self.stats.transactions += 1
            last: BusError | None = None
            for attempt in range(self.retries + 1):
                if attempt:
                    self.stats.retries += 1
                    logger.debug('retry %s/%s after: %s', attempt, self.retries, last)
                self._write_bytes(request)
                if not expected:
                    return {}
                try:
                    return self._read_packets(expected, data_size, timeout_s)
                except (BusTimeout, ChecksumError, MalformedReply) as exc:
                    last = exc
                    self._drain()
            self.stats.failures += 1
            assert last is not None
            raise type(last)(f'{last} (after {self.retries + 1} attempts)')

    def _drain(self) -> None:
        """After a failed attempt, discard bytes until the line is quiet (bounded by the margin).

        Protocol 0 has no sequence numbers, so a late reply to the failed attempt could
        otherwise be taken for the answer to the next request.
        """
        deadline = time.monotonic() + self.timeout_margin_ms * 1e-3
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return
                wait = min(DRAIN_QUIET_MS * 1e-3, deadline - now)
                ready, _, _ = select.select([self._serial.fileno()], [], [], wait)
                if not ready:
                    return
                junk = self._serial.read(READ_CHUNK_BYTES)
                self.stats.rx_bytes += len(junk)
                self.stats.drained_bytes += len(junk)
        except _port_errors() as exc:
            raise self._disconnected(exc) from exc

    def _check(self, packets: Mapping[int, Packet], values: Mapping[int, object],
               what: str, check_errors: bool) -> None:
        errors = {i: p.error for i, p in packets.items() if p.error}
        for i, p in packets.items():
            self.last_errors[i] = p.error
        if errors:
            self.stats.servo_errors += 1
            if check_errors:
                text = ', '.join(f'id {i}: {protocol.describe_error_bits(b)}'
                                 for i, b in sorted(errors.items()))
                raise ServoError(
                    f'{what}: servo error bits set ({text}); let the arm cool down or remove '
                    'the load, check the supply voltage, then reset the fault', errors, values)

    # ---- public requests --------------------------------------------------------------------

    def ping(self, servo_id: int, *, check_errors: bool = True) -> int:
        """PING one servo; return its error bits (raise BusTimeout when it is absent)."""
        packets = self._transact(protocol.ping_packet(servo_id), [servo_id], 0)
        self._check(packets, {}, f'ping id {servo_id}', check_errors)
        return packets[servo_id].error

    def read_bytes(self, servo_id: int, address: int, size: int, *,
                   check_errors: bool = True) -> bytes:
        """READ raw bytes from one servo."""
        packets = self._transact(protocol.read_packet(servo_id, address, size), [servo_id], size)
        data = packets[servo_id].params
        self._check(packets, {servo_id: data}, f'read id {servo_id} @{address}', check_errors)
        return data

    def read(self, servo_id: int, register: str | Register, *, check_errors: bool = True) -> int:
        """READ one register (sign-magnitude decoded)."""
        reg = _resolve(register)
        packets = self._transact(protocol.read_packet(servo_id, reg.address, reg.size),
                                 [servo_id], reg.size)
        value = protocol.decode_register(reg, packets[servo_id].params)
        self._check(packets, {servo_id: value}, f'read {reg.name} id {servo_id}', check_errors)
        return value

    def write_bytes(self, servo_id: int, address: int, data: bytes, *,
                    check_errors: bool = True) -> None:
        """WRITE raw bytes to one servo and wait for its status reply (none for broadcast)."""
        expected = [] if servo_id == protocol.BROADCAST_ID else [servo_id]
        packets = self._transact(protocol.write_packet(servo_id, address, data), expected, 0)
        self._check(packets, {}, f'write id {servo_id} @{address}', check_errors)

    def write(self, servo_id: int, register: str | Register, value: int, *,
              check_errors: bool = True) -> None:
        """WRITE one register (sign-magnitude encoded)."""
        reg = _resolve(register)
        if not reg.writable:
            raise ValueError(f'{reg.name} is read-only; choose a writable register')
        self.write_bytes(servo_id, reg.address, protocol.encode_register(reg, value),
                         check_errors=check_errors)

    def sync_read_bytes(self, ids: Iterable[int], address: int, size: int, *,
                        check_errors: bool = True) -> dict[int, bytes]:
        """SYNC_READ one block from many servos: one request, one status packet per id."""
        ids = list(ids)
        packets = self._transact(protocol.sync_read_packet(ids, address, size), ids, size)
        data = {i: packets[i].params for i in ids}
        self._check(packets, data, f'sync read @{address}', check_errors)
        return data

    def sync_read(self, ids: Iterable[int], register: str | Register, *,
                  check_errors: bool = True) -> dict[int, int]:
        """SYNC_READ one register from many servos (sign-magnitude decoded)."""
        reg = _resolve(register)
        ids = list(ids)
        packets = self._transact(protocol.sync_read_packet(ids, reg.address, reg.size), ids,
                                 reg.size)
        values = {i: protocol.decode_register(reg, packets[i].params) for i in ids}
        self._check(packets, values, f'sync read {reg.name}', check_errors)
        return values

    def sync_write_bytes(self, address: int, size: int, data: Mapping[int, bytes]) -> None:
        """SYNC_WRITE raw blocks; servos send no reply, so nothing can be retried."""
        self._transact(protocol.sync_write_packet(address, size, data), [], 0)

    def sync_write(self, register: str | Register, values: Mapping[int, int]) -> None:
        """SYNC_WRITE one register on many servos (sign-magnitude encoded)."""
        reg = _resolve(register)
        if not reg.writable:
            raise ValueError(f'{reg.name} is read-only; choose a writable register')
        self.sync_write_bytes(reg.address, reg.size,
                              {i: protocol.encode_register(reg, v) for i, v in values.items()})
