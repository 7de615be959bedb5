"""Turning logits into next-token distributions and draws: temperature, top-p, greedy.

Pure tensor functions; they know nothing about models or vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import OmniDraftError


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if not (self.temperature >= 0.0):
            raise OmniDraftError(f"temperature must be >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise OmniDraftError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def generator(self) -> torch.Generator:
        g = torch.Generator()
        g.manual_seed(self.seed if self.seed is not None else torch.seed())
        return g


def probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """[..., V] logits -> [..., V] probabilities after temperature and top-p.

    At temperature 0 the distribution is the one-hot argmax (what greedy decoding samples from).
    """
    if cfg.greedy:
        out = torch.zeros_like(logits, dtype=torch.float32)
        return out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    p = torch.softmax(logits.float() / cfg.temperature, dim=-1)
    if cfg.top_p < 1.0:
        sorted_p, idx = torch.sort(p, dim=-1, descending=True)
        cum = sorted_p.cumsum(-1)
        drop = cum - sorted_p > cfg.top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter_(-1, idx, sorted_p)
        p = p / p.sum(-1, keepdim=True)
    return p


def sample(p: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one id from a [V] distribution."""
    return int(torch.multinomial(p, 1, generator=generator))


def next_token(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator) -> int:
    """One id from [V] logits: argmax when greedy, else a draw from probs()."""
    if cfg.greedy:
        return int(logits.argmax())
    return sample(probs(logits, cfg), generator)
