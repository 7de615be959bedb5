"""One generation's own state: a model's KV cache or a target's session must never be shared by two
generations in flight, or both produce text that is not the target's.

``own(x)`` gives a generation its state: a fresh cache over the same weights for an in-process
model that can fork one (``CausalLM.fork``), otherwise ``x`` itself, held exclusively until the
generation ends, and a second generation asking for it meanwhile gets a clear error.
Knows nothing about what the objects compute.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, TypeVar

from omnidraft.errors import OmniDraftError

T = TypeVar("T")


@contextmanager
def own(obj: T, what: str) -> Iterator[T]:
    """The state one generation may use for ``obj`` (``what`` names it in the error)."""
    fork = getattr(obj, "fork", None)
    if callable(fork):
        yield fork()
        return
    if getattr(obj, "_omnidraft_busy", False):
        raise OmniDraftError(f"the {what} is already in use by another generation",
                             "finish or close that generation first, or give each its own " + what)
    obj._omnidraft_busy = True
    try:
        yield obj
    finally:
        obj._omnidraft_busy = False
