"""Two Sessions keeping one cost file (pairs/cost_merge.py, cost_store.write with a base): what each learnt
since it read the file joins what the other wrote meanwhile, rather than replacing it."""

import json

import pytest

from omnidraft.pairs.cost import CostModel
from omnidraft.pairs.cost_store import CostFile, CostRecord, load, write
from omnidraft.pairs.cost_merge import merge

ON = {"target_runtime": "executorch 8da8w", "drafter_runtime": "executorch 8da8w", "cpu": "X", "threads": 2}
TIMED = {1: 10.0, 4: 12.0}


def rec(model: CostModel, reached: list[float], accepted: list[float]) -> CostRecord:
    return CostRecord(model, reached, accepted, ON)


def test_counts_add_and_learnt_terms_move_by_each_sessions_own_move():
    base = rec(CostModel(dict(TIMED), 2.0, pace=1.0, decode_scales={"chat": [0.8, 3]}), [10.0, 5.0], [8.0, 2.0])
    mine = rec(CostModel(dict(TIMED), 2.0, pace=1.2, decode_scales={"chat": [0.7, 4], "completion": [0.9, 1]}),
               [14.0, 7.0, 1.0], [11.0, 3.0, 1.0])
    theirs = rec(CostModel(dict(TIMED), 2.0, pace=0.9, decode_scales={"chat": [0.8, 3], "completion": [1.1, 3]}),
                 [13.0, 6.0], [10.0, 3.0])
    got = merge(base.to_json(), mine.to_json(), theirs.to_json())
    assert got["reached"] == [17.0, 8.0, 1.0] and got["accepted"] == [13.0, 4.0, 1.0]
    model = CostRecord.from_json(got).model
    assert model.pace == pytest.approx(1.1)  # theirs 0.9, moved by mine's +0.2
    assert model.decode_scales["chat"] == [pytest.approx(0.7), 4]  # only mine saw chat since base
    assert model.decode_scales["completion"] == [pytest.approx((0.9 * 1 + 1.1 * 3) / 4), 4]  # both saw it first
    assert model.verify_ms == TIMED


def test_a_session_that_timed_the_target_again_keeps_its_model_and_both_counts():
    base = rec(CostModel(dict(TIMED), 2.0, pace=1.3), [10.0], [8.0])
    mine = rec(CostModel({1: 9.0, 4: 11.0}, 2.0), [10.0], [8.0])  # retimed: its pace starts over
    theirs = rec(CostModel(dict(TIMED), 2.0, pace=1.5), [12.0], [9.0])
    got = CostRecord.from_json(merge(base.to_json(), mine.to_json(), theirs.to_json()))
    assert got.model.verify_ms == {1: 9.0, 4: 11.0} and got.model.pace == 1.0
    assert got.reached == [12.0] and got.accepted == [9.0]


def test_a_write_with_a_base_merges_what_another_session_wrote_since(tmp_path):
    path = tmp_path / "cost.json"
    start, _ = write(path, rec(CostModel(dict(TIMED), 2.0), [4.0], [2.0]))
    other, merged = write(path, rec(CostModel(dict(TIMED), 2.0), [9.0], [6.0]), start)  # +5 rounds, +4 accepted
    assert other.reached == [9.0] and not merged  # nobody wrote between: its own record
    mine, merged = write(path, rec(CostModel(dict(TIMED), 2.0), [7.0], [3.0]), start)  # +3, +1 from the same start
    assert mine.reached == [12.0] and mine.accepted == [7.0] and merged
    assert (load(path, ON).reached, load(path, ON).accepted) == ([12.0], [7.0])
    write(path, rec(CostModel(dict(TIMED), 2.0), [1.0], [1.0]))  # no base (a new measurement): written as is
    assert (load(path, ON).reached, load(path, ON).accepted) == ([1.0], [1.0])


def test_a_damaged_file_is_replaced_by_the_sessions_record(tmp_path):
    path = tmp_path / "cost.json"
    start, _ = write(path, rec(CostModel(dict(TIMED), 2.0), [4.0], [2.0]))
    path.write_text('{"model": {"pace": "fast"}, "reached": [1], "on": %s}' % json.dumps(ON))
    assert write(path, rec(CostModel(dict(TIMED), 2.0), [6.0], [3.0]), start)[0].reached == [6.0]
    assert load(path, ON).reached == [6.0]


def test_a_cost_file_goes_on_from_the_merged_model(tmp_path):
    """CostFile.keep: a Session that kept its cost model after another Session of the pair wrote
    the file continues from both Sessions' evidence."""
    from omnidraft.decode.draft_length import CostModelK

    path = tmp_path / "cost.json"
    start, _ = write(path, rec(CostModel(dict(TIMED), 2.0), [4.0], [2.0]))
    write(path, rec(CostModel(dict(TIMED), 2.0, pace=1.5), [9.0], [6.0]), start)  # the other Session
    dl = CostModelK(CostModel(dict(TIMED), 2.0, pace=1.2), [7.0], [3.0])
    CostFile(path, ON, start).keep(dl)
    assert dl.reached == [12.0] and dl.accepted == [7.0] and dl.model.pace == pytest.approx(1.7)
    dl.model.decode_scales["chat"] = [0.5, 1]  # later learning is its own, not the file's record
    assert load(path, ON).model.decode_scales == {}
