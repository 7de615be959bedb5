"""A memory budget: the most one process running a pair may hold resident (its RSS, read from
/proc/self/status), asked before each optional part loads and once the required ones have.

What a pair needs resident is the target and, for speculation, the drafter; what it can do
without is the other target runtime a router may choose (pairs/assemble.py) and the caches of
more conversation slots (models/slots.py). Those are loaded only while the budget has room for
their estimated size; the required parts failing to fit is one clear error. The daemon and other
processes keep budgets of their own.

``release`` hands what a process freed back to the system (a daemon's round, a benchmark's rows).

Knows /proc and sizes written by people ("3.5G", "800M"); nothing about which parts exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from omnidraft.errors import OmniDraftError

_UNITS = {"": 1 << 20, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes in ``text``: a number of MiB, or with a unit M / G (MB, GiB, ... alike), e.g. "3.5G"."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m and _UNITS.get(m.group(2).upper())
    if not unit or float(m.group(1)) <= 0:
        raise OmniDraftError(f"not a memory size: {text!r}", "write it as MiB (1500), or with M or G (800M, 3.5G)")
    return int(float(m.group(1)) * unit)


def status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM of process ``pid`` in bytes ({} when it is gone or /proc cannot be read)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out if len(out) == 2 else {}


def rss_bytes() -> int:
    """This process's resident set size (0 where /proc has none)."""
    return status().get("VmRSS", 0)


def available_bytes() -> tuple[int, int] | None:
    """(MemAvailable, MemTotal) in bytes from /proc/meminfo; None where there is none."""
    try:
        fields = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    except OSError:
        return None
    return int(fields["MemAvailable"].split()[0]) << 10, int(fields["MemTotal"].split()[0]) << 10


def release() -> None:
    """Hand freed memory back to the system: collect, then trim the C heap (glibc keeps freed heap
    otherwise: a 1.5B program's 5.2 GB fell to 0.75 GB on collection and to 0.41 GB trimmed)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


@dataclass(frozen=True)
class Budget:
    """``max_bytes``: the most this process may hold resident; None: no budget of its own (a slot's
    cache still leaves part of the machine free, models/slots.py)."""

    max_bytes: int | None = None

    def __post_init__(self):
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise OmniDraftError(f"the memory budget must be positive, got {self.max_bytes} bytes")

    def allows(self, more: int) -> bool:
        """Whether ``more`` bytes still fit beside what this process holds now."""
        return self.max_bytes is None or rss_bytes() + more <= self.max_bytes

    def require(self, what: str, hint: str) -> None:
        """An error naming ``what`` (the parts just loaded) when this process holds more than the budget."""
        held = rss_bytes()
        if self.max_bytes is not None and held > self.max_bytes:
            raise OmniDraftError(f"{what} holds {gib(held)} resident here, over the memory budget of "
                                 f"{gib(self.max_bytes)}", hint)
