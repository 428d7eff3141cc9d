"""Hardware-path test set-up: keep the test process's garbage collector out of the servo loop."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture(scope='module', autouse=True)
def _frozen_heap():
    """Exclude everything allocated so far from garbage collection while a module runs.

    The servo emulator runs as a thread of the test process and must answer within the bus
    timeout. Late in a full run the heap holds hundreds of thousands of objects from earlier
    modules; a full collection then stalls every thread for a few hundred milliseconds, which
    the driver (rightly) reports as servo timeouts. Freezing the old heap keeps collections
    short; the driver process itself is not affected either way.
    """
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
