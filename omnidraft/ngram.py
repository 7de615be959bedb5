"""The n-gram cache C = {drafter-id tuple -> target-id tuple}: runs of drafter sub-tokens that
spell the same text as a run of target tokens, where the two tokenizers disagree.

The paper's entries merge several drafter tokens into one target token (rule (1)); the same
table also holds the converse (one drafter token such as newline+indent spelled by several
target tokens) and many-to-many segments learned in context. Lookup of the longest run starting
at a draft position walks a prefix index: O(k * max_n) for a k-token draft, whatever |C| is.
Knows ids and byte tables; nothing about models, probabilities or persistence.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

Key = tuple[int, ...]
Value = tuple[int, ...]


class NgramCache:
    """Unbounded n-gram cache with a prefix index (bounded/persistent versions wrap this API)."""

    def __init__(self, max_n: int = 4):
        if max_n < 2:
            raise ValueError(f"max_n must be >= 2, got {max_n}")
        self.max_n = max_n
        self._map: dict[Key, Value] = {}
        self._prefixes: Counter[Key] = Counter()  # proper prefixes (len >= 1) of stored keys
        self.seeded = 0
        self.learned = 0

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: Key) -> bool:
        return key in self._map

    def get(self, key: Key) -> Value | None:
        return self._map.get(key)

    def add(self, key: Key, value: Value, *, seeded: bool = False) -> bool:
        """Store key -> value; False if present already or not an n-gram (both sides length 1,
        or a side longer than max_n)."""
        if (len(key) == 1 and len(value) == 1) or not key or not value:
            return False
        if len(key) > self.max_n or len(value) > self.max_n or key in self._map:
            return False
        self._map[key] = tuple(value)
        for j in range(1, len(key)):
            self._prefixes[key[:j]] += 1
        if seeded:
            self.seeded += 1
        else:
            self.learned += 1
        return True

    def is_prefix(self, key: Key) -> bool:
        """Whether some stored key strictly extends ``key``."""
        return self._prefixes.get(key, 0) > 0

    def longest(self, draft: Sequence[int], start: int, min_len: int = 1) -> tuple[Value, int] | None:
        """(target ids, key length) of the longest stored run draft[start:start+n] with
        n >= min_len, or None."""
        best = None
        end = min(len(draft), start + self.max_n)
        for j in range(start + 1, end + 1):
            key = tuple(draft[start:j])
            if j - start >= min_len:
                v = self._map.get(key)
                if v is not None:
                    best = (v, j - start)
            if not self.is_prefix(key):
                break
        return best

    def items(self) -> Iterable[tuple[Key, Value]]:
        return self._map.items()


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
