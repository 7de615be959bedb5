"""A drafter/target pair's translation state: the vocabulary map and the n-gram cache, the
latter seeded from the vocabularies once and kept on disk when a store path is given.

Knows tokenizers and vocab sizes; nothing about running models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

from omnidraft.home import subdir
from omnidraft.translate.ngram import NgramCache
from omnidraft.translate.ngram_seed import seed
from omnidraft.translate.ngram_store import NgramStore
from omnidraft.translate.vocab import VocabMap, load_or_build, pair_key

DEFAULT_CACHE_BYTES = 64 << 20
T = TypeVar("T")


class PairState:
    def __init__(self, draft_tok, target_tok, draft_vocab: int, target_vocab: int, *,
                 max_n: int = 4, seed_ngrams: bool = True, policy: str = "lfu",
                 max_entries: int | None = None, max_bytes: int | None = DEFAULT_CACHE_BYTES,
                 persist: bool = False, store_path: str | Path | None = None):
        """``persist``: keep the n-gram cache in $OMNIDRAFT_HOME/pairs/<pair key>/ngrams.sqlite
        (or ``store_path``), loading it now and writing it on ``save()``."""
        self.draft_tok = draft_tok
        self.target_tok = target_tok
        self.key = pair_key(draft_tok, target_tok, draft_vocab, target_vocab)
        self.vmap: VocabMap = load_or_build(draft_tok, target_tok, draft_vocab, target_vocab, self.key)
        self.cache = NgramCache(max_n=max_n, policy=policy, max_entries=max_entries,
                                max_bytes=max_bytes)
        if persist and store_path is None:
            store_path = subdir("pairs", self.key) / "ngrams.sqlite"
        self.store = NgramStore(store_path, self.key) if store_path is not None else None
        self._shared: dict[str, object] = {}
        on_disk_seeded = self.store.count()[0] if self.store else 0
        if self.store:
            self.store.load_into(self.cache)
        if seed_ngrams and not on_disk_seeded:
            seed(self.cache, self.vmap, draft_tok, target_tok, self.key)
            self.save()

    def save(self) -> int:
        """Flush new entries and hit counts to the store (no-op without one)."""
        return self.store.flush(self.cache) if self.store else 0

    def shared(self, key: str, build: Callable[[], T]) -> T:
        """The pair's one ``build()`` under ``key``: state proposers share across generations
        (translators with their 49k-id tables, slrs byte tables), built on first use."""
        if key not in self._shared:
            self._shared[key] = build()
        return self._shared[key]
