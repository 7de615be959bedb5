"""A target runtime loaded when the router first sends it a generation (pairs/deferred.py): held
only once a generation runs on it, never loaded to be probed, dropped where the budget cannot hold it."""

import copy

import pytest

from omnidraft.decode.draft_length import CostModelK
from omnidraft.decode.target import LocalTarget
from omnidraft.errors import OmniDraftError
from omnidraft.models.budget import Budget, rss_bytes
from omnidraft.models.slots import Slots
from omnidraft.pairs.deferred import Deferred, waiting
from omnidraft.pairs.router import Router
from omnidraft.pairs.routing import Route, warm

from .test_routing import LLAMACPP, PROGRAM, Cache, route


class Model(Cache):  # an LM with no twin, as llama.cpp
    vocab_size = 10


def deferred(made: list, size: int = 0, budget: Budget = Budget()) -> Deferred:
    return Deferred(lambda: made.append(Model()) or made[-1], Model, max_length=4096, size=size, budget=budget)


def test_it_answers_what_is_known_unloaded_and_loads_on_first_use():
    made = []
    lm = deferred(made)
    assert waiting(lm) and lm.tokens == [] and lm.length == 0 and lm.max_length == 4096
    assert getattr(lm, "twin", None) is None and getattr(lm, "fork", None) is None
    slots = Slots(lm, 2)
    assert slots.distinct == 1 and waiting(slots)  # no twin: one instance every slot shares, still unloaded
    warm([slots], [1, 2, 3])  # the chat preamble is read when it loads, not before
    assert made == [] and lm.tokens == []
    assert lm.vocab_size == 10 and len(made) == 1 and not waiting(slots)
    lm.extend([4, 5])
    assert lm.tokens == made[0].tokens == [4, 5]


def test_the_router_loads_it_when_forecast_first_and_never_to_probe_it():
    from omnidraft.pairs.router import PROBE_EVERY

    made = []
    program = route("executorch", PROGRAM)
    llama = Route("llamacpp", LocalTarget(deferred(made)), CostModelK(copy.deepcopy(LLAMACPP)))
    program.target.model.vocab_size = 10
    program.draft_length.model.decode_scales["chat"] = [1.0, 10 * PROBE_EVERY]
    llama.draft_length.model.decode_scales["chat"] = [1.0, 1]  # starved: a loaded route would be probed
    router = Router([program, llama])
    long = list(range(300))
    picks = [router.pick(long, 64, [], True, False) for _ in range(PROBE_EVERY + 1)]
    assert all(p.route is program and not p.probe for p in picks) and made == []
    assert router.pick(list(range(20)), 64, [], True, False).route is llama  # forecast first: loaded now
    assert len(made) == 1


def test_one_the_budget_cannot_hold_is_dropped_and_the_generation_runs_on_the_other():
    made, notes = [], []
    program = route("executorch", PROGRAM)
    program.target.model.vocab_size = 10
    tight = Budget(rss_bytes() + (1 << 20))
    llama = Route("llamacpp", LocalTarget(deferred(made, size=1 << 30, budget=tight)), CostModelK(copy.deepcopy(LLAMACPP)))
    router = Router([program, llama], note=notes.append)
    assert router.pick(list(range(20)), 64, [], True, False).route is program
    assert made == [] and router.routes == [program] and not router.routed
    assert "would pass the memory budget: every generation runs on executorch" in notes[0]
    with pytest.raises(OmniDraftError, match="1.00 GiB would pass the memory budget"):
        llama.target.model.load()
