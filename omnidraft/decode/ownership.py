"""One generation's own state: a model's KV cache or a target's session must never be shared by two
generations in flight, or both produce text that is not the target's.

``own(x)`` gives a generation its state: what ``x.fork()`` returns where it returns one (an
eager model: a fresh cache over the same weights; a LocalTarget over such a model), otherwise
``x`` itself, held exclusively until the generation ends, and a second generation asking for it
meanwhile gets a clear error. (A Session serves its generations one at a time: this is for
callers of the decode front door that share models.)
Knows nothing about what the objects compute.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, TypeVar

from omnidraft.errors import OmniDraftError

T = TypeVar("T")
_CLAIM = threading.Lock()  # the busy check and its setting are one step, whatever thread asks


@contextmanager
def own(obj: T, what: str) -> Iterator[T]:
    """The state one generation may use for ``obj`` (``what`` names it in the error)."""
    fork = getattr(obj, "fork", None)
    mine = fork() if callable(fork) else None
    if mine is not None:
        yield mine
        return
    with _CLAIM:
        if getattr(obj, "_omnidraft_busy", False):
            raise OmniDraftError(f"the {what} is already in use by another generation",
                                 "finish or close that generation first, or give each its own " + what)
        obj._omnidraft_busy = True
    try:
        yield obj
    finally:
        obj._omnidraft_busy = False
