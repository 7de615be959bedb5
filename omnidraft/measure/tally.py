"""Sums of generation figures over one row's prompts, and the paired interval of one row's
tokens/s over another's on the same prompts (a bootstrap over prompts).

Knows the figures a generation reports (decode/metrics.py's names); nothing about rows or models.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


def figures(m: dict) -> dict:
    """One generation's decoding figures from its metrics (decode/metrics.py's summary), as
    ``Tally.add`` takes them: the drafter's proposals apart from copies from the context (a
    ``lookup`` round) and recalls from the memory (a ``memory`` round), target forwards, prefill
    seconds, the median translation ms of a drafted one."""
    kinds = m.get("rounds_by_kind") or {}
    copies, recalls = kinds.get("lookup", {}), kinds.get("memory", {})
    drafted = (m.get("proposed") or 0) - copies.get("proposed", 0) - recalls.get("proposed", 0)
    return {"drafted": drafted,
            "accepted": (m.get("accepted") or 0) - copies.get("accepted", 0) - recalls.get("accepted", 0),
            "copied": copies.get("proposed", 0), "copies_kept": copies.get("accepted", 0),
            "recalled": recalls.get("proposed", 0), "recalls_kept": recalls.get("accepted", 0),
            "forwards": m.get("target_forwards") or m["new_tokens"], "prefill": m.get("prefill_s") or 0.0,
            "translate_ms": m.get("translate_ms_median") if drafted else None}


@dataclass
class Tally:
    """``per_prompt``: (new tokens, wall seconds) per prompt, in the order added; ``prefill``: the
    seconds of those walls before the first new token (0 where a row does not say); ``drafted`` and
    ``accepted``: the drafter's proposed and kept ids; ``copied`` and ``copies_kept``: the same for
    copies from the context; ``recalled`` and ``recalls_kept``: for recalls from the memory; ``forwards``: target forwards (``uncounted``: prompts whose row did
    not count them); ``translate_ms``: each drafted generation's median translation ms;
    ``first_token``: seconds to the first token where a row says (a server's); ``by_position``:
    drafted ids accepted at each draft position (where an engine counts them: vLLM's); ``equal``:
    outputs equal to the reference row's, of ``compared``."""

    tokens: int = 0
    wall: float = 0.0
    prefill: float = 0.0
    drafted: int = 0
    accepted: int = 0
    copied: int = 0
    copies_kept: int = 0
    recalled: int = 0
    recalls_kept: int = 0
    forwards: int = 0
    uncounted: int = 0
    equal: int = 0
    compared: int = 0
    per_prompt: list[tuple[int, float]] = field(default_factory=list)
    translate_ms: list[float] = field(default_factory=list)
    first_token: list[float] = field(default_factory=list)
    by_position: list[int] = field(default_factory=list)

    def add(self, tokens: int, seconds: float, *, prefill: float = 0.0, drafted: int = 0, accepted: int = 0,
            copied: int = 0, copies_kept: int = 0, recalled: int = 0, recalls_kept: int = 0,
            forwards: int | None = None, translate_ms: float | None = None,
            first_token_s: float | None = None, by_position: list[int] | None = None, equal: bool | None = None,
            counted: bool = True) -> None:
        """One prompt's run: ``forwards`` None means one target forward per new token (no drafts);
        ``counted`` False: the row does not say (another engine's); ``equal`` None: not compared."""
        self.tokens += tokens
        self.wall += seconds
        self.prefill += prefill
        self.per_prompt.append((tokens, seconds))
        self.drafted += drafted
        self.accepted += accepted
        self.copied += copied
        self.copies_kept += copies_kept
        self.recalled += recalled
        self.recalls_kept += recalls_kept
        self.forwards += tokens if forwards is None else forwards
        self.uncounted += int(not counted)
        if translate_ms is not None:
            self.translate_ms.append(translate_ms)
        if first_token_s is not None:
            self.first_token.append(first_token_s)
        for p, n in enumerate(by_position or ()):
            if p == len(self.by_position):
                self.by_position.append(0)
            self.by_position[p] += n
        if equal is not None:
            self.compared += 1
            self.equal += int(equal)

    def add_metrics(self, m: dict, equal: bool | None = None) -> None:
        """One generation's metrics (a Session's Result.metrics, or generate_ar's)."""
        self.add(m["new_tokens"], m["wall_s"], **figures(m), equal=equal)

    @property
    def prompts(self) -> int:
        return len(self.per_prompt)

    def tokens_per_s(self) -> float:
        return self.tokens / self.wall if self.wall > 0 else 0.0

    def decode_tokens_per_s(self) -> float:
        """Tokens/s with the prefill seconds left out."""
        return self.tokens / max(self.wall - self.prefill, 1e-9) if self.tokens else 0.0

    def acceptance(self) -> float | None:
        """The drafter's (copies apart); None where nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    def tokens_per_forward(self) -> float | None:
        """None where a prompt's row did not count its target forwards."""
        return None if self.uncounted else self.tokens / max(self.forwards, 1)

    def translate_ms_median(self) -> float | None:
        return statistics.median(self.translate_ms) if self.translate_ms else None

    def latency(self, share: float) -> float | None:
        """The ``share`` quantile of the prompts' wall seconds (nearest rank)."""
        walls = sorted(s for _, s in self.per_prompt)
        return walls[min(len(walls) - 1, int(share * len(walls)))] if walls else None

    def summary(self) -> dict:
        acc, per_forward = self.acceptance(), self.tokens_per_forward()
        rounded = (lambda x: None if x is None else round(x, 3))  # noqa: E731
        return {"prompts": self.prompts, "tokens": self.tokens, "seconds": round(self.wall, 3),
                "tokens_per_s": round(self.tokens_per_s(), 3), "drafted": self.drafted, "accepted": self.accepted,
                "acceptance": None if acc is None else round(acc, 4), "copied": self.copied,
                "copies_kept": self.copies_kept, "recalled": self.recalled, "recalls_kept": self.recalls_kept,
                "tokens_per_forward": None if per_forward is None else round(per_forward, 3), "equal": self.equal,
                "compared": self.compared, "latency_p50_s": rounded(self.latency(0.5)),
                "latency_p95_s": rounded(self.latency(0.95)),
                "first_token_s": rounded(statistics.median(self.first_token)) if self.first_token else None,
                "accepted_by_position": list(self.by_position) or None,
                "per_prompt": [[n, round(s, 4)] for n, s in self.per_prompt]}


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
