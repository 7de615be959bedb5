"""The index of a memory's entries (earlier prompts and answers, in target ids): given the current
context, the longest suffix of it that occurred in any entry, and the continuation that most
often followed it (SuffixDecoding's walk: follow the most frequent next id, the chance the product
of count ratios, stop below ``min_prob``; ties go to the most recent occurrence).

Layout (numpy, no Python object per token): ``toks``, every entry's ids each followed by a
sentinel (-1); two tables, for the ``short`` and the ``long`` n-grams, of (hash, end) sorted by
hash, ends ascending within a hash. A find looks the context's last ``long`` ids up first (so a
long match is found among all its occurrences), else its last ``short``; takes the most recent
``candidates`` occurrences, measures each one's match backwards up to ``max_match`` ids, keeps the
longest and walks forward from them: a few binary searches and array operations on at most
``candidates`` x ``max_match`` ids, whatever the memory holds. Adding an entry merges its n-grams
into the sorted tables (one copy of each); ``build`` makes the whole index at once (vectorised).

Knows target ids and arrays; nothing about the store, models or decoding.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from omnidraft.memory.config import MemoryConfig

P = np.uint64(0x9E3779B97F4A7C15)  # the rolling hash's multiplier (odd): h = h * P + (id + 1), mod 2**64
MASK = (1 << 64) - 1
SENTINEL = -1  # ends every entry: no n-gram and no continuation crosses it
SURE = 0.5  # a recall whose first id most of its occurrences agree on (Recall.priced_as)
LONG_MATCH = 8  # a match this long needs no second occurrence to be trusted (Recall.priced_as)


def gram_hash(ids: Iterable[int]) -> int:
    """The hash of one n-gram, as ``gram_hashes`` computes it for every position."""
    h, p = 0, int(P)
    for t in ids:
        h = (h * p + int(t) + 1) & MASK
    return h


def gram_hashes(toks: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, ends) of every n-gram of ``toks`` [L] that holds no sentinel: ``ends`` the position
    just past each (where its continuation starts), ascending."""
    size = len(toks) - n + 1
    if size <= 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int32)
    x = toks.astype(np.int64).astype(np.uint64) + np.uint64(1)  # the sentinel becomes 0
    h = x[:size].copy()
    for j in range(1, n):
        h = h * P + x[j:size + j]
    gaps = np.concatenate([[0], np.cumsum(toks < 0)])
    ok = gaps[n:] == gaps[:size]
    return h[ok], (np.flatnonzero(ok) + n).astype(np.int32)


@dataclass(frozen=True)
class Recall:
    """A continuation from the memory."""

    length: int  # ids of the context's suffix that matched
    continuation: list[int]  # what most often followed (at least one id)
    probs: list[float]  # per id, the estimated chance the continuation is right up to it
    entries: tuple[int, ...]  # the entries whose occurrences it followed to its end
    occurrences: int  # occurrences of the matched suffix weighed
    support: tuple[int, ...] = ()  # per id, the occurrences it was read from (those followed up to it)
    source = "memory"

    @property
    def steps(self) -> tuple[float, ...]:
        """Per id, the share of the occurrences still followed that went on with it (the chance's
        step: 1 where they all agree, below 1 where they split), negative where only one occurrence
        was followed (nothing agreed or split: -1); the cost model prices each id by it."""
        ratios = (p / q for p, q in zip(self.probs, [1.0, *self.probs[:-1]]))
        return tuple(-1.0 if n == 1 else r for r, n in zip(ratios, self.support or [0] * len(self.probs)))

    @property
    def priced_as(self) -> str:
        """Whose acceptance counts the cost model prices it by: a recall that earlier text supports
        (``memory``: most of its occurrences agreed on its first id and either two or more did or
        the match is long, as recurring work's are) apart from one it does not (``memory-unsure``:
        a common phrase's in unrelated text, or a short match seen once)."""
        backed = self.probs[0] * self.occurrences >= 2 or self.length >= LONG_MATCH
        return "memory" if self.probs[0] >= SURE and backed else "memory-unsure"


class Table:
    """One n-gram length's (hash, end) pairs, sorted by hash, ends ascending within a hash."""

    def __init__(self, n: int, keys: np.ndarray | None = None, ends: np.ndarray | None = None):
        self.n = n
        self.keys = np.zeros(0, np.uint64) if keys is None else keys
        self.ends = np.zeros(0, np.int32) if ends is None else ends

    @classmethod
    def of(cls, n: int, toks: np.ndarray, offset: int = 0) -> "Table":
        keys, ends = gram_hashes(toks, n)
        order = np.argsort(keys, kind="stable")
        return cls(n, keys[order], ends[order] + offset)

    def merge(self, other: "Table") -> None:
        """Take in ``other``'s pairs, all of whose ends lie past this table's."""
        at = np.searchsorted(self.keys, other.keys, side="right")
        self.keys = np.insert(self.keys, at, other.keys)
        self.ends = np.insert(self.ends, at, other.ends)

    def occurrences(self, h: int, most: int) -> np.ndarray:
        """Ends of the latest ``most`` n-grams hashed ``h`` (ascending)."""
        key = np.uint64(h)
        lo = int(np.searchsorted(self.keys, key, side="left"))
        hi = int(np.searchsorted(self.keys, key, side="right"))
        return self.ends[max(lo, hi - most):hi]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.ends.nbytes


class SuffixIndex:
    """Entries in order of their ids (``add``), each a list of target ids."""

    def __init__(self, cfg: MemoryConfig = MemoryConfig()):
        self.cfg = cfg
        self.toks = np.zeros(0, np.int32)
        self.starts = np.zeros(0, np.int64)  # where each entry starts in toks
        self.ids = np.zeros(0, np.int64)  # each entry's id
        self.tables = (Table(cfg.short), Table(cfg.long))

    @classmethod
    def build(cls, entries: list[tuple[int, list[int] | np.ndarray]], cfg: MemoryConfig = MemoryConfig()
              ) -> "SuffixIndex":
        """The index of ``entries`` ((id, ids), ids ascending) at once."""
        index = cls(cfg)
        if entries:
            index._append(entries)
            index.tables = tuple(Table.of(t.n, index.toks) for t in index.tables)
        return index

    def add(self, entries: list[tuple[int, list[int] | np.ndarray]]) -> None:
        """Take in ``entries`` ((id, ids), ids ascending and past every entry held)."""
        if not entries:
            return
        offset = len(self.toks)
        self._append(entries)
        fresh = self.toks[offset:]
        for table in self.tables:
            table.merge(Table.of(table.n, fresh, offset))

    def _append(self, entries: list[tuple[int, list[int] | np.ndarray]]) -> None:
        parts, starts, at = [], [], len(self.toks)
        for _, ids in entries:
            starts.append(at)
            parts.append(np.asarray(ids, np.int32))
            parts.append(np.array([SENTINEL], np.int32))
            at += len(ids) + 1
        self.toks = np.concatenate([self.toks, *parts])
        self.starts = np.concatenate([self.starts, np.array(starts, np.int64)])
        self.ids = np.concatenate([self.ids, np.array([i for i, _ in entries], np.int64)])

    @property
    def entries(self) -> int:
        return len(self.ids)

    @property
    def tokens(self) -> int:
        return len(self.toks) - len(self.ids)

    @property
    def nbytes(self) -> int:
        """RAM the index's arrays hold."""
        return (self.toks.nbytes + self.starts.nbytes + self.ids.nbytes
                + sum(t.nbytes for t in self.tables))

    def find(self, context: list[int], span: int) -> Recall | None:
        """The continuation (at most ``span`` ids, ``max_span`` at most) that most often followed
        the longest suffix of ``context`` found in an entry; None where no suffix of ``short`` ids
        or more occurred."""
        cfg = self.cfg
        span = min(span, cfg.max_span)
        if span < 1 or not len(self.toks):
            return None
        for table in reversed(self.tables):  # the long n-gram first
            if len(context) < table.n:
                continue
            ends = table.occurrences(gram_hash(context[-table.n:]), cfg.candidates)
            if not len(ends):
                continue
            length, ends = self._longest(context, ends)
            if length >= table.n:  # else only hash collisions: look shorter
                return self._walk(length, ends, span)
        return None

    def _longest(self, context: list[int], ends: np.ndarray) -> tuple[int, np.ndarray]:
        """The longest match among occurrences ending at ``ends`` [c], measured backwards up to
        ``max_match`` ids, and the ends that reach it."""
        depth = min(self.cfg.max_match, len(context))
        want = np.asarray(context[-depth:][::-1], np.int32)  # [depth]: the context backwards
        at = ends[:, None] - 1 - np.arange(depth)[None, :]  # [c, depth]
        same = (self.toks[np.maximum(at, 0)] == want[None, :]) & (at >= 0)
        lengths = np.where(same.all(axis=1), depth, same.argmin(axis=1))
        best = int(lengths.max())
        return best, ends[lengths == best]

    def _walk(self, length: int, ends: np.ndarray, span: int) -> Recall | None:
        """From the occurrences ending at ``ends``, follow the most frequent next id (ties: the most
        recent occurrence's) while the chance stays at ``min_prob`` or above. Where every occurrence
        still followed goes on alike, the whole stretch is taken at once (at the same chance)."""
        at = ends[:, None] + np.arange(span)[None, :]  # [c, span]
        rows = np.where(at < len(self.toks), self.toks[np.minimum(at, len(self.toks) - 1)], SENTINEL)
        alive = np.arange(len(ends))
        out: list[int] = []
        probs: list[float] = []
        support: list[int] = []
        chance, d = 1.0, 0
        while d < span:
            ahead = rows[alive, d:]  # [a, span - d]
            same = (ahead == ahead[0]).all(axis=0)
            run = len(same) if same.all() else int(same.argmin())
            if run:  # the occurrences agree for ``run`` ids: up to an entry's end, at the same chance
                stretch = ahead[0, :run].tolist()
                cut = stretch.index(SENTINEL) if SENTINEL in stretch else run
                out.extend(stretch[:cut])
                probs.extend([chance] * cut)
                support.extend([len(alive)] * cut)
                if cut < run:
                    break
                d += run
                continue
            col = ahead[:, 0].tolist()
            counts = Counter(col)
            most = max(counts.values())
            pick = next(t for t in reversed(col) if counts[t] == most)  # the latest of the most frequent
            chance *= most / len(alive)
            if pick < 0 or chance < self.cfg.min_prob:
                break
            out.append(pick)
            probs.append(chance)
            support.append(len(alive))
            alive = alive[ahead[:, 0] == pick]
            d += 1
        if not out:
            return None
        owners = np.searchsorted(self.starts, ends[alive], side="right") - 1
        return Recall(length, out, probs, tuple(int(i) for i in np.unique(self.ids[owners])[-8:]), len(ends),
                      tuple(support))
