"""Cross-vocabulary speculative decoding (OmniDraft Algorithm 1): the one decode loop.

Each round reads top to bottom: draft -> translate -> verify -> accept -> cache update.
Knows the stages' interfaces; each stage lives in its own module (translate.py, target.py,
verify.py, reverse.py, ngram.py). The drafter and target KV caches persist across rounds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import torch

from omnidraft.train.acceptance import AcceptanceHead, StopRule
from omnidraft.errors import OmniDraftError
from omnidraft.decode.metrics import Metrics
from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.reverse import DraftContext, learn_ngrams
from omnidraft.models.eager import CausalLM, Forward
from omnidraft.decode.sampling import SamplingConfig, probs, sample
from omnidraft.decode.target import LocalTarget
from omnidraft.propose.slrs import SLRSProposer
from omnidraft.translate.token import Proposal, Translator

STRATEGIES = ("ar", "tli", "omnidraft", "slem", "dtw", "slrs")


@dataclass(frozen=True)
class SpecConfig:
    strategy: str = "omnidraft"
    k: int = 4  # drafter tokens per round (the maximum when confidence is set)
    learn_ngrams: bool = True  # add unseen n-grams from verified output (omnidraft only)
    confidence: float | None = None  # stop a draft after a token the drafter gives p < this
    gamma: float | None = None  # adaptive drafting: stop once the acceptance head's 1 - prod P > gamma
    min_k: int = 1  # fewest drafter tokens per round under adaptive drafting

    def __post_init__(self):
        if self.confidence is not None and not 0.0 < self.confidence < 1.0:
            raise OmniDraftError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.gamma is not None and not 0.0 < self.gamma < 1.0:
            raise OmniDraftError(f"gamma must be in (0, 1), got {self.gamma}")
        if self.gamma is not None and self.confidence is not None:
            raise OmniDraftError("choose one stopping rule: confidence or gamma (acceptance head)")
        if not 1 <= self.min_k <= self.k:
            raise OmniDraftError(f"min_k must be in 1..k ({self.k}), got {self.min_k}")
        if self.strategy not in STRATEGIES:
            raise OmniDraftError(f"unknown strategy '{self.strategy}'",
                                 f"choose one of {', '.join(STRATEGIES)}")
        if not 1 <= self.k <= 32:
            raise OmniDraftError(f"draft length k must be in 1..32, got {self.k}")


class Drafter:
    """Turns drafter logits into the proposal distribution and a draft token.

    ``tli`` renormalises the drafter over the shared vocabulary (the paper's SpD_DM) so every
    draft maps directly; ``omnidraft`` drafts from the full drafter vocabulary.
    """

    def __init__(self, model: CausalLM, sampling: SamplingConfig, restrict: torch.Tensor | None,
                 head: AcceptanceHead | None = None):
        self.model = model
        self.sampling = sampling
        self.gen = sampling.generator("draft")
        # [Vd] additive mask: 0 where allowed, -inf elsewhere (None = everything allowed)
        self.mask = None if restrict is None else torch.where(restrict, 0.0, float("-inf"))
        self.head = head
        # an exported program scores its own greedy token with the head in its .ptd
        self.program_head = bool(getattr(model, "scores_accept", False))
        self.embeddings = (model.model.get_input_embeddings().weight  # [Vd, H]
                           if head is not None and not self.program_head else None)

    def stop_rule(self, cfg: "SpecConfig") -> "StopRule | _Confidence | None":
        """A fresh per-round stopping rule for ``cfg`` (None: always draft k tokens)."""
        if cfg.gamma is not None:
            if self.program_head and (not self.sampling.greedy or self.mask is not None):
                raise OmniDraftError("the exported drafter scores acceptance for its greedy token only",
                                     "use greedy omnidraft drafting, or the eager drafter runtime")
            if self.head is None and not self.program_head:
                raise OmniDraftError("adaptive drafting (gamma) needs an acceptance head",
                                     "pair the drafter and train one, or drop gamma")
            return StopRule(cfg.gamma, cfg.min_k, cfg.k)
        if cfg.confidence is not None:
            return _Confidence(cfg.confidence)
        return None

    def accept_prob(self, out: Forward, d: int) -> float:
        """The head's P(accept) for draft token d, drafted from the last position of ``out``."""
        if self.program_head:
            return float(out.accept[-1])  # d is the program's greedy token (checked in stop_rule)
        return self.head.accept_prob(out.hidden[-1], self.embeddings[d])

    def pick(self, logits: torch.Tensor, want_conf: bool = False) -> tuple[int, torch.Tensor | None, float]:
        """(draft id, [Vd] distribution it was drawn from or None when greedy, the drafter's
        probability of the id; computed for greedy picks only when ``want_conf``, else 1.0)."""
        if self.mask is not None:
            logits = logits + self.mask[: logits.shape[-1]]
        if self.sampling.greedy:
            d = int(logits.argmax())
            return d, None, float(torch.softmax(logits, -1)[d]) if want_conf else 1.0
        q = probs(logits, self.sampling)
        d = sample(q, self.gen)
        return d, q, float(q[d])


class _Confidence:
    """Stop a draft after a token the drafter itself gives probability < threshold."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def update(self, p: float) -> bool:
        return p < self.threshold


def decode_speculative(drafter: Drafter, target: LocalTarget, translator: Translator,
                       ctx: DraftContext, target_prompt_ids: list[int], *, cfg: SpecConfig,
                       max_new_tokens: int, stop: set[int], metrics: Metrics,
                       cache: NgramCache | None,
                       rows_out: list | None = None) -> Iterator[list[int]]:
    """Yield each round's committed target tokens (accepted + correction/bonus).

    ``max_new_tokens`` counts target tokens and must fit the target's context window after the
    prompt (generate.check_budget). Each round drafts at most what can still be committed and
    what fits both models' windows: near the end of either window the proposal shrinks, down to
    none (the target then decodes alone), so speculative decoding ends where `ar` ends.
    ``rows_out``: when given (and the target records top-k), receives the target's top-k
    (ids [n, k], probs [n, k]) for each round's committed tokens, for training records.
    """
    t0 = time.perf_counter()
    target.start(target_prompt_ids)
    rule = drafter.stop_rule(cfg)
    use_head = isinstance(rule, StopRule)
    metrics.prefill_s = time.perf_counter() - t0
    produced = 0
    generated: list[int] = []
    committed = list(target_prompt_ids)  # every target id so far, for string-level translation
    while produced < max_new_tokens:
        step_t0 = time.perf_counter()
        # room: tokens this round can still commit beyond the correction/bonus, and the windows
        target_room = target.max_length - len(committed)  # the verify feeds pending + proposal
        drafter_room = drafter.model.max_length - len(ctx.ids) + 1  # sync, then k - 1 extends
        k = max(0, min(cfg.k, max_new_tokens - produced - 1, target_room, drafter_room))
        # 1. draft and 2. translate: drafter ids -> target ids (+ q' for rejection sampling)
        if k:
            out = drafter.model.sync(ctx.ids, hidden=use_head)  # the drafter's last position
            metrics.drafter_forwards += 1
            propose = _propose_slrs if isinstance(translator, SLRSProposer) else _draft_and_translate
            prop, q_target, translate_s = propose(drafter, translator, ctx, committed, out, k, rule,
                                                  target.needs_q, metrics)
            if len(prop.target_ids) > target_room:  # a split n-gram can outgrow the drafts
                prop, q_target = prop.prefix(target_room), (q_target[:target_room]
                                                              if q_target is not None else None)
        else:
            prop, q_target, translate_s = Proposal(), _no_rows(target), 0.0
        # 3. verify (one target forward)
        verdict = target.verify(prop.target_ids, q_target)
        metrics.target_forwards += 1
        # 4. accept: the kept prefix plus the correction/bonus token, cut at a stop id or budget
        new = prop.target_ids[: verdict.accepted] + [verdict.token]
        for j, t in enumerate(new):
            if t in stop:
                new = new[: j + 1]
                break
        new = new[: max_new_tokens - produced]
        if rows_out is not None and target.last_rows is not None:
            rows_out.append(tuple(x[: len(new)] for x in target.last_rows))
        metrics.proposed += len(prop.target_ids)
        metrics.accepted += verdict.accepted
        metrics.ngram_proposed += prop.ngram_count
        metrics.ngram_accepted += sum(prop.from_cache[: verdict.accepted])
        # 5. cache update and reverse translation into the drafter's tokens
        tr_t0 = time.perf_counter()
        ctx.append_target(new)
        generated.extend(new)
        committed.extend(new)
        if cache is not None and cfg.learn_ngrams:
            learn_ngrams(cache, ctx, generated)
        translate_s += time.perf_counter() - tr_t0
        produced += len(new)
        metrics.new_tokens = produced
        metrics.steps += 1
        metrics.translate_ms.append(translate_s * 1e3)
        metrics.step_ms.append((time.perf_counter() - step_t0) * 1e3)
        metrics.wall_s = time.perf_counter() - t0
        yield new
        if new[-1] in stop:
            break
    metrics.wall_s = time.perf_counter() - t0


def _no_rows(target) -> torch.Tensor | None:
    """q' for an empty proposal: [0, V] when the target verifies by rejection, else None."""
    return torch.zeros(0, target.vocab_size) if target.needs_q else None


def _draft_and_translate(drafter: Drafter, translator, ctx: DraftContext, committed: list[int],
                         out: Forward, k: int, rule, needs_q: bool, metrics: Metrics):
    """Draft up to k (>= 1) drafter tokens from the state ``out``, stopping early once the draft can
    no longer translate or when the stopping rule says so (drafter confidence, or the acceptance
    head's predicted chance that some token so far is rejected); then translate them.
    Returns (proposal, q' [m, Vt] or None, translation seconds)."""
    use_head = isinstance(rule, StopRule)
    drafts: list[int] = []
    qrows: list[torch.Tensor] = []  # [Vd] each, when sampling
    if use_head:
        rule.reset()
    for i in range(k):
        d, q, conf = drafter.pick(out.logits[-1], want_conf=isinstance(rule, _Confidence))
        drafts.append(d)
        if q is not None:
            qrows.append(q)
        if not translator.viable(drafts, ctx=ctx, history=committed):
            drafts.pop()
            break
        if rule is not None and rule.update(drafter.accept_prob(out, d) if use_head else conf):
            break
        if i < k - 1:
            out = drafter.model.extend([d], hidden=use_head)
            metrics.drafter_forwards += 1
    t0 = time.perf_counter()
    prop = translator.translate(drafts, ctx=ctx, history=committed)
    q_target = None
    if needs_q:  # [consumed, Vd] drafter rows -> [m, Vt]; an empty proposal has no rows
        q_draft = torch.stack(qrows[: prop.consumed]) if prop.consumed else torch.zeros(0, 0)
        q_target = translator.proposal_dists(prop, drafts, q_draft)
    return prop, q_target, time.perf_counter() - t0


def _propose_slrs(drafter: Drafter, proposer: SLRSProposer, ctx: DraftContext, committed: list[int],
                  out: Forward, k: int, rule, needs_q: bool, metrics: Metrics):
    """slrs drafts target tokens directly, from the drafter's string distribution psi (exact,
    so rejection sampling against it is lossless). Same return as _draft_and_translate."""
    f0 = proposer.forwards
    ids, rows = proposer.propose(drafter.model, ctx, out.logits[-1], k, drafter.sampling, drafter.gen)
    metrics.drafter_forwards += proposer.forwards - f0
    prop = Proposal(target_ids=ids, spans=[(0, 0)] * len(ids), sub=[0] * len(ids),
                    from_cache=[False] * len(ids), consumed=len(ids))
    q = None
    if needs_q:
        q = torch.stack(rows) if rows else torch.zeros(0, proposer.vt)
    return prop, q, 0.0
