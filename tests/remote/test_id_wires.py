"""The OpenAI-API target against stand-ins of vLLM's and SGLang's servers (id_engine_stub.py): the
engine is recognised from /models, greedy speculative output equals the target's own greedy output
with one request per verify (every row is exact: no probes), point-mass sampling at temperature 1
is distributed as the target's law (chi-square) on drafts inside and outside the top N, at other
settings as the engine's own law, and a reply whose lists are misaligned is refused."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy import stats

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.sampling import SamplingConfig
from omnidraft.errors import OmniDraftError
from omnidraft.propose.config import SpecConfig
from omnidraft.remote.echo_wire import EchoWire
from omnidraft.remote.http import BadReply
from omnidraft.remote.id_wires import SglangWire, VllmWire
from omnidraft.remote.openai_api import OpenAITarget
from omnidraft.translate.state import PairState

from ..bigram import BigramLM
from ..conftest import vocab_len
from .id_engine_stub import IdEngineStub, tempered_law
from .test_openai_api import PROMPTS, TOKEN, _favour
from .test_server import _free_port

ENGINES = ("vllm", "sglang")


@pytest.fixture(scope="module")
def lm(qwen_tok):
    return BigramLM(vocab_len(qwen_tok), _favour(qwen_tok), seed=12, noise=0.4, rest_mass=1e-6, name="target")


@pytest.fixture(scope="module", params=ENGINES)
def stub(request, lm, qwen_tok):
    s = IdEngineStub(lm, qwen_tok, TOKEN, {qwen_tok.eos_token_id}, _free_port(), owner=request.param)
    yield s
    s.stop()


def _target(stub, tok, sampling=SamplingConfig(), **kw):
    return OpenAITarget(stub.url, TOKEN, None, tok, sampling, eos_ids={tok.eos_token_id}, **kw)


def test_the_engine_is_recognised_from_its_model_list(stub, qwen_tok):
    target = _target(stub, qwen_tok)
    want = VllmWire if target.wire.engine == "vllm" else SglangWire
    assert isinstance(target.wire, want) and target.model == "stub"
    assert isinstance(_target(stub, qwen_tok, engine="llama-cpp-python").wire, EchoWire)  # named: as named
    with pytest.raises(OmniDraftError, match="unknown engine"):
        _target(stub, qwen_tok, engine="tgi")


def test_greedy_speculative_output_is_the_targets_own_in_one_request_per_verify(stub, lm, smollm_tok, qwen_tok):
    drafter = BigramLM(vocab_len(smollm_tok), _favour(smollm_tok), seed=11, noise=0.4, rest_mass=1e-6, name="draft")
    pair = PairState(smollm_tok, qwen_tok, drafter.vocab_size, lm.vocab_size)
    for prompt in PROMPTS:
        own = generate_ar(LocalTarget(lm.fork(), SamplingConfig()), qwen_tok, prompt, max_new_tokens=24)
        target = _target(stub, qwen_tok)
        out = generate_speculative(drafter.fork(), target, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(4),
                                   max_new_tokens=24, record_topk=8)
        assert out.token_ids == own.token_ids, (stub.url, prompt)
        assert out.metrics["accepted"] > 0
        assert target.evaluations == out.metrics["steps"]  # no probe: every proposed token's p is given
        ids, probs = target.last_rows
        assert ids.shape == (ids.shape[0], 8) and float(probs[0, 0]) > 0


def test_the_engine_alone_streams_its_own_greedy_output(stub, lm, qwen_tok):
    prompt = qwen_tok(PROMPTS[0], add_special_tokens=False).input_ids
    own = generate_ar(LocalTarget(lm.fork(), SamplingConfig()), qwen_tok, PROMPTS[0], max_new_tokens=12)
    alone = _target(stub, qwen_tok).generate_alone(prompt, 12)
    assert alone.text == qwen_tok.decode([t for t in own.token_ids if t != qwen_tok.eos_token_id])


def test_point_mass_sampling_is_the_targets_distribution(stub, lm, qwen_tok):
    """A draft outside the top N (its probability is the prompt entry beyond them: a listed draft
    takes the same path)."""
    prefix = qwen_tok("x = f", add_special_tokens=False).input_ids
    p = torch.softmax(lm.logits_after(prefix)[-1].float(), -1)
    d = qwen_tok(" zebra", add_special_tokens=False).input_ids[0]
    assert p[d] < p.topk(20).values[-1]
    target = _target(stub, qwen_tok, SamplingConfig(temperature=1.0, seed=5))
    draws, seen = 1000, Counter()
    for _ in range(draws):
        target.start(prefix)
        v = target.verify([d])
        seen[d if v.accepted else v.token] += 1
    cells = [i for i in p.argsort(descending=True).tolist()[:40] if p[i] * draws >= 5]
    obs = [seen[i] for i in cells] + [draws - sum(seen[i] for i in cells)]
    exp = [float(p[i]) * draws for i in cells]
    exp.append(draws - sum(exp))
    assert stats.chisquare(obs, exp).pvalue > 1e-4, seen.most_common(5)


def test_sampling_at_other_settings_is_the_engines_own_law(stub, lm, qwen_tok):
    """Temperature 0.7, top-p 0.9: each position sampled by the engine (temperature, then top-p)."""
    prefix = qwen_tok("x = f", add_special_tokens=False).input_ids
    law = tempered_law(lm.logits_after(prefix)[-1], 0.7, 0.9)
    d = int(law.argsort(descending=True)[1])
    target = _target(stub, qwen_tok, SamplingConfig(temperature=0.7, top_p=0.9, seed=4))
    draws, seen = 800, Counter()
    for _ in range(draws):
        target.start(prefix)
        v = target.verify([d])
        seen[d if v.accepted else v.token] += 1
    assert all(law[i] > 0 for i in seen)  # nothing outside the nucleus
    cells = [i for i in law.argsort(descending=True).tolist() if law[i] * draws >= 5]
    obs = [seen[i] for i in cells] + [draws - sum(seen[i] for i in cells)]
    exp = [float(law[i]) * draws for i in cells]
    exp.append(draws - sum(exp))
    assert stats.chisquare(obs, exp).pvalue > 1e-4, seen.most_common(5)


def test_misaligned_prompt_log_probabilities_are_refused(lm, qwen_tok):
    broken = IdEngineStub(lm, qwen_tok, TOKEN, {qwen_tok.eos_token_id}, _free_port(), owner="sglang", shift=1)
    try:
        target = _target(broken, qwen_tok)
        prefix = qwen_tok("x = f", add_special_tokens=False).input_ids
        target.start(prefix)
        best = [int(lm.logits_after(prefix)[-1].argmax())]
        best.append(int(lm.logits_after(best)[-1].argmax()))  # both in the top lists, wherever they sit
        with pytest.raises(BadReply, match="aligned"):
            target.verify(best)
    finally:
        broken.stop()


def test_an_openai_url_takes_the_engine_it_is_told(stub):
    from omnidraft.pairs.build import load_target
    from omnidraft.pairs.settings import TargetRef

    ref = TargetRef("openai+" + stub.url, token=TOKEN, tokenizer="qwen2.5-coder-0.5b", engine="vllm")
    target, _ = load_target(ref, sampling=SamplingConfig(), verify="point-mass")
    assert isinstance(target.wire, VllmWire)
