"""The regression guard of a training round: publish the candidate adapter unless it is
significantly worse than the current one on the held-out records.

Both models are scored teacher-forced on the same held-out positions (did the drafter's argmax
equal the target's token?), so the comparison is paired: only the positions where exactly one of
them is right say anything. Under "no change" the candidate wins each of those n discordant
positions with probability 1/2; the candidate is rejected when it wins so few that this has
probability below ``alpha`` (McNemar's exact one-sided test). Hence an improving candidate is
rejected with probability below ``alpha`` however small the held-out slice is (a plain "after <
before" rejects half of all rounds that change nothing, and many small improvements on a tiny
slice). ``power`` says how likely a given regression is caught at a given slice size.

Knows position-level hits as tensors; nothing about models, records or adapters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Verdict:
    publish: bool
    before: float  # held-out acceptance of the current adapter
    after: float  # of the candidate
    wins: int  # positions only the candidate gets right
    losses: int  # positions only the current adapter gets right
    p_worse: float  # P(wins <= observed | no change): small means significantly worse

    def to_dict(self) -> dict:
        return {"acceptance_before": round(self.before, 4), "acceptance_after": round(self.after, 4),
                "guard_wins": self.wins, "guard_losses": self.losses, "guard_p_worse": round(self.p_worse, 4)}


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n if n else 1.0


def judge(before: torch.Tensor, after: torch.Tensor, alpha: float = 0.05) -> Verdict:
    """``before``, ``after``: [P] bool, each held-out position right under the current adapter
    and under the candidate. Publish unless the candidate is significantly worse at ``alpha``."""
    if before.shape != after.shape:
        raise ValueError(f"paired hits differ in shape: {tuple(before.shape)} vs {tuple(after.shape)}")
    wins = int((after & ~before).sum())
    losses = int((before & ~after).sum())
    p_worse = _binom_cdf(wins, wins + losses)
    n = max(before.numel(), 1)
    return Verdict(p_worse >= alpha, float(before.sum()) / n, float(after.sum()) / n, wins, losses, p_worse)


def power(discordant: int, drop: float, alpha: float = 0.05) -> float:
    """The chance the guard rejects a candidate that is truly worse: among ``discordant``
    positions, the candidate wins each with probability (1 - ``drop``) / 2 instead of 1/2
    (``drop`` = (losses - wins) / discordant in expectation)."""
    crit = -1  # the largest win count that is rejected
    while crit + 1 <= discordant and _binom_cdf(crit + 1, discordant) < alpha:
        crit += 1
    q = (1 - drop) / 2
    return sum(math.comb(discordant, i) * q ** i * (1 - q) ** (discordant - i) for i in range(crit + 1))
