"""Token embeddings at 8 bits (export/embedding8.py): the rows a lookup returns are the fp32 rows
within half a quantisation step, a quantised model's embedding is the int8 table while its tied LM
head keeps its own quantised weight, Gemma's scaled embedding is left alone, and the shipped tiny
target program holds no fp32 table."""

import pytest
import torch

from omnidraft.export.embedding8 import Int8Embedding, embeddings_at_8_bits

from ..conftest import tiny, vocab_len


def test_rows_come_back_within_half_a_step():
    torch.manual_seed(0)
    weight = torch.randn(500, 48) * torch.rand(500, 1) * 3  # rows of different scales
    weight[7] = 0.0  # an all-zero row keeps a finite scale
    emb = Int8Embedding(weight)
    assert emb.codes.dtype == torch.int8 and emb.codes.shape == (500, 48)
    ids = torch.tensor([[0, 7, 499, 3, 3]])  # [1, 5]
    got = emb(ids)  # [1, 5, 48]
    want = weight[ids]
    step = weight.abs().amax(dim=1)[ids].unsqueeze(-1) / 127  # [1, 5, 1]
    assert got.shape == want.shape and got.dtype == torch.float32
    assert torch.all((got - want).abs() <= step / 2 + 1e-6)
    assert torch.equal(got[0, 1], torch.zeros(48))


def test_a_quantised_model_keeps_int8_embeddings_and_its_tied_head(qwen_tok):
    from omnidraft.export.lower import quantize

    model = tiny("qwen2", vocab_len(qwen_tok), seed=3, tie_word_embeddings=True)
    ids = torch.tensor([[1, 50, 151_000, 9]])
    with torch.no_grad():
        before = model(ids).logits  # [1, 4, V]
    fp32 = model.model.embed_tokens.weight.detach().clone()
    quantize(model, "8da8w", 32)
    assert isinstance(model.model.embed_tokens, Int8Embedding)
    assert not any(isinstance(p, torch.nn.Parameter) and p.shape == fp32.shape and p.dtype == torch.float32
                   for p in model.model.parameters())  # no fp32 table left under the decoder
    head = model.lm_head.weight
    assert hasattr(head, "dequantize") or hasattr(head, "qdata")  # the head is quantised on its own
    with torch.no_grad():
        after = model(ids).logits
    assert torch.allclose(model.model.embed_tokens(ids), fp32[ids], atol=float(fp32.abs().max()) / 127)
    assert torch.corrcoef(torch.stack([before.flatten(), after.flatten()]))[0, 1] > 0.99


def test_scaled_embeddings_are_left_alone(gemma_tok):
    model = tiny("gemma3", vocab_len(gemma_tok))
    kind = type(model.model.embed_tokens)
    assert kind is not torch.nn.Embedding  # Gemma scales its lookups
    assert embeddings_at_8_bits(model) == []
    assert type(model.model.embed_tokens) is kind


def test_the_shipped_target_program_holds_no_fp32_table(shipped, qwen_tok):
    pytest.importorskip("executorch")
    table = vocab_len(qwen_tok) * 32 * 4  # the tiny target's fp32 embedding alone (hidden 32)
    assert len(shipped.pte) < table  # 8-bit table + 8-bit head: about half of it
