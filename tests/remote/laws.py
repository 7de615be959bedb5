"""What the engine stand-ins sample with, written apart from the code under test: the top-p
nucleus (the fewest likeliest ids whose mass reaches top_p) and one seeded draw.

Both are exact and cheap over a 150k vocabulary: the nucleus sorts only the likeliest ids when
they hold top_p of the mass (else everything), and a draw inverts the float64 CDF with one
uniform, where a full argsort and torch.multinomial took ~20 ms a request.
"""

from __future__ import annotations

import torch


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """[V] probabilities -> the ids of their top-p nucleus, likeliest first."""
    if top_p >= 1.0:
        return torch.arange(probs.shape[0])
    n = 256
    while True:
        vals, ids = torch.topk(probs, min(n, probs.shape[0]))
        cum = vals.cumsum(0)
        if cum[-1] >= top_p or n >= probs.shape[0]:
            return ids[: int((cum < top_p).sum()) + 1]
        n *= 16


def draw(law: torch.Tensor, generator: torch.Generator) -> int:
    """One id from the [V] law (zero-probability ids never)."""
    cdf = law.double().cumsum(0)
    u = float(torch.rand((), dtype=torch.float64, generator=generator)) * float(cdf[-1])
    return min(int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True)),
               int(law.nonzero().flatten()[-1]))
