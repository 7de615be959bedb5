"""Fake propagation through torchao's quantisation ops is a lookup (export/quant_fakes.py): a
propagating call is answered from the first call's output layout, a recording or real call runs
torchao's implementation, torchao's kernels come back after the block (the program's bytes with
and without it: test_lower.py)."""

import pytest
import torch


pytest.importorskip("torchao")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from omnidraft.export.quant_fakes import shape_only_quant_ops  # noqa: E402

ARGS = ("ASYMMETRIC", [1, 1, 8], torch.int8)  # per-token activations of width 8


def choose(x):
    return torch.ops.torchao.choose_qparams_affine(x, *ARGS, eps=1e-6, scale_dtype=torch.float32,
                                                   zero_point_dtype=torch.int8)


def test_a_propagating_call_gets_the_first_calls_layout_without_the_maths(monkeypatch):
    from torch._inductor.decomposition import decompositions

    op = torch.ops.torchao.choose_qparams_affine.default
    real, calls = decompositions[op], []
    monkeypatch.setitem(decompositions, op, lambda *a, **k: calls.append(1) or real(*a, **k))
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x, y = (mode.from_tensor(torch.randn(1, 5, 8)) for _ in range(2))
    expected = real(x, *ARGS, eps=1e-6, scale_dtype=torch.float32, zero_point_dtype=torch.int8)
    with shape_only_quant_ops():
        got = [choose(x), choose(y)]
        with mode:
            got.append(choose(y))
    assert len(calls) == 1  # torchao's implementation ran once, for the first call
    for outs in got:
        for g, e in zip(outs, expected):
            assert (g.shape, g.dtype, g.stride()) == (e.shape, e.dtype, e.stride())


def test_a_traced_call_records_torchaos_implementation():
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(1, 5, 8)
    outside = make_fx(choose, tracing_mode="fake")(x).code
    with shape_only_quant_ops():
        choose(FakeTensorMode().from_tensor(x))  # a layout learnt ...
        inside = make_fx(choose, tracing_mode="fake")(x).code  # ... is not what a trace records
    assert "amin" in outside and inside == outside


def test_real_tensors_are_quantised_by_torchao_and_its_kernels_return_after_the_block():
    x = torch.randn(1, 5, 8)
    outside = choose(x)
    with shape_only_quant_ops():
        inside = choose(x)
    again = choose(x)
    for a, b, c in zip(outside, inside, again):
        assert torch.equal(a, b) and torch.equal(a, c)
