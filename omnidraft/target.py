"""The verifying side of speculative decoding: holds the target's KV cache and turns a proposal
into a Verdict. ``LocalTarget`` runs in-process; a remote target speaks the same protocol.

Cache discipline: the cache holds the committed context except its last token (``pending``);
each verify feeds [pending, t_1..t_m], so one forward yields all m+1 target rows.
Knows models and verification; nothing about drafters or vocabularies.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .errors import OmniDraftError
from .records import topk_rows
from .runtime import CausalLM
from .sampling import SamplingConfig, probs
from .verify import Verdict, verify_greedy, verify_point_mass, verify_rejection

VERIFY_MODES = ("rejection", "point-mass")


class Target(Protocol):
    vocab_size: int
    max_length: int

    def start(self, prompt_ids: list[int]) -> None: ...

    def verify(self, proposal: list[int], q: torch.Tensor | None) -> Verdict: ...


class LocalTarget:
    """In-process target. ``q``: [m, V] proposal distributions (rejection mode), else None."""

    def __init__(self, model: CausalLM, sampling: SamplingConfig, mode: str = "rejection",
                 record_topk: int = 0):
        """``record_topk`` > 0: after each verify, ``last_rows`` holds the target's top-k ids and
        probabilities ([n+1, k] each) at the committed positions, for training records."""
        if mode not in VERIFY_MODES:
            raise OmniDraftError(f"unknown verify mode '{mode}'", f"choose one of {', '.join(VERIFY_MODES)}")
        self.model = model
        self.sampling = sampling
        self.mode = mode
        self.gen = sampling.generator()
        self.pending: int | None = None
        self.forwards = 0
        self.record_topk = record_topk
        self.last_rows: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def max_length(self) -> int:
        return self.model.max_length

    @property
    def needs_q(self) -> bool:
        return not self.sampling.greedy and self.mode == "rejection"

    def start(self, prompt_ids: list[int]) -> None:
        if len(prompt_ids) > 1:
            self.model.prefill(prompt_ids[:-1])
            self.forwards += 1
        else:
            self.model.reset()
        self.pending = prompt_ids[-1]

    def verify(self, proposal: list[int], q: torch.Tensor | None = None) -> Verdict:
        if self.pending is None:
            raise RuntimeError("verify before start")
        logits = self.model.extend([self.pending] + list(proposal)).logits  # [m+1, V]
        self.forwards += 1
        if self.sampling.greedy:
            verdict = verify_greedy(proposal, logits.argmax(-1).tolist())
        else:
            p = probs(logits, self.sampling)  # [m+1, V]
            if self.mode == "rejection":
                if q is None or q.shape != (len(proposal), p.shape[1]):
                    raise ValueError(f"rejection mode needs q of shape [{len(proposal)}, {p.shape[1]}]")
                verdict = verify_rejection(proposal, q, p, self.gen)
            else:
                verdict = verify_point_mass(proposal, p, self.gen)
        if self.record_topk:
            self.last_rows = topk_rows(logits[: verdict.accepted + 1], self.record_topk)
        self.model.rollback(len(proposal) - verdict.accepted)
        self.pending = verdict.token
        return verdict
