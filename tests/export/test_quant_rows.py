"""export/quant_rows.py: a weight quantised a block of rows at a time gets the same int8 codes and
scales as at once (per row and per group of a row)."""

import pytest
import torch

pytest.importorskip("torchao")


@pytest.mark.parametrize("granularity", ["axis", "group"])
def test_rows_at_a_time_quantise_to_the_same_codes(monkeypatch, granularity):
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as intx

    from omnidraft.export import quant_rows

    weight = torch.randn(1000, 64, generator=torch.Generator().manual_seed(0))
    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int8 if granularity == "axis" else torch.int4,
        weight_granularity=PerAxis(0) if granularity == "axis" else PerGroup(32))
    rows = []  # the rows of each call torchao's own quantize_affine gets
    original = intx.quantize_affine
    monkeypatch.setattr(intx, "quantize_affine", lambda *a, **k: rows.append(a[0].shape[0]) or original(*a, **k))
    got = {}
    for block in (1000, 96):  # 96: ten blocks and a ragged last one
        rows.clear()
        lin = torch.nn.Sequential(torch.nn.Linear(64, 1000, bias=False))
        lin[0].weight.data.copy_(weight)
        monkeypatch.setattr(quant_rows, "ROWS", block)
        with quant_rows.rows_at_a_time():
            quantize_(lin, config)
        assert rows == ([1000] if block == 1000 else [96] * 10 + [40])
        got[block] = (lin[0].weight.qdata, lin[0].weight.scale)
    assert torch.equal(got[1000][0], got[96][0]) and torch.equal(got[1000][1], got[96][1])
