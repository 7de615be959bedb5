"""Cross-vocabulary speculative decoding (OmniDraft Algorithm 1): the one decode loop.

Each round reads top to bottom: draft -> translate (the proposer) -> verify (the target) ->
accept -> reverse translation and cache update, and yields one ``Round``. A round may propose
ids copied from the context (propose/lookup.py) or recalled from the pair's memory of earlier
answers (memory/) instead: target ids, so no draft and no translation, when the draft length's
cost model says the copy pays more than drafting. Callers
fold rounds into metrics, text and training records. The proposing side of a round (what to
propose, what the verdict teaches) is decode/speculator.py's, which the vLLM proposer runs around
vLLM's own verification too; this loop adds the target's verify and the acceptance. Knows the
stages' interfaces (Proposer, Target, DraftContext, ContextIndex, Recalls); the stages live in
propose/, translate/, memory/ and decode/target.py. The drafter and target KV caches persist across rounds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import torch

from omnidraft.decode.draft_length import DraftLength
from omnidraft.decode.speculator import Speculator
from omnidraft.decode.target import Target
from omnidraft.decode.verify import Verdict
from omnidraft.memory.spaces import Recalls
from omnidraft.propose.base import Proposer
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
    #                        the context, also when the loop took one instead of drafting; "memory"
    #                        for a recall from the memory) or "none"
    match: int = 0  # lookup and memory rounds: the length of the suffix that matched


def decode(proposer: Proposer, target: Target, ctx: DraftContext, prompt_ids: list[int], *,
           k: DraftLength, max_new_tokens: int, stop: set[int], lookup: ContextIndex | None = None,
           memory: Recalls | None = None, record_topk: int = 0) -> Iterator[Round]:
    """Yield one Round per target verification until a stop id or ``max_new_tokens``.

    ``k`` says how many drafter tokens each round drafts (decode/draft_length.py), told what the
    drafter would first have to read (its catch-up) and what may still be committed, and sees
    what each round accepted; a round of 0 is the target decoding one token alone (its token is
    translated back into the drafter's context when a later round drafts, or at the end).
    ``lookup``: the context's index (prompt and committed ids are synced into it each round);
    where its suffix occurred before, ``k.lookup_span`` may take the copied continuation as the
    round's proposal, a point mass (exact under either verify rule); ``memory``: the pair's memory
    (memory/spaces.py), whose recalls are such copies too. Such a round is, for the drafter, a
    round without a draft. ``record_topk`` > 0: each Round carries the target's
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
    spec = Speculator(proposer, ctx, prompt_ids, k, lookup=lookup, memory=memory, needs_q=target.needs_q,
                      target_vocab=target.vocab_size)
    produced = 0
    try:
        while produced < max_new_tokens:
            round_t0 = time.perf_counter()
            # room: tokens this round can still commit beyond the correction/bonus, and the window
            window = target.max_length - len(spec.committed)  # verify feeds pending + proposal
            room = max(0, min(max_new_tokens - produced - 1, window))
            # 0. a copy from the context, or 1. draft and 2. translate (the speculator)
            plan = spec.plan(room, max_new_tokens - produced, window=window)
            prop = plan.proposal
            # 3. verify (one target forward)
            verdict = target.verify(prop.target_ids, prop.q)
            spec.verdict(plan, verdict.accepted, verdict.token)
            # 4. accept: the kept prefix plus the correction/bonus token, cut at a stop id or budget
            new = prop.target_ids[: verdict.accepted] + [verdict.token]
            for j, t in enumerate(new):
                if t in stop:
                    new = new[: j + 1]
                    break
            new = new[: max_new_tokens - produced]
            rows = None if target.last_rows is None else tuple(x[: len(new)] for x in target.last_rows)
            # 5. reverse translation into the drafter's tokens and cache update (the speculator)
            back_s = spec.commit(plan, new)
            now = time.perf_counter()
            k.observe_round(plan.width, prop.drafter_forwards, plan.read, now - round_t0)
            produced += len(new)
            kind = proposer.kind if plan.kind == "drafter" else plan.kind
            yield Round(new, prop, verdict, rows, plan.caught_up_s + prop.translate_s + back_s,
                        now - round_t0, prefill_s, now - t0, kind, plan.match.length if plan.match else 0)
            if new[-1] in stop:
                break
    finally:  # the drafter's context is whole when the loop ends (a training record reads it)
        spec.close()
