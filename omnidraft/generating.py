"""Whether this device is generating: every Session generation holds a shared lock on one file
($OMNIDRAFT_HOME/daemon/generating.lock) while it runs and stamps the file when it ends, and a
benchmark holds it while it times anything. The fine-tuning daemon trains only while nobody holds
it and the last generation ended ``QUIET_S`` ago (a guest on the device: train/daemon.py). The lock
is the kernel's (``flock``): a process killed mid-generation releases it with its files.

Knows files and locks; nothing about generating or training.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from omnidraft.home import subdir

QUIET_S = 2.0  # after a generation ends, the daemon waits this long for the next (a chat's follow-up)


def _path() -> Path:
    return subdir("daemon") / "generating.lock"


def _open() -> int | None:
    try:
        return os.open(_path(), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # a home that cannot be written: no daemon can be told, none can train there either
        return None


@contextmanager
def generating() -> Iterator[None]:
    """Held around one generation (any number at once, in any processes)."""
    fd = _open()
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only for a daemon's instant probe
        yield
    finally:
        try:
            os.utime(fd)  # when the last generation ended
        except OSError:
            pass
        os.close(fd)  # and the lock with it


def _probe(kind: int, quiet_s: float) -> bool:
    """Whether the lock can be taken as ``kind`` at once and was last stamped ``quiet_s`` ago or more."""
    fd = _open()
    if fd is None:
        return True
    try:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return time.time() - os.fstat(fd).st_mtime >= quiet_s
    finally:
        os.close(fd)


def free() -> bool:
    """True when a generation could start now without waiting (no exclusive hold: a daemon's probe)."""
    return _probe(fcntl.LOCK_SH, 0.0)


def idle(quiet_s: float = QUIET_S) -> bool:
    """True when no generation runs anywhere and the last one ended at least ``quiet_s`` ago."""
    return _probe(fcntl.LOCK_EX, quiet_s)
