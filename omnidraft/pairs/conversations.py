"""A Session's conversation slots: each holds the target ids it last ran (prompt and answer), its
earlier turns (text prompts copy from them) and when it last ran; with several slots, every local
model (each route's target and the drafter) keeps one cache per slot (models/slots.py), so that
interleaved conversations do not evict each other (the drafter's slots share one cache until a
conversation comes back to its slot: models/slots.py ``lazy``). A prompt runs on the slot that last ran the
longest prefix of it beyond the chat template's preamble, else on the least recently used one
(whose earlier turns it forgets). Every slot's caches start holding the preamble: the first chat
prompt reads only its own turn, as later ones do, and a runtime not chosen yet is not priced for a
system prompt the other holds (pairs/routing.py ``warm``).

With ``states`` (device/saved_states.py), the cache states of the target that ran a conversation's
generation and of the drafter are saved when it ends (at least MIN_SAVED positions past the
preamble), and a prompt whose slot holds less of it than a saved conversation shares restores
those states (each where its model's weights are still the same; a runtime not loaded yet is
loaded for it) instead of reading it again: one loaded program per model serves any number of
conversations, and after a restart a follow-up restores from disk. A state carries its own ids, so a model ends up
holding exactly what its ids say (the next call reads the rest of the prompt, as after any cache).

Conversations are kept apart by *space* (a server's API key; a Session's own: ``LOCAL``): a slot
last used by another space counts as holding nothing of a prompt, and before it runs one its caches
are cut back to the preamble, and saved states are found only in the prompt's own space; so no
client's prompt is read faster because another key sent the same start (a timing side channel).

Knows LM caches and routes; nothing about decoding or tokenizers.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass, field

from omnidraft.decode.target import LocalTarget
from omnidraft.errors import OmniDraftError
from omnidraft.models.lm import common_prefix
from omnidraft.models.budget import Budget
from omnidraft.device.saved_states import LOCAL, SavedStates
from omnidraft.models.slots import Slots, inner
from omnidraft.pairs.deferred import waiting
from omnidraft.pairs.routing import Route, warm

MIN_SAVED = 64  # positions past the preamble: a shorter conversation is read again, not saved
FULL = 8  # a drafter within this many positions of its window's end drafts no more there: its state is not saved


@dataclass
class Conversation:
    context: list[int] = field(default_factory=list)  # the target ids it last ran
    turns: list[int] = field(default_factory=list)  # its earlier prompts and answers
    used: int = -1  # when it last ran
    space: str = LOCAL  # whose conversation it last ran


class Conversations:
    """``n`` slots over ``routes``' local targets and ``drafter`` (pairs/drafter.py PairDrafter or
    None), their caches holding ``preamble`` (a slot's own as memory and ``budget`` allow, else an
    earlier slot's: models/slots.py); built after the cost models, whose timed calls replace the caches."""

    def __init__(self, n: int, routes: list[Route], drafter, preamble: list[int], note=None,
                 budget: Budget = Budget(), states: SavedStates | None = None):
        self.slots = [Conversation() for _ in range(n)]
        self.states = states
        self.restored = ("", 0)  # where the latest prompt's caches came from ("ram", "disk"; "": read), positions
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

    def slot_for(self, prompt_ids: list[int], space: str = LOCAL) -> Conversation:
        """The slot ``prompt_ids`` (of ``space``) runs on (now in use; see the module text)."""
        n = len(self.slots)
        held = [common_prefix(s.context, prompt_ids) if s.space == space else 0 for s in self.slots]
        best = max(range(n), key=held.__getitem__)
        if held[best] <= len(self.preamble) and n > 1:
            best = min(range(n), key=lambda i: self.slots[i].used)
            self.slots[best].turns = []
        elif self._drafter is not None and isinstance(self._drafter.lm, Slots):
            self._drafter.lm.came_back(best)  # its drafter cache its own once another took it over
        self.use(best)
        if self.slots[best].space != space:
            self._forget(self.slots[best], space)
        self.restored = self._restore(self.slots[best], prompt_ids, held[best], space)
        return self.slots[best]

    def _forget(self, slot: Conversation, space: str) -> None:
        """``slot`` (in use) becomes ``space``'s, holding nothing of another's conversation: its
        targets' caches cut back to the preamble, the drafter's emptied (it reads its prompt again)."""
        slot.context, slot.turns, slot.space = [], [], space
        for t in {id(t): t for t in self._targets()}.values():
            m = inner(t.model)
            if not waiting(m):
                m.truncate(len(self.preamble) if m.tokens[:len(self.preamble)] == self.preamble else 0)
        if self._drafter is not None and not waiting(inner(self._drafter.lm)):
            inner(self._drafter.lm).reset()

    @contextmanager
    def states_off(self):
        """No conversation state saved or restored meanwhile: a measurement that runs a prompt
        twice would restore its own first run's and not read it."""
        states, self.states = self.states, None
        try:
            yield
        finally:
            self.states = states

    @property
    def stateful(self) -> bool:
        """Some model in use can save and restore its conversation state."""
        return bool(self._programs())

    def _named(self) -> dict[str, object]:
        named = {f"target:{r.runtime}": r.target.model for r in self._routes if isinstance(r.target, LocalTarget)}
        if self._drafter is not None:
            named["drafter"] = self._drafter.lm
        return named

    def _programs(self) -> dict[str, object]:
        """The models now in use whose cache state can be saved (loaded programs), by name."""
        # a runtime not loaded yet is left so (pairs/deferred.py): asking it anything would load it
        return {n: inner(m) for n, m in self._named().items()
                if not waiting(m) and getattr(inner(m), "stateful", False)}

    def load_saved_runtimes(self) -> list[str]:
        """Load now each target runtime not loaded yet whose conversations' states are kept (they
        ran there: on a restart, a long conversation only that runtime's window holds comes back
        without waiting for the load, 0.7 s for the 0.5B's llama.cpp); the names loaded. One the
        memory budget cannot hold stays unloaded."""
        saved = self.states.models() if self.states is not None else set()
        loaded = []
        for name, m in self._named().items():
            if waiting(m) and name in saved:
                try:
                    inner(m).load()
                except OmniDraftError:
                    continue
                loaded.append(name)
        return loaded

    def _restore(self, slot: Conversation, prompt_ids: list[int], held: int, space: str) -> tuple[str, int]:
        """``slot``'s models continue from ``space``'s saved conversation sharing the most of
        ``prompt_ids`` where it shares more than ``held``; (where it came from, positions shared).
        A runtime not loaded yet whose state the conversation saved (the generation ran there) is
        loaded to restore it."""
        if self.states is None:
            return "", 0
        programs = self._programs()
        unloaded = {n: m for n, m in self._named().items() if waiting(m)}
        found = self.states.best(prompt_ids, {n: m.weights for n, m in programs.items()}, space, frozenset(unloaded))
        if found is None or found.shared <= held:
            return "", 0
        restored = 0
        for name, state in found.states.items():
            try:
                m = programs.get(name) or inner(unloaded[name]).load()
            except OmniDraftError:  # the memory budget cannot hold it now: the conversation is read there
                continue
            if getattr(m, "stateful", False) and m.weights == state.weights:
                m.restore(state)
                restored += 1
        if not restored:
            return "", 0
        slot.context, slot.turns = prompt_ids[:found.shared], []
        return found.where, found.shared

    def ran(self, slot: Conversation, prompt_ids: list[int], new_ids: list[int], keep_turns: int) -> None:
        """``slot`` ran ``prompt_ids`` and answered ``new_ids``; its earlier turns keep the last
        ``keep_turns`` ids of both (0: unchanged, e.g. a conversation that carries its own turns)."""
        if keep_turns:
            slot.turns[:] = (slot.turns + prompt_ids + new_ids)[-keep_turns:]
        slot.context, slot.used = prompt_ids + new_ids, next(self._clock)
        if self.states is not None and len(slot.context) - len(self.preamble) >= MIN_SAVED:
            self._save(slot.context, slot.space)

    def _save(self, context: list[int], space: str) -> None:
        """The states of the programs holding this conversation under ``context`` in ``space``: the
        target the generation ran on and the drafter (a target whose cache holds another one's, the
        generation having run elsewhere, is left out, and so is a drafter whose window the
        conversation has filled: it drafts no more in it; with no target holding it, nothing is saved)."""
        programs = {n: m for n, m in self._programs().items()
                    if (_holds(m.tokens, context) if n.startswith("target:") else len(m.tokens) + FULL < m.max_length)}
        if any(n.startswith("target:") for n in programs):
            self.states.put(context, {n: m.state() for n, m in programs.items()}, space)


def _holds(tokens: list[int], context: list[int]) -> bool:
    """A cache of ``tokens`` holds ``context``: all of it but its last few ids (a generation's last
    token is committed, not read)."""
    return len(tokens) >= len(context) - 8 and context[:len(tokens)] == tokens
