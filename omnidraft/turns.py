"""One generation at a time on a shared object (a Session): another thread's call waits its turn;
the same thread's second one while its first is still open is refused, since waiting on itself
would never end.

Knows threads; nothing about generating.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from omnidraft.errors import OmniDraftError


class Turns:
    def __init__(self):
        self._lock = threading.Lock()
        self._holder: int | None = None  # the thread whose turn it is

    @contextmanager
    def turn(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._holder == me:
            raise OmniDraftError("this thread's earlier generation on this Session is still open",
                                 "read that stream to its end or close() it before starting another")
        with self._lock:
            self._holder = me
            try:
                yield
            finally:
                self._holder = None
