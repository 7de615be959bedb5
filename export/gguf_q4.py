"""The 4-bit weights of a GGUF file as they are stored: for every Q4_K (or Q4_0) tensor of a qwen2
model, the 4-bit codes and the scale and offset of each block of 32 inputs, so a program can run the
very weights llama.cpp runs instead of re-quantising their dequantised values.

A Q4_K row is super-blocks of 256 inputs, each 8 blocks of 32 with a 6-bit scale and a 6-bit min
under the super-block's fp16 ``d`` and ``dmin``: w = (d*sc) * q - (dmin*m), q in 0..15. Written
as XNNPACK's blockwise symmetric 4-bit type needs it: w = s * (q - 8) + c with s = d*sc and
c = 8s - d*m per block, so the codes are q - 8 in [-8, 7] and the per-block offsets ``c`` are what
a blockwise symmetric GEMM leaves out (a program adds x's per-block sums times c). Q4_0 is
w = d * (q - 8): c = 0.

Knows the GGUF block layouts (ggml's block_q4_K / block_q4_0) and qwen2's tensor names; nothing
about torchao, programs or lowering.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from omnidraft.errors import OmniDraftError

BLOCK = 32  # inputs per scale: the group size of the program's 4-bit weights
_Q4_K_BYTES, _Q4_0_BYTES = 144, 18  # per 256 / 32 weights
_QWEN2_LINEARS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                  "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                  "ffn_down": "mlp.down_proj"}


def _per_weight(t: torch.Tensor) -> torch.Tensor:
    """[out, in / 32] per-block values -> [out, in], each repeated over its block's inputs."""
    return t.repeat_interleave(BLOCK, dim=1)


@dataclass(frozen=True)
class Blocks:
    """One Linear's weight, [out, in] = scale[:, in // 32] * codes + offset[:, in // 32]."""

    codes: torch.Tensor  # [out, in] int8 in [-8, 7]
    scale: torch.Tensor  # [out, in / 32] fp32
    offset: torch.Tensor  # [out, in / 32] fp32

    def four_bit(self) -> torch.Tensor:
        """[out, in] fp32: scale * codes, the part a blockwise symmetric 4-bit weight holds."""
        return _per_weight(self.scale) * self.codes.float()

    def weight(self) -> torch.Tensor:
        """[out, in] fp32: the dequantised weight (what llama.cpp multiplies by)."""
        return self.four_bit() + _per_weight(self.offset)


def _q4_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """raw [n, 144] uint8 super-blocks -> codes [n, 256] (0..15), scale and min [n, 8] fp32."""
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)  # [n, 1]
    dmin = raw[:, 2:4].copy().view(np.float16).astype(np.float32)
    lo, hi, mix = raw[:, 4:8], raw[:, 8:12], raw[:, 12:16]
    # blocks 0-3: 6 low bits of bytes 0-3 (scales) and 4-7 (mins); blocks 4-7: a nibble of bytes
    # 8-11 with the two high bits of bytes 0-3 (scales) or 4-7 (mins) on top
    sc = np.concatenate([lo & 63, (mix & 15) | ((lo >> 6) << 4)], axis=1).astype(np.float32)
    mn = np.concatenate([hi & 63, (mix >> 4) | ((hi >> 6) << 4)], axis=1).astype(np.float32)
    qs = raw[:, 16:144].reshape(-1, 4, 32)  # 4 runs of 32 bytes: low nibbles one block, high the next
    codes = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 256)
    return codes, d * sc, dmin * mn


def _q4_0(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """raw [n, 18] uint8 blocks -> codes [n, 32] (0..15), scale [n, 1], min [n, 1] (= 8 * scale)."""
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    qs = raw[:, 2:18]
    codes = np.concatenate([qs & 15, qs >> 4], axis=1)
    return codes, d, 8 * d


def decode(kind: str, raw: np.ndarray, out: int, inp: int) -> Blocks:
    """A Q4_K / Q4_0 tensor's bytes [out, row bytes] as ``Blocks`` for an [out, inp] weight."""
    per, fn = {"Q4_K": (_Q4_K_BYTES, _q4_k), "Q4_0": (_Q4_0_BYTES, _q4_0)}[kind]
    codes, scale, low = fn(np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, per))
    scale = torch.from_numpy(scale.reshape(out, inp // BLOCK))
    offset = 8 * scale - torch.from_numpy(low.reshape(out, inp // BLOCK))
    codes = torch.from_numpy(codes.reshape(out, inp).astype(np.int8)) - 8
    return _positive(codes, scale, offset)


def _positive(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> Blocks:
    """The same weights with every block's scale > 0, which XNNPACK requires: a negative scale s
    (Q4_0 stores one) becomes -s with codes -1 - c and offset o - s (s*c = -s*(-1 - c) - s: the
    codes stay in [-8, 7]); a zero scale (a block of equal weights) becomes 1 with codes 0."""
    neg, zero = scale < 0, scale == 0
    codes = torch.where(_per_weight(neg), -1 - codes, torch.where(_per_weight(zero), 0, codes)).to(torch.int8)
    offset = torch.where(neg, offset - scale, offset)
    scale = torch.where(neg, -scale, torch.where(zero, 1.0, scale))
    return Blocks(codes, scale, offset)


def four_bit_linears(gguf_path: Path, model_type: str) -> dict[str, Blocks]:
    """Every Linear of a qwen2 GGUF stored at 4 bits (Q4_K / Q4_0), by the Hugging Face module name
    (``model.layers.3.mlp.up_proj``); Linears stored otherwise (Q5_0, Q6_K, Q8_0, F16) are left out."""
    from gguf import GGUFReader

    if model_type != "qwen2":
        raise OmniDraftError(f"the GGUF's own 4-bit weights are read for qwen2 models only, not {model_type}",
                             "export with another --quant")
    out: dict[str, Blocks] = {}
    for t in GGUFReader(str(gguf_path)).tensors:
        parts = t.name.split(".")  # blk.<i>.<kind>.weight
        if t.tensor_type.name not in ("Q4_K", "Q4_0") or parts[0] != "blk" or parts[2] not in _QWEN2_LINEARS:
            continue
        inp, rows = (int(n) for n in t.shape)
        out[f"model.layers.{parts[1]}.{_QWEN2_LINEARS[parts[2]]}"] = decode(t.tensor_type.name, t.data, rows, inp)
    return out


def gguf_file(ref: str) -> Path:
    """The GGUF a model reference comes from: the path itself, or a catalog model's packaged file."""
    from omnidraft.models import catalog

    if ref.endswith(".gguf"):
        return Path(ref).expanduser()
    if ref in catalog.CATALOG:
        return catalog.ensure_gguf(ref)
    raise OmniDraftError(f"the -gguf scheme reads the weights of a GGUF file; {ref!r} is not one",
                         "pass a catalog name or a .gguf path, or export with another --quant")


class BlockLinear(torch.nn.Module):
    """A Linear whose weight is ``Blocks``: y = codes(x) + offset(sums(x)), where ``codes`` holds
    scale * codes (quantised to exactly those 4-bit codes and scales by ``load_codes``), ``sums``
    adds up each block of 32 inputs (fp32 0/1 weights, kept unquantised) and ``offset`` multiplies
    the sums by the blocks' offsets [out, in / 32]."""

    def __init__(self, linear: torch.nn.Linear, blocks: Blocks):
        super().__init__()
        out, inp = blocks.codes.shape
        self.codes = torch.nn.Linear(inp, out, bias=linear.bias is not None)
        self.sums = torch.nn.Linear(inp, inp // BLOCK, bias=False)
        self.offset = torch.nn.Linear(inp // BLOCK, out, bias=False)
        with torch.no_grad():
            self.codes.weight.copy_(blocks.four_bit())
            if linear.bias is not None:
                self.codes.bias.copy_(linear.bias)
            self.sums.weight.copy_(torch.eye(inp // BLOCK).repeat_interleave(BLOCK, dim=1))
            self.offset.weight.copy_(blocks.offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in] -> [..., out]
        return self.codes(x) + self.offset(self.sums(x))


def attach(root: torch.nn.Module, blocks: dict[str, Blocks]) -> dict[str, Blocks]:
    """In place: every Linear of ``root`` named (or ending with) a key of ``blocks`` becomes a
    ``BlockLinear``. Returns the ``codes`` Linears' names in ``root`` -> their blocks."""
    found: dict[str, Blocks] = {}
    for name, module in list(root.named_modules()):
        key = next((k for k in blocks if name == k or name.endswith("." + k)), None)
        if key is None or not isinstance(module, torch.nn.Linear):
            continue
        if tuple(module.weight.shape) != tuple(blocks[key].codes.shape):
            raise OmniDraftError(f"{name}: the GGUF's weight is {tuple(blocks[key].codes.shape)}, "
                                 f"the model's {tuple(module.weight.shape)}", "export the model the GGUF holds")
        parent_name, _, child = name.rpartition(".")
        setattr(root.get_submodule(parent_name) if parent_name else root, child, BlockLinear(module, blocks[key]))
        found[f"{name}.codes"] = blocks[key]
    if len(found) != len(blocks):
        raise OmniDraftError(f"{len(blocks) - len(found)} of the GGUF's 4-bit weights have no Linear in the model",
                             "export the model the GGUF holds")
    return found


def load_codes(root: torch.nn.Module, found: dict[str, Blocks]) -> None:
    """After torchao quantised each ``codes`` Linear to 4 bits in groups of 32 (symmetric): make
    its integers and scales the GGUF's own, so it dequantises to exactly scale * codes."""
    for name, blocks in found.items():
        w = root.get_submodule(name).weight
        if tuple(w.scale.shape) != tuple(blocks.scale.shape):
            raise OmniDraftError(f"{name} was not quantised in groups of {BLOCK}")
        w.qdata.copy_(blocks.codes)
        w.scale.copy_(blocks.scale.to(w.scale.dtype))
        w.zero_point.zero_()
