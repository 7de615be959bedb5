"""The C heap's free pages handed back to the system after a generation (glibc's
``malloc_trim``). Each generation allocates and frees tensors of every size, much of it in the
malloc arena of the thread that ran it (the server runs each request on a thread of its own), and
glibc keeps freed pages of an arena resident for the next allocation: a 0.5B pair's server grew by
0.15 GB over its first eight requests. Trimmed after each generation, only what is in use stays.

Knows glibc; elsewhere (another libc, another OS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def trim() -> bool:
    """Return every arena's free pages to the system; True if any were (False where unsupported)."""
    fn = _malloc_trim()
    return bool(fn(0)) if fn is not None else False
