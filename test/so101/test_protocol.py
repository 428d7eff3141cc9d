"""Byte-exact Feetech frames, sign-magnitude, and the resynchronising stream parser."""

from __future__ import annotations

import time

from hypothesis import given, HealthCheck, settings, strategies as st
import pytest

from lerobot_lang_nodes.so101 import protocol
from lerobot_lang_nodes.so101.protocol import Packet, PacketParser
from lerobot_lang_nodes.so101.registers import CONTROL_TABLE, SIGN_BITS


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# Checksums below were computed by hand: ~(id + len + instr + params) & 0xFF.
@pytest.mark.parametrize('frame, expected', [
    # 1+2+1 = 0x04 -> 0xFB
    (protocol.ping_packet(1), 'FF FF 01 02 01 FB'),
    # 1+4+2+0x38+2 = 0x41 -> 0xBE
    (protocol.read_packet(1, 56, 2), 'FF FF 01 04 02 38 02 BE'),
    # Goal_Position(0x2A) = 2048 little-endian 00 08: 1+5+3+0x2A+0+8 = 0x3B -> 0xC4
    (protocol.write_packet(1, 42, b'\x00\x08'), 'FF FF 01 05 03 2A 00 08 C4'),
    # REG_WRITE same data: 1+5+4+0x2A+8 = 0x3C -> 0xC3
    (protocol.reg_write_packet(1, 42, b'\x00\x08'), 'FF FF 01 05 04 2A 00 08 C3'),
    # ACTION broadcast: 0xFE+2+5 = 0x105 -> 0x05 -> 0xFA
    (protocol.action_packet(), 'FF FF FE 02 05 FA'),
    # SYNC_READ ids 1,2 @56 x2: 0xFE+6+0x82+0x38+2+1+2 = 0x1C3 -> 0x3C
    (protocol.sync_read_packet([1, 2], 56, 2), 'FF FF FE 06 82 38 02 01 02 3C'),
    # SYNC_WRITE @42 x2 {1: 2048, 2: 1024}: 0xFE+0x0A+0x83+0x2A+2+1+8+2+4 = 0x1C6 -> 0x39
    (protocol.sync_write_packet(42, 2, {1: b'\x00\x08', 2: b'\x00\x04'}),
     'FF FF FE 0A 83 2A 02 01 00 08 02 00 04 39'),
    # status id 1, no error, data 00 08: 1+4+0+0+8 = 0x0D -> 0xF2
    (protocol.status_packet(1, 0, b'\x00\x08'), 'FF FF 01 04 00 00 08 F2'),
    # status id 3 with OVERLOAD (0x20), no data: 3+2+0x20 = 0x25 -> 0xDA
    (protocol.status_packet(3, 0x20), 'FF FF 03 02 20 DA'),
])
def test_frames_are_byte_exact(frame: bytes, expected: str) -> None:
    assert frame == h(expected)


def test_register_encoding_is_little_endian_sign_magnitude() -> None:
    goal = CONTROL_TABLE['Goal_Position']
    assert protocol.encode_register(goal, 2048) == h('00 08')
    assert protocol.encode_register(goal, -5) == h('05 80')  # bit 15 = direction
    homing = CONTROL_TABLE['Homing_Offset']
    assert protocol.encode_register(homing, -2047) == h('FF 0F')  # bit 11 = direction
    assert protocol.decode_register(homing, h('FF 0F')) == -2047
    load = CONTROL_TABLE['Present_Load']
    assert protocol.decode_register(load, h('64 04')) == -100  # 0x400 | 100


def test_sign_magnitude_rejects_overflow_with_the_limit() -> None:
    with pytest.raises(ValueError, match='2047'):
        protocol.encode_sign_magnitude(2048, 11)


@given(st.sampled_from(sorted(set(SIGN_BITS.values()))), st.data())
def test_sign_magnitude_round_trip(sign_bit: int, data: st.DataObject) -> None:
    limit = (1 << sign_bit) - 1
    value = data.draw(st.integers(-limit, limit))
    encoded = protocol.encode_sign_magnitude(value, sign_bit)
    assert 0 <= encoded < (1 << (sign_bit + 1))
    assert protocol.decode_sign_magnitude(encoded, sign_bit) == value


def test_error_bits_are_named() -> None:
    assert protocol.describe_error_bits(0) == 'none'
    assert protocol.describe_error_bits(0x25) == 'VOLTAGE|OVERHEAT|OVERLOAD'
    assert protocol.describe_error_bits(0x0A) == 'ANGLE|OVERELE'


def test_parser_splits_back_to_back_frames() -> None:
    a = protocol.status_packet(1, 0, b'\x00\x08')
    b = protocol.status_packet(2, 0x20, b'\x10\x00')
    assert PacketParser().feed(a + b) == [Packet(1, 0, b'\x00\x08'), Packet(2, 0x20, b'\x10\x00')]


def test_parser_resyncs_after_garbage() -> None:
    parser = PacketParser()
    frame = protocol.status_packet(4, 0, b'\x34\x12')
    out = parser.feed(b'\x00\x13\xff\x42\xff\xff\xff' + frame)
    assert out == [Packet(4, 0, b'\x34\x12')]
    assert parser.garbage_bytes == 7


def test_parser_waits_for_partial_frames_byte_by_byte() -> None:
    parser = PacketParser()
    frame = protocol.status_packet(5, 0, b'\x01\x02\x03')
    got = []
    for k in range(len(frame)):
        got += parser.feed(frame[k:k + 1])
        assert got == ([] if k < len(frame) - 1 else [Packet(5, 0, b'\x01\x02\x03')])
    assert parser.pending == 0


def test_parser_finds_frame_after_truncated_frame() -> None:
    # A half frame whose length field swallows the start of the next frame: the checksum
    # fails, one byte is dropped and the real frame inside is found.
    parser = PacketParser()
    good = protocol.status_packet(2, 0, b'\x00\x08')
    truncated = protocol.status_packet(1, 0, b'\x00\x08')[:4]
    out = parser.feed(truncated + good + good)
    assert out[-2:] == [Packet(2, 0, b'\x00\x08')] * 2
    assert parser.checksum_errors >= 1


def test_parser_rejects_bad_checksum_and_bad_length() -> None:
    parser = PacketParser()
    bad = bytearray(protocol.status_packet(1, 0, b'\x00\x08'))
    bad[-1] ^= 0xFF
    assert parser.feed(bytes(bad)) == []
    assert parser.checksum_errors == 1
    assert parser.feed(h('FF FF 01 01 00') + protocol.ping_packet(3)) == [Packet(3, 1, b'')]
    assert parser.bad_lengths == 1


FRAMES = st.builds(
    lambda i, code, params: protocol.encode_packet(i, code, params),
    st.integers(0, protocol.BROADCAST_ID), st.integers(0, 255), st.binary(max_size=12))
NO_FF = st.binary(max_size=16).map(lambda b: b.replace(b'\xff', b''))


@settings(max_examples=400, deadline=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(NO_FF, FRAMES), max_size=8), st.binary(max_size=64),
       st.lists(st.integers(1, 17), min_size=1, max_size=8))
def test_fuzz_parser_recovers_frames_and_never_raises(pieces, noise, cuts) -> None:
    """Garbage without 0xFF between valid frames: every frame comes out, in order."""
    stream = b''.join(g + f for g, f in pieces)
    parser = PacketParser()
    out: list[Packet] = []
    start = time.monotonic()
    pos, k = 0, 0
    while pos < len(stream):  # arbitrary chunking must not matter
        n = cuts[k % len(cuts)]
        out += parser.feed(stream[pos:pos + n])
        pos, k = pos + n, k + 1
    assert [protocol.encode_packet(p.id, p.code, p.params) for p in out] == [f for _, f in pieces]
    out2 = parser.feed(noise)  # arbitrary bytes afterwards: no exception, bounded buffer
    for p in out2:
        assert len(p.params) <= protocol.MAX_LENGTH
    assert parser.pending <= protocol.MAX_LENGTH + 4
    assert time.monotonic() - start < 1.0


@settings(max_examples=300, deadline=200)
@given(st.binary(max_size=600))
def test_fuzz_parser_arbitrary_bytes(data: bytes) -> None:
    parser = PacketParser()
    for p in parser.feed(data):
        frame = protocol.encode_packet(p.id, p.code, p.params)
        assert frame in data  # only frames that were really in the stream
    assert parser.pending <= protocol.MAX_LENGTH + 4
