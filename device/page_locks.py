"""A program loaded without its file's pages locked in memory.

ExecuTorch's file loader maps each segment of a program and locks it (mlock), ignoring a lock the
system refuses. A process with the usual lock limit (RLIMIT_MEMLOCK, 8 MB here) is refused for any
large segment and reads in only the pages a call touches; one with CAP_IPC_LOCK (root: CI,
containers, this benchmark machine) gets every lock, so every page of what XNNPACK does not pack
is read in at load: the 0.5B target's 8-bit token embedding, 130 MB, of which a call reads a few
rows, again in each conversation slot's load. ``unlocked()`` makes every load behave as the usual
process's: the lock limit 0 and, in this thread, CAP_IPC_LOCK out of the effective set (it stays
permitted and is put back after). The same bits load (tests/device/test_page_locks.py).

Knows Linux's capabilities and rlimits; elsewhere it changes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Iterator

CAP_IPC_LOCK = 14
_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words of each set


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _capabilities():
    """(libc, header, this thread's sets) where capget is there and answers, else None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        header, data = _Header(_VERSION_3, 0), (_Data * 2)()
        if libc.capget(ctypes.byref(header), data) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return libc, header, data


@contextlib.contextmanager
def unlocked() -> Iterator[None]:
    """Inside it, this thread's mlock calls are refused as an unprivileged process's are."""
    try:
        import resource
        limits = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, limits[1]))
    except (ImportError, AttributeError, ValueError, OSError):
        limits = None
    caps = _capabilities()
    dropped = caps is not None and bool(caps[2][0].effective & (1 << CAP_IPC_LOCK))
    if dropped:
        libc, header, data = caps
        data[0].effective &= ~(1 << CAP_IPC_LOCK)
        dropped = libc.capset(ctypes.byref(header), data) == 0
    try:
        yield
    finally:
        if dropped:
            data[0].effective |= 1 << CAP_IPC_LOCK
            libc.capset(ctypes.byref(header), data)
        if limits is not None:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, limits)
