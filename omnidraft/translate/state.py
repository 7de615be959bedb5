"""A drafter/target pair's translation state: the vocabulary map and the n-gram cache, the
latter seeded from the vocabularies once and kept on disk when a store path is given.

Knows tokenizers and vocab sizes; nothing about running models.
"""

from __future__ import annotations

from pathlib import Path

from omnidraft.home import subdir
from omnidraft.translate.ngram import NgramCache, seed
from omnidraft.translate.ngram_store import NgramStore
from omnidraft.translate.token import Translator
from omnidraft.translate.vocab import VocabMap, load_or_build, pair_key

DEFAULT_CACHE_BYTES = 64 << 20


class Pair:
    def __init__(self, draft_tok, target_tok, draft_vocab: int, target_vocab: int, *,
                 max_n: int = 4, seed_ngrams: bool = True, policy: str = "lfu",
                 max_entries: int | None = None, max_bytes: int | None = DEFAULT_CACHE_BYTES,
                 persist: bool = False, store_path: str | Path | None = None):
        """``persist``: keep the n-gram cache in $OMNIDRAFT_HOME/pairs/<pair key>/ngrams.sqlite
        (or ``store_path``), loading it now and writing it on ``save()``."""
        self.draft_tok = draft_tok
        self.target_tok = target_tok
        self.key = pair_key(draft_tok, target_tok, draft_vocab, target_vocab)
        self.vmap: VocabMap = load_or_build(draft_tok, target_tok, draft_vocab, target_vocab)
        self.cache = NgramCache(max_n=max_n, policy=policy, max_entries=max_entries,
                                max_bytes=max_bytes)
        if persist and store_path is None:
            store_path = subdir("pairs", self.key) / "ngrams.sqlite"
        self.store = NgramStore(store_path, self.key) if store_path is not None else None
        self._token_translators: dict[str, Translator] = {}
        on_disk_seeded = self.store.count()[0] if self.store else 0
        if self.store:
            self.store.load_into(self.cache)
        if seed_ngrams and not on_disk_seeded:
            seed(self.cache, self.vmap, draft_tok, target_tok)
            self.save()

    def save(self) -> int:
        """Flush new entries and hit counts to the store (no-op without one)."""
        return self.store.flush(self.cache) if self.store else 0

    def translator(self, strategy: str):
        """`tli`: direct mapping only; `omnidraft`: direct mapping plus the n-gram cache;
        `slem` / `dtw`: re-tokenise the draft text with the target tokenizer (strings.py);
        `slrs`: a proposer of target tokens from the drafter's string distribution (slrs.py)."""
        if strategy == "slrs":
            from omnidraft.propose.slrs import SLRSProposer

            if getattr(self, "_slrs", None) is None:  # its byte tables are built once per pair
                self._slrs = SLRSProposer(self.vmap)
            return self._slrs
        if strategy in ("slem", "dtw"):
            from omnidraft.translate.strings import StringTranslator

            return StringTranslator(self.vmap, self.target_tok, strategy)
        if strategy not in self._token_translators:  # stateless: built once (the d2t list is 49k+ ids)
            self._token_translators[strategy] = Translator(self.vmap, self.cache if strategy == "omnidraft" else None)
        return self._token_translators[strategy]
