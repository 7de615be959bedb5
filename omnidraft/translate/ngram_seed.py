"""Seeding the n-gram cache from the two vocabularies: every token with no direct mapping that
the other tokenizer spells with 2..max_n tokens becomes an entry, before any text is seen.

Knows the vocabulary map's byte tables and the tokenizers' encode call; nothing about how the
cache stores, bounds or persists its entries (ngram.py, ngram_store.py).
"""

from __future__ import annotations

from typing import Iterable

from omnidraft.translate.ngram import NgramCache


def _texts(table: list[bytes | None], ids: Iterable[int]) -> tuple[list[int], list[str]]:
    keep, texts = [], []
    for i in ids:
        data = table[i]
        if not data:
            continue
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            continue
        keep.append(i)
    return keep, texts


def seed(cache: NgramCache, vmap, draft_tok, target_tok) -> int:
    """Seed from the vocabularies: every target token with no direct mapping that the drafter
    spells with 2..max_n tokens (rule (1) merges), and every drafter token with no direct mapping
    that the target spells with 2..max_n tokens (splits). Returns entries added."""
    added = 0
    tids, texts = _texts(vmap.target_bytes, (t for t in range(len(vmap.t2d)) if vmap.t2d[t] < 0))
    if texts:
        for t, split in zip(tids, draft_tok(texts, add_special_tokens=False)["input_ids"]):
            if 2 <= len(split) <= cache.max_n:
                added += cache.add(tuple(split), (t,), seeded=True)
    dids, texts = _texts(vmap.draft_bytes, (d for d in range(len(vmap.d2t)) if vmap.d2t[d] < 0))
    if texts:
        for d, split in zip(dids, target_tok(texts, add_special_tokens=False)["input_ids"]):
            if 2 <= len(split) <= cache.max_n:
                added += cache.add((d,), tuple(split), seeded=True)
    return added
