"""The foot pedal's key map and the kernel's input-event records, without ROS or a device."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.core.pedal import (EV_KEY, EVENT, PRESS, RELEASE, REPEAT, EventReader,
                                           PedalMap, encode, key_code)

EV_SYN, EV_MSC = 0x00, 0x04
B, A, C = key_code('b'), key_code('a'), key_code('c')


def press(code: int) -> list[tuple[int, int, int]]:
    """What a USB keyboard-pedal sends for one press: scan code, key down, sync."""
    return [(EV_MSC, 4, 0x70005), (EV_KEY, code, PRESS), (EV_SYN, 0, 0)]


def test_key_names_numbers_and_unknown_keys():
    assert key_code('b') == key_code('KEY_B') == key_code('key_b') == 48
    assert key_code('a') == 30 and key_code('F5') == 63 and key_code('SPACE') == 57
    assert key_code('BTN_LEFT') == 0x110 and key_code('272') == 272
    with pytest.raises(ValueError, match='unknown key .pedal.*KEY_B'):
        key_code('pedal')


def test_toggle_takes_over_then_hands_back_by_the_run_mode():
    pedal = PedalMap.from_names(None, None, None)  # the factory key b toggles
    assert pedal.toggle == (B,)
    assert pedal.action(EV_KEY, B, PRESS, mode='action') == 'takeover'
    assert pedal.action(EV_KEY, B, PRESS, mode='paused') == 'takeover'
    assert pedal.action(EV_KEY, B, PRESS, mode='teleop') == 'handback'


def test_only_a_press_acts_not_the_release_or_auto_repeat_of_a_held_pedal():
    pedal = PedalMap.from_names(None, None, None)
    assert pedal.action(EV_KEY, B, RELEASE, mode='action') is None
    assert pedal.action(EV_KEY, B, REPEAT, mode='action') is None
    assert pedal.action(EV_MSC, 4, PRESS, mode='action') is None  # not a key event
    assert pedal.action(EV_KEY, A, PRESS, mode='action') is None  # a key nobody mapped


def test_a_three_pedal_switch_with_one_key_each():
    pedal = PedalMap.from_names(None, ['a'], ['c'])
    assert pedal.toggle == ()  # with explicit keys the default toggle is not added
    assert pedal.action(EV_KEY, A, PRESS, mode='teleop') == 'takeover'
    assert pedal.action(EV_KEY, C, PRESS, mode='action') == 'handback'
    assert pedal.action(EV_KEY, B, PRESS, mode='action') is None
    both = PedalMap.from_names(['b'], ['a'], None)
    assert both.action(EV_KEY, B, PRESS, mode='teleop') == 'handback'


def test_conflicting_or_empty_maps_are_refused():
    with pytest.raises(ValueError, match='both takeover and handback'):
        PedalMap.from_names(None, ['a'], ['a'])
    with pytest.raises(ValueError, match='at least one key'):
        PedalMap((), (), ())


def test_records_split_across_reads_are_reassembled():
    data = encode(press(B) + [(EV_KEY, B, RELEASE)], stamp_s=12.25)
    assert len(data) == 4 * EVENT.size == 96  # 24-byte struct input_event on 64-bit Linux
    reader = EventReader()
    got = []
    cuts = (0, 5, 30, 60, 96)  # read boundaries inside records
    for start, end in zip(cuts, cuts[1:]):
        got += list(reader.feed(data[start:end]))
    assert len(got) == 4
    assert [e for e in got if e[0] == EV_KEY] == [(EV_KEY, B, PRESS), (EV_KEY, B, RELEASE)]
