"""The speculative engine: greedy output equals the target's own greedy output token for token;
each defect of #17 as a test (sampling's statistics are in test_lossless.py)."""

import pytest
import torch

from omnidraft.errors import OmniDraftError
from omnidraft.decode.draft_length import K_MAX, FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative, stream_speculative
from omnidraft.decode.modes import VERIFY_MODES, default_verify_mode, is_lossless
from omnidraft.translate.state import PairState
from omnidraft.models.eager import CausalLM
from omnidraft.sampling import SamplingConfig
from omnidraft.propose.config import SpecConfig
from omnidraft.propose.registry import STRATEGIES, get
from omnidraft.decode.target import LocalTarget

from ..bigram import BigramLM
from ..conftest import UNTRANSLATABLE, tiny, vocab_len

PROMPTS = [
    "def fibonacci(n):\n",
    "The Eiffel Tower is in",
    "for i in range(10):\n    print(i)\n",
    "Écrivez une fonction qui trie une liste: ",  # non-ASCII
    "x",
]


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if get(s).speculative])
@pytest.mark.parametrize("k", [1, 4, 6])
def test_greedy_equals_target_cross_vocab(cross, strategy, k):
    d, t, pair = cross
    for prompt in PROMPTS:
        ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=24)
        out = generate_speculative(d, LocalTarget(t, SamplingConfig(), default_verify_mode(strategy)), pair, prompt,
                                   cfg=SpecConfig(strategy), k=FixedK(k), max_new_tokens=24)
        assert out.token_ids == ref.token_ids, prompt
        assert out.metrics["new_tokens"] == len(ref.token_ids)


@pytest.mark.parametrize("confidence", [0.05, 0.4, 0.9])
def test_greedy_equals_target_with_confidence_stop(cross, confidence):
    d, t, pair = cross
    for prompt in PROMPTS[:3]:
        ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=20)
        out = generate_speculative(d, LocalTarget(t), pair, prompt, max_new_tokens=20,
                                   cfg=SpecConfig("omnidraft", confidence=confidence), k=FixedK(K_MAX))
        assert out.token_ids == ref.token_ids


def test_greedy_identity_pair_accepts_everything(qwen_tok):
    """Same tokenizer and same weights: drafts agree except where the drafter's canonical
    re-tokenisation of the text differs from the target's own (random models emit odd splits)."""
    model = tiny("qwen2", vocab_len(qwen_tok), seed=3)
    d, t = CausalLM(model), CausalLM(model)
    pair = PairState(qwen_tok, qwen_tok, d.vocab_size, t.vocab_size)
    ref = generate_ar(LocalTarget(t), qwen_tok, PROMPTS[0], max_new_tokens=30)
    out = generate_speculative(d, LocalTarget(t), pair, PROMPTS[0], cfg=SpecConfig("omnidraft"), k=FixedK(4),
                               max_new_tokens=30)
    assert out.token_ids == ref.token_ids
    m = out.metrics
    assert m["acceptance_rate"] >= 0.4 and m["target_forwards"] < 30


def test_stop_token_and_budget(cross):
    d, t, pair = cross
    out = generate_speculative(d, LocalTarget(t), pair, PROMPTS[1], cfg=SpecConfig("omnidraft"), k=FixedK(3),
                               max_new_tokens=7)
    assert len(out.token_ids) == 7


# ---------------------------------------------------------------- defects of #17, each a test
SPECULATIVE = [s for s in STRATEGIES if get(s).speculative]


def test_every_default_is_lossless_and_approximate_modes_say_so():
    t1 = SamplingConfig(temperature=1.0)
    for strategy in SPECULATIVE:
        for remote in (False, True):
            assert is_lossless(strategy, default_verify_mode(strategy, remote=remote), t1)
        assert is_lossless(strategy, "point-mass", t1)
        assert is_lossless(strategy, "rejection", SamplingConfig())  # greedy: exact match
    assert [s for s in SPECULATIVE if not is_lossless(s, "rejection", t1)] == ["omnidraft", "slem", "dtw"]


@pytest.fixture(scope="module")
def bigram_cross(smollm_tok, qwen_tok):
    vd, vt = vocab_len(smollm_tok), vocab_len(qwen_tok)
    favour_t = {i: 0.5 for p in (" the", "(", "\n", " x") for i in qwen_tok.encode(p, add_special_tokens=False)}
    favour_d = {i: 0.5 for p in (" the", "(", "\n", " x") for i in smollm_tok.encode(p, add_special_tokens=False)}
    return (BigramLM(vd, favour_d, seed=1, noise=0.3), BigramLM(vt, favour_t, seed=2, noise=0.3),
            PairState(smollm_tok, qwen_tok, vd, vt))


@pytest.mark.parametrize("strategy", SPECULATIVE)
@pytest.mark.parametrize("mode", VERIFY_MODES)
def test_empty_proposals_under_every_mode(smollm_tok, qwen_tok, bigram_cross, strategy, mode):
    """A drafter that only ever drafts an untranslatable token: every proposal is empty, the
    target decodes alone, nothing crashes, and greedy output is the target's."""
    _, t, pair = bigram_cross
    d = BigramLM(pair.vmap.d2t.shape[0], {UNTRANSLATABLE: 30.0}, seed=3, rest_mass=1e-9)  # else 2% drafts another
    for sampling in (SamplingConfig(), SamplingConfig(temperature=1.0, seed=1)):
        out = generate_speculative(d, LocalTarget(t, sampling, mode), pair, "def f(x):", cfg=SpecConfig(strategy),
                                   k=FixedK(4), max_new_tokens=8)
        assert len(out.token_ids) == 8
        if strategy not in ("slrs", "tli", "lookup"):  # slrs drafts target tokens from the string
            assert out.metrics["proposed"] == 0  # distribution; tli drafts mapped tokens only; lookup copies
        if sampling.greedy:
            ref = generate_ar(LocalTarget(t), pair.target_tok, "def f(x):", max_new_tokens=8)
            assert out.token_ids == ref.token_ids


@pytest.mark.parametrize("strategy", SPECULATIVE)
def test_identity_pair_accepts(qwen_tok, strategy):
    """Translator contract: drafter == target (same tokenizer, same weights) must accept; a
    translator that proposed nothing would fail here."""
    v = vocab_len(qwen_tok)
    lm = BigramLM(v, {i: 0.5 for i in range(200, 230)}, seed=5, noise=2.0)
    pair = PairState(qwen_tok, qwen_tok, v, v)
    out = generate_speculative(lm, LocalTarget(lm, SamplingConfig(), default_verify_mode(strategy)), pair,
                               "def add(a, b):", cfg=SpecConfig(strategy), k=FixedK(4), max_new_tokens=24)
    assert out.token_ids == generate_ar(LocalTarget(lm), qwen_tok, "def add(a, b):", max_new_tokens=24).token_ids
    assert out.metrics["acceptance_rate"] >= 0.5, out.metrics


def test_interleaved_generations_on_shared_models_are_each_the_targets(cross):
    d, t, pair = cross
    prompts = PROMPTS[:2]
    target = LocalTarget(t)  # over an eager model: each generation verifies on a fork of its own
    refs = [generate_ar(target, pair.target_tok, p, max_new_tokens=16).token_ids for p in prompts]
    gens = [stream_speculative(d, target, pair, p, cfg=SpecConfig("omnidraft"), k=FixedK(3), max_new_tokens=16)
            for p in prompts]
    results = [None, None]
    while any(r is None for r in results):
        for i, g in enumerate(gens):
            if results[i] is None:
                try:
                    next(g)
                except StopIteration as done:
                    results[i] = done.value
    assert [r.token_ids for r in results] == refs


class _OneCache(CausalLM):
    """An in-process model that cannot fork (as an exported program holds its one cache)."""

    fork = None


def test_a_target_session_in_use_is_refused_clearly(cross):
    d, t, pair = cross
    shared = LocalTarget(_OneCache(t.model), SamplingConfig(), "point-mass")
    assert shared.fork() is None
    first = stream_speculative(d, shared, pair, "x = 1", cfg=SpecConfig("omnidraft"), k=FixedK(3), max_new_tokens=8)
    next(first)
    second = stream_speculative(d, shared, pair, "y = 2", cfg=SpecConfig("omnidraft"), k=FixedK(3), max_new_tokens=8)
    with pytest.raises(OmniDraftError, match="already in use"):
        next(second)
    first.close()  # releases it
    again = generate_speculative(d, shared, pair, "y = 2", cfg=SpecConfig("omnidraft"), k=FixedK(3), max_new_tokens=8)
    assert again.token_ids == generate_ar(LocalTarget(t), pair.target_tok, "y = 2", max_new_tokens=8).token_ids


@pytest.mark.parametrize("strategy", SPECULATIVE)
@pytest.mark.parametrize("k", [4, 6])
def test_generation_ends_where_ar_ends_at_the_context_window(smollm_tok, qwen_tok, strategy, k):
    """A target window of 40 tokens and a drafter window of 12 (shorter than the prompt): the
    speculative output equals ar's up to the last position of the window, no crash."""
    d = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=1, max_position_embeddings=12))
    t = CausalLM(tiny("qwen2", vocab_len(qwen_tok), seed=2, max_position_embeddings=40))
    pair = PairState(smollm_tok, qwen_tok, d.vocab_size, t.vocab_size)
    prompt = "for i in range(10):\n    print(i)\n"
    ref = generate_ar(LocalTarget(t), qwen_tok, prompt, max_new_tokens=100)
    assert len(ref.token_ids) + len(qwen_tok(prompt)["input_ids"]) == 40
    target = LocalTarget(t, SamplingConfig(), default_verify_mode(strategy))
    out = generate_speculative(d, target, pair, prompt, cfg=SpecConfig(strategy), k=FixedK(k), max_new_tokens=100)
    assert out.token_ids == ref.token_ids
    d_wide = CausalLM(tiny("llama", vocab_len(smollm_tok), seed=1))
    out = generate_speculative(d_wide, target, pair, prompt, cfg=SpecConfig(strategy), k=FixedK(k), max_new_tokens=100)
    assert out.token_ids == ref.token_ids


def test_greedy_and_sampling_leave_the_callers_rng_alone(cross):
    d, t, pair = cross
    torch.manual_seed(7)
    state = torch.get_rng_state()
    generate_ar(LocalTarget(t), pair.target_tok, "x", max_new_tokens=4)
    generate_ar(LocalTarget(t, SamplingConfig(temperature=1.0)), pair.target_tok, "x", max_new_tokens=4)
    for sampling in (SamplingConfig(), SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, seed=3)):
        generate_speculative(d, LocalTarget(t, sampling, default_verify_mode("tli")), pair, "x", cfg=SpecConfig("tli"),
                             k=FixedK(3), max_new_tokens=4)
    assert torch.equal(torch.get_rng_state(), state)


def test_local_target_validates_before_touching_its_cache(cross):
    _, t, _ = cross
    target = LocalTarget(CausalLM(t.model), SamplingConfig(temperature=1.0, seed=1), "rejection")
    target.start([5, 6, 7, 8])
    length = target.model.length
    with pytest.raises(ValueError, match="shape"):
        target.verify([1, 2], torch.zeros(3, target.vocab_size))
    with pytest.raises(ValueError, match="ids"):
        target.verify([10**7], torch.zeros(1, target.vocab_size))
    assert target.model.length == length and target.pending == 8
    q = torch.zeros(2, target.vocab_size)
    q[0, 1] = q[1, 2] = 1.0
    real = target.model.model.forward

    def boom(*a, **kw):
        real(*a, **kw)
        raise RuntimeError("interrupted mid-forward")
    target.model.model.forward = boom
    try:
        with pytest.raises(RuntimeError):
            target.verify([1, 2], q)
    finally:
        target.model.model.forward = real
    # the prefill ran the whole prompt; the pending token's row waits for the first verify
    assert target.model.length == length and target.model.tokens == [5, 6, 7, 8]
    fresh = LocalTarget(CausalLM(t.model), SamplingConfig(temperature=1.0, seed=1), "rejection")
    fresh.start([5, 6, 7, 8])
    assert target.verify([1, 2], q) == fresh.verify([1, 2], q)


def test_results_and_json_say_lossless(cross):
    d, t, pair = cross
    t1 = SamplingConfig(temperature=1.0, seed=0)
    exact = generate_speculative(d, LocalTarget(t, t1, default_verify_mode("omnidraft")), pair, "x",
                                 cfg=SpecConfig("omnidraft"), k=FixedK(3), max_new_tokens=4)
    approx = generate_speculative(d, LocalTarget(t, t1, "rejection"), pair, "x", cfg=SpecConfig("omnidraft"),
                                  k=FixedK(3), max_new_tokens=4)
    assert (exact.lossless, exact.metrics["verify"]) == (True, "point-mass")
    assert (approx.lossless, approx.metrics["verify"]) == (False, "rejection")


def test_position_acceptance_counts_each_position_given_the_ones_before(cross):
    """position_acceptance[i] = rounds accepting draft position i / rounds that proposed it with
    positions 0..i-1 accepted (what the cost model's per-position rates are); position 0 is
    reached by every round that proposed anything, so its rate ties to the overall counts."""
    d, t, pair = cross
    out = generate_speculative(d, LocalTarget(t), pair, PROMPTS[0], cfg=SpecConfig("omnidraft"), k=FixedK(4),
                               max_new_tokens=30)
    m = out.metrics
    rates = m["position_acceptance"]
    assert rates and all(0.0 <= r <= 1.0 for r in rates) and len(rates) <= 5


def test_metrics_position_counters():
    from types import SimpleNamespace as NS

    from omnidraft.decode.metrics import Metrics

    m = Metrics("omnidraft")
    for proposed, accepted in ((4, 4), (4, 1), (3, 0), (0, 0), (2, 2)):
        prop = NS(target_ids=list(range(proposed)), ngram_count=0, from_cache=[False] * proposed, drafter_forwards=proposed)
        m.add(NS(committed=[0] * (accepted + 1), proposal=prop, verdict=NS(accepted=accepted), translate_s=0.0,
                 round_s=0.01, prefill_s=0.0, elapsed_s=0.1, kind="drafter"))
    # position 0: reached by the 4 rounds that proposed something, accepted in 3
    assert m.reached == [4, 3, 1, 1] and m.position_accepted == [3, 2, 1, 1]
    assert m.summary()["position_acceptance"] == [0.75, 0.6667, 1.0, 1.0]


class _Schedule:
    """Draft lengths 0, 0, 3 round after round (a DraftLength)."""

    def __init__(self):
        self.n = 0
        self.told: list[int] = []  # the drafter's unread tokens each round was told of

    def start(self):
        self.n = 0

    def next_k(self, unread=0, remaining=None):
        self.n += 1
        self.told.append(unread)
        return 3 if self.n % 3 == 0 else 0

    def observe(self, proposed, accepted):
        pass

    def probe_soon(self):
        pass

    def observe_round(self, width, forwards, read, seconds):
        pass


def test_rounds_without_a_draft_reach_the_drafter_before_it_drafts_and_by_the_end(cross):
    """A round of 0 drafts leaves its token's reverse translation for later: the drafter's context
    spells every committed token whenever it drafts, and once the loop ends; output unchanged."""
    from omnidraft.decode.loop import decode
    from omnidraft.decode.text import encode_prompt
    from omnidraft.translate.reverse import DraftContext

    d, t, pair = cross
    vm = pair.vmap

    def spelled(ctx) -> bytes:
        return b"".join(vm.draft_bytes[i] or b"" for i in ctx.gen_ids) + ctx.tail

    def committed_bytes(ids) -> bytes:
        return b"".join(vm.target_bytes[i] or b"" for i in ids)

    inner = get("omnidraft").proposer(pair, d.fork(), SamplingConfig(), SpecConfig("omnidraft"), None)
    seen: list[tuple[bytes, bytes]] = []

    class Spy:
        kind = "drafter"

        def propose(self, state, k):
            seen.append((spelled(state.ctx), committed_bytes(state.generated)))
            return inner.propose(state, k)

        def observe(self, state, fresh):
            inner.observe(state, fresh)

        def unread(self, state):
            return inner.unread(state)

    prompt = PROMPTS[0]
    ctx = DraftContext(pair.draft_tok, vm, encode_prompt(pair.draft_tok, prompt, chat=False))
    schedule = _Schedule()
    rounds = list(decode(Spy(), LocalTarget(t.fork(), SamplingConfig()), ctx, encode_prompt(pair.target_tok, prompt, chat=False),
                         k=schedule, max_new_tokens=20, stop=set()))
    out = [i for r in rounds for i in r.committed]
    assert out == generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=20).token_ids
    assert len(seen) >= 2 and all(drafter == target for drafter, target in seen)
    assert len(rounds) > len(seen) and spelled(ctx) == committed_bytes(out)
    # the draft length is told the drafter's catch-up: the whole prompt until it first drafts,
    # then the tokens after its drafts (the bonus at least) and what rounds without a draft added
    told = schedule.told
    assert told[:3] == [len(ctx.prompt_ids) + i for i in range(3)]
    assert told[3] >= 1 and told[4:6] == [told[3] + 1, told[3] + 2]
