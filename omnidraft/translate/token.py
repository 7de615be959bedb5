"""Draft -> target translation (OmniDraft mapping rules (1) and (2)).

Rule (1): walking the draft left to right, a run of drafter sub-tokens found in the n-gram cache
becomes its target token(s), the first with q'(t) = prod q(d_j) and any further ones determined
by it; otherwise a directly mapped token keeps q; a token with neither ends the proposal.
Rule (2) spreads that over the target vocabulary for rejection sampling.

With the target tokenizer (``tok``), the n-gram entries are first read from the target's own
tokenisation of the draft text in context (translate/strings.py ``retokenise``): the draft and
that tokenisation are cut at the byte boundaries they share, and each piece is an entry (drafter
run -> target run) under the same rules, so the target is proposed the tokens it would write
itself (a merge the cache has not learned yet, a boundary with the committed text). Past the
text that re-tokenises (a special draft token, a partial character), the cache and the direct
map go on as before.
Knows the vocabulary map, the cache and the target tokenizer's encode; nothing about models.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch

from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.reverse import _utf8_complete
from omnidraft.translate.strings import retokenise
from omnidraft.translate.vocab import VocabMap


def _pieces(dlens: Sequence[int], tlens: Sequence[int]) -> Iterator[tuple[int, int, int, int]]:
    """Cut two tokenisations of the same leading bytes at their shared boundaries, from the start:
    yields (draft start, draft end, target start, target end) per piece while both sides last."""
    i = j = ds = ts = 0
    dpos = tpos = 0
    while i < len(dlens) or j < len(tlens):
        if dpos <= tpos and i < len(dlens):
            dpos += dlens[i]
            i += 1
        elif j < len(tlens):
            tpos += tlens[j]
            j += 1
        else:
            return
        if dpos == tpos and i > ds and j > ts:
            yield ds, i, ts, j
            ds, ts = i, j


class Translator:
    def __init__(self, vmap: VocabMap, cache: NgramCache | None, tok=None, lookbehind: int = 4):
        """``tok``: the target tokenizer, to read entries from its tokenisation of the draft
        (None: the cache and the direct map only)."""
        self.vmap = vmap
        self.cache = cache
        self.tok, self.lookbehind = tok, lookbehind
        mapped = torch.from_numpy(vmap.d2t).ge(0).nonzero().flatten()
        self.src = mapped  # [S] drafter ids with a direct mapping
        self.dst = torch.from_numpy(vmap.d2t)[mapped]  # [S] their target ids
        self.target_vocab = len(vmap.t2d)
        self.direct_mask = torch.from_numpy(vmap.d2t >= 0)  # [Vd] bool
        self._d2t = vmap.d2t.tolist()  # a list: the per-token lookups below are the hot path

    def _direct(self, d: int) -> int:
        """The target id drafter id ``d`` maps to directly, or -1."""
        return self._d2t[d] if d < len(self._d2t) else -1

    def _retokenised(self, drafts: Sequence[int], ctx, history: Sequence[int]) -> dict[int, tuple]:
        """Draft index -> (target ids, drafter tokens) of each piece where the draft and the
        target's tokenisation of its text in context share both boundaries; {} without ``tok``."""
        if self.tok is None or (ctx is not None and ctx.tail):
            return {}  # (a partial committed character: the draft's text starts inside it)
        db, tb = self.vmap.draft_bytes, self.vmap.target_bytes
        lens = []
        for d in drafts:  # the text up to the first token without bytes
            if d >= len(db) or not db[d]:
                break
            lens.append(len(db[d]))
        data = b"".join(db[d] for d in drafts[: len(lens)])
        while lens and sum(lens) > _utf8_complete(data):  # a partial character at the end waits
            lens.pop()
        data = data[: sum(lens)]
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:  # byte tokens that make no character
            return {}
        ids = retokenise(tb, self.tok, data, history, self.lookbehind) if data else []
        if b"".join(tb[t] or b"" for t in ids) != data:
            return {}  # special tokens or dropped ids: the pieces would not line up
        return {s: (tuple(ids[ts:te]), e - s)
                for s, e, ts, te in _pieces(lens, [len(tb[t]) for t in ids])}

    def translate(self, drafts: Sequence[int], ctx=None, history: Sequence[int] = ()) -> Proposal:
        """Rule (1) over ``drafts`` (drafter ids): target ids and the draft span of each.
        ``ctx`` (the DraftContext) and ``history`` (committed target ids) place the draft text in
        context for the target's tokenisation."""
        out = Proposal()
        i, k = 0, len(drafts)
        cache = self.cache
        pieces = self._retokenised(drafts, ctx, history)
        while i < k:
            direct = self._direct(drafts[i])
            # the target's own tokenisation first, then a cached multi-token run, then the direct
            # map, then a cached one-token split entry
            hit = pieces.get(i)
            if hit is not None and len(hit[0]) == 1 and hit[1] == 1 and hit[0][0] == direct:
                hit = None  # one token for one: the direct map (q kept as it is)
            elif hit is None and cache is not None:
                hit = cache.longest(drafts, i, min_len=2)
                if hit is None and direct < 0:
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
        """Whether drafting on can still pay: the draft is text the target tokenizer can spell
        (with ``tok``), or it translates fully, or its untranslated tail is a proper prefix of a
        cached n-gram (the next draft tokens may complete it)."""
        db = self.vmap.draft_bytes
        if self.tok is not None and all(d < len(db) and db[d] for d in drafts):
            return True
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
