"""omnidraft/heap.py: freed C heap pages leave the process."""

import ctypes
import sys

import pytest

from omnidraft import heap


def _anon_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) << 10
    return 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or heap._malloc_trim() is None, reason="glibc only")
def test_trim_hands_back_pages_freed_below_a_block_still_in_use():
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, n = 64 << 10, 1024  # 64 MiB in blocks below the mmap threshold: in the heap
    blocks = [libc.malloc(size) for _ in range(n)]
    for b in blocks:
        ctypes.memset(b, 1, size)
    held = _anon_bytes()
    for b in blocks[:-1]:  # the last block keeps the heap's top where it is: nothing trims by itself
        libc.free(b)
    freed = _anon_bytes()
    assert heap.trim()
    after = _anon_bytes()
    libc.free(blocks[-1])
    assert held - freed < (16 << 20)  # freeing alone left the pages resident
    assert freed - after > (48 << 20), (held, freed, after)
