"""The speculative engine: greedy output equals the target's own greedy output token for token,
and sampling reproduces the target's next-token distribution (tli, point-mass)."""

import pytest
import torch
from scipy import stats

from omnidraft.generate import generate_ar, generate_speculative
from omnidraft.pair import Pair
from omnidraft.runtime import CausalLM
from omnidraft.sampling import SamplingConfig
from omnidraft.speculative import SpecConfig

from .conftest import tiny, vocab_len

PROMPTS = [
    "def fibonacci(n):\n",
    "The Eiffel Tower is in",
    "for i in range(10):\n    print(i)\n",
    "Écrivez une fonction qui trie une liste: ",  # non-ASCII
    "x",
]


@pytest.mark.parametrize("strategy", ["tli", "omnidraft", "slem", "dtw", "slrs"])
@pytest.mark.parametrize("k", [1, 4, 6])
def test_greedy_equals_target_cross_vocab(cross, strategy, k):
    d, t, pair = cross
    for prompt in PROMPTS:
        ref = generate_ar(t, pair.target_tok, prompt, max_new_tokens=24)
        out = generate_speculative(d, t, pair, prompt, cfg=SpecConfig(strategy, k=k), max_new_tokens=24)
        assert out.token_ids == ref.token_ids, prompt
        assert out.metrics["new_tokens"] == len(ref.token_ids)


@pytest.mark.parametrize("confidence", [0.05, 0.4, 0.9])
def test_greedy_equals_target_with_confidence_stop(cross, confidence):
    d, t, pair = cross
    for prompt in PROMPTS[:3]:
        ref = generate_ar(t, pair.target_tok, prompt, max_new_tokens=20)
        out = generate_speculative(d, t, pair, prompt, max_new_tokens=20,
                                   cfg=SpecConfig("omnidraft", k=10, confidence=confidence))
        assert out.token_ids == ref.token_ids


def test_greedy_identity_pair_accepts_everything(qwen_tok):
    """Same tokenizer and same weights: drafts agree except where the drafter's canonical
    re-tokenisation of the text differs from the target's own (random models emit odd splits)."""
    model = tiny("qwen2", vocab_len(qwen_tok), seed=3)
    d, t = CausalLM(model), CausalLM(model)
    pair = Pair(qwen_tok, qwen_tok, d.vocab_size, t.vocab_size)
    ref = generate_ar(t, qwen_tok, PROMPTS[0], max_new_tokens=30)
    out = generate_speculative(d, t, pair, PROMPTS[0], cfg=SpecConfig("omnidraft", k=4),
                               max_new_tokens=30)
    assert out.token_ids == ref.token_ids
    m = out.metrics
    assert m["acceptance_rate"] >= 0.4 and m["target_forwards"] < 30


def test_stop_token_and_budget(cross):
    d, t, pair = cross
    out = generate_speculative(d, t, pair, PROMPTS[1], cfg=SpecConfig("omnidraft", k=3),
                               max_new_tokens=7)
    assert len(out.token_ids) == 7


def _sharpen(model, factor):
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model


def _first_token_dist(d, t, pair, strategy, mode, draws, prompt):
    counts: dict[int, int] = {}
    for s in range(draws):
        out = generate_speculative(d, t, pair, prompt, cfg=SpecConfig(strategy, k=3),
                                   max_new_tokens=1, verify_mode=mode,
                                   sampling=SamplingConfig(temperature=1.0, seed=s))
        counts[out.token_ids[0]] = counts.get(out.token_ids[0], 0) + 1
    return counts


def _target_p(t, pair, prompt):
    ids = pair.target_tok(prompt)["input_ids"]
    return torch.softmax(t.prefill(ids).logits[-1], -1)


def _chi2(counts, p, draws):
    big = [i for i in range(len(p)) if p[i] * draws >= 5]
    obs = [counts.get(i, 0) for i in big]
    exp = [float(p[i]) * draws for i in big]
    obs.append(draws - sum(obs))
    exp.append(draws - sum(exp))
    return stats.chisquare(obs, exp).pvalue


@pytest.fixture(scope="module")
def sharp(smollm_tok, qwen_tok):
    d = CausalLM(_sharpen(tiny("llama", vocab_len(smollm_tok), seed=4), 30.0))
    t = CausalLM(_sharpen(tiny("qwen2", vocab_len(qwen_tok), seed=5), 30.0))
    return d, t, Pair(smollm_tok, qwen_tok, d.vocab_size, t.vocab_size)


@pytest.mark.parametrize("strategy,mode", [("tli", "rejection"), ("tli", "point-mass"),
                                           ("omnidraft", "point-mass"), ("slem", "point-mass"),
                                           ("dtw", "point-mass"), ("slrs", "rejection")])
def test_sampling_reproduces_target_distribution(sharp, strategy, mode):
    d, t, pair = sharp
    draws, prompt = 600, "def add(a, b):"
    p = _target_p(t, pair, prompt)
    counts = _first_token_dist(d, t, pair, strategy, mode, draws, prompt)
    assert _chi2(counts, p, draws) > 1e-3, counts


def test_omnidraft_rule2_departure_is_measured(sharp):
    """The paper calls rejection sampling with mapping (2) approximate: measure how far."""
    d, t, pair = sharp
    draws, prompt = 600, "def add(a, b):"
    p = _target_p(t, pair, prompt)
    counts = _first_token_dist(d, t, pair, "omnidraft", "rejection", draws, prompt)
    emp = torch.zeros_like(p)
    for i, c in counts.items():
        emp[i] = c / draws
    tv = 0.5 * float((emp - p).abs().sum())
    print(f"omnidraft rule-(2) rejection sampling: TV(empirical, p) = {tv:.4f} over {draws} draws")
    assert tv < 0.5
