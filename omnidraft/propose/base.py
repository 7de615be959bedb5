"""The Proposer protocol: what every strategy implements to put target tokens before the verifier.

Each round the decode loop hands a proposer the shared ``DraftState`` and a draft budget k; the
proposer drafts (drafter forwards), translates into target ids and, when the verifier samples by
rejection, attaches q' (the distribution each proposed token was drawn from). After the round it
``observe``s the committed tokens (e.g. to learn n-grams). Knows the drafter context and the
proposal record; nothing about verification or the target model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from omnidraft.translate.proposal import Proposal
from omnidraft.translate.reverse import DraftContext


@dataclass
class DraftState:
    ctx: DraftContext  # the drafter's tokens of the prompt and committed text
    committed: list[int]  # every target id so far, prompt included
    generated: list[int] = field(default_factory=list)  # the target ids committed after the prompt
    needs_q: bool = False  # the verifier samples by rejection: proposals carry q' [m, Vt]
    target_vocab: int = 0  # Vt

    def empty(self) -> Proposal:
        """A proposal of no tokens (the target decodes alone this round)."""
        return Proposal(q=torch.zeros(0, self.target_vocab) if self.needs_q else None)

    def copied(self, ids: list[int]) -> Proposal:
        """Target ids copied from the context: a point mass on each (q' one-hot rows when the
        verifier samples by rejection, which then accepts id x with probability p(x) and
        resamples from p without x: the point-mass rule, exact)."""
        prop = Proposal.direct(ids)
        if self.needs_q:
            prop.q = torch.zeros(len(ids), self.target_vocab).scatter_(
                1, torch.tensor(ids).unsqueeze(1), 1.0)  # [m, Vt]
        return prop


class Proposer(Protocol):
    kind: str  # what a round it proposes is reported as: "drafter", or "lookup" (copied from the context)

    def propose(self, state: DraftState, k: int) -> Proposal:
        """At most ``k`` (>= 1) drafter tokens' worth of target ids; fewer near the drafter's
        window end, none when nothing translates. ``Proposal.q`` is set iff ``state.needs_q``."""

    def observe(self, state: DraftState, fresh: int) -> None:
        """After the committed tokens reach the drafter's context: the last ``fresh`` of
        ``state.generated`` are new since the previous call (cache updates)."""

    def unread(self, state: DraftState) -> int:
        """Tokens of ``state.ctx`` a draft would first feed the drafter (its catch-up: the prompt
        at a generation's start, what rounds without a draft committed); 0 without a drafter."""
