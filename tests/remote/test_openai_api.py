"""The OpenAI-API target against a stand-in of llama-cpp-python's server (llamacpp_stub.py):
greedy speculative output equals the target's own greedy output, point-mass sampling at
temperature 1 is distributed as the target's own sampling (chi-square) on drafts the reply lists,
leaves unlisted and hides behind a shared text, at other temperatures and top-p as the engine's
own sampling at those settings, and bad input gets one clear error."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy import stats

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.sampling import SamplingConfig
from omnidraft.errors import OmniDraftError
from omnidraft.propose.config import SpecConfig
from omnidraft.decode.verify import Verdict
from omnidraft.remote.http import BadReply, RemoteUnavailable
from omnidraft.remote.openai_api import OpenAITarget
from omnidraft.remote.remote import FallbackTarget
from omnidraft.decode.target import LocalTarget
from omnidraft.translate.state import PairState

from ..bigram import BigramLM
from ..conftest import vocab_len
from .llamacpp_stub import LlamaCppStub, engine_law
from .test_server import _free_port

TOKEN = "stub-token-0123456789abcdef"
PROMPTS = ["x = f", "the cat is", "for a in"]
# Space-led words: any sequence of them is its own text's tokenisation, as a real model's output
# nearly always is (a text engine cannot follow one that is not: test_a_context_no_text_expresses...)
WORDS = [" the", " x", " a", " b", " if", " in", " for", " return", " cat", " dog", " (", " is", " of",
         " to", " and", " on", " it", " not", " with", " as", " at", " by", " we", " or", " be"]


def _favour(tok) -> dict[int, float]:
    out = {}
    for r, w in enumerate(WORDS):
        (i,) = tok.encode(w, add_special_tokens=False)
        out[i] = 1.0 - r / len(WORDS)
    return out


@pytest.fixture(scope="module")
def engine(qwen_tok):
    lm = BigramLM(vocab_len(qwen_tok), _favour(qwen_tok), seed=12, noise=0.4, rest_mass=1e-6, name="target")
    stub = LlamaCppStub(lm, qwen_tok, TOKEN, {qwen_tok.eos_token_id}, _free_port())
    yield lm, stub
    stub.stop()


def _target(stub, tok, sampling=SamplingConfig(), **kw):
    return OpenAITarget(stub.url, TOKEN, None, tok, sampling, eos_ids={tok.eos_token_id}, **kw)


def test_greedy_speculative_output_is_the_targets_own(engine, smollm_tok, qwen_tok):
    lm, stub = engine
    drafter = BigramLM(vocab_len(smollm_tok), _favour(smollm_tok), seed=11, noise=0.4, rest_mass=1e-6,
                       name="draft")
    pair = PairState(smollm_tok, qwen_tok, drafter.vocab_size, lm.vocab_size)
    for prompt in PROMPTS:
        own = generate_ar(LocalTarget(lm.fork(), SamplingConfig()), qwen_tok, prompt, max_new_tokens=24)
        target = _target(stub, qwen_tok)
        out = generate_speculative(drafter.fork(), target, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(4),
                                   max_new_tokens=24, record_topk=8)
        assert out.token_ids == own.token_ids, prompt
        assert out.metrics["accepted"] > 0
        ids, probs = target.last_rows
        assert ids.shape == probs.shape and ids.shape[1] == 8 and float(probs[0, 0]) > 0


def test_the_engine_alone_is_timed_in_one_request(engine, qwen_tok):
    lm, stub = engine
    own = generate_ar(LocalTarget(lm.fork(), SamplingConfig()), qwen_tok, PROMPTS[0], max_new_tokens=12)
    before = stub.requests
    alone = _target(stub, qwen_tok).generate_alone(qwen_tok(PROMPTS[0], add_special_tokens=False).input_ids, 12)
    assert alone.tokens == len([t for t in own.token_ids if t != qwen_tok.eos_token_id]) and alone.seconds > 0
    assert alone.text == qwen_tok.decode([t for t in own.token_ids if t != qwen_tok.eos_token_id])
    assert stub.requests == before + 1


def _committed(stub, tok, prefix_ids, proposal, draws):
    target = _target(stub, tok, SamplingConfig(temperature=1.0, seed=5))
    out = Counter()
    for _ in range(draws):
        target.start(prefix_ids)
        v = target.verify(proposal)
        out[proposal[0] if v.accepted else v.token] += 1
    return out


@pytest.mark.parametrize("which", ["listed", "unlisted", "shared text"])
def test_point_mass_sampling_is_the_targets_distribution(engine, qwen_tok, which):
    lm, stub = engine
    prefix = qwen_tok("x = f", add_special_tokens=False).input_ids
    p = torch.softmax(lm.logits_after(prefix)[-1].float(), -1)  # the exact law of the next token
    if which == "listed":
        d = int(p.argsort(descending=True)[1])
    elif which == "unlisted":
        d = qwen_tok(" zebra", add_special_tokens=False).input_ids[0]
        assert p[d] < 1e-6
    else:  # " (" shares its text with a token ending in part of a character
        d = qwen_tok(" (", add_special_tokens=False).input_ids[0]
    draws = 1000
    seen = _committed(stub, qwen_tok, prefix, [d], draws)
    cells = [i for i in p.argsort(descending=True).tolist()[:40] if p[i] * draws >= 5]
    obs = [seen[i] for i in cells] + [draws - sum(seen[i] for i in cells)]
    exp = [float(p[i]) * draws for i in cells]
    exp.append(draws - sum(exp))
    assert stats.chisquare(obs, exp).pvalue > 1e-4, (which, seen.most_common(5))


@pytest.mark.parametrize("temperature, top_p", [(0.7, 1.0), (1.3, 0.9)])
def test_sampling_at_other_settings_is_the_engines_own_law(engine, qwen_tok, temperature, top_p):
    """Away from temperature 1 / top-p 1 the engine samples each position itself: the committed
    token (accepted draft or correction) and, after an acceptance, the bonus are distributed as
    the engine's own sampling at those settings; one request per committed token, no echo."""
    lm, stub = engine
    prefix = qwen_tok("x = f", add_special_tokens=False).input_ids
    law = engine_law(lm.logits_after(prefix)[-1], temperature, top_p)
    d = int(law.argsort(descending=True)[1])  # the second likeliest: acceptances and corrections
    after = engine_law(lm.logits_after(prefix + [d])[-1], temperature, top_p)
    target = _target(stub, qwen_tok, SamplingConfig(temperature=temperature, top_p=top_p, seed=4))
    first, bonus = Counter(), Counter()
    draws, before = 800, stub.requests
    for _ in range(draws):
        target.start(prefix)
        v = target.verify([d])
        first[d if v.accepted else v.token] += 1
        if v.accepted:
            bonus[v.token] += 1
    assert stub.requests - before == draws + first[d]  # one per committed token
    for seen, p in ((first, law), (bonus, after)):
        assert all(p[i] > 0 for i in seen)  # nothing outside the nucleus
        n = sum(seen.values())
        obs, exp = [0], [0.0]  # ids pooled in order of probability into cells expecting >= 5
        for i in p.argsort(descending=True).tolist():
            if p[i] == 0:
                break
            if exp[-1] >= 5:
                obs.append(0)
                exp.append(0.0)
            obs[-1] += seen[i]
            exp[-1] += float(p[i]) * n
        if exp[-1] < 5:  # the tail's last cell joins the one before
            obs[-2:], exp[-2:] = [obs[-2] + obs[-1]], [exp[-2] + exp[-1]]
        assert len(obs) >= 3, "too few cells to test"
        assert stats.chisquare(obs, exp, sum_check=False).pvalue > 1e-4, (temperature, top_p, seen.most_common(5))


def test_bad_input_gets_one_clear_error(engine, qwen_tok):
    lm, stub = engine
    with pytest.raises(OmniDraftError, match="401"):
        OpenAITarget(stub.url, "wrong-token-0123456789", None, qwen_tok, SamplingConfig(),
                     eos_ids={qwen_tok.eos_token_id})
    target = _target(stub, qwen_tok)
    split = [qwen_tok.convert_tokens_to_ids(c) for c in ["d", "e", "f"]]  # "def" is one token
    with pytest.raises(OmniDraftError, match="tokenisation"):
        target.start(split)
    target.start(qwen_tok("x = ", add_special_tokens=False).input_ids)
    with pytest.raises(ValueError, match="proposal ids"):
        target.verify([vocab_len(qwen_tok) + 5])
    v = target.verify(split)  # not what "def" tokenises to: cut after "d", verified that far
    assert v.accepted <= 1


def test_a_context_no_text_expresses_ends_the_remote_generation(engine, qwen_tok, monkeypatch):
    lm, stub = engine
    target = _target(stub, qwen_tok)
    x, space, eq = qwen_tok.convert_tokens_to_ids(["x", "Ġ", "="])
    target.start([x, space])  # "x " is its own tokenisation; "x =" is not x, " ", "="
    monkeypatch.setattr(target, "_judge", lambda sent, rows, last: Verdict(0, eq))
    assert target.verify([]) == Verdict(0, eq)  # committed: a fallback continues after it
    with pytest.raises(RemoteUnavailable, match="tokenises back"):
        target.verify([])
    monkeypatch.setattr(target.wire, "expressible", lambda ids: True)
    with pytest.raises(BadReply, match="tokenised the prompt differently"):
        target.verify([])


def test_the_local_fallback_continues_when_the_engine_goes_away(qwen_tok, smollm_tok):
    lm = BigramLM(vocab_len(qwen_tok), _favour(qwen_tok), seed=12, noise=0.4, rest_mass=1e-6, name="target")
    stub = LlamaCppStub(lm, qwen_tok, TOKEN, {qwen_tok.eos_token_id}, _free_port())
    remote = OpenAITarget(stub.url, TOKEN, None, qwen_tok, SamplingConfig(), eos_ids={qwen_tok.eos_token_id},
                          retries=0, timeout=5)
    verify = remote.verify

    def dies_after_two(proposal, q=None):
        if stub.requests >= 2:
            stub.stop()
        return verify(proposal, q)
    remote.verify = dies_after_two
    target = FallbackTarget(remote, LocalTarget(lm.fork(), SamplingConfig(), stream="fallback"))
    drafter = BigramLM(vocab_len(smollm_tok), _favour(smollm_tok), seed=11, noise=0.4, rest_mass=1e-6)
    pair = PairState(smollm_tok, qwen_tok, drafter.vocab_size, lm.vocab_size)
    out = generate_speculative(drafter, target, pair, PROMPTS[1], cfg=SpecConfig("omnidraft"), k=FixedK(4),
                               max_new_tokens=24)
    own = generate_ar(LocalTarget(lm.fork(), SamplingConfig()), qwen_tok, PROMPTS[1], max_new_tokens=24)
    assert target.fell_back and out.token_ids == own.token_ids


def test_an_openai_url_names_the_target(engine, qwen_tok):
    from omnidraft.pairs.build import load_target
    from omnidraft.pairs.settings import TargetRef

    lm, stub = engine
    target, tok = load_target(TargetRef("openai+" + stub.url, token=TOKEN, tokenizer="qwen2.5-coder-0.5b"),
                              sampling=SamplingConfig(), verify="point-mass")
    target.start(qwen_tok(PROMPTS[0], add_special_tokens=False).input_ids, record_topk=64)
    assert isinstance(target, OpenAITarget) and target.model == "stub" and target.record_topk == 20
    assert tok.eos_token_id in target.eos_ids and len(target.eos_ids) >= 1


def test_a_session_hands_generation_to_the_engine_while_it_is_faster(engine, qwen_tok, smollm_tok, tmp_path,
                                                                     monkeypatch):
    """With the engine measured faster than the pair (engine.json), a Session lets the engine
    generate alone (one streamed request, its own output), re-tries the pair every PROBE_EVERY
    generations, and keeps measuring both; a fixed k keeps the pair."""
    from omnidraft import Session
    from omnidraft.pairs.settings import TargetRef
    from omnidraft.pairs.engine_choice import PROBE_EVERY, EngineChoice

    from ..conftest import save_tiny, tiny

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    lm, stub = engine
    drafter = str(save_tiny(tiny("llama", vocab_len(smollm_tok), seed=11), smollm_tok, tmp_path / "drafter"))
    url = "openai+" + stub.url
    tok_dir = qwen_tok.name_or_path  # a path: the catalog under the test's own home is empty
    s = Session(drafter, TargetRef(url, token=TOKEN, tokenizer=tok_dir), log=False)
    own = generate_ar(LocalTarget(lm.fork(), SamplingConfig()), qwen_tok, PROMPTS[0], max_new_tokens=12)
    text = qwen_tok.decode([t for t in own.token_ids if t != qwen_tok.eos_token_id])
    assert s.generate(PROMPTS[0], max_new_tokens=12).text == text  # not measured yet: the pair
    assert "engine" not in s.last.metrics and s.engine_choice.pair_tokens_per_s > 0
    s.engine_choice.measured(pair_tokens_per_s=1.0, engine_tokens_per_s=1000.0)
    before = stub.requests
    pieces = list(s.stream(PROMPTS[0], max_new_tokens=12))
    assert "".join(pieces) == text and len(pieces) > 1  # streamed as the engine sends it
    assert s.last.metrics["engine"] == {"name": "openai-api", "url": stub.url, "model": "stub"}
    assert s.last.lossless and stub.requests == before + 1
    again = Session(drafter, TargetRef(url, token=TOKEN, tokenizer=tok_dir), log=False)
    assert again.engine_choice.engine_now()  # kept in the pair's folder
    again.engine_choice.since_probe = PROBE_EVERY  # a probe is due: the pair runs, and is measured
    assert again.generate(PROMPTS[0], max_new_tokens=12).text == text and "engine" not in again.last.metrics
    assert again.engine_choice.since_probe == 0
    fixed = Session(drafter, TargetRef(url, token=TOKEN, tokenizer=tok_dir), log=False, k=3)
    assert fixed.engine_choice is None
    (tmp_path / "bad.json").write_text("{not json")
    assert not EngineChoice.load(tmp_path / "bad.json").engine_now()  # unreadable: the pair runs
