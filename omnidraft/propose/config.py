"""SpecConfig: which strategy drafts and when a draft stops early. How many tokens a round
drafts is not here: a ``DraftLength`` (decode/draft_length.py) says it each round.

Validates itself and names the bad option; knows strategy names only through the registry.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnidraft.errors import OmniDraftError
from omnidraft.propose.registry import get


# A Session's default stopping rule: a draft stops after a token the drafter itself gives less than
# this probability (the round's k caps it). Chosen by measurement on the 1.5B with its shipped adapter
# (bench/results/distill-20261128-0143: 1.05x / 1.03x the tokens/s of full drafts on code / chat, the
# zero adapter 1.02x / 0.99x; head-20261128-0130 replays 0.3 / 0.5 / 0.7 on the same rounds: 0.5 best)
DRAFT_CONFIDENCE = 0.5


@dataclass(frozen=True)
class SpecConfig:
    strategy: str = "omnidraft"
    learn_ngrams: bool = True  # add unseen n-grams from verified output (strategies with a cache)
    retokenise: bool = True  # omnidraft: entries from the target's tokenisation of the draft, then the cache
    confidence: float | None = None  # stop a draft after a token the drafter gives p < this
    gamma: float | None = None  # adaptive drafting: stop once the acceptance head's 1 - prod P > gamma
    min_k: int = 1  # fewest drafter tokens per round under adaptive drafting (the round's k caps it)
    # adaptive drafting priced by the pair's cost model: a Session sets stop_below from what a longer
    # draft is predicted to commit against what it costs (pairs/cost.py stop_below)
    priced: bool = False
    # the head's prod P below which a draft stops, per position n = 1, 2, ... (the last holds past them)
    stop_below: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.confidence is not None and not 0.0 < self.confidence < 1.0:
            raise OmniDraftError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.gamma is not None and not 0.0 < self.gamma < 1.0:
            raise OmniDraftError(f"gamma must be in (0, 1), got {self.gamma}")
        rules = [n for n, on in (("confidence", self.confidence is not None), ("gamma", self.gamma is not None),
                                 ("priced", self.priced), ("stop_below", self.stop_below is not None)) if on]
        if len(rules) > 1 and set(rules) != {"priced", "stop_below"}:
            raise OmniDraftError(f"choose one stopping rule, got {' and '.join(rules)}",
                                 "confidence (the drafter's), gamma or priced (the acceptance head's)")
        below = self.stop_below
        if below is not None and (not below or not all(0.0 <= t <= 1.0 for t in below)):
            raise OmniDraftError(f"stop_below must be chances in [0, 1], got {self.stop_below}")
        if self.min_k < 1:
            raise OmniDraftError(f"min_k must be >= 1, got {self.min_k}")
        get(self.strategy)  # an unknown name is an error naming the choices
