"""What a proposer hands the verifier: target-vocabulary ids, where each came from in the draft,
and (when the verifier samples by rejection) the distribution each was drawn from.

A data record only; translators fill the token fields, proposers add q' and their costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch


@dataclass
class Proposal:
    target_ids: list[int] = field(default_factory=list)  # [m]
    spans: list[tuple[int, int]] = field(default_factory=list)  # [m] draft index [start, end)
    sub: list[int] = field(default_factory=list)  # [m] index within its n-gram's target run
    from_cache: list[bool] = field(default_factory=list)  # [m] came from an n-gram entry (cached or re-tokenised)
    consumed: int = 0  # draft tokens covered by the proposal
    drafts: list[int] = field(default_factory=list)  # the drafter ids drafted (spans index them); past
    #                                                  ``consumed``: drafted but not translatable
    q: torch.Tensor | None = None  # [m, Vt] proposal distributions, when the verifier needs them
    drafter_forwards: int = 0  # drafter forward passes spent on this proposal
    translate_s: float = 0.0  # seconds spent translating (drafter forwards excluded)
    # with a stopping rule, per drafted token (index as ``drafts``): the acceptance head's P(accept)
    # (a head rule only) and the drafter's own probability of the token; else empty
    accept_p: list[float] = field(default_factory=list)
    draft_p: list[float] = field(default_factory=list)

    @property
    def ngram_count(self) -> int:
        return sum(self.from_cache)

    @classmethod
    def direct(cls, target_ids: list[int]) -> "Proposal":
        """Target ids proposed directly (no draft tokens behind them to track)."""
        m = len(target_ids)
        return cls(list(target_ids), [(0, 0)] * m, [0] * m, [False] * m, m)

    def prefix(self, m: int) -> "Proposal":
        """The first ``m`` proposed tokens (the draft tokens they cover, their q' rows)."""
        spans = self.spans[:m]
        return replace(self, target_ids=self.target_ids[:m], spans=spans, sub=self.sub[:m],
                       from_cache=self.from_cache[:m], consumed=max((e for _, e in spans), default=0),
                       q=None if self.q is None else self.q[:m])
