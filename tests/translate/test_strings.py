"""String-level strategies (slem, dtw): greedy output equals the target's own, token for token,
on a SentencePiece target (the byte-level pair is in decode/test_speculative.py); the DTW alignment on
hand-made cases."""

import pytest

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.modes import default_verify_mode
from omnidraft.decode.target import LocalTarget
from omnidraft.translate.state import PairState
from omnidraft.models.eager import CausalLM
from omnidraft.propose.config import SpecConfig
from omnidraft.sampling import SamplingConfig
from omnidraft.translate.strings import dtw_align, levenshtein

from ..conftest import tiny, vocab_len

PROMPTS = ["def fibonacci(n):\n", "The Eiffel Tower is in", "Écrivez une fonction qui trie: ",
           "for i in range(10):\n    print(i)\n", "x"]


@pytest.mark.parametrize("strategy", ["slem", "dtw"])
def test_greedy_equals_target_sentencepiece_target(smollm_tok, gemma_tok, strategy):
    d = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=6))
    t = CausalLM(tiny("gemma3", vocab_len(gemma_tok), seed=7))
    pair = PairState(smollm_tok, gemma_tok, d.vocab_size, t.vocab_size)
    for prompt in PROMPTS[:3]:
        ref = generate_ar(LocalTarget(t), gemma_tok, prompt, max_new_tokens=20)
        target = LocalTarget(t, SamplingConfig(), default_verify_mode(strategy))
        assert generate_speculative(d, target, pair, prompt, cfg=SpecConfig(strategy), k=FixedK(4),
                                    max_new_tokens=20).token_ids == ref.token_ids


def test_slem_accepts_when_the_draft_text_is_the_targets(qwen_tok, smollm_tok):
    """Drafter and target share weights and tokenizer: re-tokenised drafts are mostly accepted,
    and a drafter with a different tokenizer still gets its text through (no direct map needed)."""
    model = tiny("qwen2", vocab_len(qwen_tok), seed=3)
    d, t = CausalLM(model), CausalLM(model)
    pair = PairState(qwen_tok, qwen_tok, d.vocab_size, t.vocab_size)
    ref = generate_ar(LocalTarget(t), qwen_tok, PROMPTS[0], max_new_tokens=30)
    out = generate_speculative(d, LocalTarget(t, SamplingConfig(), default_verify_mode("slem")), pair, PROMPTS[0],
                               cfg=SpecConfig("slem"), k=FixedK(4), max_new_tokens=30)
    assert out.token_ids == ref.token_ids and out.metrics["acceptance_rate"] >= 0.4


def test_levenshtein_and_dtw_by_hand():
    assert levenshtein(b"kitten", b"sitting") == 3 and levenshtein(b"", b"ab") == 2
    same = [b"def", b" f", b"(x)"]
    assert dtw_align(same, same) == [(0, 0), (1, 1), (2, 2)]
    # draft "hel" "lo" " world" vs target "hello" " wor" "ld"
    path = dtw_align([b"hel", b"lo", b" world"], [b"hello", b" wor", b"ld"])
    assert path[0] == (0, 0) and path[-1] == (2, 2)
    assert all(i2 - i1 in (0, 1) and j2 - j1 in (0, 1) for (i1, j1), (i2, j2) in zip(path, path[1:]))
    # one draft token against three target tokens: every target token is reached
    path = dtw_align([b"abc"], [b"a", b"b", b"c"])
    assert path == [(0, 0), (0, 1), (0, 2)]
    # the Sakoe-Chiba band: far-off pairs are never matched
    a = [bytes([65 + i]) for i in range(30)]
    assert all(abs(i - j) <= 8 for i, j in dtw_align(a, a, window=8))
    assert dtw_align([], [b"x"]) == []
