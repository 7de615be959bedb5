"""Slots: several KV caches of one model, so that conversations served in turn keep their state.

``Slots`` is an LM (models/lm.py) over ``n`` instances of one model; ``use(i)`` makes instance i
the one every call reaches, so the decode loop, the targets and the cost model run unchanged on
it. Instances are the model's twins: an ExecuTorch program loaded again (its own cache; weights
read from the same files), an eager model's fork (its own cache over the same weights); a runtime
with neither (llama.cpp here) has one instance that every slot shares, whose cache then holds the
last conversation only. A slot's cache persists between generations: a Slots has no ``fork``, so a
generation holds it (decode/ownership.py) rather than starting a fresh cache.

Knows the LM protocol; nothing about conversations, tokenizers or decoding.
"""

from __future__ import annotations

from omnidraft.models.budget import Budget, available_bytes, gib, rss_bytes
from omnidraft.models.lm import LM


def twin(lm: LM) -> LM | None:
    """Another instance of ``lm`` with its own empty cache, or None where its runtime has none."""
    make = getattr(lm, "twin", None) or getattr(lm, "fork", None)
    return make() if callable(make) else None


def inner(lm: LM) -> LM:
    """The instance a call on ``lm`` reaches now (``lm`` itself unless it is a Slots)."""
    return lm.current if isinstance(lm, Slots) else lm


RESERVE = 0.15  # of the machine's memory a twin must leave available (else the slot shares a cache)


class Slots:
    """``n`` instances of ``first``'s model behind the LM protocol; slot 0 is ``first``. Twins are
    made while memory allows: a twin whose size (as the last one measured; before the first, this
    whole process's) would leave less than RESERVE of the machine's memory available, or pass
    ``budget`` (models/budget.py), is not made, and its slot shares an earlier slot's instance
    (``distinct`` says how many there are; ``note`` hears why, once). ``lazy``: every slot starts
    on ``first``'s instance and gets a twin only when ``own`` asks (when conversations interleave:
    pairs/conversations.py), so one conversation at a time never holds a second copy."""

    def __init__(self, first: LM, n: int, note=None, budget: Budget = Budget(), lazy: bool = False):
        if n < 1:
            raise ValueError(f"slots must be >= 1, got {n}")
        self.lms: list[LM] = [first] * n
        self.at, self._note, self._budget, self._refused = 0, note, budget, False
        self._size = rss_bytes()  # what a twin may take: this process's size until one has been measured
        for i in range(1, 1 if lazy else n):
            if not self.own(i):
                self.lms[i:] = [self.lms[j % i] for j in range(i, n)]
                break

    def own(self, i: int) -> bool:
        """Slot ``i`` on an instance of its own, a new twin, if it shares one and memory allows;
        True when it got one."""
        if sum(lm is self.lms[i] for lm in self.lms) == 1:
            return False
        mem = available_bytes()
        short = (f"another would leave under {RESERVE:.0%} of memory free" if mem and mem[0] - self._size < RESERVE * mem[1]
                 else "another would pass the memory budget" if not self._budget.allows(self._size) else None)
        if short:
            if self._note and not self._refused:
                self._note(f"{getattr(self.lms[0], 'name', 'a model')}: {self.distinct} of {len(self.lms)} slots keep "
                           f"their own cache ({short}: {gib(self._size)} each); the others share them")
            self._refused = True
            return False
        before = rss_bytes()
        made = twin(self.lms[0])
        if made is None:
            return False
        self._size = max(0, rss_bytes() - before)
        self.lms[i] = made
        return True

    def came_back(self, i: int) -> None:
        """Slot ``i`` is to run again after the slot running now took over the instance they share:
        slot ``i`` gets its own (``own``)."""
        if i != self.at and self.lms[i] is self.lms[self.at]:
            self.own(i)

    @property
    def distinct(self) -> int:
        return len({id(lm) for lm in self.lms})

    @property
    def current(self) -> LM:
        return self.lms[self.at]

    @property
    def shared(self) -> bool:
        """Every slot reaches one instance (a runtime with no twin)."""
        return self.distinct == 1

    def use(self, i: int) -> None:
        if not 0 <= i < len(self.lms):
            raise ValueError(f"slot {i} is outside 0..{len(self.lms) - 1}")
        self.at = i

    def tokens_of(self, i: int) -> list[int]:
        """The ids slot ``i``'s cache holds."""
        return self.lms[i].tokens

    def __getattr__(self, name: str):
        if name == "fork":  # a slot keeps its cache: generations hold it, never fork a fresh one
            raise AttributeError(name)
        return getattr(self.lms[self.at], name)

    def reset(self) -> None:
        """Every slot's cache emptied (the weights changed under them: an adapter loaded in place)."""
        for lm in {id(x): x for x in self.lms}.values():
            lm.reset()

    def load_adapter(self, ptd) -> None:
        """A program's adapter .ptd loaded into every instance (each restarts with an empty cache),
        every instance's program released first: none holds the old version's weights while the new
        one loads, so the instances share one packed copy of it (device/weight_sharing.py)."""
        lms = list({id(x): x for x in self.lms}.values())
        for lm in lms:
            release = getattr(lm, "release", None)
            if callable(release):
                release()
        try:
            for lm in lms:
                lm.load_adapter(ptd)
        except BaseException:  # a bad .ptd: every instance still released runs its adapter again
            for lm in lms:
                if getattr(lm, "program", True) is None and lm.ptd is not None:
                    lm.load_adapter(lm.ptd)
            raise
