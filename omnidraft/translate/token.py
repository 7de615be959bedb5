"""Draft -> target translation (OmniDraft mapping rules (1) and (2)).

Rule (1): walking the draft left to right, a run of drafter sub-tokens found in the n-gram cache
becomes its target token(s), the first with q'(t) = prod q(d_j) and any further ones determined
by it; otherwise a directly mapped token keeps q; a token with neither ends the proposal.
Rule (2) spreads that over the target vocabulary for rejection sampling.
Knows the vocabulary map and the cache; nothing about models.
"""

from __future__ import annotations

from typing import Sequence

import torch

from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.vocab import VocabMap


class Translator:
    def __init__(self, vmap: VocabMap, cache: NgramCache | None):
        self.vmap = vmap
        self.cache = cache
        mapped = torch.from_numpy(vmap.d2t).ge(0).nonzero().flatten()
        self.src = mapped  # [S] drafter ids with a direct mapping
        self.dst = torch.from_numpy(vmap.d2t)[mapped]  # [S] their target ids
        self.target_vocab = len(vmap.t2d)
        self.direct_mask = torch.from_numpy(vmap.d2t >= 0)  # [Vd] bool
        self._d2t = vmap.d2t.tolist()  # a list: the per-token lookups below are the hot path

    def _direct(self, d: int) -> int:
        """The target id drafter id ``d`` maps to directly, or -1."""
        return self._d2t[d] if d < len(self._d2t) else -1

    def translate(self, drafts: Sequence[int], ctx=None, history: Sequence[int] = ()) -> Proposal:
        """Rule (1) over ``drafts`` (drafter ids): target ids and the draft span of each.
        (``ctx``/``history`` are for string-level translators; token-level needs neither.)"""
        out = Proposal()
        i, k = 0, len(drafts)
        cache = self.cache
        while i < k:
            direct = self._direct(drafts[i])
            # a multi-token run first, then the direct map, then a one-token split entry
            hit = cache.longest(drafts, i, min_len=2) if cache is not None else None
            if hit is None and direct < 0 and cache is not None:
                hit = cache.longest(drafts, i, min_len=1)
            if hit is not None:
                values, n = hit
            elif direct >= 0:
                values, n = (direct,), 1
            else:
                break
            for j, t in enumerate(values):
                out.target_ids.append(t)
                out.spans.append((i, i + n))
                out.sub.append(j)
                out.from_cache.append(hit is not None)
            i += n
        out.consumed = i
        return out

    def viable(self, drafts: Sequence[int], ctx=None, history: Sequence[int] = ()) -> bool:
        """Whether drafting on can still pay: the draft translates fully, or its untranslated tail
        is a proper prefix of a cached n-gram (the next draft tokens may complete it)."""
        prop = self.translate(drafts)
        if prop.consumed == len(drafts):
            return True
        tail = tuple(drafts[prop.consumed:])
        return self.cache is not None and len(tail) < self.cache.max_n and self.cache.is_prefix(tail)

    def to_target(self, q_row: torch.Tensor) -> torch.Tensor:
        """[Vd] drafter distribution -> [Vt] over target ids (unmapped drafter mass dropped)."""
        out = torch.zeros(self.target_vocab, dtype=torch.float32)
        return out.index_add_(0, self.dst, q_row[self.src].float())

    def proposal_dists(self, prop: Proposal, drafts: Sequence[int], q: torch.Tensor) -> torch.Tensor:
        """Rule (2): [m, Vt] q' for each proposed target token. q: [k, Vd] drafter rows.

        Direct token: q' = q mapped to the target vocabulary. N-gram token t from d_s..d_e:
        q'(t) = prod q(d_j), q'(map(d_s)) = q(d_s) - prod q(d_j), q' elsewhere as mapped.
        Later target tokens of a multi-token entry are determined by the first: a point mass.
        """
        rows = []
        for t, (s, e), sub in zip(prop.target_ids, prop.spans, prop.sub):
            if sub > 0:
                rows.append(torch.zeros(self.target_vocab).index_fill_(0, torch.tensor([t]), 1.0))
                continue
            row = self.to_target(q[s])
            if e - s > 1 or prop.from_cache[len(rows)]:
                prod = float(torch.prod(q[torch.arange(s, e), torch.tensor(drafts[s:e])]))
                first = self._direct(drafts[s])
                if first >= 0:
                    row[first] = max(0.0, float(row[first]) - prod)
                row[t] = float(row[t]) + prod
            rows.append(row)
        return torch.stack(rows) if rows else torch.zeros(0, self.target_vocab)
