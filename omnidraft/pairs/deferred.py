"""A target runtime that is loaded when a generation first runs on it, not when the Session opens:
where a pair keeps both of its target's runtimes (the router's second route, pairs/assemble.py),
the second is held only once the router sends it a generation. Until then it holds nothing (a
route on it is priced for reading the whole prompt: its cache is empty) and answers only what is
known without loading it; the first use of anything else loads it, within the memory budget as
it stands then (models/budget.py). Measured on the AMD EPYC (AVX-512), 2 cores: the 1.5B pair
served with both runtimes held 5.36 GB at peak, the program alone 3.17 GB at the same tokens/s
(bench/results/bench-footprint-20261206-2111.md).

Knows the LM protocol's optional hooks and the budget; nothing about routing or decoding.
"""

from __future__ import annotations

from typing import Callable

from omnidraft.errors import OmniDraftError
from omnidraft.models.budget import Budget, gib
from omnidraft.models.lm import LM

# hooks callers probe with getattr(lm, name, None): answered from the runtime's class, unloaded
OPTIONAL = ("twin", "fork")


class Deferred:
    """The LM ``load()`` makes, made on first use. ``cls``: its class (which optional hooks it
    has); ``max_length``: its window; ``size``: the bytes loading it is estimated to add, which
    must fit ``budget`` then. Once loaded it passes everything through to the LM."""

    def __init__(self, load: Callable[[], LM], cls: type, *, max_length: int, size: int,
                 budget: Budget = Budget(), what: str = "the target"):
        self._make, self._cls, self._window, self._size = load, cls, max_length, size
        self._budget, self._what = budget, what
        self._lm: LM | None = None

    @property
    def loaded(self) -> bool:
        return self._lm is not None

    @property
    def tokens(self) -> list[int]:
        return [] if self._lm is None else self._lm.tokens

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def max_length(self) -> int:
        return self._window if self._lm is None else self._lm.max_length

    def load(self) -> LM:
        """The LM, loaded now if it was not; OmniDraftError where the budget cannot hold it."""
        if self._lm is None:
            if not self._budget.allows(self._size):
                raise OmniDraftError(f"{self._what} not loaded: ~{gib(self._size)} would pass the memory budget")
            self._lm = self._make()
        return self._lm

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._lm is None and name in OPTIONAL and not hasattr(self._cls, name):
            raise AttributeError(name)
        return getattr(self.load(), name)


def waiting(lm) -> bool:
    """Whether ``lm`` (or the LM a Slots reaches) is a Deferred not loaded yet."""
    return getattr(lm, "loaded", True) is False
