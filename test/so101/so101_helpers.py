"""Shared helpers of the SO-101 tests (waits with deadlines, calibrations)."""

from __future__ import annotations

from collections.abc import Callable

from lerobot_lang_nodes.so101.calibration import JOINT_NAMES, MotorCalibration
from lerobot_lang_nodes.testing import wait_until

WAIT_S = 5.0
# Generous: the test machines are shared, and a late reply under load must not read as a
# fault in tests that count retries exactly.
MARGIN_MS = 100.0


def wait_for(predicate: Callable[[], bool], timeout_s: float = WAIT_S,
             what: str = 'condition') -> None:
    """testing.wait_until with this suite's default timeout and a servo-rate poll."""
    wait_until(predicate, timeout_s, what, poll_s=0.005)


def make_calibration(lo: int = 1000, hi: int = 3000) -> dict[str, MotorCalibration]:
    """A valid calibration with the same range on every joint (wrist_roll full turn)."""
    return {j: MotorCalibration(i + 1, 0, 0, 0 if j == 'wrist_roll' else lo,
                                4095 if j == 'wrist_roll' else hi)
            for i, j in enumerate(JOINT_NAMES)}
