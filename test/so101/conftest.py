"""Fixtures for the SO-101 hardware-path tests: an emulator on a real pty, a bus, a robot."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from so101_helpers import make_calibration, MARGIN_MS

from lerobot_lang_nodes.so101.bus import FeetechBus
from lerobot_lang_nodes.so101.robot import So101Config, So101Robot
from lerobot_lang_nodes.so101.emulator import ServoBusEmulator


@pytest.fixture
def emulator(tmp_path) -> Iterator[ServoBusEmulator]:
    emu = ServoBusEmulator(range(1, 7), link=tmp_path / 'so101').start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def bus(emulator) -> Iterator[FeetechBus]:
    b = FeetechBus.open(emulator.port, retries=2, timeout_margin_ms=MARGIN_MS)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def robot_factory(emulator) -> Iterator[Callable[..., So101Robot]]:
    made: list[So101Robot] = []

    def make(**overrides) -> So101Robot:
        cfg = So101Config(**{'port': emulator.port, 'calibration': make_calibration(),
                             'timeout_margin_ms': MARGIN_MS, **overrides})
        robot = So101Robot(cfg)
        robot.connect()
        made.append(robot)
        return robot

    try:
        yield make
    finally:
        for robot in made:
            robot.close()
