"""Draft, then translate: the proposer of `tli`, `omnidraft`, `slem` and `dtw`.

The drafter drafts up to k tokens from its own vocabulary, stopping early once the draft can no
longer translate or when its stopping rule says so; the strategy's translator turns the draft
into target ids (token-level mapping rules (1)(2) with or without the n-gram cache, or
string-level re-tokenisation) and, for rejection sampling, q' rows. When the strategy keeps an
n-gram cache, ``observe`` learns the committed text's n-grams into it.
Knows the Drafter and a translator's interface; nothing about verification.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from omnidraft.propose.base import DraftState
from omnidraft.propose.drafter import Drafter
from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.reverse import LEARN_WINDOW, learn_ngrams


class TranslatingProposer:
    kind = "drafter"

    def __init__(self, drafter: Drafter, translator, rule=None, learn: NgramCache | None = None):
        """``translator``: translate / viable / proposal_dists (translate/token.py, strings.py).
        ``rule``: the drafter's stopping rule or None; ``learn``: the n-gram cache to learn
        committed n-grams into, or None."""
        self.drafter = drafter
        self.translator = translator
        self.rule = rule
        self.learn = learn

    def propose(self, state: DraftState, k: int) -> Proposal:
        k = min(k, self.drafter.room(len(state.ctx.ids)))
        if k <= 0:
            return state.empty()
        lm, rule, ctx = self.drafter.model, self.rule, state.ctx
        use_head = rule is not None and rule.uses_head
        out = lm.sync(ctx.ids, hidden=use_head)  # the drafter's last position
        forwards = 1
        drafts: list[int] = []
        untranslatable: list[int] = []  # the draft token that ended drafting, if one did
        qrows: list[torch.Tensor] = []  # [Vd] each, when sampling
        accept_p: list[float] = []  # the head's P(accept) per draft, when a head rule runs
        draft_p: list[float] = []  # the drafter's probability of each draft, when a rule runs
        if rule is not None:
            rule.reset()
        for i in range(k):
            d, q, conf = self.drafter.pick(out.logits[-1], want_conf=rule is not None)
            drafts.append(d)
            if q is not None:
                qrows.append(q)
            if not self.translator.viable(drafts, ctx=ctx, history=state.committed):
                untranslatable.append(drafts.pop())
                break
            if rule is not None:
                draft_p.append(conf)
            if use_head:
                accept_p.append(self.drafter.accept_prob(out, d))
            if rule is not None and rule.update(accept_p[-1] if use_head else conf):
                break
            if i < k - 1:
                out = lm.extend([d], hidden=use_head)
                forwards += 1
        t0 = time.perf_counter()
        prop = self.translator.translate(drafts, ctx=ctx, history=state.committed)
        q_target = None
        if state.needs_q:  # [consumed, Vd] drafter rows -> [m, Vt]; an empty proposal has no rows
            q_draft = torch.stack(qrows[: prop.consumed]) if prop.consumed else torch.zeros(0, 0)
            q_target = self.translator.proposal_dists(prop, drafts, q_draft)
        return replace(prop, drafts=drafts + untranslatable, q=q_target, drafter_forwards=forwards,
                       accept_p=accept_p, draft_p=draft_p, translate_s=time.perf_counter() - t0)

    def unread(self, state: DraftState) -> int:
        return self.drafter.unread(state.ctx.ids)

    def observe(self, state: DraftState, fresh: int) -> None:
        if self.learn is not None:  # the usual window, or all of a longer stretch
            learn_ngrams(self.learn, state.ctx, state.generated, window=max(LEARN_WINDOW, fresh))
