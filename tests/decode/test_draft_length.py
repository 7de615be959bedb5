"""The draft length per round (decode/draft_length.py): the cost model's k re-estimated from the
acceptance rounds observe, falling to 0 (the target alone) when drafting stops paying, probing
again every few generations, and any k schedule leaving greedy output the target's own."""

import copy

import pytest

from omnidraft.decode.draft_length import CostModelK, FixedK
from omnidraft.decode.generate import generate_ar, generate_speculative
from omnidraft.decode.target import LocalTarget
from omnidraft.pairs.cost import CostModel
from omnidraft.propose.config import SpecConfig

# a generation teaches its model what its rounds cost (observe_round): tests that decode take a copy
CHEAP = CostModel({1: 10.0, 2: 10.5, 4: 11.0, 8: 14.0, 9: 14.5}, drafter_ms=1.0)  # verification batches
LINEAR = CostModel({n: 10.0 * n for n in (1, 2, 4, 8, 9)}, drafter_ms=1.0)  # it does not


def test_cheap_verification_and_good_acceptance_draft():
    dl = CostModelK(CHEAP, reached=[100, 90], accepted=[90, 80])
    assert dl.next_k() > 0 and dl.state()["predicted_tokens_per_s"] > dl.state()["target_alone_tokens_per_s"]


def test_reaching_drafts_k_max_where_the_model_drafts_and_nothing_where_it_does_not():
    """A priced draft may run to k_max (the head's rule ends it); the model still says whether to
    draft, learns from every round, and a pinned k (pairing's measurement) stays exact."""
    dl = CostModelK(CHEAP, reached=[100, 90], accepted=[90, 80], k_max=6)
    assert 0 < dl.next_k() and dl.reaching().next_k() == 6
    dl.reaching().observe(6, 2)
    assert dl.reached[:3] == [101, 91, 1]
    with dl.fixed(3):
        assert dl.reaching().next_k() == 3
    alone = CostModelK(LINEAR, reached=[100], accepted=[95])
    assert alone.reaching().next_k() == 0


def test_verification_that_does_not_batch_runs_the_target_alone():
    dl = CostModelK(LINEAR, reached=[100], accepted=[95])
    dl.start()
    assert dl.next_k() == 0 and dl.state()["k"] == 0


def test_falling_acceptance_switches_to_the_target_alone():
    dl = CostModelK(CHEAP, reached=[20], accepted=[18], memory=64)
    assert dl.next_k() > 0
    for _ in range(200):  # every proposal rejected at its first token
        dl.observe(dl.next_k() or 4, 0)
    assert dl.next_k() == 0
    assert dl.reached[0] <= 64 + 1  # old evidence faded instead of piling up


def test_target_alone_probes_again_every_few_generations():
    dl = CostModelK(CHEAP, reached=[10], accepted=[0], probe_every=3, probe_rounds=8)
    assert dl.next_k() == 0
    dl.start()
    dl.start()
    assert dl.next_k() == 0  # not yet
    dl.start()  # the third generation since: probe
    assert dl.next_k() >= 1 and dl.state()["probing"]
    for _ in range(8):  # the drafter got much better (a new adapter, say)
        dl.observe(4, 4)
    assert not dl.state()["probing"] and dl.next_k() > 0  # and the model keeps drafting


def test_a_new_adapter_is_probed_at_the_next_generation():
    dl = CostModelK(CHEAP, reached=[100], accepted=[0])
    dl.start()
    assert dl.next_k() == 0
    dl.probe_soon()
    dl.start()
    assert dl.next_k() >= 1 and dl.state()["probing"]


def test_no_evidence_probes_first_and_pinning_measures():
    dl = CostModelK(CHEAP)
    assert dl.rates() == []
    dl.start()
    assert dl.next_k() >= 1  # nothing known: the first generation drafts to find out
    with dl.fixed(5):
        assert dl.next_k() == 5
        dl.observe(5, 3)
    assert dl.rates()[:4] == [1.0, 1.0, 1.0, 0.0] and dl.pinned is None and not dl.probe_left


def test_margin_keeps_a_marginal_win_off():
    """Predicted 2% faster is within the estimate's error: the target alone is kept."""
    m = CostModel({1: 10.0, 2: 19.0}, drafter_ms=0.0)
    rate = 0.02 * 19.0 / 10.0 + 19.0 / 10.0 - 1  # tokens_per_s(k=1) = 1.02 x plain
    assert m.tokens_per_s([rate], 1) == pytest.approx(1.02 * m.tokens_per_s([], 0))
    assert m.choose([rate], k_max=1)[0] == 0
    assert m.choose([rate], k_max=1, margin=1.0)[0] == 1


def test_once_on_drafting_stays_while_predicted_no_slower():
    """A marginal win (1.06x predicted) turns drafting on; one rejected round (1.04x) keeps it on
    (it would not turn it on); rounds that make it predicted slower than the target alone turn it off."""
    m = CostModel({1: 10.0, 2: 15.0}, drafter_ms=0.0)
    ratio = lambda acc, n: m.tokens_per_s([acc / n], 1) / m.tokens_per_s([], 0)  # noqa: E731
    dl = CostModelK(m, reached=[20], accepted=[11.8], k_max=1)
    assert ratio(11.8, 20) == pytest.approx(1.06) and dl.next_k() == 1
    dl.observe(1, 0)
    assert 1.0 < ratio(11.8, 21) < 1.05 and m.choose(dl.rates(), 1)[0] == 0
    assert dl.next_k() == 1  # still on
    for _ in range(6):
        dl.observe(1, 0)
    assert ratio(11.8, 27) < 1.0 and dl.next_k() == 0


def test_any_k_schedule_keeps_greedy_output_the_targets(cross):
    """k = 0 rounds (the target alone), changing k mid-generation and probing: lossless all the way."""
    d, t, pair = cross
    prompt = "def fibonacci(n):\n"
    ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=32)
    alone = generate_speculative(d, LocalTarget(t), pair, prompt, cfg=SpecConfig("omnidraft"), max_new_tokens=32,
                                 k=FixedK(0))
    assert alone.token_ids == ref.token_ids and alone.metrics["proposed"] == 0
    assert alone.metrics["target_forwards"] == len(ref.token_ids)

    class Zigzag(FixedK):  # 3, 0, 3, 0, ...: the drafter sits out rounds and catches up
        def next_k(self, unread=0, remaining=None):
            self.k = (self.k * 7 + 3) % 6
            return self.k

    for dl in (Zigzag(0), CostModelK(copy.deepcopy(CHEAP), reached=[10], accepted=[9])):
        got = generate_speculative(d, LocalTarget(t), pair, prompt, cfg=SpecConfig("omnidraft"), max_new_tokens=32,
                                   k=dl)
        assert got.token_ids == ref.token_ids


def test_rounds_that_cost_more_than_timed_turn_drafting_off(cross):
    """The loop reports each round's wall time; a model whose drafted rounds run far slower than
    its timings (here: timings that claim every call is nearly free) stops drafting."""
    d, t, pair = cross
    dl = CostModelK(copy.deepcopy(CHEAP), reached=[100, 90], accepted=[90, 80])
    dl.model.verify_ms = {w: ms / 1e3 for w, ms in dl.model.verify_ms.items()}  # 10 us a verify call
    dl.model.drafter_ms = 1e-4
    assert dl.next_k() > 0
    generate_speculative(d, LocalTarget(t), pair, "def fibonacci(n):\n", cfg=SpecConfig("omnidraft"),
                         max_new_tokens=48, k=dl)
    extra = dl.state()["drafted_extra_ms"]
    assert extra > 0  # what the rounds cost beyond the timed terms, learnt
    dl.model.pace = 1.0
    dl.model.drafted_extra_ms = 40 * extra  # as if drafting rounds were 40 times dearer
    dl.reestimate()
    assert dl.next_k() == 0


def test_a_copy_found_in_the_context_is_verified_where_the_cost_model_prefers_it():
    dl = CostModelK(CHEAP, reached=[100, 90], accepted=[60, 40])  # drafting pays a little
    span = dl.lookup_span(4, 12)  # no evidence about copies: the hopeful prior tries one
    assert 1 <= span <= 12
    for _ in range(40):  # copies after a 4-id match keep failing at their first id
        dl.observe_lookup(4, span, 0)
    assert dl.lookup_span(4, 12) == 0  # so the drafter drafts
    assert dl.lookup_span(7, 12) > 0  # other match lengths are judged apart
    for _ in range(40):  # copies after a 7-id match are accepted whole: longer spans pay
        dl.observe_lookup(7, 8, 8)
    assert dl.lookup_span(7, 12) >= 8 and dl.state()["lookup_acceptance"][7][0] > 0.9
    with dl.fixed(3):  # pairing measures the drafter: no copies
        assert dl.lookup_span(7, 12) == 0


def test_a_recalls_ids_are_priced_by_whether_earlier_occurrences_agreed_there():
    dl = CostModelK(CHEAP, reached=[100, 90], accepted=[60, 40])
    agree, split_at_3 = (1.0,) * 8, (1.0, 1.0, 1.0, 0.4, 1.0, 1.0, 1.0, 1.0)
    for _ in range(60):  # where the occurrences agreed the target kept the ids; where they split it did not
        dl.observe_lookup(8, 8, 8, source="memory", steps=agree)
        dl.observe_lookup(8, 8, 3, source="memory", steps=split_at_3)
    rates = dl.lookup_rates(8, "memory", steps=split_at_3)
    assert rates[1] > 0.9 and rates[3] < 0.2  # the split id priced by the splits seen, not by its position
    assert dl.lookup_span(8, 8, "memory", steps=agree) == 8
    assert dl.lookup_span(8, 8, "memory", steps=split_at_3) == 3  # verified up to the split
    assert dl.state()["memory_step_acceptance"]["memory:wide"] < 0.2
    # one sequence whose recalls keep failing prices its next recall's first id lower (work the memory does not know)
    assert dl.lookup_rates(8, "memory", steps=agree, here=(10.0, 0.0))[0] < 0.3 < dl.lookup_rates(8, "memory")[0]


def test_copies_are_not_taken_where_verification_does_not_batch():
    dl = CostModelK(LINEAR, reached=[100], accepted=[95])
    for _ in range(40):
        dl.observe_lookup(3, 4, 1)  # a quarter accepted: 1.25 tokens for the price of 2+ calls
    assert dl.lookup_span(3, 8) == 0


def test_a_fixed_draft_length_verifies_at_most_k_copied_ids():
    assert FixedK(4).lookup_span(3, 10) == 4 and FixedK(4).lookup_span(3, 2) == 2
    assert FixedK(0).lookup_span(3, 10) == 0  # the target alone, copies included


def test_copies_mixed_with_drafts_keep_greedy_output_the_targets(cross):
    """A prompt that repeats itself: rounds copy from it, rounds draft, and the output is the
    target's own; the metrics count each kind of round."""
    from omnidraft.propose.lookup import LookupConfig

    d, t, pair = cross
    prompt = "x = 1\ny = 2\nx = 1\ny = 2\nx = 1\ny ="
    ref = generate_ar(LocalTarget(t), pair.target_tok, prompt, max_new_tokens=32)
    rounds = []
    got = generate_speculative(d, LocalTarget(t), pair, prompt, cfg=SpecConfig("omnidraft"), k=FixedK(4),
                               max_new_tokens=32, lookup=LookupConfig(min_match=2), on_round=rounds.append)
    kinds = got.metrics["rounds_by_kind"]
    assert got.token_ids == ref.token_ids
    assert kinds["lookup"]["rounds"] > 0 and sum(k["rounds"] for k in kinds.values()) == len(rounds)
    copies = [r for r in rounds if r.kind == "lookup"]
    assert all(r.proposal.drafter_forwards == 0 and r.match >= 2 for r in copies)  # a copy drafts nothing
    assert kinds["lookup"]["accepted"] == sum(r.verdict.accepted for r in copies)


def test_a_copy_is_verified_only_at_a_width_whose_cost_was_measured():
    """Verification costs rise in steps (4-row GEMM tiles: v(5) ~ v(8)); between v(4) and v(13)
    a straight line would make 10 copied ids look cheap (v(11) ~ 31.7 ms) where they may cost the
    step past 8. Copies accepted whole are verified at a measured width: 3 of 10, all 12 of 12."""
    m = CostModel({1: 10.0, 2: 12.0, 4: 13.0, 13: 37.0}, drafter_ms=5.0)
    dl = CostModelK(m, reached=[100], accepted=[10])
    for _ in range(40):
        dl.observe_lookup(5, 12, 12)
    assert dl.lookup_span(5, 10) == 3
    assert dl.lookup_span(5, 12) == 12 and dl.lookup_span(5, 2) == 1


def test_a_copy_kept_whole_learns_from_the_bonus_token_whether_its_next_id_would_have_been_kept():
    dl = CostModelK(CHEAP, reached=[100], accepted=[60])
    for _ in range(30):  # 3 ids copied and kept, and the target's bonus token was the copy's 4th
        dl.observe_lookup(8, 3, 3, next_kept=True)
    assert len(dl.lookup_rates(8)) == 4 and dl.lookup_rates(8)[3] > 0.9
    dl.observe_lookup(6, 3, 3, next_kept=False)  # the copy's 4th id was not the target's token
    assert dl.copy_counts[("context", 6)] == ([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0])


def test_a_position_seldom_reached_is_judged_by_the_positions_before_it():
    """Copies kept whole at 3 ids, then one of 7 kept whole too: the next spans are not cut back
    to 3 by a prior's pessimism about positions seen once."""
    step = CostModel({1: 62.0, 2: 80.0, 3: 84.0, 4: 92.0, 5: 150.0, 6: 160.0, 7: 150.0, 8: 153.0, 9: 210.0,
                      12: 214.0, 16: 269.0}, drafter_ms=12.0)
    dl = CostModelK(step, reached=[100, 60], accepted=[56, 42])
    for _ in range(30):
        dl.observe_lookup(8, 3, 3)
    dl.observe_lookup(8, 7, 7)
    assert dl.lookup_span(8, 32) >= 7


def test_the_drafter_catches_up_only_where_drafting_will_repay_it():
    """Reading 150 unread tokens costs 150 x 2.5 ms; drafting saves ~6.3 ms a token here. Worth it
    over 96 tokens all drafted, not over 16, nor where copies commit 9 tokens in 10: there the
    drafter would also read every copied id to come (~0.9 x 96 x 2.5 ms) to draft the tenth
    token, so it stops even with nothing unread; where copies commit half, it drafts on."""
    m = CostModel(CHEAP.verify_ms, drafter_ms=1.0, catchup_ms=2.5)
    dl = CostModelK(m, reached=[100], accepted=[90])
    k = dl.k
    assert k > 0 and dl.drafted_share() == 1.0
    assert dl.next_k(150, 96) == k and dl.next_k(150, 16) == 0 and dl.next_k(0, 16) == k
    assert dl.next_k(150) == k  # nothing known of what remains: draft as chosen
    half = copy.deepcopy(dl)
    for _ in range(30):  # rounds of copies, 9 tokens each, and one drafted round in ten
        dl.observe_lookup(8, 8, 8)
        if _ % 10 == 0:
            dl.observe(k, k)
    assert dl.drafted_share() < 0.2
    assert dl.next_k(150, 96) == 0 and dl.next_k(3, 96) == 0 and dl.next_k(0, 96) == 0
    for _ in range(30):  # copies commit about a third of the tokens
        half.observe_lookup(8, 4, 4)
        half.observe(k, k)
    assert 0.5 < half.drafted_share() < 0.8
    assert half.next_k(3, 96) == k and half.next_k(150, 16) == 0
    with dl.fixed(4):  # pairing measures acceptance: no veto
        assert dl.next_k(150, 16) == 4
