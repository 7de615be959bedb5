"""A pair's memory as its generations use it: ``Memories`` opens the pair's store when first asked
and hands out one ``Memory`` per space (the local user, or an API key); a generation's
``Recalls`` finds continuations for its rounds in its space's index, counts which entries'
proposals the target accepted, and remembers the generation's answer when it ends.

The index is built on the first generation that uses the space (start-up reads nothing), then
takes in at each generation's start what any process added since (the daemon, another Session,
a server); after an eviction or a clear anywhere it is built again.

Knows the store and the index; nothing about models or decoding (decode/speculator.py asks).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from omnidraft.errors import OmniDraftError
from omnidraft.memory.config import MemoryConfig
from omnidraft.memory.index import Recall, SuffixIndex
from omnidraft.memory.store import MemoryStore

LOCAL = "local"  # the space of a Session's own generations (a server gives each API key its own)


class Memory:
    """One space of a pair's memory: its index, shared by every generation recalling from it."""

    def __init__(self, store: MemoryStore, space: str, cfg: MemoryConfig, note: Callable[[str], None]):
        self.store, self.space, self.cfg, self.note = store, space, cfg, note
        self.index: SuffixIndex | None = None
        self.seen = 0  # the newest entry id the index holds
        self.epoch = -1
        self.finds, self.find_s = 0, 0.0  # every lookup and the seconds they took, since this Memory was made

    def sync(self) -> None:
        """Take in what was remembered since (building the index on first use, or after entries went)."""
        epoch = self.store.epoch()
        if self.index is None or epoch != self.epoch:
            entries, bad = self.store.entries(self.space)
            self.index, self.epoch = SuffixIndex.build(entries, self.cfg), epoch
        else:
            entries, bad = self.store.entries(self.space, self.seen)
            self.index.add(entries)
        if entries:
            self.seen = entries[-1][0]
        if bad:
            self.note(f"memory: skipped {bad} damaged entries in {self.store.path}")

    def generation(self) -> Recalls:
        """What one generation recalls from this space and adds to it (several may run at once: an
        engine's batch)."""
        return Recalls(self)


class Recalls:
    """One generation's use of a space: its lookups, which entries' proposals the target accepted,
    and, when it ends, its answer kept."""

    def __init__(self, memory: Memory):
        self.memory = memory
        self.helped: dict[int, int] = {}  # entry id -> tokens of its proposals accepted
        self.lookups = self.found = self.verified = 0

    def find(self, context: list[int], span: int) -> Recall | None:
        """The memory's continuation of ``context`` (its last ``max_match`` ids), at most ``span`` ids."""
        memory = self.memory
        if memory.index is None:
            memory.sync()
        t0 = time.perf_counter()
        found = memory.index.find(context[-memory.cfg.max_match:], span)
        memory.finds, memory.find_s = memory.finds + 1, memory.find_s + time.perf_counter() - t0
        self.lookups += 1
        self.found += found is not None
        return found

    def verified_by(self, recall: Recall, accepted: int) -> None:
        """A round verified ``recall``'s ids and the target accepted ``accepted`` of them."""
        self.verified += 1
        if accepted:
            for entry in recall.entries:
                self.helped[entry] = self.helped.get(entry, 0) + accepted

    def remember(self, ids: list[int], tally: dict[str, tuple[int, int, int]]) -> None:
        """Keep ``ids`` (the new part of a prompt and its answer; none: nothing new to keep), the
        credit of this generation's accepted proposals and its ``tally`` (source -> rounds,
        proposed, accepted)."""
        tally = {**tally, "lookups": (self.lookups, self.found, self.verified)} if self.lookups else tally
        self.memory.store.add(self.memory.space, ids, self.helped, tally)


class Memories:
    """The memory of the pair whose folder is ``folder``/memory, one ``Memory`` per space. A store
    that cannot be read is said once (``note``) and the pair runs without it."""

    def __init__(self, folder: Path, cfg: MemoryConfig = MemoryConfig(), note: Callable[[str], None] = print):
        self.folder, self.cfg, self.note = Path(folder), cfg, note
        self._store: MemoryStore | None = None
        self._spaces: dict[str, Memory] = {}
        self._failed = False
        self._mutex = threading.Lock()

    def space(self, name: str = LOCAL) -> Memory | None:
        """The ``Memory`` of space ``name`` (None: the store is unreadable)."""
        with self._mutex:
            if self._store is None and not self._failed:
                try:
                    self._store = MemoryStore(self.folder, self.cfg)
                except OmniDraftError as err:
                    self._failed = True
                    self.note(str(err))
            if self._store is None:
                return None
            if name not in self._spaces:
                self._spaces[name] = Memory(self._store, name, self.cfg, self.note)
            return self._spaces[name]

    @property
    def rss_bytes(self) -> int:
        """What the loaded indexes hold in RAM."""
        return sum(m.index.nbytes for m in self._spaces.values() if m.index is not None)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
