"""Seeding the n-gram cache from the two vocabularies: every token with no direct mapping that
the other tokenizer spells with 2..max_n tokens becomes an entry, before any text is seen.

Knows the vocabulary map's byte tables and the tokenizers' encode call; nothing about how the
cache stores, bounds or persists its entries (ngram.py, ngram_store.py).
"""

from __future__ import annotations

from typing import Iterable

from omnidraft.translate.ngram import Key, NgramCache, Value

_ENTRIES: dict[tuple[str, int], tuple[list[Key], list[Value]]] = {}  # (pair key, max_n) -> entries


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


def _encode(tok, texts: list[str]) -> list[list[int]]:
    """Token ids of each text without special tokens: a fast tokenizer's backend in one batch
    (what ``tok(texts)`` returns, without its per-text Python conversion), else ``tok`` itself."""
    if not texts:
        return []
    backend = getattr(tok, "backend_tokenizer", None) if getattr(tok, "is_fast", False) else None
    if backend is None:
        return tok(texts, add_special_tokens=False)["input_ids"]
    return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]


def entries(vmap, draft_tok, target_tok, max_n: int) -> tuple[list[Key], list[Value]]:
    """(drafter keys, target values): every target token with no direct mapping that the drafter
    spells with 2..max_n tokens (rule (1) merges), then every drafter token with no direct
    mapping that the target spells with 2..max_n tokens (splits)."""
    keys, values = [], []
    tids, texts = _texts(vmap.target_bytes, (t for t in range(len(vmap.t2d)) if vmap.t2d[t] < 0))
    for t, split in zip(tids, _encode(draft_tok, texts)):
        if 2 <= len(split) <= max_n:
            keys.append(tuple(split))
            values.append((t,))
    dids, texts = _texts(vmap.draft_bytes, (d for d in range(len(vmap.d2t)) if vmap.d2t[d] < 0))
    for d, split in zip(dids, _encode(target_tok, texts)):
        if 2 <= len(split) <= max_n:
            keys.append((d,))
            values.append(tuple(split))
    return keys, values


def seed(cache: NgramCache, vmap, draft_tok, target_tok, key: str | None = None) -> int:
    """Seed ``cache`` from the vocabularies (``entries``). ``key``: the pair's key
    (vocab.pair_key); the entries, a function of the two tokenizers alone, are then computed once
    per process. Returns entries added."""
    memo = (key, cache.max_n)
    found = _ENTRIES.get(memo) if key is not None else None
    if found is None:
        found = entries(vmap, draft_tok, target_tok, cache.max_n)
        if key is not None:
            _ENTRIES[memo] = found
    return cache.seed(*found)
