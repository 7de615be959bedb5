"""Sums of generation figures over one row's prompts, and the paired interval of one row's
tokens/s over another's on the same prompts (a bootstrap over prompts).

Knows the figures a generation reports (decode/metrics.py's names); nothing about rows or models.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Tally:
    """``per_prompt``: (new tokens, wall seconds) per prompt, in the order added; ``drafted`` and
    ``accepted``: proposed and kept ids; ``forwards``: target forwards (``uncounted``: prompts
    whose row did not count them); ``equal``: outputs equal to the reference row's, of
    ``compared``."""

    tokens: int = 0
    wall: float = 0.0
    drafted: int = 0
    accepted: int = 0
    forwards: int = 0
    uncounted: int = 0
    equal: int = 0
    compared: int = 0
    per_prompt: list[tuple[int, float]] = field(default_factory=list)

    def add(self, tokens: int, seconds: float, *, drafted: int = 0, accepted: int = 0, forwards: int | None = None,
            equal: bool | None = None, counted: bool = True) -> None:
        """One prompt's run: ``forwards`` None means one target forward per new token (no drafts);
        ``counted`` False: the row does not say (another engine's); ``equal`` None: not compared."""
        self.tokens += tokens
        self.wall += seconds
        self.per_prompt.append((tokens, seconds))
        self.drafted += drafted
        self.accepted += accepted
        self.forwards += tokens if forwards is None else forwards
        self.uncounted += int(not counted)
        if equal is not None:
            self.compared += 1
            self.equal += int(equal)

    def add_metrics(self, m: dict, equal: bool | None = None) -> None:
        """One generation's metrics (a Session's Result.metrics; unset counts: a run without drafts)."""
        self.add(m["new_tokens"], m["wall_s"], drafted=m.get("proposed") or 0, accepted=m.get("accepted") or 0,
                 forwards=m.get("target_forwards") or m["new_tokens"], equal=equal)

    @property
    def prompts(self) -> int:
        return len(self.per_prompt)

    def tokens_per_s(self) -> float:
        return self.tokens / self.wall if self.wall > 0 else 0.0

    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def tokens_per_forward(self) -> float | None:
        """None where a prompt's row did not count its target forwards."""
        return None if self.uncounted else self.tokens / max(self.forwards, 1)

    def summary(self) -> dict:
        acc, per_forward = self.acceptance(), self.tokens_per_forward()
        return {"prompts": self.prompts, "tokens": self.tokens, "seconds": round(self.wall, 3),
                "tokens_per_s": round(self.tokens_per_s(), 3), "drafted": self.drafted, "accepted": self.accepted,
                "acceptance": None if acc is None else round(acc, 4),
                "tokens_per_forward": None if per_forward is None else round(per_forward, 3), "equal": self.equal,
                "compared": self.compared, "per_prompt": [[n, round(s, 4)] for n, s in self.per_prompt]}


def ratio_interval(a: Tally, b: Tally, level: float = 0.95, draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A paired bootstrap interval of ``a``'s tokens/s over ``b``'s (each the ratio of sums): the
    prompts are resampled with replacement, each keeping both rows' runs on it. ``a`` and ``b``
    must hold the same prompts in the same order."""
    import numpy as np

    if len(a.per_prompt) != len(b.per_prompt) or not a.per_prompt:
        raise ValueError(f"a paired interval needs the same prompts in both rows ({len(a.per_prompt)} and "
                         f"{len(b.per_prompt)})")
    x, y = np.asarray(a.per_prompt, dtype=float), np.asarray(b.per_prompt, dtype=float)  # [P, 2] each
    idx = np.random.default_rng(seed).integers(0, len(x), size=(draws, len(x)))  # [draws, P]
    ratios = (x[idx, 0].sum(1) / x[idx, 1].sum(1)) / (y[idx, 0].sum(1) / y[idx, 1].sum(1))  # [draws]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)
