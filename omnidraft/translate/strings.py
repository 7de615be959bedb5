"""String-level translation for the `slem` and `dtw` strategies: the draft is turned back into
text and re-tokenised with the target's tokenizer in context.

SLEM (UAG's string-level exact match): the target tokens proposed are those of the target's own
tokenisation of (a look-behind window of committed text + the draft text) past the window, so a
token that merges across the boundary comes out as the target would write it; when the window
does not re-tokenise to the committed tokens (a non-injective boundary) the draft text is
tokenised alone. Verification is exact match at greedy and the point-mass rule when sampling,
both lossless whatever the proposal. TokenTiming (`dtw`) proposes the same tokens and also
aligns them to the draft tokens by dynamic token warping (Levenshtein cost between token
strings, Sakoe-Chiba window) to carry the drafter's probabilities over to the target tokens.
Knows byte tables and the target tokenizer; nothing about models.
"""

from __future__ import annotations

from typing import Sequence

import torch

from omnidraft.translate.reverse import _utf8_complete
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.vocab import VocabMap


def levenshtein(a: bytes, b: bytes) -> int:
    """Edit distance between two byte strings."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
        prev = cur
    return prev[-1]


def dtw_align(a: Sequence[bytes], b: Sequence[bytes], window: int = 8) -> list[tuple[int, int]]:
    """Dynamic token warping between token strings ``a`` (draft) and ``b`` (target).

    Cost of pairing a_i with b_j: Levenshtein(a_i, b_j); the usual DTW recursion (match, or
    repeat either side) within a Sakoe-Chiba band |i - j * len(a)/len(b)| <= window, widened
    to reach the corner when the lengths differ a lot. Returns the warping path as (i, j)
    pairs from (0, 0) to (len(a) - 1, len(b) - 1); [] if either side is empty.
    """
    n, m = len(a), len(b)
    if not n or not m:
        return []
    w = max(window, abs(n - m))
    inf = float("inf")
    D = [[inf] * (m + 1) for _ in range(n + 1)]
    D[0][0] = 0.0
    for i in range(1, n + 1):
        center = i * m / n
        lo, hi = max(1, int(center - w)), min(m, int(center + w) + 1)
        for j in range(lo, hi + 1):
            c = levenshtein(a[i - 1], b[j - 1])
            D[i][j] = c + min(D[i - 1][j - 1], D[i - 1][j], D[i][j - 1])
    path, i, j = [], n, m
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        steps = [(D[i - 1][j - 1], i - 1, j - 1), (D[i - 1][j], i - 1, j), (D[i][j - 1], i, j - 1)]
        _, i, j = min(steps, key=lambda s: s[0])
    return path[::-1]


def retokenise(table: list[bytes | None], tok, new: bytes, history: Sequence[int], lookbehind: int = 4) -> list[int]:
    """The target tokenizer's ids for the text ``new`` (complete UTF-8) as it continues the
    committed target ids ``history``: the tokens past a look-behind window of up to
    ``lookbehind`` committed tokens, when the window re-tokenises to itself; else ``new`` alone.
    ``table``: the target's token bytes (ids past it are dropped)."""
    window: list[int] = []
    for t in reversed(history[-lookbehind:]):
        if t >= len(table) or not table[t]:
            break  # a special token: look no further back
        window.insert(0, t)
    ids = None
    if window:
        try:
            full = tok.encode((b"".join(table[t] for t in window) + new).decode("utf-8"), add_special_tokens=False)
        except UnicodeDecodeError:  # the window starts inside a character
            full = []
        if full[: len(window)] == window:
            ids = full[len(window):]
    if ids is None:
        ids = tok.encode(new.decode("utf-8"), add_special_tokens=False)
    return [t for t in ids if t < len(table)]


class StringTranslator:
    """``translate(drafts, ctx, history)``: drafter ids -> target ids by re-tokenising text.

    ``ctx``: the DraftContext (its ``tail`` holds committed bytes the drafter has not seen as a
    whole character yet); ``history``: the target ids committed so far (prompt included).
    """

    def __init__(self, vmap: VocabMap, target_tok, *, align: bool = False, lookbehind: int = 4,
                 window: int = 8):
        """``align``: also warp the proposal onto the draft tokens (TokenTiming, `dtw`) to carry
        the drafter's probabilities over in ``proposal_dists``; without it (`slem`) q' rows are
        placeholders."""
        self.vmap, self.tok, self.align = vmap, target_tok, align
        self.lookbehind, self.window = lookbehind, window
        self.target_vocab = len(vmap.t2d)
        self.last_alignment: list[tuple[int, int]] = []

    def _draft_text(self, drafts: Sequence[int], ctx) -> bytes | None:
        data = b"".join(self.vmap.draft_bytes[d] or b"" for d in drafts if d < len(self.vmap.draft_bytes))
        tail = ctx.tail if ctx is not None else b""
        if not data.startswith(tail):
            return None  # the draft contradicts committed bytes
        data = data[len(tail):]
        data = data[: _utf8_complete(data)]
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:  # drafters can emit byte tokens that make no character
            data = data[: err.start]
        return data

    def translate(self, drafts: Sequence[int], ctx=None, history: Sequence[int] = ()) -> Proposal:
        out = Proposal()
        new = self._draft_text(drafts, ctx)
        if not new:
            return out
        table = self.vmap.target_bytes
        ids = retokenise(table, self.tok, new, history, self.lookbehind)
        out.target_ids = ids
        out.spans = [(0, len(drafts))] * len(ids)
        out.sub = list(range(len(ids)))
        out.from_cache = [False] * len(ids)
        out.consumed = len(drafts)
        if self.align:
            self.last_alignment = dtw_align([self.vmap.draft_bytes[d] or b"" for d in drafts],
                                            [table[t] or b"" for t in ids], self.window)
        return out

    def viable(self, drafts: Sequence[int], ctx=None, history: Sequence[int] = ()) -> bool:
        return self._draft_text(drafts, ctx) is not None

    def proposal_dists(self, prop: Proposal, drafts: Sequence[int], q: torch.Tensor) -> torch.Tensor:
        """[m, Vt] q' per proposed target token. ``dtw``: target token j carries the product of
        q(d_i) over the draft tokens whose warping path ends at j (one-hot at t_j, the rest
        spread uniformly); without ``align`` (``slem``) there is no per-token q (point masses). Used for rejection
        sampling, which is only approximately lossless with these; point-mass verification is
        lossless and the default for string-level strategies."""
        m = len(prop.target_ids)
        rows = torch.zeros(m, self.target_vocab)
        probs = [1.0] * m
        if self.align and self.last_alignment and len(q):
            last_j = {}
            for i, j in self.last_alignment:
                last_j[i] = j
            for i, j in last_j.items():
                if i < len(q):
                    probs[j] *= float(q[i, drafts[i]])
        for j, t in enumerate(prop.target_ids):
            rest = (1.0 - probs[j]) / max(self.target_vocab - 1, 1)
            rows[j].fill_(rest)
            rows[j, t] = probs[j]
        return rows
