"""Tallies and the paired interval (measure/tally.py)."""

import pytest

from omnidraft.measure.tally import Tally, figures, ratio_interval


def test_a_tally_sums_runs_and_fills_what_a_draft_free_run_leaves_unset():
    t = Tally()
    t.add(10, 1.0, drafted=6, accepted=3, forwards=7, equal=True)
    t.add_metrics({"new_tokens": 20, "wall_s": 1.0, "proposed": None, "accepted": None, "target_forwards": None})
    assert (t.tokens, t.wall, t.drafted, t.accepted, t.forwards, t.equal, t.prompts) == (30, 2.0, 6, 3, 27, 1, 2)
    assert t.tokens_per_s() == 15.0 and t.acceptance() == 0.5 and t.tokens_per_forward() == pytest.approx(30 / 27)
    assert Tally().acceptance() is None and Tally().tokens_per_s() == 0.0
    assert t.summary()["per_prompt"] == [[10, 1.0], [20, 1.0]]
    assert (t.equal, t.compared) == (1, 1)  # the second run was not compared


def test_copies_from_the_context_are_counted_apart_from_the_drafters_proposals():
    """A generation that drafted 8 (5 kept) and copied 12 (10 kept): the drafter's acceptance is
    5/8, not 15/20 (copies pass for drafts otherwise); the prefill leaves the decode rate."""
    m = {"new_tokens": 30, "wall_s": 2.0, "prefill_s": 0.5, "proposed": 20, "accepted": 15, "target_forwards": 9,
         "translate_ms_median": 0.2, "rounds_by_kind": {"drafter": {"rounds": 3, "proposed": 8, "accepted": 5},
                                                         "lookup": {"rounds": 2, "proposed": 12, "accepted": 10}}}
    t = Tally()
    t.add_metrics(m)
    t.add_metrics({**m, "translate_ms_median": 0.4})
    assert (t.drafted, t.accepted, t.copied, t.copies_kept, t.forwards) == (16, 10, 24, 20, 18)
    assert t.acceptance() == 5 / 8 and t.decode_tokens_per_s() == 60 / 3.0
    assert t.translate_ms_median() == pytest.approx(0.3)
    copied_only = {**m, "proposed": 12, "accepted": 10, "rounds_by_kind": {"lookup": m["rounds_by_kind"]["lookup"]}}
    assert figures(copied_only)["translate_ms"] is None and figures(copied_only)["drafted"] == 0


def test_a_row_that_does_not_count_forwards_or_report_ids_says_neither():
    """Another engine's drafting row (llama.cpp's prompt lookup) counts no target forwards and
    llama.cpp reports no ids: its tokens per forward is unknown, not 1.0, and 0 compared is not 0 equal."""
    t = Tally()
    t.add(10, 1.0, counted=False)
    t.add(12, 1.0, counted=False)
    s = t.summary()
    assert s["tokens_per_forward"] is None and (s["equal"], s["compared"]) == (0, 0)


def test_the_paired_interval_holds_the_ratio_and_narrows_when_prompts_agree():
    a, b, c = Tally(), Tally(), Tally()
    for n, s in [(10, 1.0), (40, 2.0), (20, 1.5), (30, 1.0)]:
        a.add(n, s / 2)  # twice as fast on every prompt
        b.add(n, s)
        c.add(n, s * (0.5 if n % 20 else 1.0))  # faster on some prompts only
    lo, hi = ratio_interval(a, b)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)
    lo, hi = ratio_interval(c, b)
    point = c.tokens_per_s() / b.tokens_per_s()
    assert lo < point < hi and lo >= 1.0
    b.add(5, 1.0)
    with pytest.raises(ValueError, match="same prompts"):
        ratio_interval(a, b)
