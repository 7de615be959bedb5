"""The n-gram cache C = {drafter-id tuple -> target-id tuple}: runs of drafter sub-tokens that
spell the same text as a run of target tokens, where the two tokenizers disagree.

The paper's entries merge several drafter tokens into one target token (rule (1)); the same
table also holds the converse (one drafter token such as newline+indent spelled by several
target tokens) and many-to-many segments learned in context. Memory-bounded by entry count and
bytes with LFU (default) or LRU eviction (cachetools). Lookup of the longest run starting at a
draft position walks a prefix index: O(k * max_n) for a k-token draft, whatever |C| is.
Knows ids and byte tables; nothing about models, probabilities or files (ngram_store.py).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import cachetools

Key = tuple[int, ...]
Value = tuple[int, ...]

_BITS = 19  # ids < 2**19 - 1 (Gemma-3's 262,144 ids fit); id + 1 so no tuple packs to another's int
_MASK = (1 << _BITS) - 1
POLICIES = ("lfu", "lru", "unbounded")
# Bytes per stored entry in steady state under eviction churn, prefix index included, measured
# with tracemalloc (tests/test_ngram_cache.py): turns a byte budget into an entry budget.
# cachetools' LFU keeps a links dict and an OrderedDict node per key, hence its premium.
BYTES_PER_ENTRY = {"lfu": 700, "lru": 560, "unbounded": 220}  # worst seen + margin


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


class NgramCache:
    """Bounded n-gram cache. ``max_entries``/``max_bytes`` bound memory (the tighter wins);
    ``policy`` picks what is evicted first: least frequently used (lfu) or least recently (lru).

    Frequencies count translation hits (an entry chosen for a proposal), not probes.
    """

    def __init__(self, max_n: int = 4, *, policy: str = "lfu", max_entries: int | None = None,
                 max_bytes: int | None = None):
        if max_n < 2:
            raise ValueError(f"max_n must be >= 2, got {max_n}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.max_n = max_n
        self.policy = policy
        per_entry = BYTES_PER_ENTRY[policy]
        caps = [c for c in (max_entries, None if max_bytes is None else max_bytes // per_entry)
                if c is not None]
        self.capacity = min(caps) if caps else None
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"cache bound too small: {max_entries=} {max_bytes=}")
        if policy == "unbounded" or self.capacity is None:
            self._map: dict | cachetools.Cache = {}
        else:
            self._map = (_LFU if policy == "lfu" else _LRU)(self.capacity, self._evicted)
        self._prefixes: dict[int, int] = {}  # packed proper prefixes of stored keys -> count
        self._seeded: set[int] = set()  # packed keys that came from seeding
        self.learned_total = 0  # entries ever learned online (evicted ones included)
        self.evictions = 0
        self.hits: dict[int, int] = {}  # packed key -> hits since the last drain (for persistence)
        self.added: list[int] = []  # packed keys added since the last drain

    # ------------------------------------------------------------------ bookkeeping
    def _evicted(self, pk: int, value: int) -> None:
        self.evictions += 1
        self._seeded.discard(pk)
        pp = pk >> _BITS
        while pp:
            n = self._prefixes[pp] - 1
            if n:
                self._prefixes[pp] = n
            else:
                del self._prefixes[pp]
            pp >>= _BITS

    @property
    def seeded(self) -> int:
        return len(self._seeded)

    @property
    def learned(self) -> int:
        return len(self._map) - len(self._seeded)

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: Key) -> bool:
        return pack(key) in self._map

    def get(self, key: Key) -> Value | None:
        pk = pack(key)
        return unpack(self._peek(pk)) if pk in self._map else None

    def add(self, key: Key, value: Value, *, seeded: bool = False) -> bool:
        """Store key -> value; False if present already or not an n-gram (both sides length 1,
        or a side longer than max_n)."""
        if (len(key) == 1 and len(value) == 1) or not key or not value:
            return False
        if len(key) > self.max_n or len(value) > self.max_n:
            return False
        return self._insert(pack(key), pack(value), seeded, new=True)

    def add_packed(self, pk: int, pv: int, seeded: bool) -> bool:
        """Restore an entry loaded from disk (already validated; not counted as new)."""
        return self._insert(pk, pv, seeded, new=False)

    def _insert(self, pk: int, pv: int, seeded: bool, new: bool) -> bool:
        if pk in self._map:
            return False
        self._map[pk] = pv  # may evict another entry first
        prefixes = self._prefixes
        pp = pk >> _BITS
        while pp:  # proper prefixes, by dropping the last id
            prefixes[pp] = prefixes.get(pp, 0) + 1
            pp >>= _BITS
        if seeded:
            self._seeded.add(pk)
        if new:
            self.added.append(pk)
            self.learned_total += not seeded
        return True

    def touch(self, pk: int, times: int = 1) -> None:
        """Count ``times`` uses of a stored entry (moves it up in LFU/LRU order)."""
        for _ in range(times):
            self._map[pk]  # noqa: B018  (cachetools counts the access)

    def is_prefix(self, key: Key) -> bool:
        """Whether some stored key strictly extends ``key``."""
        return pack(key) in self._prefixes

    def longest(self, draft: Sequence[int], start: int, min_len: int = 1) -> tuple[Value, int] | None:
        """(target ids, key length) of the longest stored run draft[start:start+n] with
        n >= min_len, or None. Counts one hit for the entry returned."""
        best = None
        pk = 0
        end = min(len(draft), start + self.max_n)
        for j in range(start, end):
            pk = (pk << _BITS) | (draft[j] + 1)
            n = j - start + 1
            if n >= min_len and pk in self._map:  # `in` does not count as a use
                best = (pk, n)
            if pk not in self._prefixes:
                break
        if best is None:
            return None
        value = self._map[best[0]]  # one counted use
        self.hits[best[0]] = self.hits.get(best[0], 0) + 1
        return unpack(value), best[1]

    def drain(self) -> tuple[list[tuple[int, int, bool]], list[tuple[int, int]]]:
        """What changed since the last drain, then forget it: (packed key, packed value, seeded)
        of entries added and still stored, and (packed key, hits) of entries used."""
        added = [(k, self._peek(k), k in self._seeded) for k in dict.fromkeys(self.added)
                 if k in self._map]
        hits = list(self.hits.items())
        self.added, self.hits = [], {}
        return added, hits

    def _peek(self, pk: int) -> int:
        """Read without counting a use."""
        if type(self._map) is dict:
            return self._map[pk]
        return cachetools.Cache.__getitem__(self._map, pk)

    def items(self) -> Iterable[tuple[Key, Value]]:
        return ((unpack(k), unpack(v)) for k, v in list(self._map.items()))



def _texts(table: list[bytes | None], ids: Iterable[int]) -> tuple[list[int], list[str]]:
    keep, texts = [], []
    for i in ids:
        data = table[i]
        if not data:
            continue
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            continue
        keep.append(i)
    return keep, texts


def seed(cache: NgramCache, vmap, draft_tok, target_tok) -> int:
    """Seed from the vocabularies: every target token with no direct mapping that the drafter
    spells with 2..max_n tokens (rule (1) merges), and every drafter token with no direct mapping
    that the target spells with 2..max_n tokens (splits). Returns entries added."""
    added = 0
    tids, texts = _texts(vmap.target_bytes, (t for t in range(len(vmap.t2d)) if vmap.t2d[t] < 0))
    if texts:
        for t, split in zip(tids, draft_tok(texts, add_special_tokens=False)["input_ids"]):
            if 2 <= len(split) <= cache.max_n:
                added += cache.add(tuple(split), (t,), seeded=True)
    dids, texts = _texts(vmap.draft_bytes, (d for d in range(len(vmap.d2t)) if vmap.d2t[d] < 0))
    if texts:
        for d, split in zip(dids, target_tok(texts, add_special_tokens=False)["input_ids"]):
            if 2 <= len(split) <= cache.max_n:
                added += cache.add((d,), tuple(split), seeded=True)
    return added


def aligned_segments(draft_ids: Sequence[int], draft_lens: Sequence[int],
                     target_ids: Sequence[int], target_lens: Sequence[int]):
    """Split two tokenizations of the same bytes at their common token boundaries.

    ``*_lens``: byte length of each token. Both sequences must end at the same byte. Yields
    (drafter-id tuple, target-id tuple) for each minimal segment between common boundaries,
    walking back from the shared end (so a ragged start is simply never reached).
    """
    i, j = len(draft_ids), len(target_ids)
    seg_d: list[int] = []
    seg_t: list[int] = []
    dpos = tpos = 0  # bytes consumed from the end on each side
    while i > 0 or j > 0:
        if (dpos <= tpos and i > 0) or j == 0:
            i -= 1
            seg_d.append(draft_ids[i])
            dpos += draft_lens[i]
        else:
            j -= 1
            seg_t.append(target_ids[j])
            tpos += target_lens[j]
        if dpos == tpos and seg_d and seg_t:
            yield tuple(reversed(seg_d)), tuple(reversed(seg_t))
            seg_d, seg_t = [], []
