"""Typed errors of the SO-101 hardware path; every message names the fix."""

from __future__ import annotations

from collections.abc import Mapping


class BusError(RuntimeError):
    """A Feetech bus transaction failed."""


class BusTimeout(BusError):
    """A servo did not answer (completely) within the computed timeout."""


class ChecksumError(BusError):
    """A status packet arrived with a checksum that does not match its bytes."""


class MalformedReply(BusError):
    """A status packet had a wrong id, length or structure for the request that was sent."""


class PortDisconnected(BusError):
    """The serial port vanished or cannot be opened."""


class ServoError(BusError):
    """A servo answered with error bits set in its status packet.

    `errors` maps servo id -> error bits; `values` holds the data that was read anyway (a
    status packet with error bits still carries valid data), so callers can surface both.
    """

    def __init__(self, message: str, errors: Mapping[int, int],
                 values: Mapping[int, object] | None = None) -> None:
        super().__init__(message)
        self.errors = dict(errors)
        self.values = dict(values or {})


class ModelMismatch(BusError):
    """A servo reported a model number other than the expected STS3215."""


class CalibrationError(ValueError):
    """A calibration file is missing or malformed, or a calibration run failed."""


class MotionRefused(RuntimeError):
    """A motion command was refused by a safety rule (fault latch, not connected, bad input)."""


class FaultLatched(MotionRefused):
    """A servo reported overload/overheat; motion is refused until So101Robot.reset()."""


class NotConnected(RuntimeError):
    """The robot or bus is used before connect()/open()."""


class ConfigurationMismatch(MotionRefused):
    """After a reconnect the servos differ from the calibration or the start-up settings."""
