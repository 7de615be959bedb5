"""Token embeddings at 8 bits: each row of a model's ``nn.Embedding`` as int8 codes with one fp32
scale (symmetric, the row's largest magnitude / 127), looked up by id and scaled back.

An embedding lookup is a gather, which XNNPACK does not run: the table stays a constant of the
program, read by ExecuTorch's portable kernels, and a quantised program held it in fp32 beside its
8-bit Linears (Qwen2.5-1.5B: 151,936 x 1,536 x 4 bytes = 0.93 GB of its 2.6 GB file; 0.23 GB at
8 bits). Only the looked-up rows are dequantised, a few per call, so decoding costs the same.
The LM head is a Linear of its own (quantised by ``lower.quantize``), tied or not.

Knows nn.Embedding; nothing about programs or lowering.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .quant_rows import ROWS  # the 0.5B's whole table at once held ~1.05 GB of temporaries, in rows 0.21 GB


class Int8Embedding(nn.Module):
    """``nn.Embedding``'s lookup over int8 codes [V, H] and per-row fp32 scales [V, 1]."""

    def __init__(self, weight: torch.Tensor):  # weight [V, H], floating
        super().__init__()
        w = weight.detach()
        codes = torch.empty(w.shape, dtype=torch.int8)  # [V, H]
        scales = torch.empty(w.shape[0], 1, dtype=torch.float32)  # [V, 1]
        for i in range(0, w.shape[0], ROWS):  # a few rows at a time: no temporary the size of the table
            part = w[i:i + ROWS].float()
            s = (part.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=torch.finfo(torch.float32).tiny)
            scales[i:i + ROWS] = s
            codes[i:i + ROWS] = torch.round(part / s).clamp(-127, 127)
        self.register_buffer("codes", codes)
        self.register_buffer("scales", scales)
        self.dtype = weight.dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids [...] -> [..., H]
        rows = F.embedding(ids, self.codes).to(torch.float32) * F.embedding(ids, self.scales)
        return rows.to(self.dtype)


def embeddings_at_8_bits(module: nn.Module) -> list[str]:
    """In place: every plain ``nn.Embedding`` under ``module`` (not subclasses, such as Gemma's
    scaled one) replaced by an ``Int8Embedding`` of its weight; returns their names."""
    found = [(name, m) for name, m in module.named_modules() if type(m) is nn.Embedding and name]
    for name, m in found:
        parent_name, _, attr = name.rpartition(".")
        setattr(module.get_submodule(parent_name) if parent_name else module, attr, Int8Embedding(m.weight))
    return [name for name, _ in found]
