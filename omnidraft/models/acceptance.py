"""Acceptance-prediction heads for adaptive drafting (SpecDec++ style), one per target.

The head reads the drafter's last hidden state that produced a draft token plus that token's
input embedding and predicts P(accept | the draft so far was accepted); the drafter's stop rule
(propose/drafter.py) ends a draft once 1 - prod P > gamma. Its labels and loss are in
head_labels.py, its training in head_trainer.py. Knows tensors; nothing about tokenizers,
records or the decode loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from omnidraft.errors import OmniDraftError

LABELS = ("ratio", "greedy")


@dataclass(frozen=True)
class HeadConfig:
    width: int = 256  # ResBlock width
    mismatch_weight: float = 6.0  # BCE weight of the reject class (SpecDec++)
    labels: str = "ratio"  # ratio: min(1, p/q) (sampling) | greedy: 1[argmax q == y]
    lr: float = 1e-3
    batch_size: int = 8
    replay_size: int = 256  # N: records kept for interleaved head updates
    head_steps: int = 2  # interleaved: head updates per distillation update
    max_tokens: int = 256

    def __post_init__(self):
        checks = [
            (self.width >= 8, "width", ">= 8"),
            (self.mismatch_weight > 0, "mismatch_weight", "> 0"),
            (self.labels in LABELS, "labels", f"one of {LABELS}"),
            (self.lr > 0, "lr", "> 0"),
            (self.batch_size >= 1, "batch_size", ">= 1"),
            (self.replay_size >= 1, "replay_size", ">= 1"),
            (self.head_steps >= 0, "head_steps", ">= 0"),
        ]
        for ok, name, want in checks:
            if not ok:
                raise OmniDraftError(f"HeadConfig.{name} must be {want}, got "
                                     f"{getattr(self, name)!r}")


class AcceptanceHead(nn.Module):
    """f_phi: [N, H] hidden + [N, H] token embedding -> [N] logits of P(accept)."""

    def __init__(self, hidden_size: int, width: int = 256, mismatch_weight: float = 1.0):
        super().__init__()
        self.hidden_size = hidden_size
        # Weighted BCE with weight w on the reject class moves the optimum's odds by 1/w;
        # accept_prob adds log w back so the stopping rule multiplies calibrated probabilities.
        self.register_buffer("logit_shift", torch.tensor(math.log(mismatch_weight)))
        self.inp = nn.Linear(2 * hidden_size, width)
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.out = nn.Linear(width, 1)
        nn.init.zeros_(self.fc2.weight)  # the ResBlock starts as the identity
        nn.init.zeros_(self.fc2.bias)

    def forward(self, hidden: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        x = self.inp(torch.cat([hidden, emb], -1))  # [N, W]
        x = x + self.fc2(torch.nn.functional.silu(self.fc1(self.norm(x))))
        return self.out(x).squeeze(-1)  # [N]

    @torch.inference_mode()
    def accept_prob(self, hidden: torch.Tensor, emb: torch.Tensor) -> float:
        """Calibrated P(accept) for one draft token. hidden, emb: [H]."""
        logit = self(hidden.float().unsqueeze(0), emb.float().unsqueeze(0))[0]
        return float(torch.sigmoid(logit + self.logit_shift))

    def config(self) -> dict:
        return {"hidden_size": self.hidden_size, "width": self.inp.out_features}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> "AcceptanceHead":
        head = cls(state["inp.weight"].shape[1] // 2, state["inp.weight"].shape[0])
        head.load_state_dict(state)  # logit_shift included
        return head.eval()
