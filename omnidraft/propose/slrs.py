"""String-level rejection sampling (`slrs`, after UAG's Algorithm 3): the drafter's next-string
distribution turned into an exact distribution over *target* tokens, then ordinary speculative
sampling against the target, so it is lossless for any drafter and either tokenizer.

The proposal process: draw drafter token d ~ q; the proposed target token is the longest target
token that is a prefix of d's bytes, except that when d's bytes are a proper prefix of longer
target tokens (and d is among the ``branch`` most likely such tokens, with at most
``max_extensions`` of them) one more drafter token d2 is drawn and the longest target prefix of
bytes(d) + bytes(d2) is proposed. Its probability psi(t) is computed exactly from 1 + branch
drafter forwards (the bounded lookahead), which the proposal counts. Practical only for drafters
with short tokens: every branch costs a drafter forward per proposed target token.

``StringDistribution`` (byte tables, built once per pair) computes psi; ``SLRSProposer`` is one
generation's proposer over it. Knows byte tables and the drafter; nothing about verification.
"""

from __future__ import annotations

import bisect
import copy
import time
from typing import Callable

import numpy as np
import torch

from omnidraft.sampling import SamplingConfig, probs, sample
from omnidraft.propose.base import DraftState
from omnidraft.propose.drafter import Drafter
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.vocab import VocabMap


SECOND_KEPT = 64  # drafter tokens whose second-token map is kept (~400 KB each at 49k drafter ids)


class StringDistribution:
    def __init__(self, vmap: VocabMap, branch: int = 2, max_extensions: int = 512):
        self.vmap = vmap
        self.branch = branch
        self.max_extensions = max_extensions
        self.vd, self.vt = len(vmap.draft_bytes), len(vmap.target_bytes)
        self._tables = None
        self._seconds: dict[int, torch.Tensor] = {}  # drafter token -> its [Vd] second-token map (_second)

    # ------------------------------------------------------------------ byte tables (lazy)
    def _build(self):
        tb = self.vmap.target_bytes
        by_bytes: dict[bytes, int] = {}
        for i, b in enumerate(tb):
            if b and b not in by_bytes:
                by_bytes[b] = i
        t_sorted = sorted(by_bytes)  # target strings, sorted: a prefix's extensions are one range
        t_ids = [by_bytes[b] for b in t_sorted]
        db = self.vmap.draft_bytes
        d_order = torch.tensor(sorted((i for i in range(self.vd) if db[i]), key=lambda i: db[i]))  # [n]
        d_sorted = [db[i] for i in d_order.tolist()]
        maxlen = max(map(len, t_sorted))
        r1 = np.full(self.vd, -1, dtype=np.int64)  # [Vd] longest target prefix of each drafter token
        for i, b in enumerate(db):
            if b:
                r1[i] = self._longest(by_bytes, b, maxlen)
            elif self.vmap.d2t[i] >= 0:  # special tokens map by role
                r1[i] = self.vmap.d2t[i]
        self._tables = (by_bytes, t_sorted, t_ids, d_order, d_sorted, maxlen, torch.from_numpy(r1))

    @staticmethod
    def _longest(by_bytes: dict[bytes, int], s: bytes, maxlen: int) -> int:
        for n in range(min(len(s), maxlen), 0, -1):
            t = by_bytes.get(s[:n])
            if t is not None:
                return t
        return -1

    def _extensions(self, s: bytes) -> tuple[int, int]:
        """[lo, hi) range in the sorted target strings of those that extend ``s`` properly."""
        t_sorted = self._tables[1]
        lo = bisect.bisect_left(t_sorted, s)
        if lo < len(t_sorted) and t_sorted[lo] == s:
            lo += 1
        hi = bisect.bisect_left(t_sorted, s + b"\xff" * 8)
        return lo, hi

    # ------------------------------------------------------------------ psi
    def distribution(self, lookahead: Callable[[int], torch.Tensor], logits: torch.Tensor,
                     sampling: SamplingConfig, tail: bytes) -> torch.Tensor:
        """psi [Vt] for the drafter state whose next-token ``logits`` [Vd] are given.
        ``lookahead(d)``: the drafter's next-token logits [Vd] after that state plus token d (the
        state itself unchanged). ``tail``: committed bytes the drafter has not consumed yet;
        drafter tokens must start with them."""
        if self._tables is None:
            self._build()
        by_bytes, t_sorted, _, d_order, d_sorted, maxlen, r1 = self._tables
        db = self.vmap.draft_bytes
        # greedy: psi from the drafter at temperature 1, so its argmax is the likeliest target token
        qcfg = SamplingConfig(temperature=1.0) if sampling.greedy else sampling
        q = probs(logits.float(), qcfg)[: self.vd]  # [Vd]
        if tail:  # only tokens consistent with the committed partial character, cut after it
            keep = torch.zeros(self.vd, dtype=torch.bool)
            r = torch.full((self.vd,), -1, dtype=torch.long)
            lo = bisect.bisect_left(d_sorted, tail)
            for j in range(lo, len(d_sorted)):
                if not d_sorted[j].startswith(tail):
                    break
                rest = d_sorted[j][len(tail):]
                if rest:
                    keep[d_order[j]] = True
                    r[d_order[j]] = self._longest(by_bytes, rest, maxlen)
            q = torch.where(keep & (r >= 0), q, torch.zeros(()))
            r1 = r
        q = torch.where(r1 >= 0, q, torch.zeros(()))
        total = float(q.sum())
        psi = torch.zeros(self.vt)
        if total <= 0:
            return psi
        q = q / total
        # the lookahead: the most likely drafter tokens that longer target tokens extend
        branch = []
        if self.branch and not tail:
            for d in torch.topk(q, min(8 * self.branch, self.vd)).indices.tolist():
                if len(branch) == self.branch:
                    break
                lo, hi = self._extensions(db[d]) if db[d] else (0, 0)
                if 0 < hi - lo <= self.max_extensions and float(q[d]) > 0:
                    branch.append((d, lo, hi))
        direct = q.clone()
        for d, _, _ in branch:
            direct[d] = 0.0
        psi.index_add_(0, r1.clamp(min=0), direct)
        for d, lo, hi in branch:
            q2 = probs(lookahead(d).float(), qcfg)[: self.vd]  # [Vd]
            psi.index_add_(0, self._second(d, int(r1[d]), lo, hi), q2 * float(q[d]))
        return psi

    def _second(self, d: int, own: int, lo: int, hi: int) -> torch.Tensor:
        """[Vd]: for each drafter token d2 drawn after ``d``, the target token proposed, the longest
        target token bytes(d) + bytes(d2) starts with among d's extensions [lo, hi) (``own``: d's
        own when none). It depends on d alone: the last SECOND_KEPT are kept."""
        r2 = self._seconds.pop(d, None)
        if r2 is None:
            _, t_sorted, t_ids, d_order, d_sorted, _, _ = self._tables
            r2 = torch.full((self.vd,), own, dtype=torch.long)
            base = self.vmap.draft_bytes[d]
            for i in sorted(range(lo, hi), key=lambda i: len(t_sorted[i])):  # longer ones win
                rest = t_sorted[i][len(base):]
                a = bisect.bisect_left(d_sorted, rest)
                b = bisect.bisect_left(d_sorted, rest + b"\xff" * 8)
                if a < b:
                    r2[d_order[a:b]] = t_ids[i]  # a view: no tensor built per extension
            if len(self._seconds) >= SECOND_KEPT:
                self._seconds.pop(next(iter(self._seconds)))
        self._seconds[d] = r2  # the most recently used last
        return r2


class SLRSProposer:
    kind = "drafter"
    """One generation's `slrs` proposer: target tokens drawn from psi, each conditioning the
    drafter on the text of the ones before (q' = psi, exact)."""

    def __init__(self, drafter: Drafter, dist: StringDistribution):
        self.drafter = drafter
        self.dist = dist
        self.forwards = 0  # drafter forwards of the current proposal
        self.forward_s = 0.0  # and their seconds (a proposal's translate_s excludes them)

    def _forward(self, ids: list[int], sync: bool) -> torch.Tensor:
        t0 = time.perf_counter()
        lm = self.drafter.model
        logits = (lm.sync(ids) if sync else lm.extend(ids, last_only=True)).logits[-1]  # [Vd]
        self.forwards += 1
        self.forward_s += time.perf_counter() - t0
        return logits

    def _lookahead(self, d: int) -> torch.Tensor:
        logits = self._forward([d], sync=False)
        self.drafter.model.rollback(1)
        return logits

    def propose(self, state: DraftState, k: int) -> Proposal:
        """Up to k target tokens; at most one per drafter forward's worth of window room."""
        k = min(k, self.drafter.room(len(state.ctx.ids)))
        if k <= 0:
            return state.empty()
        t0 = time.perf_counter()
        self.forwards, self.forward_s = 0, 0.0
        sampling, vmap = self.drafter.sampling, self.dist.vmap
        ids, rows = [], []
        work = state.ctx
        logits = self._forward(work.ids, sync=True)
        for j in range(k):
            psi = self.dist.distribution(self._lookahead, logits, sampling, work.tail)
            if float(psi.sum()) <= 0:
                break
            t = int(psi.argmax()) if sampling.greedy else sample(psi, self.drafter.gen)
            ids.append(t)
            rows.append(psi)
            if j == k - 1 or not vmap.target_bytes[t]:
                break
            work = copy.copy(work)
            work.gen_ids = list(work.gen_ids)
            work.append_target([t])
            logits = self._forward(work.ids, sync=True)
        prop = Proposal.direct(ids)
        if state.needs_q:
            prop.q = torch.stack(rows) if rows else torch.zeros(0, self.dist.vt)
        prop.drafter_forwards = self.forwards
        prop.translate_s = time.perf_counter() - t0 - self.forward_s
        return prop

    def unread(self, state: DraftState) -> int:
        return self.drafter.unread(state.ctx.ids)

    def observe(self, state: DraftState, fresh: int) -> None:
        pass
