"""One sequence's proposing side of speculative decoding, between two verifications: what the
next round proposes (a copy from the context, a continuation recalled from the pair's memory of
earlier answers, a translated draft, or nothing) and what the round's verdict teaches (the draft
length's acceptance counts per source, the memory's credit, the drafter's context by reverse
translation, the n-gram cache). decode/loop.py runs it around its own target's ``verify``; the
vLLM proposer (omnidraft/vllm/) runs it around vLLM's step, which verifies in its place.

Knows the stages' interfaces (Proposer, DraftLength, DraftContext, ContextIndex, Recalls); nothing
about the target or how verification is done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from omnidraft.decode.draft_length import DraftLength
from omnidraft.memory.index import Recall
from omnidraft.memory.spaces import Recalls
from omnidraft.propose.base import DraftState, Proposer
from omnidraft.propose.lookup import ContextIndex, Match
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.reverse import DraftContext


@dataclass(frozen=True)
class Plan:
    """What a round proposes and why."""

    proposal: Proposal  # the target ids to verify (none: the target decodes one token alone)
    match: Match | Recall | None  # what the round copies from: the context's match or the memory's recall
    drafted: int  # drafter tokens the round asked for (0: a copy, or nothing)
    read: int  # committed tokens the drafter first read (its catch-up), when it drafted
    caught_up_s: float  # choosing and the drafter's catch-up's reverse translation

    @property
    def kind(self) -> str:
        """``lookup`` (copied from the context), ``memory`` (recalled), ``drafter`` or ``none``."""
        if self.match:
            return "memory" if self.match.source == "memory" else "lookup"
        return "drafter" if self.drafted else "none"

    @property
    def width(self) -> int:
        """The verify call's width: the proposal and the correction or bonus token."""
        return len(self.proposal.target_ids) + 1


class Speculator:
    """``proposer``: the strategy's (it owns the drafter's cache); ``ctx``: the drafter's tokens of
    the prompt; ``prompt_ids``: the target's; ``k``: the draft length (fixed, or the cost model);
    ``lookup``: the context's index for copies (None: no copies); ``memory``: the pair's memory of
    earlier answers to recall from (None: none)."""

    def __init__(self, proposer: Proposer, ctx: DraftContext, prompt_ids: list[int], k: DraftLength, *,
                 lookup: ContextIndex | None = None, memory: Recalls | None = None, needs_q: bool = False,
                 target_vocab: int = 0):
        self.proposer, self.k, self.lookup, self.memory = proposer, k, lookup, memory
        self.state = DraftState(ctx, list(prompt_ids), needs_q=needs_q, target_vocab=target_vocab)
        self.behind: list[int] = []  # committed by rounds without a draft, not yet translated back
        self.recalled: dict[str, tuple[float, float]] = {}  # this sequence's recalls by how they are priced:
        #                                                     (verified, first id accepted)

    @property
    def committed(self) -> list[int]:
        """Every target id so far, prompt included."""
        return self.state.committed

    def plan(self, room: int, remaining: int, *, window: int | None = None) -> Plan:
        """The next round's proposal: at most ``room`` ids (what can still be committed beyond the
        correction or bonus), ``remaining`` being what the generation may still commit; ``window``:
        the most ids the verify call can take (the target's window left; None: ``room``).
        A copy from the context or a recall from the memory where one is found and the draft length
        prefers it (of both, the one it predicts faster); else the drafter's k tokens, translated
        (first reading what rounds without a draft committed)."""
        t0 = time.perf_counter()
        match, span = self._copy(room)
        unread = 0 if span else self.proposer.unread(self.state) + len(self.behind)
        drafted = 0 if span else min(self.k.next_k(unread, remaining), room)
        if drafted:
            self._translate_back()
        caught_up_s = time.perf_counter() - t0
        if span:
            prop = self.state.copied(match.continuation[:span])
        else:
            prop = self.proposer.propose(self.state, drafted) if drafted else self.state.empty()
        window = room if window is None else window
        if len(prop.target_ids) > window:  # a split n-gram can outgrow the drafts
            prop = prop.prefix(window)
        return Plan(prop, match if span else None, drafted, unread if drafted else 0, caught_up_s)

    def verdict(self, plan: Plan, accepted: int, token: int) -> None:
        """The round's verdict teaches the draft length: ``accepted`` proposed ids kept, then
        ``token`` (the correction, or the bonus after a proposal kept whole)."""
        n = len(plan.proposal.target_ids)
        if plan.match:  # a copy kept whole: is the bonus token the copy's next id?
            more = accepted == n < len(plan.match.continuation)
            self.k.observe_lookup(plan.match.length, n, accepted,
                                  token == plan.match.continuation[n] if more else None, plan.match.priced_as,
                                  steps=plan.match.steps)
            if plan.kind == "memory":
                self.memory.verified_by(plan.match, accepted)
                n, a = self.recalled.get(plan.match.priced_as, (0.0, 0.0))
                self.recalled[plan.match.priced_as] = (n + 1, a + (accepted > 0))
        else:
            self.k.observe(n, accepted)

    def commit(self, plan: Plan, new: list[int]) -> float:
        """The round's committed ids (accepted prefix and correction or bonus, as cut) join the
        context; after a drafted round they are translated back into the drafter's context at once
        (the n-gram cache learns them), after any other when the drafter next drafts. Returns the
        seconds this took."""
        t0 = time.perf_counter()
        self.state.committed.extend(new)
        self.state.generated.extend(new)
        self.behind.extend(new)
        if plan.drafted:
            self._translate_back()
        return time.perf_counter() - t0

    def close(self) -> None:
        """The drafter's context made whole (a training record reads it)."""
        self._translate_back()

    def _copy(self, room: int) -> tuple[Match | Recall | None, int]:
        """What to copy (the context's latest earlier match, the memory's recall) and how many of
        its ids, as the draft length chooses; (None, 0): nothing found, or drafting preferred."""
        if room < 1:
            return None, 0
        found = []
        if self.lookup is not None:
            self.lookup.sync(self.state.committed)
            found.append(self.lookup.find(room))
        if self.memory is not None:
            found.append(self.memory.find(self.state.committed, room))

        def here(m: Match | Recall) -> tuple[float, float] | None:  # this sequence's own recalls so far
            return self.recalled.get(m.priced_as, (0.0, 0.0)) if m.source == "memory" else None

        spans = [(m, self.k.lookup_span(m.length, len(m.continuation), m.priced_as, steps=m.steps, here=here(m)))
                 for m in found if m]
        spans = [(m, n) for m, n in spans if n]
        if not spans:
            return None, 0
        return max(spans, key=lambda mn: self.k.copy_rate(mn[0].length, mn[1], mn[0].priced_as, steps=mn[0].steps,
                                                           here=here(mn[0])))

    def _translate_back(self) -> None:
        """Reverse translation of the committed ids not yet read back, and the proposer's cache update."""
        if self.behind:
            self.state.ctx.append_target(self.behind)
            self.proposer.observe(self.state, len(self.behind))
            self.behind.clear()
