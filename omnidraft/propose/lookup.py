"""Proposals copied from the context (prompt lookup, n-gram self-speculation), in the target's
own token ids: no drafter forward and no translation.

``ContextIndex`` keeps, for every n-gram of ``min_match``..``max_match`` target ids of the
context (earlier turns a Session hands it, the prompt, the committed output), where its latest
occurrence ended. A lookup finds the longest suffix of the context that occurred before and
proposes what followed that occurrence, up to a length the caller chooses. Bounded work per round:
``max_match - min_match + 1`` dict writes per committed token, as many reads per lookup, and the
index holds at most ``max_tokens`` of context (the oldest are forgotten).

Knows target ids only; nothing about models, the drafter, the cost model or verification.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnidraft.errors import OmniDraftError


@dataclass(frozen=True)
class LookupConfig:
    min_match: int = 3  # shortest suffix that counts as a match
    max_match: int = 8  # longest suffix looked for (longer is preferred)
    max_tokens: int = 16384  # context kept in the index (earlier turns included)
    max_span: int = 32  # most tokens one lookup proposes

    def __post_init__(self):
        if not 1 <= self.min_match <= self.max_match <= 64:
            raise OmniDraftError(f"lookup match lengths must satisfy 1 <= min_match <= max_match <= 64, "
                                 f"got {self.min_match}..{self.max_match}")
        if self.max_span < 1:
            raise OmniDraftError(f"lookup max_span must be >= 1, got {self.max_span}")
        if self.max_tokens < 2 * self.max_match:
            raise OmniDraftError(f"lookup max_tokens must be >= {2 * self.max_match}, got {self.max_tokens}")


@dataclass(frozen=True)
class Match:
    length: int  # ids of the context's suffix that matched an earlier occurrence
    continuation: list[int]  # what followed that occurrence (at least one id, at most max_span)
    source = "context"
    priced_as = "context"  # whose acceptance counts the cost model prices it by
    steps = None  # one occurrence: no per-id chances (a memory's Recall has them)


class ContextIndex:
    """The context's n-grams and where each last ended. ``sync(ids)`` takes in a growing
    sequence (only what is new since the last call is indexed); ``find()`` looks up its suffix."""

    def __init__(self, cfg: LookupConfig = LookupConfig(), earlier: list[int] | None = None):
        self.cfg = cfg
        self.ids: list[int] = []
        self.base = 0  # absolute position of self.ids[0] (older ids were forgotten)
        self.ends: dict[tuple[int, ...], int] = {}  # n-gram -> absolute end (exclusive) of its latest occurrence
        self.indexed = 0  # absolute ends < this are in self.ends
        self.synced = 0  # how much of the sequence passed to sync() has been taken in
        self.extend(earlier or [])

    def extend(self, ids: list[int]) -> None:
        """Append ids to the context (an earlier turn, then the prompt and what is committed)."""
        self.ids.extend(ids)
        over = len(self.ids) - self.cfg.max_tokens
        if over > 0:  # forget the oldest; their n-grams go stale (skipped when read, dropped here)
            del self.ids[:over]
            self.base += over
            if len(self.ends) > 2 * (self.cfg.max_match - self.cfg.min_match + 1) * self.cfg.max_tokens:
                self.ends = {g: e for g, e in self.ends.items() if e - len(g) >= self.base}

    def sync(self, sequence: list[int]) -> None:
        """Take in what ``sequence`` (the prompt plus committed ids, growing) holds beyond the last sync."""
        if len(sequence) > self.synced:
            self.extend(sequence[self.synced:])
            self.synced = len(sequence)

    def _index(self) -> None:
        """Record every n-gram ending before the context's last id (the suffix looked up ends there)."""
        end = self.base + len(self.ids)
        lo, hi = self.cfg.min_match, self.cfg.max_match
        for e in range(max(self.indexed, self.base + lo), end):
            i = e - self.base
            for n in range(lo, min(hi, i) + 1):
                self.ends[tuple(self.ids[i - n:i])] = e
        self.indexed = end

    def find(self, span: int | None = None) -> Match | None:
        """The longest suffix (``max_match`` down to ``min_match`` ids) that occurred earlier, its
        latest earlier occurrence, and up to ``span`` (default ``max_span``) ids that followed it."""
        self._index()
        span = self.cfg.max_span if span is None else min(span, self.cfg.max_span)
        if span < 1:
            return None
        for n in range(min(self.cfg.max_match, len(self.ids) - 1), self.cfg.min_match - 1, -1):
            e = self.ends.get(tuple(self.ids[-n:]))
            if e is None or e - n < self.base:  # never seen, or its occurrence was forgotten
                continue
            i = e - self.base
            return Match(n, self.ids[i:i + span])
        return None


class LookupProposer:
    """The ``lookup`` strategy: each round proposes up to k ids copied from the context (prompt
    lookup decoding, no drafter forward); none where the context's suffix did not occur before.
    A copy is a point mass, so its q' rows are one-hot and rejection sampling against them is the
    point-mass rule: exact."""

    kind = "lookup"

    def __init__(self, cfg: LookupConfig = LookupConfig()):
        self.index = ContextIndex(cfg)

    def propose(self, state, k: int):
        self.index.sync(state.committed)
        match = self.index.find(k)
        return state.copied(match.continuation) if match else state.empty()

    def observe(self, state, fresh: int) -> None:
        pass

    def unread(self, state) -> int:
        return 0
