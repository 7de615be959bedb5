"""torchao's weight quantisation a block of rows at a time.

``quantize_affine`` computes ``round(w * (1 / scale)) + zero_point``, clamped, over the whole weight
at once: each step a weight-sized fp32 temporary. On the 0.5B target's tied LM head ([151,936 x
896], 0.54 GB in fp32) those took the export from 0.41 GB loaded to 3.1-4.2 GB while quantising
(caught by a 3 ms sampler reading the main thread's stack). Every output element depends on its
own row's input and scale only, so within ``rows_at_a_time()`` a 2-D weight quantised per row or
per group of a row goes ``ROWS`` rows at a time: the same int8 codes (tests/export/test_quant_rows.py).

Knows torchao's IntxUnpackedToInt8Tensor module and quantize_affine's signature; nothing about models.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

ROWS = 4096


@contextlib.contextmanager
def rows_at_a_time() -> Iterator[None]:
    """Within the block, torchao's int8 weight tensors quantise their weights ROWS rows at a time."""
    from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as intx

    whole = intx.quantize_affine

    def in_rows(input, block_size, scale, zero_point, output_dtype, quant_min=None, quant_max=None):
        n = input.shape[0]
        if (type(input) not in (torch.Tensor, torch.nn.Parameter) or input.dim() != 2 or block_size[0] != 1 or n <= ROWS
                or scale.dim() != 2 or scale.shape[0] != n or (zero_point is not None and zero_point.shape[0] != n)):
            return whole(input, block_size, scale, zero_point, output_dtype, quant_min, quant_max)
        out = None
        for i in range(0, n, ROWS):
            part = whole(input[i:i + ROWS], block_size, scale[i:i + ROWS],
                         None if zero_point is None else zero_point[i:i + ROWS], output_dtype, quant_min, quant_max)
            out = torch.empty(input.shape, dtype=part.dtype) if out is None else out
            out[i:i + ROWS] = part
        return out

    intx.quantize_affine = in_rows
    try:
        yield
    finally:
        intx.quantize_affine = whole
