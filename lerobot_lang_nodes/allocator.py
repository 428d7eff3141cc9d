"""Keep image-sized buffers in the heap: glibc malloc thresholds for node processes.

Every camera frame crosses several buffers of its size (the rclpy message, the serialized
sample, the shared-memory copy, the subscriber's sample and Python object). glibc serves a
block above its mmap threshold (128 KiB at start, raised on the fly up to the size of the
largest block freed) with a fresh mapping, and gives the top of the heap back to the kernel
once more than the trim threshold is free: a 640x480 rgb8 frame (900 KiB) then costs a page
fault per 4 KiB page at every copy, and the kernel zeroes each page. bench/image_transport.py
measured this as most of a frame's latency (p50 7 ms with the default thresholds, 2.7 ms
with these; three streams at 30 Hz to two subscribers). Fixed thresholds keep the freed
buffers mapped for the next frame; the cost is that a process keeps the memory of its peak.

``LEROBOT_LANG_MALLOC=default`` leaves glibc's behaviour alone (to compare, or to save memory).
"""

from __future__ import annotations

import ctypes
import os
import platform

MALLOC_ENV = 'LEROBOT_LANG_MALLOC'
# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks up to 32 MiB (glibc's ceiling for this threshold on 64-bit; a 1920x1080 rgb8 frame
# is 6 MiB) come from the heap, and up to 128 MiB of free heap stays mapped.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def tune_allocator(environ: dict[str, str] | None = None) -> str:
    """Apply the thresholds to this process; returns what was done (for the log)."""
    env = os.environ if environ is None else environ
    choice = env.get(MALLOC_ENV, 'tuned')
    if choice == 'default':
        return f'glibc malloc defaults ({MALLOC_ENV}=default)'
    if choice != 'tuned':
        raise ValueError(f'{MALLOC_ENV}={choice!r}: expected tuned (the default) or default')
    if platform.libc_ver()[0] != 'glibc':
        return 'not glibc: allocator left as it is'
    libc = ctypes.CDLL(None)
    ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
          and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1)
    if not ok:
        return 'glibc refused the malloc thresholds: allocator left as it is'
    return (f'malloc: mmap threshold {MMAP_THRESHOLD_BYTES >> 20} MiB, trim threshold '
            f'{TRIM_THRESHOLD_BYTES >> 20} MiB')


__all__ = ['MALLOC_ENV', 'tune_allocator']
