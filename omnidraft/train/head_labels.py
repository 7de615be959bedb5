"""What an acceptance head is trained toward: per-position labels from a verification record,
and the weighted binary cross-entropy that scores the head against them.

Pure functions over records and tensors; nothing about models, heads or optimisers.
"""

from __future__ import annotations

import torch

from omnidraft.train.records import Record


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
