"""Per-run decoding metrics: what every strategy counts, and the derived rates.

Plain counters folded from the decode loop's rounds (``add``) or filled by `ar`; no timing
policy beyond what the loops record.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omnidraft.decode.loop import Round


@dataclass
class Metrics:
    strategy: str
    new_tokens: int = 0  # target tokens committed to the output
    steps: int = 0  # decode rounds (one target forward each)
    proposed: int = 0  # target tokens proposed to the verifier
    accepted: int = 0  # of those, accepted
    ngram_proposed: int = 0  # proposed target tokens that came from n-gram merges
    ngram_accepted: int = 0
    target_forwards: int = 0
    drafter_forwards: int = 0
    prefill_s: float = 0.0
    wall_s: float = 0.0
    translate_ms: list[float] = field(default_factory=list)  # per step: map + reverse + cache update
    step_ms: list[float] = field(default_factory=list)  # per step: whole round
    reached: list[int] = field(default_factory=list)  # [i]: drafter rounds that proposed position i with 0..i-1 accepted
    position_accepted: list[int] = field(default_factory=list)  # [i]: of those, rounds that accepted i
    kinds: dict[str, list[int]] = field(default_factory=dict)  # round kind -> [rounds, proposed, accepted]

    def add(self, r: "Round") -> None:
        """Fold one speculative round in."""
        prop = r.proposal
        self.new_tokens += len(r.committed)
        self.steps += 1
        self.proposed += len(prop.target_ids)
        self.accepted += r.verdict.accepted
        self.ngram_proposed += prop.ngram_count
        self.ngram_accepted += sum(prop.from_cache[: r.verdict.accepted])
        self.target_forwards += 1
        self.drafter_forwards += prop.drafter_forwards
        self.translate_ms.append(r.translate_s * 1e3)
        self.step_ms.append(r.round_s * 1e3)
        kind = self.kinds.setdefault(r.kind, [0, 0, 0])
        kind[0] += 1
        kind[1] += len(prop.target_ids)
        kind[2] += r.verdict.accepted
        # positions: the drafter's acceptance (what its cost model reads), not the copies'
        for i in range(min(len(prop.target_ids), r.verdict.accepted + 1) if r.kind == "drafter" else 0):
            if i == len(self.reached):
                self.reached.append(0)
                self.position_accepted.append(0)
            self.reached[i] += 1
            self.position_accepted[i] += i < r.verdict.accepted
        self.prefill_s = r.prefill_s
        self.wall_s = r.elapsed_s

    def summary(self) -> dict:
        decode_s = max(self.wall_s - self.prefill_s, 1e-9)
        med = (lambda xs: round(statistics.median(xs), 4) if xs else None)
        return {
            "strategy": self.strategy,
            "new_tokens": self.new_tokens,
            "steps": self.steps,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "acceptance_rate": round(self.accepted / self.proposed, 4) if self.proposed else None,
            "mean_accepted_per_step": round(self.accepted / self.steps, 4) if self.steps else None,
            "tokens_per_step": round(self.new_tokens / self.steps, 4) if self.steps else None,
            "ngram_proposed": self.ngram_proposed,
            "ngram_accepted": self.ngram_accepted,
            "ngram_hits_per_step": round(self.ngram_proposed / self.steps, 4) if self.steps else None,
            "target_forwards": self.target_forwards,
            "drafter_forwards": self.drafter_forwards,
            "prefill_s": round(self.prefill_s, 4),
            "wall_s": round(self.wall_s, 4),
            "tokens_per_s": round(self.new_tokens / self.wall_s, 3) if self.wall_s else None,
            "decode_tokens_per_s": round(self.new_tokens / decode_s, 3),
            "translate_ms_median": med(self.translate_ms),
            "step_ms_median": med(self.step_ms),
            "rounds_by_kind": {k: {"rounds": n, "proposed": p, "accepted": a} for k, (n, p, a) in self.kinds.items()},
            "position_acceptance": [round(a / n, 4) for a, n in zip(self.position_accepted, self.reached)],
            "position_reached": list(self.reached),
            "position_accepted": list(self.position_accepted),
            "translate_share_median": (round(statistics.median(
                t / s for t, s in zip(self.translate_ms, self.step_ms) if s > 0), 5)
                if self.step_ms else None),
        }
