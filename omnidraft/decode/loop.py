"""Cross-vocabulary speculative decoding (OmniDraft Algorithm 1): the one decode loop.

Each round reads top to bottom: draft -> translate (the proposer) -> verify (the target) ->
accept -> reverse translation and cache update, and yields one ``Round``. A round may propose
ids copied from the context instead (propose/lookup.py: target ids, so no draft and no
translation) when the draft length's cost model says the copy pays more than drafting. Callers
fold rounds into metrics, text and training records. Knows the stages' interfaces (Proposer,
Target, DraftContext, ContextIndex); the stages live in propose/, translate/ and
decode/target.py. The drafter and target KV caches persist across rounds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import torch

from omnidraft.decode.draft_length import DraftLength
from omnidraft.decode.target import Target
from omnidraft.decode.verify import Verdict
from omnidraft.propose.base import DraftState, Proposer
from omnidraft.propose.lookup import ContextIndex
from omnidraft.translate.proposal import Proposal
from omnidraft.translate.reverse import DraftContext


@dataclass(frozen=True)
class Round:
    committed: list[int]  # target ids this round commits: the accepted prefix and the
    #                       correction/bonus token, cut at a stop id or the token budget
    proposal: Proposal  # what was proposed (target ids, q', drafter forwards, translation time)
    verdict: Verdict  # accepted count and the correction/bonus token
    rows: tuple[torch.Tensor, torch.Tensor] | None  # the target's top-k (ids, probs) [n, k] at the
    #                                                 n committed positions, when it records them
    translate_s: float  # translation, reverse translation and cache update
    round_s: float  # the whole round
    prefill_s: float  # the target's prompt prefill before the first round
    elapsed_s: float  # since the loop started, prefill included
    kind: str = "drafter"  # who proposed: the proposer's kind ("drafter"; "lookup" for copies from
    #                        the context, also when the loop took one instead of drafting) or "none"
    match: int = 0  # lookup rounds: the length of the suffix that matched


def decode(proposer: Proposer, target: Target, ctx: DraftContext, prompt_ids: list[int], *,
           k: DraftLength, max_new_tokens: int, stop: set[int], lookup: ContextIndex | None = None,
           record_topk: int = 0) -> Iterator[Round]:
    """Yield one Round per target verification until a stop id or ``max_new_tokens``.

    ``k`` says how many drafter tokens each round drafts (decode/draft_length.py), told what the
    drafter would first have to read (its catch-up) and what may still be committed, and sees
    what each round accepted; a round of 0 is the target decoding one token alone (its token is
    translated back into the drafter's context when a later round drafts, or at the end).
    ``lookup``: the context's index (prompt and committed ids are synced into it each round);
    where its suffix occurred before, ``k.lookup_span`` may take the copied continuation as the
    round's proposal, a point mass (exact under either verify rule). Such a round is, for the
    drafter, a round without a draft. ``record_topk`` > 0: each Round carries the target's
    top-k rows at its committed positions (``Target.start``).

    ``max_new_tokens`` counts target tokens and must fit the target's context window after the
    prompt (generate.check_budget). Each round drafts at most what can still be committed and
    what fits both models' windows: near the end of either window the proposal shrinks, down to
    none (the target then decodes alone), so speculative decoding ends where `ar` ends.
    """
    t0 = time.perf_counter()
    k.start()
    target.start(prompt_ids, record_topk)
    prefill_s = time.perf_counter() - t0
    state = DraftState(ctx, list(prompt_ids), needs_q=target.needs_q, target_vocab=target.vocab_size)
    behind: list[int] = []  # committed by rounds without a draft and not yet translated back
    produced = 0
    try:
        while produced < max_new_tokens:
            round_t0 = time.perf_counter()
            # room: tokens this round can still commit beyond the correction/bonus, and the window
            target_room = target.max_length - len(state.committed)  # verify feeds pending + proposal
            room = max(0, min(max_new_tokens - produced - 1, target_room))
            # 0. a copy from the context, when one is found and the cost model prefers it
            match = _look_up(lookup, state.committed, room)
            span = k.lookup_span(match.length, len(match.continuation)) if match else 0
            # the drafter's catch-up: what it has not read, translated back or not
            unread = 0 if span else proposer.unread(state) + len(behind)
            k_round = 0 if span else min(k.next_k(unread, max_new_tokens - produced), room)
            # 1. draft and 2. translate: target ids (+ q' for rejection sampling); the drafter's
            # context first takes in what rounds without a draft committed
            if k_round:
                _translate_back(proposer, state, behind)
            caught_up_s = time.perf_counter() - round_t0
            if span:
                prop = state.copied(match.continuation[:span])
            else:
                prop = proposer.propose(state, k_round) if k_round else state.empty()
            if len(prop.target_ids) > target_room:  # a split n-gram can outgrow the drafts
                prop = prop.prefix(target_room)
            # 3. verify (one target forward)
            verdict = target.verify(prop.target_ids, prop.q)
            if span:  # a copy kept whole: is the bonus token the copy's next id?
                n = len(prop.target_ids)
                more = verdict.accepted == n < len(match.continuation)
                k.observe_lookup(match.length, n, verdict.accepted,
                                 verdict.token == match.continuation[n] if more else None)
            else:
                k.observe(len(prop.target_ids), verdict.accepted)
            # 4. accept: the kept prefix plus the correction/bonus token, cut at a stop id or budget
            new = prop.target_ids[: verdict.accepted] + [verdict.token]
            for j, t in enumerate(new):
                if t in stop:
                    new = new[: j + 1]
                    break
            new = new[: max_new_tokens - produced]
            rows = None if target.last_rows is None else tuple(x[: len(new)] for x in target.last_rows)
            # 5. reverse translation into the drafter's tokens and cache update; after a round
            # without a draft it waits until the drafter next reads its context
            back_t0 = time.perf_counter()
            state.committed.extend(new)
            state.generated.extend(new)
            behind.extend(new)
            if k_round:
                _translate_back(proposer, state, behind)
            now = time.perf_counter()
            k.observe_round(len(prop.target_ids) + 1, prop.drafter_forwards, unread if k_round else 0, now - round_t0)
            produced += len(new)
            kind = "lookup" if span else proposer.kind if k_round else "none"
            yield Round(new, prop, verdict, rows, caught_up_s + prop.translate_s + now - back_t0,
                        now - round_t0, prefill_s, now - t0, kind, match.length if span else 0)
            if new[-1] in stop:
                break
    finally:  # the drafter's context is whole when the loop ends (a training record reads it)
        _translate_back(proposer, state, behind)


def _look_up(lookup: ContextIndex | None, committed: list[int], room: int):
    """The context's latest earlier match and up to ``room`` ids that followed it, if any."""
    if lookup is None or room < 1:
        return None
    lookup.sync(committed)
    return lookup.find(room)


def _translate_back(proposer: Proposer, state: DraftState, behind: list[int]) -> None:
    """Reverse translation of the committed ids in ``behind`` (then emptied) and the proposer's
    cache update."""
    if behind:
        state.ctx.append_target(behind)
        proposer.observe(state, len(behind))
        behind.clear()
