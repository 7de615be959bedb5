"""Distillation losses for aligning a drafter to a target across vocabularies (pure functions).

L_DM: a divergence between q'_theta (the drafter mapped into the target vocabulary) and the
target's p on direct-mapped positions. p is known as its top-k over tokens the drafter can
express plus one bin for the remaining mass, so each divergence is computed exactly over those
K+1 bins (a lower bound of the full-vocabulary one, tight when the top-k holds the mass).
L_N-gram: -lambda * log q_theta(d_i) on drafter positions inside n-gram segments; lambda fixed
or the target's p(t) of the segment's token. The approximate-KL variant scores the n-gram token
with mapping rule (2) instead. Knows tensors only.
"""

from __future__ import annotations

import torch

EPS = 1e-8
DIVERGENCES = ("kl", "fkl", "jsd")


def _binned(logq: torch.Tensor, row_ids: torch.Tensor, row_probs: torch.Tensor,
            row_other: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q and p over K+1 bins. logq: [N, V] drafter log-probs; row_ids: [N, K] drafter ids (-1 pad);
    row_probs: [N, K]; row_other: [N]. Returns (q [N, K+1], p [N, K+1], valid [N, K+1])."""
    valid = row_ids >= 0  # [N, K]
    qs = torch.gather(logq, 1, row_ids.clamp(min=0).long()).exp() * valid  # [N, K]
    ps = row_probs.float() * valid
    qo = (1.0 - qs.sum(1, keepdim=True)).clamp(min=EPS)  # [N, 1]
    po = row_other.float().unsqueeze(1).clamp(min=EPS)
    ones = torch.ones_like(qo, dtype=torch.bool)
    return torch.cat([qs, qo], 1), torch.cat([ps, po], 1), torch.cat([valid, ones], 1)


def _div(q: torch.Tensor, p: torch.Tensor, valid: torch.Tensor, kind: str) -> torch.Tensor:
    """Divergence per row over masked bins. q, p, valid: [N, B] -> [N]."""
    q = q.clamp(min=EPS)
    p = p.clamp(min=EPS)
    if kind == "kl":  # KL(q' || p): the paper's choice
        terms = q * (q.log() - p.log())
    elif kind == "fkl":  # KL(p || q')
        terms = p * (p.log() - q.log())
    elif kind == "jsd":
        m = 0.5 * (p + q)
        terms = 0.5 * q * (q.log() - m.log()) + 0.5 * p * (p.log() - m.log())
    else:
        raise ValueError(f"divergence must be one of {DIVERGENCES}, got {kind!r}")
    return (terms * valid).sum(1)


def direct_loss(logq: torch.Tensor, row_ids: torch.Tensor, row_probs: torch.Tensor,
                row_other: torch.Tensor, kind: str = "kl") -> torch.Tensor:
    """L_DM per position. logq: [N, V] drafter log-probs at direct-mapped positions; rows as in
    the record ([N, K], [N, K], [N]). Returns [N]."""
    return _div(*_binned(logq, row_ids, row_probs, row_other), kind)


def ngram_nll(token_logq: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """L_N-gram per position: -weight * log q_theta(d_i). token_logq, weight: [N] -> [N]."""
    return -weight * token_logq


def ngram_approx_kl(logq_first: torch.Tensor, seg_logq: torch.Tensor, first_direct: torch.Tensor,
                    p_ngram: torch.Tensor, row_ids: torch.Tensor, row_probs: torch.Tensor,
                    row_other: torch.Tensor, kind: str = "kl") -> torch.Tensor:
    """Approximate KL for n-gram tokens with mapping rule (2), per segment.

    logq_first: [S, V] drafter log-probs at each segment's first position; seg_logq: [S]
    sum of log q(d_j) over the segment (log of q'(t_ngram)); first_direct: [S] drafter id of
    map(d_1), -1 if unmapped; p_ngram: [S] target p of the n-gram token; rows: the target's
    top-k at that position ([S, K], [S, K], [S]). Bins: stored ids with q'(d_1) reduced by
    q'(t_ngram), one bin for t_ngram, one for the rest. Returns [S].
    """
    q, p, valid = _binned(logq_first, row_ids, row_probs, row_other)  # [S, K+1]
    prod = seg_logq.exp().unsqueeze(1)  # [S, 1]
    hit = (row_ids == first_direct.unsqueeze(1)) & (first_direct.unsqueeze(1) >= 0)  # [S, K]
    reduced = torch.where(hit, (q[:, :-1] - prod).clamp(min=EPS), q[:, :-1])
    q_other = (q[:, -1:] - prod * (~hit.any(1, keepdim=True))).clamp(min=EPS)
    p_other = (p[:, -1:] - p_ngram.float().unsqueeze(1)).clamp(min=EPS)
    q2 = torch.cat([reduced, prod, q_other], 1)
    p2 = torch.cat([p[:, :-1], p_ngram.float().unsqueeze(1), p_other], 1)
    v2 = torch.cat([valid[:, :-1], torch.ones_like(prod, dtype=torch.bool),
                    torch.ones_like(prod, dtype=torch.bool)], 1)
    return _div(q2, p2, v2, kind)
