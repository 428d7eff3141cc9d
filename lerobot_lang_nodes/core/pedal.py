"""A foot pedal (or any key) switching who commands the arm, from Linux input events; no ROS.

USB foot switches (PCsensor, iKKEGOL and the like) are keyboards to Linux: each pedal sends a
key (often `a`, `b`, `c`, or a mouse button) through an evdev device, `/dev/input/eventN`
(stable names under `/dev/input/by-id/`). Reading the device directly needs no driver and no
package: the kernel hands out fixed-size ``struct input_event`` records (a timeval, then
type, code and value). A press (value 1) of a mapped key becomes an action: ``takeover``,
``handback``, or ``toggle`` (hand-back in run mode teleop, where a human has the arm, even
while a silent leader holds it; takeover in any other mode). Auto-repeat (value 2) and
releases (value 0) do nothing, so a pedal held down switches once.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

# struct input_event on 64-bit Linux: struct timeval (two longs), __u16 type, __u16 code,
# __s32 value: 24 bytes.
EVENT = struct.Struct('@llHHi')
EV_KEY = 0x01
PRESS, RELEASE, REPEAT = 1, 0, 2
# EVIOCGRAB = _IOW('E', 0x90, int): while grabbed, the pedal's keys reach nobody else
# (a pedal that types 'b' into the operator's terminal would be a surprise).
EVIOCGRAB = 0x40044590

ACTIONS = ('takeover', 'handback', 'toggle')

# The keys foot pedals send, from linux/input-event-codes.h; any other key by its number.
_LETTERS = 'QWERTYUIOP', 'ASDFGHJKL', 'ZXCVBNM'
KEY_CODES: dict[str, int] = {}
for _row, _first in zip(_LETTERS, (16, 30, 44)):
    for _i, _c in enumerate(_row):
        KEY_CODES[f'KEY_{_c}'] = _first + _i
for _i, _d in enumerate('1234567890'):
    KEY_CODES[f'KEY_{_d}'] = 2 + _i
KEY_CODES.update({
    'KEY_ESC': 1, 'KEY_ENTER': 28, 'KEY_SPACE': 57, 'KEY_TAB': 15, 'KEY_LEFTCTRL': 29,
    'KEY_LEFTSHIFT': 42, 'KEY_LEFTALT': 56, 'KEY_UP': 103, 'KEY_PAGEUP': 104, 'KEY_LEFT': 105,
    'KEY_RIGHT': 106, 'KEY_DOWN': 108, 'KEY_PAGEDOWN': 109, 'KEY_VOLUMEDOWN': 114,
    'KEY_VOLUMEUP': 115, 'KEY_PLAYPAUSE': 164,
    'BTN_LEFT': 0x110, 'BTN_RIGHT': 0x111, 'BTN_MIDDLE': 0x112,
})
for _i in range(1, 11):
    KEY_CODES[f'KEY_F{_i}'] = 58 + _i

DEFAULT_TOGGLE = ('KEY_B',)  # the factory key of common single-pedal USB foot switches


def key_code(name: str) -> int:
    """'b', 'KEY_B', 'BTN_LEFT' or a number -> the key code; ValueError naming the known keys."""
    text = name.strip()
    if text.isdigit():
        return int(text)
    upper = text.upper()
    for candidate in (upper, f'KEY_{upper}'):
        if candidate in KEY_CODES:
            return KEY_CODES[candidate]
    raise ValueError(f'unknown key {name!r}: give a key name (a, KEY_B, F5, SPACE, BTN_LEFT, '
                     f'...: {", ".join(sorted(KEY_CODES))}) or its number from '
                     'linux/input-event-codes.h')


@dataclass
class PedalMap:
    """Which key does what; codes as ``key_code`` gives them."""

    toggle: tuple[int, ...] = field(default_factory=lambda: tuple(map(key_code,
                                                                        DEFAULT_TOGGLE)))
    takeover: tuple[int, ...] = ()
    handback: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        seen: dict[int, str] = {}
        for action in ACTIONS:
            for code in getattr(self, action):
                if code in seen and seen[code] != action:
                    raise ValueError(f'key {code} is mapped to both {seen[code]} and {action}')
                seen[code] = action
        if not seen:
            raise ValueError('map at least one key (toggle, takeover or handback)')

    @classmethod
    def from_names(cls, toggle: list[str] | None, takeover: list[str] | None,
                   handback: list[str] | None) -> PedalMap:
        """The command line's lists; with neither takeover nor handback keys, toggle defaults
        to the pedal's factory key."""
        if toggle is None:
            toggle = [] if (takeover or handback) else list(DEFAULT_TOGGLE)
        return cls(tuple(map(key_code, toggle)), tuple(map(key_code, takeover or ())),
                   tuple(map(key_code, handback or ())))

    def action(self, ev_type: int, code: int, value: int, mode: str) -> str | None:
        """What one input event asks for, given the executor's run mode now."""
        if ev_type != EV_KEY or value != PRESS:
            return None
        if code in self.takeover:
            return 'takeover'
        if code in self.handback:
            return 'handback'
        if code in self.toggle:
            return 'handback' if mode == 'teleop' else 'takeover'
        return None


class EventReader:
    """Input events from the device's byte stream (reads may split records)."""

    def __init__(self) -> None:
        self._pending = b''

    def feed(self, data: bytes) -> Iterator[tuple[int, int, int]]:
        self._pending += data
        size = EVENT.size
        whole = len(self._pending) - len(self._pending) % size
        for offset in range(0, whole, size):
            _sec, _usec, ev_type, code, value = EVENT.unpack_from(self._pending, offset)
            yield ev_type, code, value
        self._pending = self._pending[whole:]


def encode(events: list[tuple[int, int, int]], stamp_s: float = 0.0) -> bytes:
    """The kernel's records for ``(type, code, value)`` events (as a device sends them)."""
    sec, usec = int(stamp_s), int((stamp_s % 1.0) * 1e6)
    return b''.join(EVENT.pack(sec, usec, t, c, v) for t, c, v in events)


def key_names() -> Mapping[int, str]:
    """Code -> name, for messages."""
    return {code: name for name, code in KEY_CODES.items()}


__all__ = ['ACTIONS', 'DEFAULT_TOGGLE', 'EVENT', 'EVIOCGRAB', 'EV_KEY', 'EventReader',
           'KEY_CODES', 'PRESS', 'PedalMap', 'RELEASE', 'REPEAT', 'encode', 'key_code',
           'key_names']
