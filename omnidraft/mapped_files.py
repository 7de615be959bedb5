"""This process's mappings of files, and handing their resident pages back to the system.

A page of a mapped file that was never written is the page cache's: dropping it from this process
(madvise DONTNEED) loses nothing, and the next read of it maps it again from the page cache (or
the file). A page written through a private mapping would lose the write: callers drop only
pages they never write (a program's constants, a model's weights before quantisation).
Dropped, it no longer counts in this process's resident size, and the system may reclaim it
under pressure like any cached file page.

Knows /proc/self/maps and libc's madvise and munlock; nothing about what the files hold.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Callable

MADV_DONTNEED = 4


def mappings(path_matches: Callable[[str], bool]) -> list[tuple[int, int]]:
    """[start, end) of this process's file mappings whose path ``path_matches``."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and path_matches(fields[5]):
                    lo, hi = (int(x, 16) for x in fields[0].split("-"))
                    out.append((lo, hi))
    except OSError:  # not Linux
        pass
    return out


def drop(ranges: list[tuple[int, int]]) -> int:
    """Drop this process's resident pages wholly inside each [start, end) of ``ranges`` (which must lie
    inside file mappings, ``mappings``, and never have been written), unlocked first where they
    were locked; returns the bytes handed back."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc
        return 0
    libc.madvise.argtypes, libc.madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    libc.munlock.argtypes, libc.munlock.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
    page, dropped = mmap.PAGESIZE, 0
    for start, end in ranges:
        a, b = -(-start // page) * page, end // page * page
        if b > a:
            libc.munlock(a, b - a)
            if libc.madvise(a, b - a, MADV_DONTNEED) == 0:
                dropped += b - a
    return dropped
