"""Verification of a proposal against the target's distributions: pure functions.

Definitions (shared by every mode):
- proposal: m target-vocabulary ids t_1..t_m proposed after the committed context.
- p: [m+1, V] target distributions; row i is the target's next-token distribution after
  the context plus t_1..t_i (row 0: after the context alone).
- accepted: the length n of the longest proposal prefix the verifier keeps (0 <= n <= m).
- correction token: when n < m, a token drawn for position n+1 in place of the rejected t_{n+1},
  from the mode's residual distribution; it is always committed.
- bonus token: when n == m, a token drawn from p[m], the position after the whole proposal.
Each round therefore commits n + 1 tokens. ``p`` and ``q`` are read row by row (``p[i]``), so
they may be lazily computed rows (sampling.LazyProbs). These functions know no models and no
vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from omnidraft.sampling import sample


@dataclass(frozen=True)
class Verdict:
    accepted: int  # n: proposal[:n] is kept
    token: int  # the correction token (n < m) or the bonus token (n == m)

    def bonus(self, m: int) -> bool:
        return self.accepted == m


def verify_greedy(proposal: list[int], target_argmax: list[int]) -> Verdict:
    """Temperature 0. ``target_argmax``: [m+1] argmax ids of the target's rows.

    Accepts while the target's argmax equals the proposal; the token is the target's argmax at
    the first mismatch (correction) or after the last proposal (bonus).
    """
    n = 0
    while n < len(proposal) and proposal[n] == target_argmax[n]:
        n += 1
    return Verdict(n, int(target_argmax[n]))


def _draw(dist: torch.Tensor, gen: torch.Generator) -> int:
    return sample(dist, gen)


def verify_rejection(proposal: list[int], q: torch.Tensor, p: torch.Tensor,
                     gen: torch.Generator) -> Verdict:
    """Speculative rejection sampling (Leviathan et al.; Chen et al.).

    q: [m, V] the proposal distributions the tokens were drawn from (in target vocabulary).
    p: [m+1, V] target distributions.
    Accept t_i with probability min(1, p_i(t_i) / q_i(t_i)); on the first rejection draw the
    correction from norm(max(0, p_i - q_i)); if all are accepted draw the bonus from p_m.
    Lossless (output ~ p) when q_i is the distribution t_i was actually drawn from.
    """
    m = len(proposal)
    for i, t in enumerate(proposal):
        pt, qt = float(p[i][t]), float(q[i][t])
        u = float(torch.rand((), generator=gen))
        if qt > 0 and u < min(1.0, pt / qt):
            continue
        residual = torch.clamp(p[i] - q[i], min=0.0)
        total = float(residual.sum())
        return Verdict(i, _draw(residual / total if total > 0 else p[i], gen))
    return Verdict(m, _draw(p[m], gen))


def verify_point_mass(proposal: list[int], p: torch.Tensor, gen_at: Callable[[int], torch.Generator]) -> Verdict:
    """Lossless for any proposal mechanism: treat each proposal as a point mass q = 1{t_i}.

    Row i's token x_i is drawn from p_i with the stream ``gen_at(i)``; t_i is accepted iff it is
    x_i, and the first x_i that differs is the correction (all equal: x_m is the bonus). So t_i is
    accepted with probability p_i(t_i) and the correction is drawn from p_i without t_i,
    renormalised: the point-mass rule. Each committed token is x_i, a draw from p_i: given one
    stream per sequence position (sampling.PositionDraws), a seeded generation commits the
    target's own seeded tokens whatever was proposed.
    p: [m+1, V] target distributions.
    """
    for i, t in enumerate(proposal):
        x = _draw(p[i], gen_at(i))
        if x != t:
            return Verdict(i, x)
    return Verdict(len(proposal), _draw(p[len(proposal)], gen_at(len(proposal))))
