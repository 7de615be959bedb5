"""The drafter side of a round: turning the drafter's logits into draft tokens, and the rules
that stop a draft early (drafter confidence; the acceptance head's predicted chance that some
token so far is rejected, SpecDec++ style).

Knows an LM, a sampler and an acceptance head; nothing about vocabularies or verification.
"""

from __future__ import annotations

from typing import Protocol

import torch

from omnidraft.sampling import SamplingConfig, probs, sample
from omnidraft.errors import OmniDraftError
from omnidraft.models import lm as lm_ops
from omnidraft.models.lm import LM, Forward


class StopSettings(Protocol):
    """What a stopping rule is built from (``SpecConfig`` is one): a protocol, so the drafter
    needs no import of the configuration that names it (config -> registry -> drafter)."""

    min_k: int
    confidence: float | None
    gamma: float | None
    stop_below: tuple[float, ...] | None


class StopRule:
    """Adaptive stopping over one draft: after the n-th token, with the acceptance head's
    predicted chances P_1..P_n, stop once prod_i P_i < ``below[n - 1]`` (never before ``min_k``
    tokens; past the thresholds given the last one holds; the round's k ends the draft anyway). A
    constant threshold 1 - gamma is SpecDec++'s rule (stop once 1 - prod P > gamma); a cost model prices
    one per position (pairs/cost.py ``stop_below``)."""

    uses_head = True

    def __init__(self, below: tuple[float, ...] | list[float], min_k: int):
        self.below, self.min_k = tuple(below), min_k
        self.reset()

    @classmethod
    def gamma(cls, gamma: float, min_k: int) -> "StopRule":
        return cls((1.0 - gamma,), min_k)

    def reset(self) -> None:
        self.prod, self.n = 1.0, 0

    def update(self, p_accept: float) -> bool:
        """Count one drafted token; True if drafting should stop after it."""
        self.prod *= p_accept
        self.n += 1
        if self.n < self.min_k:
            return False
        return self.prod < self.below[min(self.n, len(self.below)) - 1]


class Confidence:
    """Stop a draft after a token the drafter itself gives probability < threshold."""

    uses_head = False

    def __init__(self, threshold: float):
        self.threshold = threshold

    def reset(self) -> None:
        pass

    def update(self, p: float) -> bool:
        return p < self.threshold


class Drafter:
    """One generation's drafter: its LM (own cache), its random stream, an optional restriction
    of the tokens it may draft, and the acceptance head for adaptive drafting.

    ``restrict``: [Vd] bool, the only drafter ids that may be drafted (``tli`` drafts from the
    shared vocabulary so every draft maps directly); None drafts from the full vocabulary.
    """

    def __init__(self, model: LM, sampling: SamplingConfig, restrict: torch.Tensor | None = None,
                 head=None):
        self.model = model
        self.sampling = sampling
        self.gen = sampling.generator("draft")
        # [Vd] additive mask: 0 where allowed, -inf elsewhere (None = everything allowed)
        self.mask = None if restrict is None else torch.where(restrict, 0.0, float("-inf"))
        self.head = head
        # an exported program scores its own greedy token with the head in its .ptd
        self.embeddings = (model.input_embeddings()  # [Vd, H]
                           if head is not None and not model.scores_accept else None)

    def unread(self, ids: list[int]) -> int:
        """Ids of ``ids`` the model has not read: past the longest prefix its cache shares."""
        return len(ids) - lm_ops.common_prefix(self.model.tokens, ids)

    def room(self, n_ids: int) -> int:
        """Draft tokens that fit the window after syncing to ``n_ids`` ids (sync, then k - 1 extends)."""
        return self.model.max_length - n_ids + 1

    def stop_rule(self, cfg: StopSettings) -> StopRule | Confidence | None:
        """A stopping rule for ``cfg`` (None: always draft the round's k); reset it for each draft."""
        if cfg.gamma is not None or cfg.stop_below is not None:
            if self.model.scores_accept and (not self.sampling.greedy or self.mask is not None):
                raise OmniDraftError("the exported drafter scores acceptance for its greedy token only",
                                     "use greedy omnidraft drafting, or the eager drafter runtime")
            if self.head is None and not self.model.scores_accept:
                raise OmniDraftError("adaptive drafting (gamma) needs an acceptance head",
                                     "pair the drafter and train one, or drop gamma")
            if cfg.stop_below is not None:
                return StopRule(cfg.stop_below, cfg.min_k)
            return StopRule.gamma(cfg.gamma, cfg.min_k)
        if cfg.confidence is not None:
            return Confidence(cfg.confidence)
        return None

    def accept_prob(self, out: Forward, d: int) -> float:
        """The head's P(accept) for draft token d, drafted from the last position of ``out``."""
        if self.model.scores_accept:
            return float(out.accept[-1])  # d is the program's greedy token (checked in stop_rule)
        return self.head.accept_prob(out.hidden[-1], self.embeddings[d])

    def pick(self, logits: torch.Tensor, want_conf: bool = False) -> tuple[int, torch.Tensor | None, float]:
        """(draft id, [Vd] distribution it was drawn from or None when greedy, the drafter's
        probability of the id; computed for greedy picks only when ``want_conf``, else 1.0).
        ``logits``: [Vd]."""
        if self.mask is not None:
            logits = logits + self.mask[: logits.shape[-1]]
        if self.sampling.greedy:
            d = int(logits.argmax())
            return d, None, float(torch.softmax(logits, -1)[d]) if want_conf else 1.0
        q = probs(logits, self.sampling)
        d = sample(q, self.gen)
        return d, q, float(q[d])
