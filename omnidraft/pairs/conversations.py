"""A Session's conversation slots: each holds the target ids it last ran (prompt and answer), its
earlier turns (text prompts copy from them) and when it last ran; with several slots, every local
model (each route's target and the drafter) keeps one cache per slot (models/slots.py), so that
interleaved conversations do not evict each other (the drafter's slots share one cache until a
conversation comes back to its slot: models/slots.py ``lazy``). A prompt runs on the slot that last ran the
longest prefix of it beyond the chat template's preamble, else on the least recently used one
(whose earlier turns it forgets). Every slot's caches start holding the preamble: the first chat
prompt reads only its own turn, as later ones do, and a runtime not chosen yet is not priced for a
system prompt the other holds (pairs/routing.py ``warm``).

Knows LM caches and routes; nothing about decoding or tokenizers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from omnidraft.decode.target import LocalTarget
from omnidraft.models.lm import common_prefix
from omnidraft.models.budget import Budget
from omnidraft.models.slots import Slots
from omnidraft.pairs.routing import Route, warm


@dataclass
class Conversation:
    context: list[int] = field(default_factory=list)  # the target ids it last ran
    turns: list[int] = field(default_factory=list)  # its earlier prompts and answers
    used: int = -1  # when it last ran


class Conversations:
    """``n`` slots over ``routes``' local targets and ``drafter`` (pairs/drafter.py PairDrafter or
    None), their caches holding ``preamble`` (a slot's own as memory and ``budget`` allow, else an
    earlier slot's: models/slots.py); built after the cost models, whose timed calls replace the caches."""

    def __init__(self, n: int, routes: list[Route], drafter, preamble: list[int], note=None,
                 budget: Budget = Budget()):
        self.slots = [Conversation() for _ in range(n)]
        self.at = 0  # the slot the latest generation ran on
        self._clock = itertools.count()
        self._routes, self._drafter, self.preamble = routes, drafter, preamble
        if n > 1:
            for t in {id(t): t for t in self._targets()}.values():
                t.model = Slots(t.model, n, note=note, budget=budget)
            if drafter is not None:
                drafter.slot(n, note=note, budget=budget)
        for i in range(n):
            self.use(i)
            warm([t.model for t in self._targets()], preamble)
        self.use(0)

    def _targets(self) -> list[LocalTarget]:
        return [r.target for r in self._routes if isinstance(r.target, LocalTarget)]

    @property
    def current(self) -> Conversation:
        return self.slots[self.at]

    def use(self, i: int) -> None:
        """Run the next generation on slot ``i``'s caches."""
        self.at = i
        models = [t.model for t in self._targets()] + ([self._drafter.lm] if self._drafter is not None else [])
        for m in {id(m): m for m in models if isinstance(m, Slots)}.values():
            m.use(i)

    def slot_for(self, prompt_ids: list[int]) -> Conversation:
        """The slot ``prompt_ids`` runs on (now in use; see the module text)."""
        n = len(self.slots)
        held = [common_prefix(s.context, prompt_ids) for s in self.slots]
        best = max(range(n), key=held.__getitem__)
        if held[best] <= len(self.preamble) and n > 1:
            best = min(range(n), key=lambda i: self.slots[i].used)
            self.slots[best].turns = []
        elif self._drafter is not None and isinstance(self._drafter.lm, Slots):
            self._drafter.lm.came_back(best)  # its drafter cache its own once another took it over
        self.use(best)
        return self.slots[best]

    def ran(self, slot: Conversation, prompt_ids: list[int], new_ids: list[int], keep_turns: int) -> None:
        """``slot`` ran ``prompt_ids`` and answered ``new_ids``; its earlier turns keep the last
        ``keep_turns`` ids of both (0: unchanged, e.g. a conversation that carries its own turns)."""
        if keep_turns:
            slot.turns[:] = (slot.turns + prompt_ids + new_ids)[-keep_turns:]
        slot.context, slot.used = prompt_ids + new_ids, next(self._clock)
