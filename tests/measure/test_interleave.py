"""The one interleave (measure/interleave.py): every row runs every prompt, the order rotates so
each row leads equally often and follows each other row equally often."""

from collections import Counter

from omnidraft.measure.interleave import interleaved, rotated


def test_each_row_leads_once_in_every_cycle_of_prompts():
    rows = ["pair", "alone", "llama.cpp"]
    orders = [rotated(rows, i) for i in range(6)]
    assert orders[0] == rows and orders[1] == ["alone", "llama.cpp", "pair"] and orders[3] == rows
    assert Counter(o[0] for o in orders) == {r: 2 for r in rows}
    followers = Counter((o[j], o[j + 1]) for o in orders for j in range(2))
    assert len(set(followers.values())) == 1  # every ordered neighbour pair equally often
    assert rotated([], 3) == []


def test_interleaved_runs_every_prompt_on_every_row_after_its_reset():
    events = []
    out = list(interleaved(["p0", "p1"], ["a", "b"], lambda r, p: (events.append(("run", r, p)), f"{r}:{p}")[1],
                           before=lambda p: events.append(("reset", p))))
    assert [(i, p, r, got) for i, p, r, got in out] == [(0, "p0", "a", "a:p0"), (0, "p0", "b", "b:p0"),
                                                     (1, "p1", "b", "b:p1"), (1, "p1", "a", "a:p1")]
    assert events[::2] == [("reset", "p0")] * 2 + [("reset", "p1")] * 2  # a reset before each run
