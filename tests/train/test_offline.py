"""Offline training resumes from its checkpoint: interrupted anywhere, it ends with the weights an
uninterrupted run has (adapter and acceptance head), and trains on the schedule it was given."""

import copy

import pytest
import torch

from omnidraft.models.acceptance import AcceptanceHead, HeadConfig
from omnidraft.train.offline import schedule, train
from omnidraft.train.trainer import TrainConfig, attach_lora
from omnidraft.train.tuning import RoundConfig

from omnidraft.train.teacher import answer_ids, teacher_record

PROMPTS = [("def add(a, b):\n", "    return a + b\n"), ("The weather today is", " sunny with a light breeze."),
           ("x = [1, 2, 3]\n", "y = [v * 2 for v in x]\nprint(y)\n"), ("Dear team,", " lunch is on Friday at noon.")]
CFG = RoundConfig(train=TrainConfig(lr=1e-3, update_interval=2, batch_size=2),
                  head=HeadConfig(labels="greedy", batch_size=2, replay_size=3))


@pytest.fixture(scope="module")
def setup(cross):
    drafter, target, pair = cross
    records = [teacher_record(pair, target, p, False, answer_ids(pair.target_tok, a, 32), 16) for p, a in PROMPTS]
    return drafter, {i: r.to_bytes() for i, r in enumerate(records)}


def _fresh(drafter):
    torch.manual_seed(0)
    model = attach_lora(copy.deepcopy(drafter.model), CFG.train)
    return model, AcceptanceHead(model.config.hidden_size, 16)


def _weights(model, head):
    return {**{k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad},
            **{f"head.{k}": v.clone() for k, v in head.state_dict().items()}}


def test_schedule_is_whole_updates_of_shuffled_epochs():
    order = schedule(list(range(7)), 2, 2)
    assert len(order) == 12 and order[:6] != order[6:]
    assert all(len(set(e)) == 6 and set(e) <= set(range(7)) for e in (order[:6], order[6:]))
    assert schedule(list(range(7)), 2, 2) == order


def test_an_interrupted_run_resumes_to_the_uninterrupted_weights(setup, tmp_path):
    drafter, rows = setup
    order = schedule(sorted(rows), 3, CFG.train.update_interval)
    model, head = _fresh(drafter)
    untouched = _weights(model, head)
    full = train(model, head, order, rows.__getitem__, tmp_path / "a.pt", CFG, every=1)
    want = _weights(model, head)
    assert full.done == len(order)
    assert any(not torch.equal(want[k], untouched[k]) for k in want)  # it trained

    reads = {"n": 0}

    def dying(rid):  # the process dies in the middle of the 4th update
        reads["n"] += 1
        if reads["n"] == 7:
            raise KeyboardInterrupt
        return rows[rid]

    model, head = _fresh(drafter)
    with pytest.raises(KeyboardInterrupt):
        train(model, head, order, dying, tmp_path / "b.pt", CFG, every=1)
    model, head = _fresh(drafter)  # a new process: fresh weights, the checkpoint on disk
    seen = []
    resumed = train(model, head, order, lambda rid: seen.append(rid) or rows[rid], tmp_path / "b.pt", CFG, every=1)
    assert resumed.done == len(order)
    got = _weights(model, head)
    for k in want:
        assert torch.allclose(got[k], want[k], atol=1e-6), k
    with pytest.raises(ValueError, match="another schedule"):
        train(model, head, order[::-1], rows.__getitem__, tmp_path / "b.pt", CFG)
