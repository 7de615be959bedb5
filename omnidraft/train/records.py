"""Training records: what one verified generation teaches the drafter, in the drafter's tokens.

A record holds the drafter-space token sequence, the loss masks, and only the target
probabilities the losses need: for each direct-mapped position the target's top-k probabilities
restricted to tokens the drafter can express (stored as drafter ids) plus the remaining mass,
and for each n-gram segment the target's probability of its token. Serialised with safetensors
(bytes), so records cross a network and a disk unchanged. Knows the vocabulary map and the
segment alignment; nothing about models or optimisers. Built here, above decoding: decode/
hands over what it verified (``Verified``) and imports nothing of train/.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from omnidraft.decode.generate import Verified
from omnidraft.translate.align import aligned_segments
from omnidraft.translate.vocab import VocabMap

FORMAT = "omnidraft-record/1"


@dataclass
class Record:
    draft_ids: torch.Tensor  # [L] int32, drafter prompt + generated tokens
    gen_start: int  # first generated position; losses apply to positions >= gen_start
    kl_row: torch.Tensor  # [L] int32, row of the target distribution for a direct-mapped token, -1 else
    row_ids: torch.Tensor  # [R, K] int32, drafter ids of the target's top-k (mapped only), -1 pad
    row_probs: torch.Tensor  # [R, K] float16, their target probabilities
    row_other: torch.Tensor  # [R] float16, target mass outside row_ids
    ngram_p: torch.Tensor  # [L] float16, target prob of the n-gram token a position belongs to, 0 else
    ngram_first: torch.Tensor  # [L] bool, first drafter position of its n-gram segment
    ngram_len: torch.Tensor  # [L] int32, drafter length of the segment (at its first position), 0 else
    ngram_row: torch.Tensor  # [L] int32, row (target top-k) at the segment's target position, -1 else
    ngram_first_direct: torch.Tensor  # [L] int32, drafter id of map(d_first) if mapped, -1 else

    @property
    def length(self) -> int:
        return int(self.draft_ids.shape[0])

    @property
    def ngram_mask(self) -> torch.Tensor:  # [L] bool
        return self.ngram_p > 0

    def to_bytes(self) -> bytes:
        tensors = {k: v.contiguous() for k, v in self.__dict__.items() if isinstance(v, torch.Tensor)}
        return st_save(tensors, metadata={"format": FORMAT, "gen_start": str(self.gen_start)})

    @classmethod
    def from_bytes(cls, data: bytes) -> "Record":
        try:
            header_len = int.from_bytes(data[:8], "little")
            meta = json.loads(data[8:8 + header_len]).get("__metadata__") or {}
        except (ValueError, AttributeError) as err:
            raise ValueError(f"not an OmniDraft training record ({err})") from None
        if meta.get("format") != FORMAT:
            raise ValueError(f"not an OmniDraft training record (format {meta.get('format')!r})")
        return cls(gen_start=int(meta["gen_start"]), **st_load(data))


def build_record(vmap: VocabMap, verified: Verified) -> Record:
    """One record from a finished generation's verifications (decode/generate.py ``Verified``:
    the drafter's and the target's tokens, the target's top-k [len(target_gen), K] at each
    generated position)."""
    draft_prompt, draft_gen, tail = verified.draft_prompt, verified.draft_gen, verified.tail
    target_gen, top_ids, top_probs = verified.target_gen, verified.top_ids, verified.top_probs
    L = len(draft_prompt) + len(draft_gen)
    g0 = len(draft_prompt)
    t2d = vmap.t2d
    kl_row = torch.full((L,), -1, dtype=torch.int32)
    ngram_p = torch.zeros(L, dtype=torch.float16)
    ngram_first = torch.zeros(L, dtype=torch.bool)
    ngram_len = torch.zeros(L, dtype=torch.int32)
    ngram_row = torch.full((L,), -1, dtype=torch.int32)
    ngram_first_direct = torch.full((L,), -1, dtype=torch.int32)
    rows: dict[int, int] = {}  # target position -> row index

    def row(j: int) -> int:
        return rows.setdefault(j, len(rows))

    # positions with text on both sides; zero-length (special) tokens are left out
    dpos = [i for i, d in enumerate(draft_gen) if vmap.draft_bytes[d]]
    tpos = [j for j, t in enumerate(target_gen) if vmap.target_bytes[t]]
    dlens = [len(vmap.draft_bytes[draft_gen[i]]) for i in dpos]
    tlens = [len(vmap.target_bytes[target_gen[j]]) for j in tpos]
    excess = len(tail)  # the drafter side stops before a held-back partial character
    while excess > 0 and tpos and tlens[-1] <= excess:
        excess -= tlens.pop()
        tpos.pop()
    if excess:
        dpos, tpos = [], []
    # walk the segments (from the end) with positions: indices into dpos/tpos
    di, ti = len(dpos), len(tpos)
    for dseg, tseg in aligned_segments([draft_gen[i] for i in dpos], dlens,
                                       [target_gen[j] for j in tpos], tlens):
        di -= len(dseg)
        ti -= len(tseg)
        dp = [g0 + dpos[di + x] for x in range(len(dseg))]
        tp = [tpos[ti + x] for x in range(len(tseg))]
        if len(dseg) == 1 and len(tseg) == 1 and vmap.d2t[dseg[0]] == tseg[0]:
            kl_row[dp[0]] = row(tp[0])
            continue
        j = tp[0]
        hit = (top_ids[j] == tseg[0]).nonzero()
        pt = float(top_probs[j, hit[0, 0]]) if len(hit) else 1e-4  # outside top-k: small
        ngram_p[dp] = pt
        ngram_first[dp[0]] = True
        ngram_len[dp[0]] = len(dp)
        ngram_row[dp[0]] = row(j)
        ngram_first_direct[dp[0]] = dseg[0] if vmap.direct(dseg[0]) >= 0 else -1
    # compact rows: keep the top-k ids the drafter can express, as drafter ids
    order = sorted(rows, key=rows.get)
    K = top_ids.shape[1]
    row_ids = torch.full((len(order), K), -1, dtype=torch.int32)
    row_probs = torch.zeros((len(order), K), dtype=torch.float16)
    row_other = torch.ones(len(order), dtype=torch.float16)
    for r, j in enumerate(order):
        d = torch.as_tensor(t2d[top_ids[j].numpy()])
        keep = d >= 0
        n = int(keep.sum())
        row_ids[r, :n] = d[keep].to(torch.int32)
        row_probs[r, :n] = top_probs[j][keep].to(torch.float16)
        row_other[r] = max(0.0, 1.0 - float(top_probs[j][keep].sum()))
    width = int((row_ids >= 0).sum(1).max()) if len(order) else 0
    return Record(
        draft_ids=torch.tensor(draft_prompt + draft_gen, dtype=torch.int32), gen_start=g0,
        kl_row=kl_row, row_ids=row_ids[:, :width].contiguous(),
        row_probs=row_probs[:, :width].contiguous(), row_other=row_other, ngram_p=ngram_p,
        ngram_first=ngram_first, ngram_len=ngram_len, ngram_row=ngram_row,
        ngram_first_direct=ngram_first_direct)
