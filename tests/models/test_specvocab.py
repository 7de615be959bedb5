"""SpecVocab: exact logits on the ranked candidates, lossless speculative output with a
SpecVocab drafter, and the ranking loss."""

import torch

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.modes import default_verify_mode
from omnidraft.decode.target import LocalTarget
from omnidraft.translate.state import PairState
from omnidraft.models.eager import CausalLM
from omnidraft.propose.config import SpecConfig
from omnidraft.sampling import SamplingConfig
from omnidraft.models.specvocab import SpecVocabHead, SpecVocabLM, ranking_loss

from ..conftest import tiny, vocab_len


def test_full_rank_full_k_is_the_exact_head(smollm_tok):
    model = tiny("llama", vocab_len(smollm_tok), seed=1)
    H = model.config.hidden_size
    sv = SpecVocabLM(model, k=vocab_len(smollm_tok), rank=H)
    ids = torch.tensor([[5, 9, 200, 17]])
    full = model(input_ids=ids).logits[0]
    sparse = CausalLM(sv).extend([5, 9, 200, 17]).logits
    assert torch.allclose(sparse, full, atol=1e-4)
    h = torch.randn(3, H)
    assert torch.allclose(sv.ranker(h), model.get_output_embeddings()(h), atol=1e-3)  # SVD at full rank


def test_candidates_keep_exact_logits_and_the_rest_is_masked(smollm_tok):
    model = tiny("llama", vocab_len(smollm_tok), seed=2)
    sv = SpecVocabLM(model, k=64)
    h = torch.randn(2, model.config.hidden_size)
    out = sv.sparse_logits(h)
    full = model.get_output_embeddings()(h)
    kept = torch.isfinite(out)
    assert kept.sum(1).tolist() == [64, 64]
    assert torch.allclose(out[kept], full[kept], atol=1e-5)


def test_speculative_output_is_the_targets_with_a_specvocab_drafter(smollm_tok, qwen_tok):
    d = CausalLM(SpecVocabLM(tiny("llama", vocab_len(smollm_tok), seed=3), k=256))
    t = CausalLM(tiny("qwen2", vocab_len(qwen_tok), seed=4))
    pair = PairState(smollm_tok, qwen_tok, d.vocab_size, t.vocab_size)
    for prompt in ["def add(a, b):\n", "Bonjour, je"]:
        ref = generate_ar(LocalTarget(t), qwen_tok, prompt, max_new_tokens=20)
        for strategy in ("tli", "omnidraft"):
            target = LocalTarget(t, SamplingConfig(), default_verify_mode(strategy))
            out = generate_speculative(d, target, pair, prompt, cfg=SpecConfig(strategy), k=FixedK(4),
                                       max_new_tokens=20)
            assert out.token_ids == ref.token_ids


def test_ranking_loss_trains_the_ranker():
    torch.manual_seed(0)
    W = torch.randn(500, 64)
    head = SpecVocabHead(W, rank=4)
    h = torch.randn(32, 64)
    full = h @ W.T
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2)
    before = float(ranking_loss(head(h), full).detach())
    for _ in range(20):
        opt.zero_grad()
        ranking_loss(head(h), full).backward()
        opt.step()
    assert float(ranking_loss(head(h), full)) < before
    assert float(ranking_loss(full, full)) < 1e-6


def test_online_trainer_trains_the_ranker_alongside(smollm_tok, qwen_tok):
    from omnidraft.train.records import build_record
    from omnidraft.train.trainer import OnlineTrainer, TrainConfig, attach_lora

    d = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=5))
    t = CausalLM(tiny("qwen2", vocab_len(qwen_tok), seed=6))
    pair = PairState(smollm_tok, qwen_tok, d.vocab_size, t.vocab_size)
    recs = [build_record(pair.vmap, generate_speculative(d, LocalTarget(t), pair, p, cfg=SpecConfig("omnidraft"),
                                                         k=FixedK(4), max_new_tokens=30, record_topk=64).verified)
            for p in ["def f(x):\n", "Hello there", "x = 1\n"]]
    sv = SpecVocabLM(d.model, k=64)
    cfg = TrainConfig(update_interval=3)
    trainer = OnlineTrainer(attach_lora(d.model, cfg), cfg, ranker=sv.ranker)
    before = sv.ranker.vocab.detach().clone()
    info = [i for r in recs for i in trainer.add(r)]
    assert info and "specvocab" in info[0] and not torch.equal(before, sv.ranker.vocab.detach())
