"""CausalLM: rolling the KV cache back by n and re-extending equals a fresh forward."""

import pytest
import torch

from omnidraft.models.eager import CausalLM

from ..conftest import tiny, vocab_len


def _check_rollback(model, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (48,), generator=g).tolist()
    lm = CausalLM(model)
    lm.prefill(ids[:20])
    lm.extend(ids[20:32])
    lm.rollback(9)  # back to 23 tokens
    lm.extend(ids[23:30])
    lm.rollback(1)
    out = lm.extend(ids[29:48]).logits  # [19, V]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids])).logits[0, 29:48]
    assert lm.length == 48
    assert (out - ref).abs().max().item() <= 1e-4
    # sync keeps the common prefix and feeds the rest
    lm.sync(ids[:40] + ids[:3])
    assert lm.tokens == ids[:40] + ids[:3]


@pytest.mark.parametrize("arch,tokfix", [("llama", "smollm_tok"), ("qwen2", "qwen_tok"),
                                         ("gemma3", "gemma_tok")])
def test_rollback_matches_fresh_forward(arch, tokfix, request):
    tok = request.getfixturevalue(tokfix)
    vocab = vocab_len(tok)
    _check_rollback(tiny(arch, vocab), vocab)


def test_rollback_llama68m_shape(llama2_tok):
    """The design's Llama-68M drafter shape (2 layers, 768 hidden, 12 heads, SiLU, 32k vocab)."""
    vocab = vocab_len(llama2_tok)
    assert vocab == 32000
    model = tiny("llama", vocab, hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                 num_key_value_heads=12, hidden_act="silu")
    _check_rollback(model, vocab)


def test_llama68m_checkpoint_loads_like_any_model(llama2_tok, tmp_path):
    from omnidraft.models.loading import load_model, load_tokenizer
    from ..conftest import save_tiny

    model = tiny("llama", 32000, hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                 num_key_value_heads=12)
    path = save_tiny(model, llama2_tok, tmp_path / "llama-68m")
    lm = load_model(str(path))
    tok = load_tokenizer(str(path))
    assert lm.config.num_hidden_layers == 2 and lm.vocab_size == 32000
    ids = tok("Hello world", add_special_tokens=True)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert lm.prefill(ids).logits.shape == (1, 32000)


def test_bf16_and_hidden_states(qwen_tok):
    model = tiny("qwen2", vocab_len(qwen_tok)).to(torch.bfloat16)
    lm = CausalLM(model)
    f = lm.extend([1, 2, 3], hidden=True)
    assert lm.dtype == torch.bfloat16
    assert f.logits.dtype == torch.float32 and f.logits.shape[0] == 3
    assert f.hidden.shape == (3, model.config.hidden_size)


def test_context_window_and_bad_rollback(smollm_tok):
    lm = CausalLM(tiny("llama", vocab_len(smollm_tok), max_position_embeddings=16))
    lm.prefill(list(range(10)))
    with pytest.raises(ValueError, match="context window"):
        lm.extend(list(range(10)))
    with pytest.raises(ValueError):
        lm.rollback(11)


@pytest.mark.parametrize("start", [0, 4, 8, 16])
def test_sliding_window_rollback_across_several_extends(gemma_tok, start):
    """Gemma-3 sliding layers (window 8), after a prefill of ``start`` tokens: extend 12, roll
    back 9, extend 2, roll back 5, then extend; the logits equal a fresh forward over the same
    tokens (transformers' sliding cache layers crashed here from start 8 on)."""
    vocab = vocab_len(gemma_tok)
    model = tiny("gemma3", vocab)
    ids = torch.randint(0, vocab, (60,), generator=torch.Generator().manual_seed(3)).tolist()
    lm = CausalLM(model)
    if start:
        lm.prefill(ids[:start])
    n = start
    for step in (12, -9, 2, -5):
        if step > 0:
            lm.extend(ids[n:n + step])
        else:
            lm.rollback(-step)
        n += step
    out = lm.extend(ids[n:n + 10]).logits  # [10, V]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids[:n + 10]])).logits[0, n:n + 10]
    assert lm.length == n + 10
    assert (out - ref).abs().max().item() <= 1e-4


def test_fork_has_its_own_cache(qwen_tok):
    lm = CausalLM(tiny("qwen2", vocab_len(qwen_tok)))
    a, b = lm.fork(), lm.fork()
    a.prefill([1, 2, 3])
    b.prefill([4, 5])
    assert (a.tokens, b.tokens, lm.tokens) == ([1, 2, 3], [4, 5], [])
    assert a.model is b.model is lm.model


def test_same_start_gives_every_run_on_a_prompt_the_cache_the_first_found():
    """The previous prompt left [1, 2, 3, 4]; a run on the next prompt [1, 2, 9] keeps [1, 2] and
    writes its own tokens; ``again()`` takes the cache back to [1, 2] (what the next run must find),
    a run that kept all of it back to [1, 2, 3, 4]; an object without a cache is left alone."""
    from omnidraft.models.lm import same_start, sync

    from ..bigram import BigramLM

    lm = BigramLM(50, {3: 1.0}, seed=0)
    lm.extend([1, 2, 3, 4])
    again = same_start(lm, object())
    sync(lm, [1, 2, 9])
    lm.extend([7, 7])
    again()
    assert lm.tokens == [1, 2]
    lm.extend([3, 4, 5])
    again()
    assert lm.tokens == [1, 2, 3, 4]


def test_the_cache_goes_by_the_keyword_this_transformers_reads_also_through_peft(smollm_tok):
    """An older transformers (5.17) reads ``past_key_values=`` and drops ``cache=`` unread: each
    extend would then run uncached. The keyword is the base model's, also under a LoRA wrapper."""
    import inspect

    from omnidraft.models.lm import cache_kwarg
    from omnidraft.train.trainer import TrainConfig, attach_lora

    model = tiny("llama", vocab_len(smollm_tok), seed=3)
    kw = cache_kwarg(model)
    assert kw in inspect.signature(model.forward).parameters
    assert cache_kwarg(attach_lora(model, TrainConfig())) == kw
    lm = CausalLM(model)
    ids = smollm_tok("def add(a, b):\n    return a + b")["input_ids"]
    whole = lm.extend(ids).logits[-1]
    lm.reset()
    lm.extend(ids[:-1])
    assert torch.allclose(lm.extend(ids[-1:]).logits[-1], whole, atol=1e-4)  # the cache was read
