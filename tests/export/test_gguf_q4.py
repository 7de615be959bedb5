"""The GGUF's own 4-bit weights in a program (export/gguf_q4.py): Q4_K / Q4_0 blocks decode to what
gguf-py dequantises, a qwen2 GGUF's 4-bit Linears are found by their Hugging Face names, and a Linear
built from them computes with exactly those codes and scales, eager and lowered to XNNPACK."""

import numpy as np
import pytest
import torch

pytest.importorskip("executorch")
gguf = pytest.importorskip("gguf")

from omnidraft.errors import OmniDraftError  # noqa: E402
from omnidraft.export.gguf_q4 import BlockLinear, attach, decode, four_bit_linears, load_codes  # noqa: E402
from omnidraft.export.lower import quantize  # noqa: E402

Q = gguf.GGMLQuantizationType


def _q4_k_bytes(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """[rows, cols / 256 * 144] random Q4_K super-blocks with finite fp16 d and dmin."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows * cols // 256, 144), dtype=np.uint8)
    raw[:, 0:2] = rng.uniform(1e-3, 2e-3, (len(raw), 1)).astype(np.float16).view(np.uint8)
    raw[:, 2:4] = rng.uniform(1e-3, 4e-3, (len(raw), 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


def _q4_0_bytes(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows * cols // 32, 18), dtype=np.uint8)
    raw[:, 0:2] = rng.uniform(1e-3, 2e-3, (len(raw), 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("kind, make", [("Q4_K", _q4_k_bytes), ("Q4_0", _q4_0_bytes)])
def test_blocks_decode_to_what_gguf_dequantises(kind, make):
    raw = make(8, 512)
    blocks = decode(kind, raw, 8, 512)
    want = torch.from_numpy(gguf.quants.dequantize(raw, Q[kind]).reshape(8, 512))
    assert blocks.codes.min() >= -8 and blocks.codes.max() <= 7
    assert torch.allclose(blocks.weight(), want, rtol=0, atol=1e-6)
    if kind == "Q4_0":
        assert not blocks.offset.any()  # symmetric: nothing outside the codes


def _write(path, tensors: dict[str, tuple[np.ndarray, object]]) -> None:
    """A GGUF holding ``tensors``: name -> (bytes [rows, row bytes] or an fp32 array, its type)."""
    w = gguf.GGUFWriter(str(path), "qwen2")
    for name, (data, kind) in tensors.items():
        w.add_tensor(name, data, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_qwen2_ggufs_four_bit_linears_are_found_by_their_model_names(tmp_path):
    f = tmp_path / "m.gguf"
    _write(f, {"blk.0.ffn_up.weight": (_q4_k_bytes(64, 256), Q.Q4_K),
               "blk.1.attn_v.weight": (_q4_0_bytes(32, 256), Q.Q4_0),
               "blk.0.ffn_down.weight": (np.zeros((256, 64), np.float32), Q.F32)})
    found = four_bit_linears(f, "qwen2")
    assert sorted(found) == ["model.layers.0.mlp.up_proj", "model.layers.1.self_attn.v_proj"]
    assert tuple(found["model.layers.0.mlp.up_proj"].codes.shape) == (64, 256)  # [out, in]
    with pytest.raises(OmniDraftError, match="qwen2 models only"):
        four_bit_linears(f, "llama")


def _quantised_block_linear(seed: int = 0) -> tuple[torch.nn.Module, torch.Tensor]:
    """A model with one GGUF-weighted Linear(256 -> 64), quantised; and its dequantised weight."""
    blocks = decode("Q4_K", _q4_k_bytes(64, 256, seed), 64, 256)
    model = torch.nn.ModuleDict({"up_proj": torch.nn.Linear(256, 64, bias=False)}).eval()
    quantize(model, "8da4w", 32, exact={"up_proj": blocks})
    return model, blocks.weight()


def test_a_gguf_weighted_linear_runs_the_ggufs_codes_and_scales():
    model, weight = _quantised_block_linear()
    layer = model["up_proj"]
    assert isinstance(layer, BlockLinear)
    blocks = decode("Q4_K", _q4_k_bytes(64, 256), 64, 256)
    # the 4-bit part dequantises to exactly scale * codes (torchao's own choice would differ)
    assert torch.equal(layer.codes.weight.dequantize(), blocks.scale.repeat_interleave(32, 1) * blocks.codes)
    torch.manual_seed(0)
    x = torch.randn(3, 256)  # [rows, in]
    with torch.no_grad():
        got, want = layer(x), x @ weight.T
    assert float((got - want).abs().max()) < 0.02 * float(want.abs().max())  # int8 activations only


def test_a_gguf_weighted_linear_lowers_into_xnnpack_and_keeps_its_numbers():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    model, _ = _quantised_block_linear(1)
    x = torch.randn(3, 256)
    with torch.no_grad():
        want = model["up_proj"](x)
        ep = torch.export.export(model["up_proj"], (x,), strict=True)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    code = edge.exported_program().graph_module.code
    assert code.count("executorch_call_delegate(") == 1 and "aten" not in code  # one delegate, nothing outside
    got = Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward").execute([x])[0]
    assert float((got - want).abs().max()) < 5e-3 * float(want.abs().max())  # bf16 block scales


def test_a_gguf_weight_that_does_not_fit_the_model_is_refused():
    blocks = decode("Q4_0", _q4_0_bytes(32, 256), 32, 256)
    with pytest.raises(OmniDraftError, match="the GGUF's weight is"):
        attach(torch.nn.ModuleDict({"v_proj": torch.nn.Linear(128, 32)}), {"v_proj": blocks})
    with pytest.raises(OmniDraftError, match="have no Linear"):
        attach(torch.nn.ModuleDict({"k_proj": torch.nn.Linear(256, 32)}), {"v_proj": blocks})
    model = torch.nn.ModuleDict({"v_proj": torch.nn.Linear(256, 32)})
    found = attach(model, {"v_proj": blocks})
    with pytest.raises(OmniDraftError, match="groups of 32"):
        quantize(model, "8da8w", 32)  # 8-bit per channel: not the GGUF's blocks
        load_codes(model, found)
