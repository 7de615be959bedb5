"""Weight schemes (export/lower.py ``scheme_fields``, ``quantize``) and the per-channel 4-bit
lowering (export/qc4w.py): a weight with one 4-bit scale per output channel runs on XNNPACK's
per-channel type, whose fp32 scales reproduce the eager quantised layer; the blockwise type it got
before stores bf16 scales and misses it by ~1e-3."""

import pytest
import torch

pytest.importorskip("executorch")

from omnidraft.errors import OmniDraftError  # noqa: E402
from omnidraft.export.lower import ExportConfig, quantize, scheme_fields  # noqa: E402
from omnidraft.export.qc4w import per_channel_int4  # noqa: E402


_PLAIN = {"weight_qparams": "affine", "eight_bit": (), "gguf_weights": False}


@pytest.mark.parametrize("scheme, fields", [
    ("8da8w", {"quant": "8da8w", "group_size": 32, **_PLAIN}),
    ("8da4w", {"quant": "8da4w", "group_size": 32, **_PLAIN}),
    ("8da4w-g128", {"quant": "8da4w", "group_size": 128, **_PLAIN}),
    ("8da4w-pc-hqq-mix", {**_PLAIN, "quant": "8da4w", "group_size": 0, "weight_qparams": "hqq",
                          "eight_bit": ("lm_head", "down_proj")}),
    ("8da4w-gguf", {**_PLAIN, "quant": "8da4w", "group_size": 32, "gguf_weights": True}),
])
def test_a_scheme_name_gives_its_export_fields(scheme, fields):
    assert scheme_fields(scheme) == fields
    ExportConfig(drafter="x", **fields)  # valid


@pytest.mark.parametrize("scheme", ["8da4w-g48", "8da8w-pc", "int4", "8da4w-pc-fast", "", "8da8w-gguf",
                                    "8da4w-pc-gguf"])
def test_an_unknown_scheme_is_named_in_one_line(scheme):
    with pytest.raises(OmniDraftError, match="unknown weight scheme") as err:
        scheme_fields(scheme)
    assert "\n" not in str(err.value)


def _lowered_error(patch: bool) -> tuple[float, float]:
    """Max |program - eager| of a per-channel 4-bit Linear(256 -> 512) at 3 rows, lowered with or
    without the per-channel mapping, and the output's magnitude."""
    import contextlib

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(256, 512, bias=False)).eval()
    quantize(layer, "8da4w", 0)
    x = torch.randn(3, 256)  # [rows, in]
    with torch.no_grad():
        want = layer(x)
        ep = torch.export.export(layer, (x,), strict=True)
    with per_channel_int4() if patch else contextlib.nullcontext():
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    assert "executorch_call_delegate" in edge.exported_program().graph_module.code
    got = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward").execute([x])[0]
    return float((got - want).abs().max()), float(want.abs().max())


def test_per_channel_4bit_weights_lower_to_the_per_channel_type():
    blockwise, scale = _lowered_error(patch=False)
    per_channel, _ = _lowered_error(patch=True)
    assert per_channel < 1e-5 * scale < blockwise  # fp32 scales: the eager layer's own numbers


def test_hqq_scales_fit_the_weights_better_than_min_max():
    torch.manual_seed(1)
    base = torch.nn.Linear(256, 128, bias=False)
    errs = {}
    for qparams in ("affine", "hqq"):
        layer = torch.nn.Sequential(torch.nn.Linear(256, 128, bias=False))
        layer[0].weight.data.copy_(base.weight.data)
        quantize(layer, "8da4w", 0, qparams=qparams)
        deq = layer[0].weight.dequantize() if hasattr(layer[0].weight, "dequantize") else None
        errs[qparams] = float((deq - base.weight.data).pow(2).mean())
    assert errs["hqq"] < errs["affine"]


def test_a_mixed_scheme_keeps_the_named_linears_at_eight_bits():
    model = torch.nn.ModuleDict({"up_proj": torch.nn.Linear(64, 128, bias=False),
                                 "down_proj": torch.nn.Linear(128, 64, bias=False)})
    quantize(model, "8da4w", 0, eight_bit=("down_proj",))
    ranges = {name: (int(m.weight.qdata.min()), int(m.weight.qdata.max())) for name, m in model.items()}
    assert -8 <= ranges["up_proj"][0] and ranges["up_proj"][1] <= 7
    assert ranges["down_proj"][0] < -8 or ranges["down_proj"][1] > 7
