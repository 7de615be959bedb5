"""A drafter/target pair's translation state: the vocabulary map and the n-gram cache.

Knows tokenizers and vocab sizes; nothing about running models.
"""

from __future__ import annotations

from .ngram import NgramCache, seed
from .translate import Translator
from .vocab import VocabMap, load_or_build


class Pair:
    def __init__(self, draft_tok, target_tok, draft_vocab: int, target_vocab: int, *,
                 max_n: int = 4, seed_ngrams: bool = True):
        self.draft_tok = draft_tok
        self.target_tok = target_tok
        self.vmap: VocabMap = load_or_build(draft_tok, target_tok, draft_vocab, target_vocab)
        self.cache = NgramCache(max_n=max_n)
        if seed_ngrams:
            seed(self.cache, self.vmap, draft_tok, target_tok)

    def translator(self, strategy: str) -> Translator:
        """`tli`: direct mapping only; `omnidraft`: direct mapping plus the n-gram cache."""
        return Translator(self.vmap, self.cache if strategy == "omnidraft" else None)
