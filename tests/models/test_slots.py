"""Slots: each slot's cache is its own and persists; a runtime without a twin shares one; a
generation holds a slot's cache instead of forking a fresh one."""

from __future__ import annotations

from omnidraft.decode.ownership import own
from omnidraft.models.eager import CausalLM
from omnidraft.models.slots import Slots, inner

from ..conftest import tiny


class _NoTwin:
    tokens: list[int]

    def __init__(self):
        self.tokens = []

    def reset(self):
        self.tokens = []


def test_each_slot_keeps_its_own_cache_and_a_generation_holds_it():
    lm = CausalLM(tiny("llama", 300, seed=3))
    s = Slots(lm, 2)
    a = s.extend([1, 2, 3]).logits
    s.use(1)
    assert s.tokens == [] and inner(s) is not lm
    b = s.extend([1, 2, 3]).logits
    assert (a == b).all()  # same weights, its own cache
    s.extend([4])
    s.use(0)
    assert s.tokens == [1, 2, 3] and s.tokens_of(1) == [1, 2, 3, 4]
    with own(s, "target") as held:
        assert held is s  # no fork: the slot's cache is the generation's
    s.reset()
    assert s.tokens_of(0) == s.tokens_of(1) == []


def test_a_runtime_without_a_twin_has_one_instance_every_slot_shares():
    first = _NoTwin()
    s = Slots(first, 3)
    assert s.shared and all(inner(s) is first for _ in [s.use(i) for i in range(3)])


def test_twins_are_made_only_while_memory_allows(monkeypatch):
    from omnidraft.models import slots

    notes = []
    monkeypatch.setattr(slots, "available_bytes", lambda: (1 << 30, 100 << 30))  # 1 GiB free of 100
    s = Slots(CausalLM(tiny("llama", 300, seed=3)), 3, note=notes.append)
    assert s.distinct == 1 and len(s.lms) == 3 and "1 of 3 slots" in notes[0]
    monkeypatch.setattr(slots, "available_bytes", lambda: (90 << 30, 100 << 30))
    assert Slots(CausalLM(tiny("llama", 300, seed=3)), 3).distinct == 3


def test_twins_are_made_only_within_the_budget(monkeypatch):
    from omnidraft.models import slots
    from omnidraft.models.budget import Budget, rss_bytes

    monkeypatch.setattr(slots, "available_bytes", lambda: (90 << 30, 100 << 30))
    notes = []
    tight = Budget(rss_bytes() + (1 << 20))  # 1 MiB of room: no twin of a process this size fits
    s = Slots(CausalLM(tiny("llama", 300, seed=3)), 3, note=notes.append, budget=tight)
    assert s.distinct == 1 and "memory budget" in notes[0]
    assert Slots(CausalLM(tiny("llama", 300, seed=3)), 3, budget=Budget(rss_bytes() * 8)).distinct == 3


def test_lazy_slots_share_one_instance_until_a_slot_asks_for_its_own(monkeypatch):
    from omnidraft.models import slots

    monkeypatch.setattr(slots, "available_bytes", lambda: (90 << 30, 100 << 30))
    lm = CausalLM(tiny("llama", 300, seed=3))
    s = Slots(lm, 3, lazy=True)
    assert s.shared and len(s.lms) == 3
    s.extend([1, 2, 3])
    assert s.own(1) and not s.own(1) and s.distinct == 2  # once: slot 1 is on its own instance now
    s.use(1)
    assert s.tokens == [] and inner(s) is not lm
    s.extend([7])
    s.use(2)
    assert s.tokens == [1, 2, 3] and inner(s) is lm  # slot 2 still shares slot 0's
