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

from omnidraft.models.lm import LM


def twin(lm: LM) -> LM | None:
    """Another instance of ``lm`` with its own empty cache, or None where its runtime has none."""
    make = getattr(lm, "twin", None) or getattr(lm, "fork", None)
    return make() if callable(make) else None


def inner(lm: LM) -> LM:
    """The instance a call on ``lm`` reaches now (``lm`` itself unless it is a Slots)."""
    return lm.current if isinstance(lm, Slots) else lm


class Slots:
    """``n`` instances of ``first``'s model behind the LM protocol; slot 0 is ``first``."""

    def __init__(self, first: LM, n: int):
        if n < 1:
            raise ValueError(f"slots must be >= 1, got {n}")
        rest = [twin(first) for _ in range(n - 1)]
        self.lms: list[LM] = [first] + [t if t is not None else first for t in rest]
        self.at = 0

    @property
    def current(self) -> LM:
        return self.lms[self.at]

    @property
    def shared(self) -> bool:
        """Every slot reaches one instance (a runtime with no twin)."""
        return len({id(lm) for lm in self.lms}) == 1

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
        """A program's adapter .ptd loaded into every instance (each restarts with an empty cache)."""
        for lm in {id(x): x for x in self.lms}.values():
            lm.load_adapter(ptd)
