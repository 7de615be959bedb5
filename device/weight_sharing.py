"""Which program loads may use XNNPACK's weight cache. The cache keeps one packed copy of each
weight under its data key for every method and every program loaded with it on (xnnpack_options.py):
a program's two methods, its twins (a second conversation slot) and a drafter's slots then share one
copy. A program's adapter versions (.ptd files) reuse their data keys with other values, so two
loads of one program with different .ptd files alive at once must not both use it: the second
would run the first's packed LoRA weights (keys are content hashes of the values exported, so two
programs exported with the same initial adapter values share them too). A load is admitted to the
cache unless a load whose .ptd keys meet its own runs another .ptd and holds it now (the load then
packs its own copy); an admitted load holds it until its program is freed, and once none holds it
the next version is admitted (the cache's entries go with the last program that used them:
tests/device/test_device.py checks both).

Measured on the AMD EPYC (AVX-512), 2 cores, the smollm2-135m drafter program: 0.69 -> 0.54 GB
resident after load alone, a twin with the same adapter +0.12 GB where it packed its own +0.45.

Knows .ptd keys and files and object lifetimes; nothing about what programs compute.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Callable, TypeVar

from .xnnpack_options import weight_cache

T = TypeVar("T")
_lock = threading.Lock()  # guards _held (a finalizer may release from any thread)
_loading = threading.Lock()
_held: dict[tuple[frozenset, tuple], int] = {}  # (.ptd keys, the .ptd version) -> cached loads alive


def _version(ptd: Path) -> tuple:
    """The .ptd as loaded: its path, size and modification time (rewritten in place: another version)."""
    st = ptd.stat()
    return str(ptd.resolve()), st.st_size, st.st_mtime_ns


def _admit(keys: frozenset, version: tuple) -> bool:
    with _lock:
        if any(k & keys and v != version for k, v in _held):
            return False
        _held[keys, version] = _held.get((keys, version), 0) + 1
        return True


def _release(keys: frozenset, version: tuple) -> None:
    with _lock:
        left = _held.pop((keys, version), 0) - 1
        if left > 0:
            _held[keys, version] = left


def load_shared(keys, ptd: Path, load: Callable[[], T], owner: Callable[[T], object]) -> T:
    """``load()`` (a program load with ``ptd``'s weights, supplied under ``keys``) with XNNPACK's
    weight cache on where the cached loads alive under any of those keys run the same ``ptd`` (or
    there are none), else off; an admitted load holds the cache until ``owner(loaded)`` (the object
    whose lifetime is the program's) is freed.
    Where the runtime does not take the option, every load packs its own weights."""
    keys, version = frozenset(keys), _version(ptd)
    with _loading:  # the option is the runtime's, for whichever load comes next: one load at a time
        shared = _admit(keys, version)
        if shared and not weight_cache(True):
            _release(keys, version)
            shared = False
        if not shared:
            weight_cache(False)
        try:
            loaded = load()
        except BaseException:
            if shared:
                _release(keys, version)
            raise
    if shared:
        weakref.finalize(owner(loaded), _release, keys, version)
    return loaded
