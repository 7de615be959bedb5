"""The n-gram cache C = {drafter-id tuple -> target-id tuple}: runs of drafter sub-tokens that
spell the same text as a run of target tokens, where the two tokenizers disagree.

The paper's entries merge several drafter tokens into one target token (rule (1)); the same
table also holds the converse (one drafter token such as newline+indent spelled by several
target tokens) and many-to-many segments learned in context. Memory-bounded by entry count and
bytes with LFU (default) or LRU eviction (cachetools). Lookup of the longest run starting at a
draft position walks a prefix index: O(k * max_n) for a k-token draft, whatever |C| is.
Knows ids; nothing about vocabularies, models, probabilities or files (seeding from the
vocabularies: ngram_seed.py; byte alignment of segments: align.py; the disk: ngram_store.py).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import cachetools
import numpy as np

from omnidraft.translate.ngram_table import PackedTable

Key = tuple[int, ...]
Value = tuple[int, ...]

_BITS = 19  # ids < 2**19 - 1 (Gemma-3's 262,144 ids fit); id + 1 so no tuple packs to another's int
_MASK = (1 << _BITS) - 1
POLICIES = ("lfu", "lru", "unbounded")
# Bytes per stored entry, prefix keys included, measured with tracemalloc under churn
# (tests/translate/test_ngram_cache.py), worst seen + margin: turns a byte budget into an entry budget.
# The hot window is cachetools (a links dict and a node per key, hence its premium); the cold
# tier is flat numpy arrays (ngram_table.py).
HOT_BYTES_PER_ENTRY = {"lfu": 700, "lru": 560}
COLD_BYTES_PER_ENTRY = 90
WINDOW = 256  # most entries in the hot window of a bounded cache


def pack(ids: Sequence[int]) -> int:
    """Tuple of ids -> one int (compact dict key)."""
    v = 0
    for i in ids:
        v = (v << _BITS) | (i + 1)
    return v


def unpack(v: int) -> Key:
    out = []
    while v:
        out.append((v & _MASK) - 1)
        v >>= _BITS
    return tuple(reversed(out))


class _Evicting:
    """Mixin for a cachetools cache: report every eviction to a callback."""

    def __init__(self, maxsize, on_evict):
        super().__init__(maxsize)
        self._on_evict = on_evict

    def popitem(self):
        key, value = super().popitem()
        self._on_evict(key, value)
        return key, value


class _LFU(_Evicting, cachetools.LFUCache):
    pass


class _LRU(_Evicting, cachetools.LRUCache):
    pass


def window_for(capacity: int | None, window: int = WINDOW) -> int:
    """Hot-window entries of a cache with ``capacity`` entries: 1/8 of it, at most ``window``."""
    return 0 if capacity is None else min(window, max(1, capacity // 8))


def capacity_for(max_bytes: int, policy: str, window: int = WINDOW) -> int:
    """Most entries whose hot window plus cold tier fit in ``max_bytes``."""
    hot, cold = HOT_BYTES_PER_ENTRY[policy], COLD_BYTES_PER_ENTRY
    n = int(max_bytes // (cold + hot / 8))
    return n if window_for(n, window) * hot + n * cold <= max_bytes else (max_bytes - window * hot) // cold


class NgramCache:
    """Bounded n-gram cache. ``max_entries``/``max_bytes`` bound memory (the tighter wins);
    ``policy`` picks what is evicted first: least frequently used (lfu) or least recently (lru).

    Two tiers. Entries learned online enter a small hot window, a cachetools LFUCache/LRUCache
    of 1/8 of the capacity (at most ``window`` entries), so a new entry is not evicted before it had a chance to be used;
    the window's victims move to the cold tier with their use count (LFU) or last-use tick
    (LRU). Seeded and restored entries go straight to the cold tier, a flat numpy hash table
    (ngram_table.py, ~4x smaller per entry). When both together exceed the capacity, the cold
    entries with the lowest score are evicted, in batches of 1/64 of the capacity.
    Frequencies count translation hits (an entry chosen for a proposal), not probes.
    """

    def __init__(self, max_n: int = 4, *, policy: str = "lfu", max_entries: int | None = None,
                 max_bytes: int | None = None, window: int = WINDOW):
        if max_n < 2:
            raise ValueError(f"max_n must be >= 2, got {max_n}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if policy == "unbounded" and (max_entries or max_bytes):
            raise ValueError("policy 'unbounded' takes no max_entries/max_bytes")
        self.max_n = max_n
        self.policy = policy
        caps = [c for c in (max_entries, None if max_bytes is None or policy == "unbounded"
                            else capacity_for(max_bytes, policy, window)) if c is not None]
        self.capacity = min(caps) if caps else None
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"cache bound too small: {max_entries=} {max_bytes=}")
        self.window = window_for(self.capacity, window)
        self._hot = None
        if self.window:
            self._hot = (_LFU if policy == "lfu" else _LRU)(self.window, self._demote)
        self._hot_score: dict[int, int] = {}  # hot key -> uses (LFU) or last-use tick (LRU)
        self._hot_prefixes: dict[int, int] = {}  # packed proper prefixes of hot keys -> count
        self._cold = PackedTable(_BITS, max_n)
        self._tick = 0
        self.evictions = 0
        self.hits: dict[int, int] = {}  # packed key -> hits since the last drain (for persistence)
        self.added: list[int] = []  # packed keys added since the last drain

    # ------------------------------------------------------------------ bookkeeping
    def _demote(self, pk: int, pv: int) -> None:
        """The hot window let go of ``pk``: keep it in the cold tier with its score."""
        pp = pk >> _BITS
        while pp:
            n = self._hot_prefixes[pp] - 1
            if n:
                self._hot_prefixes[pp] = n
            else:
                del self._hot_prefixes[pp]
            pp >>= _BITS
        self._cold.add(pk, pv, self._hot_score.pop(pk, 0), False)

    def _trim(self) -> None:
        over = len(self) - self.capacity if self.capacity is not None else 0
        if over <= 0:
            return
        cold = np.arange(len(self._cold))
        batch = min(cold.size, max(over, self.capacity // 64))
        victims = cold[np.argpartition(self._cold.score[cold], batch - 1)[:batch]] if batch else cold[:0]
        self._cold.remove(victims)
        self.evictions += batch

    @property
    def seeded(self) -> int:
        return self._cold.n_seeded

    @property
    def learned(self) -> int:
        return len(self) - self.seeded

    def __len__(self) -> int:
        return len(self._cold) + (len(self._hot) if self._hot is not None else 0)

    def _where(self, pk: int) -> int:
        """-2 if ``pk`` is a hot entry, its cold key number if a cold entry, else -1."""
        if self._hot is not None and pk in self._hot:
            return -2
        return self._cold.find(pk)

    def __contains__(self, key: Key) -> bool:
        return self._where(pack(key)) != -1

    def get(self, key: Key) -> Value | None:
        v = self._peek(pack(key))
        return None if v is None else unpack(v)

    def _is_ngram(self, key: Key, value: Value) -> bool:
        """Both sides 1..max_n ids, and not both a single id (that is a direct mapping)."""
        return bool(key) and bool(value) and not (len(key) == 1 and len(value) == 1) \
            and len(key) <= self.max_n and len(value) <= self.max_n

    def add(self, key: Key, value: Value, *, seeded: bool = False) -> bool:
        """Store key -> value; False if present already or not an n-gram (both sides length 1,
        or a side longer than max_n). Seeded entries go to the cold tier, learned ones to the
        hot window."""
        if not self._is_ngram(key, value):
            return False
        pk = pack(key)
        if self._where(pk) != -1:
            return False
        if seeded or self._hot is None:
            self._cold.add(pk, pack(value), 0, seeded)
        else:
            self._hot_score[pk] = self._score_now(0)
            self._hot[pk] = pack(value)  # may demote another entry to the cold tier first
            pp = pk >> _BITS
            while pp:
                self._hot_prefixes[pp] = self._hot_prefixes.get(pp, 0) + 1
                pp >>= _BITS
        self.added.append(pk)
        self._trim()
        return True

    def seed(self, keys: Sequence[Key], values: Sequence[Value]) -> int:
        """``add(key, value, seeded=True)`` of each pair in order; in bulk (the cold tier re-slotted
        once, not per entry) when the cache has room for them all. Returns entries added."""
        pks, pvs, seen = [], [], set()
        for k, v in zip(keys, values):
            if not self._is_ngram(k, v):
                continue
            pk = pack(k)
            if pk not in seen and self._where(pk) == -1:
                seen.add(pk)
                pks.append(pk)
                pvs.append(pack(v))
        if self.capacity is not None and len(self) + len(pks) > self.capacity:  # evicts as it goes
            return sum(self.add(k, v, seeded=True) for k, v in zip(keys, values))
        self._cold.add_many(pks, pvs, (0 for _ in pks), (True for _ in pks))
        self.added.extend(pks)
        return len(pks)

    def restore(self, rows: Sequence[tuple[int, int, bool, int]]) -> int:
        """Bulk-load entries from disk: (packed key, packed value, seeded, score), least used
        first. Keys already present are skipped; the most used that fit are kept."""
        if self.capacity is not None:
            rows = rows[max(0, len(rows) - (self.capacity - len(self))):]
        seen = set()
        rows = [r for r in rows if r[0] not in seen and not seen.add(r[0]) and self._where(r[0]) == -1]
        self._cold.add_many([r[0] for r in rows], [r[1] for r in rows], (r[3] for r in rows),
                            (r[2] for r in rows))
        if rows and self.policy == "lru":
            self._tick = max(self._tick, max(r[3] for r in rows))
        return len(rows)

    def _score_now(self, uses: int) -> int:
        if self.policy == "lru":
            self._tick += 1
            return self._tick
        return uses

    def touch(self, pk: int, times: int = 1) -> None:
        """Count ``times`` uses of a stored entry (moves it up in LFU/LRU order)."""
        where = self._where(pk)
        if where == -2:
            for _ in range(times):
                self._hot[pk]  # noqa: B018  (cachetools counts the access)
            self._hot_score[pk] = self._score_now(self._hot_score.get(pk, 0) + times)
        elif where >= 0:
            sc = self._cold.score
            sc[where] = self._score_now(int(sc[where]) + times)

    def is_prefix(self, key: Key) -> bool:
        """Whether some stored key strictly extends ``key``."""
        pk = pack(key)
        return pk in self._hot_prefixes or self._cold.is_prefix(pk)

    def longest(self, draft: Sequence[int], start: int, min_len: int = 1) -> tuple[Value, int] | None:
        """(target ids, key length) of the longest stored run draft[start:start+n] with
        n >= min_len, or None. Counts one hit for the entry returned."""
        best = None
        pk = 0
        end = min(len(draft), start + self.max_n)
        hot, hot_pre, cold = self._hot, self._hot_prefixes, self._cold
        for j in range(start, end):
            pk = (pk << _BITS) | (draft[j] + 1)
            n = j - start + 1
            if n >= min_len and ((hot is not None and pk in hot) or cold.find(pk) >= 0):
                best = (pk, n)  # `in` does not count as a use
            if pk not in hot_pre and not cold.is_prefix(pk):
                break
        if best is None:
            return None
        value = self._peek(best[0])
        self.touch(best[0])  # one counted use
        self.hits[best[0]] = self.hits.get(best[0], 0) + 1
        return unpack(value), best[1]

    def drain(self) -> tuple[list[tuple[int, int, bool]], list[tuple[int, int]]]:
        """What changed since the last drain, then forget it: (packed key, packed value, seeded)
        of entries added and still stored, and (packed key, hits) of entries used."""
        added = []
        for k in dict.fromkeys(self.added):
            where = self._where(k)
            if where != -1:
                added.append((k, self._peek(k), where >= 0 and bool(self._cold.seeded[where])))
        hits = list(self.hits.items())
        self.added, self.hits = [], {}
        return added, hits

    def _peek(self, pk: int) -> int | None:
        """Packed value, read without counting a use; None if absent."""
        where = self._where(pk)
        if where == -2:
            return cachetools.Cache.__getitem__(self._hot, pk)
        return self._cold.value(where) if where >= 0 else None

    def items(self) -> Iterable[tuple[Key, Value]]:
        if self._hot is not None:
            for k, v in list(cachetools.Cache.items(self._hot)):
                yield unpack(k), unpack(v)
        cold = self._cold
        for i in range(len(cold)):
            yield unpack(cold.key(i)), unpack(cold.value(i))
