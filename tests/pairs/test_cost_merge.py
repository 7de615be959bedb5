"""Two Sessions keeping one cost file (pairs/cost_merge.py, cost.write with a base): what each learnt
since it read the file joins what the other wrote meanwhile, rather than replacing it."""

import json

import pytest

from omnidraft.pairs import cost
from omnidraft.pairs.cost import CostModel
from omnidraft.pairs.cost_merge import merge

ON = {"target_runtime": "executorch 8da8w", "drafter_runtime": "executorch 8da8w", "cpu": "X", "threads": 2}
TIMED = {1: 10.0, 4: 12.0}


def rec(model: CostModel, reached: list[float], accepted: list[float]) -> dict:
    return cost.record(model, reached, accepted, ON)


def test_counts_add_and_learnt_terms_move_by_each_sessions_own_move():
    base = rec(CostModel(dict(TIMED), 2.0, pace=1.0, decode_scales={"chat": [0.8, 3]}), [10.0, 5.0], [8.0, 2.0])
    mine = rec(CostModel(dict(TIMED), 2.0, pace=1.2, decode_scales={"chat": [0.7, 4], "completion": [0.9, 1]}),
               [14.0, 7.0, 1.0], [11.0, 3.0, 1.0])
    theirs = rec(CostModel(dict(TIMED), 2.0, pace=0.9, decode_scales={"chat": [0.8, 3], "completion": [1.1, 3]}),
                 [13.0, 6.0], [10.0, 3.0])
    got = merge(base, mine, theirs)
    assert got["reached"] == [17.0, 8.0, 1.0] and got["accepted"] == [13.0, 4.0, 1.0]
    model, reached, accepted = cost.parse(got)
    assert model.pace == pytest.approx(1.1)  # theirs 0.9, moved by mine's +0.2
    assert model.decode_scales["chat"] == [pytest.approx(0.7), 4]  # only mine saw chat since base
    assert model.decode_scales["completion"] == [pytest.approx((0.9 * 1 + 1.1 * 3) / 4), 4]  # both saw it first
    assert model.verify_ms == TIMED


def test_a_session_that_timed_the_target_again_keeps_its_model_and_both_counts():
    base = rec(CostModel(dict(TIMED), 2.0, pace=1.3), [10.0], [8.0])
    mine = rec(CostModel({1: 9.0, 4: 11.0}, 2.0), [10.0], [8.0])  # retimed: its pace starts over
    theirs = rec(CostModel(dict(TIMED), 2.0, pace=1.5), [12.0], [9.0])
    model, reached, accepted = cost.parse(merge(base, mine, theirs))
    assert model.verify_ms == {1: 9.0, 4: 11.0} and model.pace == 1.0
    assert reached == [12.0] and accepted == [9.0]


def test_a_write_with_a_base_merges_what_another_session_wrote_since(tmp_path):
    path = tmp_path / "cost.json"
    start = cost.write(path, rec(CostModel(dict(TIMED), 2.0), [4.0], [2.0]))
    other = cost.write(path, rec(CostModel(dict(TIMED), 2.0), [9.0], [6.0]), start)  # +5 rounds, +4 accepted
    assert other["reached"] == [9.0]  # nobody wrote between: its own record
    mine = cost.write(path, rec(CostModel(dict(TIMED), 2.0), [7.0], [3.0]), start)  # +3, +1 from the same start
    assert mine["reached"] == [12.0] and mine["accepted"] == [7.0]
    assert cost.load(path, ON)[1:] == ([12.0], [7.0])
    cost.write(path, rec(CostModel(dict(TIMED), 2.0), [1.0], [1.0]))  # no base (a new measurement): written as is
    assert cost.load(path, ON)[1:] == ([1.0], [1.0])


def test_a_damaged_file_is_replaced_by_the_sessions_record(tmp_path):
    path = tmp_path / "cost.json"
    start = cost.write(path, rec(CostModel(dict(TIMED), 2.0), [4.0], [2.0]))
    path.write_text('{"model": {"pace": "fast"}, "reached": [1], "on": %s}' % json.dumps(ON))
    assert cost.write(path, rec(CostModel(dict(TIMED), 2.0), [6.0], [3.0]), start)["reached"] == [6.0]
    assert cost.load(path, ON)[1:] == ([6.0], [3.0])
