"""The cost model (pairs/cost.py): expected tokens per round, the choice of k (0 when no draft
length beats plain decoding), v(n) between measured widths; timing through an LM's own
extend/rollback without disturbing its cache (pairs/timing.py); and where it is kept
(pairs/cost_store.py)."""

import pytest

from omnidraft.cli import main
from omnidraft.device.cpu import cpu_info
from omnidraft.pairs.cost import CostModel
from omnidraft.pairs.cost_store import CostRecord, load, write
from omnidraft.pairs.timing import time_calls

from ..conftest import tiny


def test_expected_tokens_per_round():
    assert CostModel.expected_tokens([1.0], 3) == 4.0
    assert CostModel.expected_tokens([0.5], 2) == pytest.approx(1.75)
    assert CostModel.expected_tokens([0.8, 0.5], 3) == pytest.approx(1 + 0.8 + 0.4 + 0.2)
    assert CostModel.expected_tokens([], 4) == 1.0


def test_choose_falls_back_to_plain_decoding_when_verification_does_not_batch():
    """v(n) = n * v(1) (an AVX2 CPU on transformers, say): no k pays, whatever the acceptance."""
    linear = CostModel({n: 10.0 * n for n in (1, 2, 4, 8)}, drafter_ms=1.0)
    k, tps = linear.choose([0.9], k_max=6)
    assert k == 0 and tps == pytest.approx(100.0)


def test_choose_drafts_when_verification_is_cheap():
    flat = CostModel({1: 10.0, 2: 10.5, 4: 11.0, 8: 14.0}, drafter_ms=1.0)
    k, tps = flat.choose([0.8], k_max=8)
    assert k > 0 and tps > 1e3 / 10.0
    assert tps == pytest.approx(max(flat.tokens_per_s([0.8], j) for j in range(9)))
    worse = CostModel(flat.verify_ms, drafter_ms=1.0, translate_ms=50.0)  # a slow translator
    assert worse.choose([0.8])[0] == 0


def test_rounds_slower_than_timed_teach_the_model_their_extra_cost():
    """Drafting that pays on paper (call-by-call timings) but not in the rounds generations run
    (the loop, verification, reverse translation, n-gram learning) is seen not to pay."""
    m = CostModel({1: 10.0, 2: 10.5, 3: 11.0}, drafter_ms=2.0)
    assert m.choose([0.6], k_max=2)[0] > 0  # k = 1: 1.6 tokens for 12.5 ms against 1 for 10 ms
    for _ in range(200):  # plain rounds take 1.1x their timed call; drafted ones 8 ms more than that
        m.observe_round(1, 0, 0, 1.1 * m.v(1) / 1e3)
        m.observe_round(2, 1, 0, (1.1 * m.round_ms(2, 1) + 8.0) / 1e3)
    assert m.pace == pytest.approx(1.1, abs=1e-3) and m.drafted_extra_ms == pytest.approx(8.0, abs=0.01)
    assert m.tokens_per_s([], 0) == pytest.approx(1e3 / 11.0, rel=1e-3)
    assert m.choose([0.6], k_max=2)[0] == 0  # k = 1: 1.6 tokens for 21.75 ms against 1 for 11: the target alone
    m.observe_round(2, 1, 0, 5.0)  # a 5-second stall moves the estimate by a bounded step
    assert m.drafted_extra_ms < 8.0 + 0.05 * 2 * 1.1 * m.round_ms(2, 1) + 0.01


def test_a_machine_slowing_down_in_plain_rounds_slows_drafting_alike():
    """The target alone decoding on a busier machine (its rounds 1.5x their timed call) is not a
    reason to start drafting: the drafted rounds it has not run are priced at the same pace, so
    the choice between them stays where it was."""
    m = CostModel({1: 10.0, 2: 14.0, 3: 15.0}, drafter_ms=2.0)
    assert m.choose([0.6], k_max=2)[0] == 0  # k = 1: 1.6 tokens for 16 ms against 1 for 10: no faster
    for _ in range(100):
        m.observe_round(1, 0, 0, 1.5 * m.v(1) / 1e3)
    assert m.pace == pytest.approx(1.5, abs=0.01) and m.choose([0.6], k_max=2)[0] == 0
    assert m.tokens_per_s([0.6], 1) / m.tokens_per_s([], 0) == pytest.approx(1.6 * 10.0 / 16.0, rel=1e-3)


def test_prompt_reads_teach_the_prefill_price():
    """A prompt is priced from the timed calls (past the widest, at its ms per id); reads measured
    cheaper (wider calls than timed) or dearer (a busier machine) move the price, one read a
    bounded step."""
    m = CostModel({1: 10.0, 8: 16.0, 32: 64.0}, drafter_ms=1.0)
    assert m.prefill_ms(0) == 0.0 and m.prefill_ms(8) == 16.0 and m.prefill_ms(320) == pytest.approx(640.0)
    for _ in range(40):  # 320-id prompts read in 448 ms: 0.7 of their price
        m.observe_prefill(320, 0.448)
    assert m.prefill_scale == pytest.approx(0.7, abs=1e-3) and m.prefill_ms(320) == pytest.approx(448.0, rel=1e-3)
    before = m.prefill_scale
    m.observe_prefill(320, 60.0)  # a one-minute stall: read as 4x the price, weighed 0.2
    assert m.prefill_scale == pytest.approx(0.8 * before + 0.2 * 4.0)
    stalled = m.prefill_scale
    m.observe_prefill(0, 1.0)  # nothing read: nothing learnt
    assert m.prefill_scale == stalled


def test_generations_teach_how_their_decoding_compares_with_the_prediction():
    """Decoding measured twice as fast as its drafts predicted (copies) halves the scale step by
    step; a stall is bounded, and a generation too short to say anything is left out."""
    m = CostModel({1: 10.0, 8: 16.0}, drafter_ms=1.0)
    for _ in range(60):  # 64 tokens predicted at 50 tokens/s, decoded in 0.64 s: 0.5 of the prediction
        m.observe_decode(50.0, 64, 0.64)
    assert m.decode_scale == pytest.approx(0.5, abs=1e-3)
    before = m.decode_scale
    m.observe_decode(50.0, 64, 600.0)  # a ten-minute stall: read as 4x, weighed 0.2
    assert m.decode_scale == pytest.approx(0.8 * before + 0.2 * 4.0)
    stalled = m.decode_scale
    m.observe_decode(50.0, 3, 0.001)  # three tokens: left out
    assert m.decode_scale == stalled


def test_each_kind_of_work_learns_its_own_decoding_from_the_route_estimate_it_starts_at(tmp_path):
    """Edits of pasted text copy, completions do not: each kind's scale starts at the route's,
    moves by 1/2 then 1/3 on its first generations, and a kind never seen is forecast at the
    route's scale over every generation."""
    m = CostModel({1: 10.0, 8: 16.0}, drafter_ms=1.0)
    for _ in range(20):  # completions decode as their drafts predict
        m.observe_decode(50.0, 64, 64 / 50.0, "completion")
    assert m.decode_scale_for("completion") == pytest.approx(1.0)
    m.observe_decode(50.0, 64, 0.5 * 64 / 50.0, "chat, long turn")  # an edit: copies, half the time
    assert m.decode_scale_for("chat, long turn") == pytest.approx(0.75)  # from 1.0, by 1/2
    m.observe_decode(50.0, 64, 0.5 * 64 / 50.0, "chat, long turn")
    assert m.decode_scale_for("chat, long turn") == pytest.approx(0.75 * 2 / 3 + 0.5 / 3)
    assert m.decode_scale_for("completion") == pytest.approx(1.0)  # untouched by the edits
    assert m.decode_scale_for("chat") == m.decode_scale == pytest.approx(0.8 * 0.9 + 0.2 * 0.5)
    path = tmp_path / "cost.json"
    write(path, CostRecord(m, [], [], {"cpu": "x"}))
    assert load(path, {"cpu": "x"}).model.decode_scales == m.decode_scales  # kept with the cost model


def test_a_prompt_read_is_priced_from_the_timed_read_not_the_verify_calls():
    """A read computes the last row's logits only: past the widest timed width n ids cost n *
    read_ms; up to it v(n) less the LM-head rows a read skips (from the widest width's two
    timings), so the price is continuous there and one id costs v(1)."""
    m = CostModel({1: 10.0, 8: 24.0, 32: 72.0}, drafter_ms=1.0, read_ms=1.5)  # a read of 32: 48 ms
    head = (72.0 - 48.0) / 31
    assert m.prefill_ms(320) == pytest.approx(480.0) and m.prefill_ms(32) == pytest.approx(48.0)
    assert m.prefill_ms(8) == pytest.approx(24.0 - 7 * head) and m.prefill_ms(1) == pytest.approx(10.0)
    assert m.prefill_ms(33) == pytest.approx(49.5)
    untimed = CostModel({1: 10.0, 8: 24.0, 32: 72.0}, drafter_ms=1.0)  # saved before reads were timed
    assert untimed.prefill_ms(320) == pytest.approx(720.0) and untimed.prefill_ms(8) == 24.0


def test_verify_time_between_and_past_measured_widths():
    m = CostModel({1: 10.0, 4: 16.0, 8: 24.0}, drafter_ms=0.0)
    assert m.v(2) == pytest.approx(12.0) and m.v(6) == pytest.approx(20.0)
    assert m.v(10) == pytest.approx(28.0)  # the last slope, extended


def test_timing_leaves_the_cache_as_it_was():
    from omnidraft.models.eager import CausalLM

    lm = CausalLM(tiny("llama", 300))
    ms = time_calls(lm, 4, reps=3, context=16)
    assert ms > 0 and lm.length == 16


def test_timing_several_widths_reads_the_context_once_and_warms_up_once():
    from omnidraft.models.eager import CausalLM
    from omnidraft.pairs.timing import measure

    lm = CausalLM(tiny("llama", 300))
    fed = []
    extend = lm.extend
    lm.extend = lambda ids, **kw: (fed.append((len(ids), kw.get("last_only", False))), extend(ids, **kw))[1]
    m = measure(lm, None, (1, 2, 4), reps=2)
    # the 64-id context read once and a warm-up call; each later width re-feeds the context's last
    # id (a sync always feeds one), then 2 timed calls of that width, every row's logits; then 2
    # prompt reads at the widest width, the last row's only
    assert [n for n, _ in fed] == [64, 1, 1, 1, 1, 2, 2, 1, 4, 4, 1, 4, 4]
    assert [last for n, last in fed[1:] if n > 1] == [False] * 4 + [True] * 2
    assert m.read_ms > 0


def test_cpu_info_names_the_flags():
    info = cpu_info()
    assert info["cores"] >= 1 and isinstance(info["flags"], list)
    assert info["native_bf16"] in (True, False)


def test_cost_command_rejects_bad_widths(capsys):
    assert main(["cost", "--target", "qwen2.5-coder-0.5b", "--widths", "1,x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--widths" in err[0]


def test_a_pairs_cost_model_is_kept_only_for_what_it_was_measured_on(tmp_path):
    m = CostModel({1: 10.0, 4: 12.0}, drafter_ms=2.0, translate_ms=0.5, drafted_extra_ms=3.0, pace=1.1,
                  prefill_scale=0.7, decode_scales={"chat": [0.8, 3]})
    on = {"target_runtime": "executorch 8da8w", "drafter_runtime": "executorch 8da8w", "cpu": "X", "threads": 2}
    write(tmp_path / "cost.json", CostRecord(m, [10.0, 5.0], [8.0, 2.5], on))
    got = load(tmp_path / "cost.json", on)
    assert got == CostRecord(m, [10.0, 5.0], [8.0, 2.5], on)
    assert load(tmp_path / "cost.json", {**on, "cpu": "Y"}) is None  # another machine measures its own
    assert load(tmp_path / "cost.json", {**on, "target_runtime": "transformers bf16"}) is None
    assert load(tmp_path / "missing.json", on) is None
    # a file an older version kept, without the fields learnt since: read with their defaults
    (tmp_path / "old.json").write_text('{"model": {"verify_ms": {"1": 9.0}, "drafter_ms": 2.0}, "on": {"cpu": "X"}}')
    assert load(tmp_path / "old.json", {"cpu": "X"}) == CostRecord(CostModel({1: 9.0}, 2.0), [], [], {"cpu": "X"})


def test_copies_are_only_as_long_as_a_measured_width():
    """Verification costs rise in steps (GEMM row tiles): an interpolated width may cost the next
    step's price, so a copy of n ids is proposed only where v(n + 1) was timed."""
    m = CostModel({1: 10.0, 4: 13.0, 13: 37.0}, drafter_ms=1.0)
    assert m.copy_lengths(10) == [3] and m.copy_lengths(12) == [3, 12] and m.copy_lengths(2) == []
    assert m.copy_lengths(12) == [n for n in range(1, 13) if n + 1 in m.verify_ms]


def test_a_saved_model_without_every_width_or_a_read_is_measured_again_with_its_counts_kept(tmp_path, monkeypatch):
    from omnidraft.pairs import cost_store, spec
    from omnidraft.pairs.timing import WIDTHS

    on = {"cpu": "X", "target_runtime": "r"}
    monkeypatch.setattr(spec, "pair_dir", lambda name: tmp_path)
    monkeypatch.setattr(cost_store, "measured_on", lambda *a: on)
    monkeypatch.setattr(cost_store, "runtime_name", lambda *a: "r")
    write(tmp_path / "cost.json", CostRecord(CostModel({1: 10.0, 4: 12.0}, drafter_ms=2.0), [10.0], [8.0], on))
    timed = CostModel({w: 10.0 + w for w in WIDTHS}, drafter_ms=2.0, read_ms=0.5)
    monkeypatch.setattr(cost_store, "measure", lambda *a, **kw: timed)
    dl, kept = cost_store.for_pair("p", None, None, "fp32")
    assert dl.model == timed and dl.reached == [10.0] and dl.accepted == [8.0]
    assert load(kept.path, on).model == timed  # kept for the next session
    dl.model.pace = 2.0  # learning after the load does not move the record the Session merges from
    assert kept.base.model == timed
    # every width but no timed prompt read (saved before reads were timed): measured again too
    write(kept.path, CostRecord(CostModel(dict(timed.verify_ms), drafter_ms=2.0), [10.0], [8.0], on))
    assert cost_store.for_pair("p", None, None, "fp32")[0].model == timed
    assert load(kept.path, on).model == timed


def test_stop_thresholds_price_drafting_on_against_its_cost():
    """After n drafts, drafting on pays when the chance all n are accepted times the tokens the
    longer draft adds beats what its ms would commit at the long-run rate; a wider call that
    jumps in cost (here width 5) ends drafts before it, and one measured cheaper than a narrower
    one is not taken as cheaper."""
    m = CostModel({1: 50.0, 2: 50.0, 3: 50.0, 4: 50.0, 5: 70.0, 6: 70.0}, drafter_ms=5.0)
    below = m.stop_below([0.8], rate=30.0, k_max=5)
    # n = 1, 2: one more draft adds 0.8 tokens per unit of c_n for 5 ms: 30 * 5 / (1e3 * 0.8)
    # n = 3: the 4th draft needs width 5 (+20 ms): best over m = 4 (25 ms / 0.8) and m = 5 (30 ms / 1.44)
    # n = 4: width 5 -> 6 costs nothing more: 5 ms / 0.8 again
    assert below == pytest.approx([0.1875, 0.1875, 30 * 30 / (1e3 * 1.44), 0.1875])
    richer = m.stop_below([0.8], rate=60.0, k_max=5)  # a faster long run asks more of each draft
    assert all(r >= t for r, t in zip(richer, below))
    dip = CostModel({1: 50.0, 2: 50.0, 3: 40.0, 4: 50.0}, drafter_ms=5.0)  # width 3 measured cheap
    assert dip.stop_below([0.8], rate=30.0, k_max=3)[0] == pytest.approx(30 * 5 / 800)
