"""Which target runtime runs a generation when a Session keeps two (pairs/routing.py): the one
predicted to end first, counting the prompt ids its cache lacks at its wide-call cost; and a
Session routing generations between two runtimes keeps each one's output the target's own."""

import copy
import json

import pytest

from omnidraft.decode.draft_length import CostModelK
from omnidraft.decode.generate import generate_ar
from omnidraft.decode.target import LocalTarget
from omnidraft.pairs.cost import CostModel
from omnidraft.pairs.cost_store import CostFile
from omnidraft.pairs.routing import Route, choose, forecast, kind, observe, warm
from omnidraft.pairs.settings import Runtime

from ..conftest import save_tiny, tiny, vocab_len

# the 1.5B on the 2-core EPYC, rounded: llama.cpp decodes faster, the program reads wide calls far cheaper
PROGRAM = CostModel({1: 38.0, 2: 40.0, 8: 48.0, 32: 60.0}, drafter_ms=10.0)
LLAMACPP = CostModel({1: 30.0, 2: 57.0, 8: 219.0, 32: 670.0}, drafter_ms=10.0)


class Cache:  # an LM's cache and window as routing reads and fills them
    def __init__(self, tokens=(), max_length=4096):
        self.tokens, self.max_length = list(tokens), max_length

    def truncate(self, n):
        del self.tokens[n:]

    def extend(self, ids, **_):
        self.tokens += ids


def route(name: str, model: CostModel, cached=()) -> Route:
    return Route(name, LocalTarget(Cache(cached)), CostModelK(copy.deepcopy(model)))


def test_a_long_prompt_goes_to_the_cheap_wide_calls_and_a_short_one_to_the_fast_decoder():
    program, llama = route("executorch", PROGRAM), route("llamacpp", LLAMACPP)
    short, long = list(range(20)), list(range(300))
    assert choose([program, llama], short, 64)[0] is llama  # 20 ids: llama.cpp's faster tokens win
    best, times = choose([program, llama], long, 64)
    assert best is program and times["llamacpp"] > times["executorch"]  # 300 ids: 6.3 s of prefill vs 0.6
    cached = route("llamacpp", LLAMACPP, cached=long[:290])  # llama.cpp already holds most of it
    assert choose([program, cached], long, 64)[0] is cached


def test_the_forecast_prices_only_the_ids_the_cache_lacks():
    long = list(range(300))
    cold, warm = route("executorch", PROGRAM), route("executorch", PROGRAM, cached=long[:290])
    assert forecast(cold, long)["prefill_ms"] == pytest.approx(300 * 60.0 / 32)
    assert forecast(warm, long)["prefill_ms"] == PROGRAM.v(10)  # the 10 ids past the cached 290
    assert forecast(warm, long)["prompt_ids_read"] == 10
    assert forecast(cold, long)["tokens_per_s"] == cold.draft_length.predicted


def test_a_runtime_not_chosen_yet_is_not_priced_for_the_preamble_the_other_holds(qwen_tok):
    from omnidraft.decode.text import chat_preamble, encode_prompt
    from omnidraft.models.lm import common_prefix

    preamble = chat_preamble(qwen_tok)
    prompt = encode_prompt(qwen_tok, "Explain what a closure is.", chat=True)
    assert 10 < len(preamble) < len(prompt) and prompt[:len(preamble)] == preamble
    assert common_prefix(preamble, encode_prompt(qwen_tok, "Hi", chat=True)) == len(preamble)
    program, llama = route("executorch", PROGRAM, cached=preamble), route("llamacpp", LLAMACPP)
    assert choose([program, llama], prompt, 64)[0] is program  # llama.cpp priced for the system prompt
    warm([program.target.model, llama.target.model], preamble)
    assert llama.target.model.tokens == preamble
    assert choose([program, llama], prompt, 64)[0] is llama  # only the question left: the faster decoder


def test_only_a_window_that_holds_the_prompt_and_budget_is_chosen():
    program = Route("executorch", LocalTarget(Cache(max_length=256)), CostModelK(copy.deepcopy(PROGRAM)))
    llama = route("llamacpp", LLAMACPP)
    assert choose([program, llama], list(range(300)), 64)[0] is llama  # the program's 256 cannot hold it
    narrow = Route("llamacpp", LocalTarget(Cache(max_length=128)), CostModelK(copy.deepcopy(LLAMACPP)))
    assert choose([program, narrow], list(range(300)), 64)[0] is program  # neither: the widest window


def test_learnt_round_costs_move_the_choice():
    program, llama = route("executorch", PROGRAM), route("llamacpp", LLAMACPP)
    prompt = list(range(10))
    assert choose([program, llama], prompt, 64)[0] is llama
    for _ in range(200):  # llama.cpp's rounds turn out 20 ms dearer than timed (a busy neighbour)
        llama.draft_length.observe_round(1, 0, 0, 0.050)
    assert choose([program, llama], prompt, 64)[0] is program


def test_a_route_whose_generations_beat_their_drafts_prediction_wins_a_near_tie():
    """Copies from the context are known only once they happen: a route whose earlier generations
    decoded faster than its drafts predicted is forecast at what it measured, and takes the next
    prompt it would have lost on drafts alone."""
    program, llama = route("executorch", PROGRAM), route("llamacpp", LLAMACPP)
    prompt = list(range(20))
    assert choose([program, llama], prompt, 64)[0] is llama
    f = forecast(program, prompt)
    assert f["tokens_per_s"] == f["drafts_tokens_per_s"] == program.draft_length.predicted
    for _ in range(10):  # the program's generations decoded in 0.6 of their predicted time (copies)
        observe(program, forecast(program, prompt), {"prefill_s": 0.5, "wall_s": 0.5 + 0.6 * 64 / f["tokens_per_s"],
                                                      "new_tokens": 64})
    assert forecast(program, prompt)["tokens_per_s"] == pytest.approx(f["tokens_per_s"] / 0.6, rel=0.1)
    assert choose([program, llama], prompt, 64)[0] is program


def test_an_edit_of_pasted_text_is_forecast_at_what_edits_took_not_what_completions_took(qwen_tok):
    """bench/results/llamacpp-20261127-2309: a copy-heavy prompt went to llama.cpp, forecast from
    drafts, where the program's copies would have run it far faster. Each kind of work is forecast
    from the route's generations of that kind: after a few edits that copied (the program's
    decoding at 0.4 of its drafts' prediction) and completions that did not, the next edit goes to
    the program and the next completion is forecast as before."""
    from omnidraft.decode.text import chat_preamble, encode_prompt

    preamble = chat_preamble(qwen_tok)
    edit = encode_prompt(qwen_tok, "Rename `f` to `g`:\n" + "def f(a, b):\n    return a + b\n" * 8, chat=True)
    question = encode_prompt(qwen_tok, "What is a closure?", chat=True)
    assert kind(edit, preamble, True) == "chat, long turn" and kind(question, preamble, True) == "chat"
    assert kind(edit, preamble, False) == "completion"
    program, llama = route("executorch", PROGRAM), route("llamacpp", LLAMACPP)
    work = kind(edit, preamble, True)
    for r in (program, llama):  # both hold the prompt
        r.target.model.tokens = list(edit[:-1])
    assert choose([program, llama], edit, 64, work)[0] is llama  # drafts alone: llama.cpp decodes faster

    def generations(name: str, took: float) -> None:  # three, taking ``took`` of their drafts' prediction
        for _ in range(3):
            f = forecast(program, edit, name)
            observe(program, f, {"prefill_s": 0.0, "wall_s": took * 64 / f["drafts_tokens_per_s"], "new_tokens": 64},
                    name)

    generations("completion", 1.0)
    completion = forecast(program, edit, "completion")["tokens_per_s"]
    assert completion == pytest.approx(program.draft_length.predicted)
    generations(work, 0.4)
    assert choose([program, llama], edit, 64, work)[0] is program
    assert forecast(program, edit, "completion")["tokens_per_s"] == pytest.approx(completion)


def test_a_session_routing_generations_keeps_each_the_targets_output(tmp_path, monkeypatch, smollm_tok, qwen_tok):
    from omnidraft import Session

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    drafter = save_tiny(tiny("llama", vocab_len(smollm_tok), seed=11), smollm_tok, tmp_path / "drafter")
    target = save_tiny(tiny("qwen2", vocab_len(qwen_tok), seed=12), qwen_tok, tmp_path / "target")
    s = Session(str(drafter), str(target), runtime=Runtime(dtype="fp32"), log=False)
    # two runtimes over the same weights, priced like the program and llama.cpp above
    second = LocalTarget(copy.deepcopy(s.target.model), s.sampling, s.verify)
    s.router.routes = [
        Route("executorch", s.target, CostModelK(copy.deepcopy(PROGRAM)), CostFile(tmp_path / "p.json", {})),
        Route("llamacpp", second, CostModelK(copy.deepcopy(LLAMACPP)), CostFile(tmp_path / "l.json", {}))]
    ref = LocalTarget(copy.deepcopy(s.target.model))
    short, long = "Hi", "def add(a, b):\n    " * 40
    # the third: both routes have learnt from this machine's timing of the same tiny model (a near
    # tie), so whichever is then predicted to end first
    for prompt, runtime in ((short, "llamacpp"), (long, "executorch"), (short, None)):
        got = s.generate(prompt, max_new_tokens=16)
        predicted = got.metrics["predicted_ms"]
        assert set(predicted) == {"executorch", "llamacpp"}
        runtime = runtime or min(predicted, key=predicted.get)
        assert got.metrics["target_runtime"] == runtime
        assert got.metrics["work"] == "completion"
        f = got.metrics["forecast"]  # the chosen route's prediction, as it stood before the generation
        assert got.metrics["predicted_ms"][runtime] == pytest.approx(f["prefill_ms"] + 16e3 / f["tokens_per_s"],
                                                                     abs=0.2)
        assert got.token_ids == generate_ar(ref, s.target_tok, prompt, max_new_tokens=16).token_ids
    assert (tmp_path / "l.json").is_file() and (tmp_path / "p.json").is_file()  # each runtime's costs kept
    for r in s.router.routes:  # each learnt from its prompt reads and decoding, and kept them
        m = r.draft_length.model
        assert m.prefill_scale != 1.0 and m.decode_scale != 1.0 and set(m.decode_scales) == {"completion"}
        assert json.loads(r.cost.path.read_text())["model"]["decode_scale"] == pytest.approx(m.decode_scale)
    s.close()


def test_a_route_that_has_not_run_a_kind_of_work_runs_it_once_when_forecast_near_the_best():
    """bench/results/llamacpp-20261128-1528: every chat prompt went to the program, forecast from
    what code completions had taught it (12.4 tokens/s) while it decoded 10.9 and the pair on
    llama.cpp ran 1.09x llama.cpp alone: llama.cpp, forecast a little slower, never ran a chat
    prompt, so its forecast was never corrected. A route not yet measured on a kind runs it once
    where forecast within TRY of the best; then both decide on what they measured."""
    from omnidraft.pairs.routing import TRY

    prompt = list(range(20))
    program, llama = route("executorch", PROGRAM, prompt[:-1]), route("llamacpp", LLAMACPP, prompt[:-1])
    assert choose([program, llama], prompt, 64, "chat")[0] is llama  # neither has run chat: the forecast
    f = forecast(llama, prompt, "chat")
    observe(llama, f, {"prefill_s": 0.0, "wall_s": 1.3 * 64 / f["drafts_tokens_per_s"], "new_tokens": 64}, "chat")
    near = choose([program, llama], prompt, 64, "chat")[1]
    assert near["llamacpp"] < near["executorch"] < near["llamacpp"] * (1 + TRY)  # llama.cpp ran 1.3x its forecast
    assert choose([program, llama], prompt, 64, "chat")[0] is program  # so the program runs chat once
    assert choose([program, llama], prompt, 7, "chat")[0] is llama  # (not where too short to teach it)
    f = forecast(program, prompt, "chat")
    observe(program, f, {"prefill_s": 0.0, "wall_s": 1.5 * 64 / f["drafts_tokens_per_s"], "new_tokens": 64}, "chat")
    assert choose([program, llama], prompt, 64, "chat")[0] is llama  # it ran 1.5x its forecast: llama.cpp again
    far = route("executorch", CostModel({1: 60.0, 2: 62.0, 8: 70.0, 32: 82.0}, drafter_ms=10.0), cached=prompt[:-1])
    assert choose([far, llama], prompt, 64, "chat")[0] is llama  # forecast far slower: not tried


def test_a_route_priced_wrong_for_a_kind_of_work_is_retried_once_in_probe_every_generations():
    """A route whose price for a kind was learnt high from a few unlucky generations is not chosen
    for that kind again by its forecast; once it has run fewer than one in PROBE_EVERY of the
    kind's generations (the counts the cost models keep, so across Sessions too) it runs the next
    one; a budget too short to teach anything does not probe, nor does another kind."""
    from omnidraft.pairs.router import PROBE_EVERY, Router

    program, llama = route("executorch", PROGRAM), route("llamacpp", LLAMACPP)
    program.draft_length.model.decode_scales["chat"] = [4.0, 2]  # priced 4x slow for chat, from 2 generations
    llama.draft_length.model.decode_scales["chat"] = [1.0, 2 * PROBE_EVERY - 2]
    router = Router([program, llama])
    prompt = list(range(20))
    assert router.pick(prompt, 64, [], True, False).route.runtime == "llamacpp"  # 2 of 32: not yet
    llama.draft_length.model.decode_scales["chat"][1] += 1  # it ran there
    assert router.pick(prompt, 64, [], True, False).route.runtime == "executorch"  # 2 of 33: under 1 in 16
    assert router.pick(prompt, 4, [], True, False).route.runtime == "llamacpp"  # 4 tokens: no probe
    assert router.pick(prompt, 64, [], False, False).route.runtime == "llamacpp"  # completions: never starved
    program.draft_length.model.decode_scales["chat"][1] += 1  # the probe ran: 3 of 34
    assert router.pick(prompt, 64, [], True, False).route.runtime == "llamacpp"


def test_a_router_probes_a_route_for_a_kind_at_most_once_in_probe_every_of_its_generations():
    """bench/results/bench-adapters-20261202-1232: two Sessions of one pair, each probing llama.cpp
    on two chat (or completion) prompts in a row: a route that ran far under one in PROBE_EVERY of a
    kind (after `omnidraft pair`), or whose count lags the other Session's generations merged into
    the other route's file, is still starved after its probe. However the counts stand, a Router
    probes a route for a kind once in PROBE_EVERY of the kind's generations; another kind keeps its
    own spacing."""
    from omnidraft.pairs.router import PROBE_EVERY, Router

    program, llama = route("executorch", PROGRAM), route("llamacpp", LLAMACPP)
    for work in ("chat", "completion"):  # the program priced 4x slow, and starved, for both kinds
        program.draft_length.model.decode_scales[work] = [4.0, 1]
        llama.draft_length.model.decode_scales[work] = [1.0, 10 * PROBE_EVERY]
    router = Router([program, llama])
    prompt = list(range(20))
    chats = [router.pick(prompt, 64, [], True, False) for _ in range(2 * PROBE_EVERY + 1)]  # counts never move
    assert [i for i, p in enumerate(chats) if p.probe] == [0, PROBE_EVERY, 2 * PROBE_EVERY]
    assert all(p.route is (program if p.probe else llama) for p in chats)
    assert router.pick(prompt, 64, [], False, False).probe  # a completion: its own first probe
    assert not router.pick(prompt, 64, [], False, False).probe


def test_what_a_probe_measures_moves_its_routes_price_for_the_kind_by_half():
    from omnidraft.pairs.router import PROBE_EVERY, Router

    program, llama = route("executorch", PROGRAM), route("llamacpp", LLAMACPP)
    program.draft_length.model.decode_scales["chat"] = [4.0, 10]  # priced 4x slow for chat
    llama.draft_length.model.decode_scales["chat"] = [1.0, 10 * (PROBE_EVERY - 1) + 1]  # 10 of 161: starved
    router = Router([program, llama])
    pick = router.pick(list(range(20)), 64, [], True, False)
    assert pick.route is program and pick.probe
    predicted = pick.forecast["drafts_tokens_per_s"]
    router.finish(pick, {"prefill_s": 0.0, "wall_s": 64 / predicted, "new_tokens": 64})  # ran as predicted: 1.0
    assert program.draft_length.model.decode_scales["chat"] == [pytest.approx(2.5), 11]  # not 4 -> 3.7
    assert not router.pick(list(range(20)), 64, [], True, False).probe  # 11 of 162: not starved
