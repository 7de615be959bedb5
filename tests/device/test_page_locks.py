"""device/page_locks.py: inside ``unlocked()`` this thread's page locks are refused, as an
unprivileged process's are (root included); after it, the lock limit and capabilities are back."""

import ctypes
import mmap
import resource
import sys

import pytest

from omnidraft.device.page_locks import unlocked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux capabilities and rlimits")


def _mlock_works(size: int = 4 << 20) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    region = mmap.mmap(-1, size)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    try:
        locked = libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) == 0
        if locked:
            libc.munlock(ctypes.c_void_p(address), ctypes.c_size_t(size))
        return locked
    finally:
        del address
        region.close()


def test_locks_are_refused_inside_and_the_limits_are_back_after():
    limits = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    before = _mlock_works()
    with unlocked():
        assert not _mlock_works()  # 4 MB: within the usual 8 MB limit, refused all the same
        assert resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] == 0
    assert resource.getrlimit(resource.RLIMIT_MEMLOCK) == limits
    assert _mlock_works() == before  # root's CAP_IPC_LOCK (or the user's limit) as it was
