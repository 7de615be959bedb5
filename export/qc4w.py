"""4-bit weights with one scale per output channel lowered to XNNPACK's per-channel 4-bit type
(qcint4: the qd8-f32-qc4w GEMMs) instead of its blockwise type with a single block per row.

torchao's ``PerAxis(0)`` int4 weight reaches ExecuTorch as a groupwise dequantisation whose group
is the whole row. ExecuTorch 1.5.1 maps every 4-bit groupwise weight to XNNPACK's blockwise type
(qbint4: bf16 scales, a scale-and-convert tail after every block, kernels of at most 3 rows on
AVX2 and 8 on AVX512-VNNI), even when the group is the row (its comment: "int4 case need more
fixes to map qb4w to qc4w"). The per-channel kernels have 4 rows (AVX2) to 8 (AVX-512), no
per-block tail and keep fp32 scales, so a 2-8 token verification reads the weights once where
the blockwise ones read them up to three times. ``per_channel_int4()`` makes that one mapping
while lowering: a weight with one group per row whose values fit in [-8, 7] is lowered as
per-channel, its [N, 1] scales as [N]. Blockwise weights with several groups per row, 8-bit
weights and activations are untouched.

Knows ExecuTorch's XNNPACK QuantParams; nothing about models or programs.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def per_channel_int4() -> Iterator[None]:
    """Within the block, 4-bit weights with one group per row lower to XNNPACK's qcint4."""
    from executorch.backends.xnnpack.operators import quant_params

    cls = quant_params.QuantParams
    original = cls.__init__

    def init(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        if self.per_channel_group and self.is_qc4w and self.group_size == self.q_input.meta["val"].shape[1]:
            self.per_channel_group = False
            self.scale = self.scale.reshape(-1)  # [N, 1] -> [N]
            if getattr(self.zp, "ndim", 0) == 2:
                self.zp = self.zp.reshape(-1)

    cls.__init__ = init
    try:
        yield
    finally:
        cls.__init__ = original
