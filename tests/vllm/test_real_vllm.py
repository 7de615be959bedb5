"""Everything that needs a real vLLM server (one module, so each of its two servers starts once:
vLLM alone, and vLLM with OmniDraftProposer).

The cloud target's vLLM wire (remote/id_wires.py VllmWire through remote/openai_api.py), not a
stand-in: the engine is recognised from its model list; greedy speculative output equals vLLM's
own greedy output with one request per verify; point-mass sampling at temperature 1 is
distributed as the engine's own law (chi-square against its prompt log-probabilities); at
temperature 0.7 and top-p 0.9 as the engine's own samples (a two-sample chi-square); a reply whose
prompt log-probabilities are shifted by one is refused; and when the engine is killed
mid-generation the local fallback continues exactly (last: it kills the plain server).

OmniDraft's proposer inside vLLM (omnidraft/vllm/): loaded by class path, its greedy output equal
to vLLM alone's on plain and repetitive prompts, its drafts and copies verified by vLLM (its
/metrics count them), its state kept in $OMNIDRAFT_HOME, each ended request kept in the pair's memory
and recalled when it comes again; a sampled request gets no drafts on this CPU build (its sampled
verification is not exact), so its seeded output is vLLM alone's."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from scipy import stats

from omnidraft.decode.draft_length import FixedK
from omnidraft.decode.generate import generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.models.eager import CausalLM
from omnidraft.propose.config import SpecConfig
from omnidraft.remote.http import BadReply
from omnidraft.remote.id_wires import VllmWire
from omnidraft.remote.openai_api import OpenAITarget
from omnidraft.remote.remote import FallbackTarget
from omnidraft.sampling import SamplingConfig
from omnidraft.translate.state import PairState

from ..conftest import tiny, vocab_len
from .conftest import serve

pytestmark = pytest.mark.vllm
PROMPTS = ["x = f", "the cat is", "def add(a, b):"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory, target_dir):
    server = serve(tmp_path_factory, target_dir, "plain")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def drafter(smollm_tok):
    return CausalLM(tiny("llama", vocab_len(smollm_tok), seed=11))


@pytest.fixture(scope="module")
def with_proposer(tmp_path_factory, target_dir, drafter, smollm_tok):
    """vLLM with OmniDraftProposer: the tiny drafter (saved), a home of its own, its state reported."""
    folder = tmp_path_factory.mktemp("proposer")
    drafter.model.save_pretrained(str(folder / "drafter"))
    smollm_tok.save_pretrained(str(folder / "drafter"))
    env = {"OMNIDRAFT_HOME": str(folder / "home"), "OMNIDRAFT_DRAFTER": str(folder / "drafter"),
           "OMNIDRAFT_DRAFTER_RUNTIME": "eager", "OMNIDRAFT_VLLM_STATS": str(folder / "stats.json")}
    spec = {"method": "custom_class", "model": "omnidraft.vllm.OmniDraftProposer", "num_speculative_tokens": 8}
    server = serve(tmp_path_factory, target_dir, "proposer", speculative=spec, env=env)
    yield server, folder
    server.stop()


@pytest.fixture(scope="module")
def pair(smollm_tok, qwen_tok, drafter):
    return PairState(smollm_tok, qwen_tok, drafter.vocab_size, len(qwen_tok))


def _target(server, tok, sampling=SamplingConfig(), **kw) -> OpenAITarget:
    return OpenAITarget(server.url, server.key, None, tok, sampling, eos_ids={tok.eos_token_id}, **kw)


def _vllm_greedy(server, ids: list[int], n: int) -> list[int]:
    """vLLM generating alone, greedily: its own ids."""
    return server.complete(ids, n)[0]


def _vllm_sampled(server, ids: list[int], n: int, seed: int) -> list[int]:
    """vLLM's seeded sample at temperature 0.8: its ids."""
    return server.complete(ids, n, temperature=0.8, seed=seed)[0]


def test_greedy_speculative_output_is_vllms_own_in_one_request_per_verify(engine, drafter, pair, qwen_tok):
    target = _target(engine, qwen_tok)
    assert isinstance(target.wire, VllmWire) and target.model == "tiny"  # told apart by /models' owned_by
    for prompt in PROMPTS:
        ids = qwen_tok(prompt, add_special_tokens=False).input_ids
        own = _vllm_greedy(engine, ids, 24)
        target = _target(engine, qwen_tok)
        out = generate_speculative(drafter.fork(), target, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(4),
                                   max_new_tokens=24)
        assert out.token_ids == own[: len(out.token_ids)] and len(out.token_ids) == len(own), prompt
        assert target.evaluations == out.metrics["steps"]  # each verify one request: every row is exact


def test_point_mass_sampling_at_temperature_1_is_the_engines_law(engine, qwen_tok):
    """A draft the engine gives a middling probability (its 4th likeliest), verified 600 times:
    accepted or corrected, each outcome counted against the law vLLM's prompt log-probabilities state."""
    prefix = qwen_tok(PROMPTS[0], add_special_tokens=False).input_ids
    target = _target(engine, qwen_tok, SamplingConfig(temperature=1.0, seed=5))
    probe = target.wire.verify(prefix + [0], 1, temperature=0.0, seed=0)[0][0]  # the law after ``prefix``
    law = dict(sorted(probe.known.items(), key=lambda kv: -kv[1])[:20])
    d = list(law)[3]
    draws, seen = 600, Counter()
    for _ in range(draws):
        target.start(prefix)
        v = target.verify([d])
        seen[d if v.accepted else v.token] += 1
    cells = [i for i, p in law.items() if p * draws >= 5]
    obs = [seen[i] for i in cells] + [draws - sum(seen[i] for i in cells)]
    exp = [law[i] * draws for i in cells]
    exp.append(draws - sum(exp))
    assert len(cells) >= 4 and stats.chisquare(obs, exp).pvalue > 1e-4, seen.most_common(6)


def test_sampling_at_other_settings_is_the_engines_own_sampling(engine, qwen_tok):
    """Temperature 0.7, top-p 0.9: the pair's outcomes against vLLM's own samples at those settings
    (each position sampled by the engine, the draft kept where its sample equals it)."""
    prefix = qwen_tok(PROMPTS[1], add_special_tokens=False).input_ids
    target = _target(engine, qwen_tok, SamplingConfig(temperature=0.7, top_p=0.9, seed=4))
    own = Counter(target.wire.sample(prefix, temperature=0.7, top_p=0.9, seed=1000 + i)[0] for i in range(400))
    d = own.most_common(2)[1][0]
    ours = Counter()
    for _ in range(400):
        target.start(prefix)
        v = target.verify([d])
        ours[d if v.accepted else v.token] += 1
    cells = [i for i, _ in own.most_common() if own[i] + ours[i] >= 10]
    table = [[own[i] for i in cells] + [400 - sum(own[i] for i in cells)],
             [ours[i] for i in cells] + [400 - sum(ours[i] for i in cells)]]
    table = [row for row in zip(*table) if sum(row)]  # drop an empty "rest" column
    assert len(cells) >= 3 and stats.chi2_contingency(list(zip(*table))).pvalue > 1e-4, (own, ours)


def test_a_shifted_prompt_logprobs_reply_is_refused(engine, qwen_tok, monkeypatch):
    target = _target(engine, qwen_tok)
    call = target.http.call

    def shifted(method, path, body=None):
        out = call(method, path, body)
        if body and body.get("prompt_logprobs"):
            entries = out["choices"][0]["prompt_logprobs"]
            out["choices"][0]["prompt_logprobs"] = [None] + entries[:-1]  # each row one position late
        return out
    monkeypatch.setattr(target.http, "call", shifted)
    prefix = qwen_tok(PROMPTS[0], add_special_tokens=False).input_ids
    target.start(prefix)
    best = _vllm_greedy(engine, prefix, 2)
    with pytest.raises(BadReply):
        target.verify(best[:1] + [best[1] + 1])


def test_omnidraft_inside_vllm_is_vllms_own_greedy_output(engine, with_proposer, qwen_tok):
    server, folder = with_proposer
    prompts = PROMPTS + ["a = [1, 2, 3]\nb = [1, 2, 3]\na = [1, 2, 3]\nb = [1, 2, 3]\na = [1, 2,",
                         "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n\ndef h(x):\n"]
    for prompt in prompts:
        ids = qwen_tok(prompt, add_special_tokens=False).input_ids
        assert _vllm_greedy(server, ids, 48) == _vllm_greedy(engine, ids, 48), prompt
    ids = qwen_tok(prompts[3], add_special_tokens=False).input_ids  # sampled: vLLM's own sampler, no drafts
    before = server.total(server.metrics(), "vllm:spec_decode_num_draft_tokens_total")
    assert _vllm_sampled(server, ids, 32, seed=7) == _vllm_sampled(engine, ids, 32, seed=7)
    assert server.total(server.metrics(), "vllm:spec_decode_num_draft_tokens_total") == before
    counts = server.metrics()
    assert server.total(counts, "vllm:spec_decode_num_draft_tokens_total") > 0  # vLLM verified the drafts
    assert server.total(counts, "vllm:spec_decode_num_accepted_tokens_total") > 0
    state = json.loads((folder / "stats.json").read_text())
    assert state["requests"] >= len(prompts) - 1 and state["rounds"]["lookup"] > 0  # copies on repetitive text
    assert any((folder / "home" / "pairs").rglob("ngrams.sqlite"))  # the pair's state, in its home
    # the requests that ended are in the pair's memory: the same prompt again is recalled, still vLLM's own output
    assert state["ended"] >= 1 and any((folder / "home" / "pairs").rglob("memory.sqlite"))
    ids = qwen_tok(prompts[2], add_special_tokens=False).input_ids
    assert _vllm_greedy(server, ids, 48) == _vllm_greedy(engine, ids, 48)
    _vllm_greedy(server, qwen_tok("x", add_special_tokens=False).input_ids, 2)  # a new request: the last reported
    state = json.loads((folder / "stats.json").read_text())
    assert state["rounds"]["memory"] > 0 and state["memory"]["lookups"] > 0, state


def test_the_vllm_suites_rows_are_vllms_own_output_and_count_what_vllm_verified(engine, with_proposer, qwen_tok):
    """`omnidraft bench vllm`'s rows (bench/vllm_rows.py) on these servers: greedy, vLLM's own ids
    with and without the proposer; the drafted, accepted and by-position counts vLLM's /metrics
    moved by during the request; sampled, vLLM's own seeded sample."""
    from dataclasses import replace

    from omnidraft.bench.rows import Prompt
    from omnidraft.bench.vllm_rows import VllmRow

    server, folder = with_proposer
    prompt = Prompt("code", "a = [1, 2, 3]\nb = [1, 2, 3]\na = [1, 2, 3]\nb = [1, 2, 3]\na = [1, 2,", False, seed=7)
    ids = qwen_tok(prompt.text, add_special_tokens=False).input_ids
    alone, proposed = VllmRow("vllm", engine, qwen_tok), VllmRow("vllm + omnidraft proposer", server, qwen_tok)
    a, p = alone.run(prompt, 32), proposed.run(prompt, 32)
    assert a.ids == p.ids == _vllm_greedy(engine, ids, 32) and a.tokens == len(a.ids)
    assert a.figures["drafted"] == 0 and a.figures["forwards"] == a.tokens
    # what vLLM verified, counted (how much of it it kept is the cost model's affair: after the earlier tests'
    # requests it may have learnt that this random target rarely keeps a copy)
    stats = folder / "stats.json"
    why = json.loads(stats.read_text()) if stats.is_file() else None  # the proposer's report, for a failure's message
    assert 0 <= p.figures["accepted"] <= p.figures["drafted"] and p.figures["drafted"] > 0, (p.figures, why)
    assert sum(p.figures["by_position"]) == p.figures["accepted"]
    assert p.figures["forwards"] == p.tokens - p.figures["accepted"]
    assert alone.run(replace(prompt, sampling=(0.8, 1.0)), 16).ids == _vllm_sampled(engine, ids, 16, seed=7)


def test_the_local_fallback_continues_exactly_when_vllm_is_killed(engine, target_dir, drafter, pair, qwen_tok):
    """Last in the module: it kills the plain server."""
    from transformers import AutoModelForCausalLM

    prompt = PROMPTS[2]
    own = _vllm_greedy(engine, qwen_tok(prompt, add_special_tokens=False).input_ids, 32)
    remote = _target(engine, qwen_tok, retries=0, timeout=10)
    verify = remote.verify

    def killed_after_three(proposal, q=None):
        if remote.evaluations >= 3 and engine.process.poll() is None:
            engine.kill()  # kill -9 of the API server, its engine core and worker
        return verify(proposal, q)
    remote.verify = killed_after_three
    local = CausalLM(AutoModelForCausalLM.from_pretrained(str(target_dir)).eval())
    target = FallbackTarget(remote, LocalTarget(local, SamplingConfig(), stream="fallback"))
    out = generate_speculative(drafter.fork(), target, pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(4),
                               max_new_tokens=32)
    assert target.fell_back and out.token_ids == own
