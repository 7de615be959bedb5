"""The n-gram cache's cold tier: packed n-gram keys -> packed values with a score per entry, in
flat numpy arrays (an open-addressing hash table, linear probing): well under the ~160 B per
entry of a Python dict of ints and the ~270 B of cachetools' LFU.

Knows packed ints (ngram.pack) and scores; nothing about tokenizers or eviction policy (the
caller says which entries to drop). Lookup is O(1) expected; removal is by batch rebuild.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

_M64 = (1 << 64) - 1
_K1, _K2 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F  # Fibonacci / murmur multipliers
_COLS = {"khi": np.uint16, "klo": np.uint64, "vhi": np.uint16, "vlo": np.uint64, "score": np.uint32,
         "seeded": bool}
_PENDING_MAX = 4096  # new prefixes kept in a set before they are merged into the sorted array


def split(v: int) -> tuple[int, int]:
    """Packed int (< 2**80) -> (high 16 bits, low 64 bits)."""
    return v >> 64, v & _M64


class PackedTable:
    """Entries live in dense columns, index = entry number: khi uint16 / klo uint64 (the packed
    key), vhi / vlo (the packed value), score uint32 (uses for LFU, last-use tick for LRU),
    seeded bool; all shaped (capacity,), the first ``n`` used. ``slots`` (2**bits,) int32 maps
    hash slots to entry numbers, -1 empty, load kept in (1/8, 1/2]. Proper prefixes of the keys
    (at most max_n - 1 ids, so they fit 64 bits exactly) are a sorted uint64 array (p,) plus a
    small set of recent ones.
    """

    def __init__(self, bits_per_id: int, max_n: int):
        if bits_per_id * (max_n - 1) > 64:
            raise ValueError("prefixes must fit 64 bits")
        self._id_bits = bits_per_id
        self._max_n = max_n
        self.n = self.n_seeded = 0
        self._columns(64)
        self._new_slots(8)
        self.prefixes = np.zeros(0, np.uint64)  # (p,) sorted
        self._pending: set[int] = set()

    def __getstate__(self) -> dict:  # memoryviews do not pickle (deepcopy, multiprocessing)
        return {k: v for k, v in self.__dict__.items() if not k.endswith("_v")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._khi_v, self._klo_v = memoryview(self.khi), memoryview(self.klo)
        self._slots_v = memoryview(self.slots)

    def _columns(self, cap: int) -> None:
        for name, dt in _COLS.items():
            col = np.zeros(cap, dt)
            old = getattr(self, name, None)
            if old is not None:
                col[: self.n] = old[: self.n]
            setattr(self, name, col)
        # memoryviews index to Python ints several times faster than numpy scalars
        self._khi_v, self._klo_v = memoryview(self.khi), memoryview(self.klo)

    def _new_slots(self, bits: int) -> None:
        self._mask = (1 << bits) - 1
        self._shift = 64 - bits
        self.slots = np.full(1 << bits, -1, np.int32)  # (2**bits,)
        self._slots_v = memoryview(self.slots)

    def __len__(self) -> int:
        return self.n

    def _slot0(self, hi: int, lo: int) -> int:
        return (((lo * _K1) ^ (hi * _K2)) & _M64) >> self._shift

    # ------------------------------------------------------------------ lookup
    def find(self, pk: int) -> int:
        """Entry number of a packed key, or -1."""
        hi, lo = pk >> 64, pk & _M64
        s = self._slot0(hi, lo)
        slots, klo, khi = self._slots_v, self._klo_v, self._khi_v
        while True:
            i = slots[s]
            if i < 0 or (klo[i] == lo and khi[i] == hi):
                return i
            s = (s + 1) & self._mask

    def is_prefix(self, pk: int) -> bool:
        """Whether some stored key strictly extends ``pk``."""
        if pk >> 64:
            return False
        if pk in self._pending:
            return True
        p = self.prefixes
        j = int(np.searchsorted(p, np.uint64(pk)))
        return j < p.size and int(p[j]) == pk

    def value(self, i: int) -> int:
        return (int(self.vhi[i]) << 64) | int(self.vlo[i])

    def key(self, i: int) -> int:
        return (int(self.khi[i]) << 64) | int(self.klo[i])

    # ------------------------------------------------------------------ insert
    def add(self, pk: int, pv: int, score: int, seeded: bool) -> None:
        """Store one key that is not stored yet."""
        i = self.n
        if i == len(self.klo):
            self._columns(i + i // 4 + 64)
        hi, lo = split(pk)
        self.khi[i], self.klo[i] = hi, lo
        self.vhi[i], self.vlo[i] = split(pv)
        self.score[i], self.seeded[i] = score, seeded
        self.n += 1
        self.n_seeded += bool(seeded)
        if 2 * self.n > len(self.slots):
            self._reslot()
        else:
            s = self._slot0(hi, lo)
            while self._slots_v[s] >= 0:
                s = (s + 1) & self._mask
            self._slots_v[s] = i
        pp = pk >> self._id_bits
        while pp:
            self._pending.add(pp)
            pp >>= self._id_bits
        if len(self._pending) > _PENDING_MAX:
            self.prefixes = np.union1d(self.prefixes, np.fromiter(self._pending, np.uint64))
            self._pending.clear()

    def add_many(self, pks: list[int], pvs: list[int], scores: Iterable[int],
                 seeded: Iterable[bool]) -> None:
        """Bulk-store new, distinct keys (not stored yet), then re-slot once."""
        m = len(pks)
        if not m:
            return
        e0 = self.n
        if e0 + m > len(self.klo):
            self._columns(e0 + m)
        self.khi[e0:e0 + m] = [k >> 64 for k in pks]
        self.klo[e0:e0 + m] = np.fromiter((k & _M64 for k in pks), np.uint64, m)
        self.vhi[e0:e0 + m] = [v >> 64 for v in pvs]
        self.vlo[e0:e0 + m] = np.fromiter((v & _M64 for v in pvs), np.uint64, m)
        self.score[e0:e0 + m] = np.fromiter(scores, np.uint32, m)
        self.seeded[e0:e0 + m] = np.fromiter(seeded, bool, m)
        self.n += m
        self.n_seeded = int(self.seeded[: self.n].sum())
        self._reslot()
        self._reprefix()

    # ------------------------------------------------------------------ removal / re-slot
    def remove(self, entries: np.ndarray) -> None:
        """Drop the given entry numbers, then rebuild: entry numbers change."""
        keep = np.ones(self.n, bool)
        keep[entries] = False
        n = int(keep.sum())
        for name in _COLS:
            col = getattr(self, name)[: self.n][keep]
            setattr(self, name, np.concatenate([col, np.zeros(n // 8 + 16, col.dtype)]))
        self._khi_v, self._klo_v = memoryview(self.khi), memoryview(self.klo)
        self.n = n
        self.n_seeded = int(self.seeded[:n].sum())
        self._reslot()
        self._reprefix()

    def _reprefix(self) -> None:
        """Recompute the sorted proper prefixes of all keys, vectorised."""
        hi, lo = self.khi[: self.n].astype(np.uint64), self.klo[: self.n]
        b = np.uint64(self._id_bits)
        lo = (lo >> b) | (hi << np.uint64(64 - self._id_bits))  # drop the last id; now < 2**64
        parts = []
        for _ in range(self._max_n - 1):
            lo = lo[lo != 0]
            parts.append(lo)
            lo = lo >> b
        self.prefixes = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
        self._pending.clear()

    def _reslot(self) -> None:
        """Size slots for load <= 1/4 and place every entry: linear probing, vectorised in rounds."""
        n = self.n
        bits = 8
        while (1 << bits) < 4 * n:
            bits += 1
        self._new_slots(bits)
        hi, lo = self.khi[:n].astype(np.uint64), self.klo[:n]
        with np.errstate(over="ignore"):
            s = ((lo * np.uint64(_K1)) ^ (hi * np.uint64(_K2))) >> np.uint64(self._shift)
        s = s.astype(np.int64)
        pending = np.arange(n)
        while pending.size:
            cand = s[pending]
            free = np.flatnonzero(self.slots[cand] < 0)
            slots, first = np.unique(cand[free], return_index=True)
            self.slots[slots] = pending[free[first]]
            lost = np.ones(pending.size, bool)
            lost[free[first]] = False
            pending = pending[lost]
            s[pending] = (s[pending] + 1) & self._mask
