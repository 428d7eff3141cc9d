"""Feetech protocol 0 (STS/SMS series) packet encoding, decoding and stream parsing."""

# Frame: 0xFF 0xFF <id> <length> <instruction|error> <params...> <checksum>
#   length   = len(params) + 2
#   checksum = ~(id + length + instruction + sum(params)) & 0xFF

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
import enum

from lerobot_lang_nodes.so101.registers import Register

HEADER = b'\xff\xff'
BROADCAST_ID = 0xFE
MAX_ID = 0xFD  # 0xFE is broadcast, 0xFF would be read as a header byte
MIN_LENGTH = 2  # instruction/error + checksum
MAX_LENGTH = 250  # the Feetech SDKs' TXPACKET_MAX_LEN; longer frames are garbage
STATUS_OVERHEAD_BYTES = 6  # header(2) + id + length + error + checksum


class Instruction(enum.IntEnum):
    """Instruction codes of protocol 0."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83


class ErrorBit(enum.IntFlag):
    """Status-packet error bits reported by STS servos."""

    VOLTAGE = 0x01
    ANGLE = 0x02
    OVERHEAT = 0x04
    OVERELE = 0x08  # over-current ("overele" in the Feetech SDK)
    OVERLOAD = 0x20


def describe_error_bits(bits: int) -> str:
    """Return e.g. 'OVERLOAD|VOLTAGE' for a status error byte ('none' for 0)."""
    if bits == 0:
        return 'none'
    names = [b.name for b in ErrorBit if bits & b]
    unknown = bits & ~sum(ErrorBit)
    if unknown:
        names.append(f'0x{unknown:02X}')
    return '|'.join(names)


@dataclass(frozen=True)
class Packet:
    """One decoded frame; `code` is the instruction (requests) or the error byte (status)."""

    id: int
    code: int
    params: bytes = b''

    @property
    def error(self) -> int:
        """Error bits, when this packet is a status packet."""
        return self.code


def checksum(body: bytes | Iterable[int]) -> int:
    """Checksum over id, length, instruction and params."""
    return ~sum(body) & 0xFF


def encode_packet(servo_id: int, code: int, params: bytes = b'') -> bytes:
    """Frame `params` for `servo_id` with instruction (or error) byte `code`."""
    if not 0 <= servo_id <= BROADCAST_ID:
        raise ValueError(f'servo id {servo_id} out of range; expected 0..{BROADCAST_ID}')
    if not 0 <= code <= 0xFF:
        raise ValueError(f'instruction/error byte {code} out of range; expected 0..255')
    length = len(params) + 2
    if length > MAX_LENGTH:
        raise ValueError(f'packet length {length} exceeds {MAX_LENGTH}; split the transfer')
    body = bytes((servo_id, length, code)) + bytes(params)
    return HEADER + body + bytes((checksum(body),))


def ping_packet(servo_id: int) -> bytes:
    """PING request."""
    return encode_packet(servo_id, Instruction.PING)


def read_packet(servo_id: int, address: int, size: int) -> bytes:
    """READ `size` bytes starting at `address`."""
    return encode_packet(servo_id, Instruction.READ, bytes((address, size)))


def write_packet(servo_id: int, address: int, data: bytes) -> bytes:
    """WRITE `data` starting at `address`."""
    return encode_packet(servo_id, Instruction.WRITE, bytes((address,)) + bytes(data))


def reg_write_packet(servo_id: int, address: int, data: bytes) -> bytes:
    """REG_WRITE: buffer a write that the next ACTION applies."""
    return encode_packet(servo_id, Instruction.REG_WRITE, bytes((address,)) + bytes(data))


def action_packet(servo_id: int = BROADCAST_ID) -> bytes:
    """ACTION: apply buffered REG_WRITEs (normally broadcast)."""
    return encode_packet(servo_id, Instruction.ACTION)


def sync_read_packet(ids: Iterable[int], address: int, size: int) -> bytes:
    """SYNC_READ: one broadcast request, then one status packet per id, in id order given."""
    return encode_packet(BROADCAST_ID, Instruction.SYNC_READ,
                         bytes((address, size)) + bytes(ids))


def sync_write_packet(address: int, size: int, data: Mapping[int, bytes]) -> bytes:
    """SYNC_WRITE the same register on many servos; servos do not reply."""
    params = bytearray((address, size))
    for servo_id, chunk in data.items():
        if len(chunk) != size:
            raise ValueError(f'sync write data for id {servo_id} has {len(chunk)} bytes; '
                             f'expected {size}')
        params.append(servo_id)
        params += chunk
    return encode_packet(BROADCAST_ID, Instruction.SYNC_WRITE, bytes(params))


def status_packet(servo_id: int, error: int = 0, params: bytes = b'') -> bytes:
    """Status (reply) packet as a servo sends it."""
    return encode_packet(servo_id, error, params)


def status_packet_size(data_size: int) -> int:
    """Bytes on the wire of a status packet carrying `data_size` data bytes."""
    return STATUS_OVERHEAD_BYTES + data_size


def encode_sign_magnitude(value: int, sign_bit: int) -> int:
    """Encode a signed int as magnitude with a direction bit at `sign_bit`."""
    max_magnitude = (1 << sign_bit) - 1
    magnitude = abs(value)
    if magnitude > max_magnitude:
        raise ValueError(f'magnitude {magnitude} does not fit below sign bit {sign_bit}; '
                         f'expected |value| <= {max_magnitude}')
    return ((1 << sign_bit) if value < 0 else 0) | magnitude


def decode_sign_magnitude(raw: int, sign_bit: int) -> int:
    """Decode magnitude + direction bit; bits above `sign_bit` are ignored."""
    magnitude = raw & ((1 << sign_bit) - 1)
    return -magnitude if (raw >> sign_bit) & 1 else magnitude


def encode_value(value: int, size: int) -> bytes:
    """Little-endian unsigned encoding (STS series byte order)."""
    if not 0 <= value < (1 << (8 * size)):
        raise ValueError(f'value {value} does not fit in {size} unsigned byte(s)')
    return value.to_bytes(size, 'little')


def decode_value(data: bytes) -> int:
    """Little-endian unsigned decoding."""
    return int.from_bytes(data, 'little')


def encode_register(register: Register, value: int) -> bytes:
    """Bytes for writing `value` (signed where the register is sign-magnitude)."""
    if register.sign_bit is not None:
        value = encode_sign_magnitude(value, register.sign_bit)
    elif value < 0:
        raise ValueError(f'{register.name} is unsigned; got {value}')
    return encode_value(value, register.size)


def decode_register(register: Register, data: bytes) -> int:
    """Value of `register` from its bytes."""
    raw = decode_value(data)
    if register.sign_bit is not None:
        return decode_sign_magnitude(raw, register.sign_bit)
    return raw


class PacketParser:
    """Incremental frame parser that resynchronises after garbage and broken frames.

    Feed arbitrary byte chunks; complete, checksum-valid frames come out in order. Bytes that
    cannot start a frame are dropped and counted; on a bad checksum only the first header byte
    is dropped, so a real frame hidden inside a broken one is still found.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.garbage_bytes = 0
        self.checksum_errors = 0
        self.bad_lengths = 0

    def reset(self) -> None:
        """Forget buffered bytes (counters are kept)."""
        self._buf.clear()

    @property
    def pending(self) -> int:
        """Bytes buffered while waiting for the rest of a frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Packet]:
        """Add bytes; return the frames completed by them."""
        self._buf += data
        out: list[Packet] = []
        buf = self._buf
        while True:
            start = buf.find(HEADER)
            if start < 0:
                # Keep a trailing 0xFF: it may be the first half of the next header.
                keep = 1 if buf[-1:] == b'\xff' else 0
                self.garbage_bytes += len(buf) - keep
                del buf[:len(buf) - keep]
                break
            if start:
                self.garbage_bytes += start
                del buf[:start]
            if len(buf) < 4:
                break
            servo_id, length = buf[2], buf[3]
            if servo_id == 0xFF:  # three 0xFF in a row: the frame starts one byte later
                self.garbage_bytes += 1
                del buf[:1]
                continue
            if not MIN_LENGTH <= length <= MAX_LENGTH:
                self.bad_lengths += 1
                self.garbage_bytes += 1
                del buf[:1]
                continue
            total = length + 4
            if len(buf) < total:
                break
            frame = bytes(buf[:total])
            if checksum(frame[2:-1]) != frame[-1]:
                self.checksum_errors += 1
                self.garbage_bytes += 1
                del buf[:1]
                continue
            out.append(Packet(frame[2], frame[4], frame[5:-1]))
            del buf[:total]
        return out
