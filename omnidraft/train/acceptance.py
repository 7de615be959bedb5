"""Acceptance-prediction heads for adaptive drafting (SpecDec++ style), one per target.

The head reads the drafter's last hidden state that produced a draft token plus that token's
input embedding and predicts P(accept | the draft so far was accepted). Drafting stops once
1 - prod P > gamma. Labels come from verification records: min(1, p(y)/q(y)) (rejection
sampling) or 1[argmax q == y] (greedy verification), attached to the drafter position that
completes a target token (the last sub-token of an n-gram). Knows tensors and records; nothing
about tokenizers or the decode loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from omnidraft.errors import OmniDraftError
from omnidraft.train.records import Record

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


def weighted_bce(logits: torch.Tensor, labels: torch.Tensor, mismatch_weight: float) -> torch.Tensor:
    """Mean weighted BCE. logits, labels: [N] (labels soft in [0, 1]); the reject part
    (1 - y) log(1 - sigmoid) is weighted by ``mismatch_weight``."""
    logp = torch.nn.functional.logsigmoid(logits)
    lognp = torch.nn.functional.logsigmoid(-logits)
    return -(labels * logp + mismatch_weight * (1 - labels) * lognp).mean()


def acceptance_labels(rec: Record, tok_logq: torch.Tensor, argmax_ok: torch.Tensor,
                      mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels for a record's generated positions.

    tok_logq: [L] drafter log q(d_i | d_<i) of the record's own token at each position (0 at
    position 0); argmax_ok: [L] bool, whether the drafter's argmax at i is d_i. Returns
    (positions [M] long, labels [M] float): direct-mapped positions get min(1, p(d_i)/q(d_i))
    (ratio) or argmax_ok (greedy); an n-gram segment's label goes on its last sub-token, with
    q = prod q(d_j) and p = the target's p(t) (greedy: all sub-tokens argmax_ok); its interior
    sub-tokens get 1 so a draft's product over drafter tokens is one over target tokens.
    """
    pos, lab = [], []
    L = rec.length
    i = max(rec.gen_start, 1)
    while i < L:
        row = int(rec.kl_row[i])
        if row >= 0:
            d = int(rec.draft_ids[i])
            if mode == "greedy":
                y = float(argmax_ok[i])
            else:
                hit = (rec.row_ids[row] == d).nonzero()
                p = float(rec.row_probs[row, hit[0, 0]]) if len(hit) else 0.0
                y = min(1.0, p / max(float(tok_logq[i].exp()), 1e-8))
            pos.append(i), lab.append(y)
            i += 1
        elif bool(rec.ngram_first[i]) and int(rec.ngram_len[i]) > 0:
            n = min(int(rec.ngram_len[i]), L - i)
            seg = range(i, i + n)
            if mode == "greedy":
                y = float(all(bool(argmax_ok[j]) for j in seg))
            else:
                q = float(tok_logq[i:i + n].sum().exp())
                y = min(1.0, float(rec.ngram_p[i]) / max(q, 1e-8))
            for j in seg[:-1]:
                pos.append(j), lab.append(1.0)
            pos.append(i + n - 1), lab.append(y)
            i += n
        else:
            i += 1
    return torch.tensor(pos, dtype=torch.long), torch.tensor(lab, dtype=torch.float32)
