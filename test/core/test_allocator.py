"""Node processes keep image-sized buffers in the heap instead of mapping them per frame."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from lerobot_lang_nodes.allocator import MALLOC_ENV, tune_allocator

# In a fresh process: does a 4 MiB allocation (a 1280x1080 rgb8 frame) get a mapping of its
# own? Counted in /proc/self/maps around it.
PROBE = '''
import sys
from lerobot_lang_nodes.allocator import tune_allocator
print(tune_allocator(), file=sys.stderr)  # the line a node logs (debug)
def mappings():
    with open('/proc/self/maps') as f:
        return sum(1 for _ in f)
before = mappings()
frame = bytearray(4 << 20)
frame[::4096] = b'x' * len(frame[::4096])  # touch every page
print(mappings() - before)
'''


def _new_mappings(env_value: str | None) -> int:
    import os
    env = {k: v for k, v in os.environ.items() if k != MALLOC_ENV}
    if env_value is not None:
        env[MALLOC_ENV] = env_value
    out = subprocess.run([sys.executable, '-c', PROBE], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != 'glibc' or sys.platform != 'linux',
                    reason='platform: needs glibc malloc on Linux')
def test_a_frame_sized_block_comes_from_the_heap_unless_the_defaults_are_asked_for():
    assert _new_mappings(None) == 0  # the nodes' setting: no mapping (and no faults) per frame
    assert _new_mappings('default') >= 1  # glibc's own threshold (128 KiB) maps it


def test_the_choice_is_validated_and_reported():
    assert 'defaults' in tune_allocator({MALLOC_ENV: 'default'})
    with pytest.raises(ValueError, match=MALLOC_ENV):
        tune_allocator({MALLOC_ENV: 'fast'})
