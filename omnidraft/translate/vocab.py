"""Vocabulary map between a drafter and a target tokenizer: every token as raw bytes, direct
mapping over the intersection of the two vocabularies, special tokens mapped by role.

Built once per pair and cached on disk, and read from disk once per process. Knows tokenizers;
nothing about models or n-grams.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from omnidraft.fsio import atomic_path
from omnidraft.home import subdir

# Special tokens are mapped by role, first role wins: end of sequence, end and start of a chat
# turn, beginning of sequence. Other specials (pad, unk, tool markers) have no counterpart.
ROLES = ("eos", "turn_end", "turn_start", "bos")
_TURN_TOKENS = {
    "turn_end": ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>"),
    "turn_start": ("<|im_start|>", "<start_of_turn>", "<|start_header_id|>"),
}
FORMAT_VERSION = 1
_LOADED: dict[str, "VocabMap"] = {}  # pair key -> map: each Session of a pair in this process reads it once


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-unicode -> byte table (the inverse of bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _kind(tok) -> str:
    """'bytelevel' (GPT-2 style Ġ/Ċ) or 'sentencepiece' (▁ and <0xNN> byte fallback)."""
    spec = json.loads(tok.backend_tokenizer.to_str())
    text = json.dumps([spec.get("decoder"), spec.get("pre_tokenizer")])
    if '"ByteLevel"' in text:
        return "bytelevel"
    return "sentencepiece"


def token_bytes(tok, vocab_size: int) -> tuple[list[bytes | None], str]:
    """Raw bytes of every id < vocab_size (None for special/added tokens and unused ids)."""
    kind = _kind(tok)
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    table: list[bytes | None] = [None] * vocab_size
    dec = _byte_decoder()
    for piece, i in tok.get_vocab().items():
        if i >= vocab_size or i in special:
            continue
        if kind == "bytelevel":
            try:
                table[i] = bytes(dec[c] for c in piece)
            except KeyError:  # an added, non-byte-level token: plain text
                table[i] = piece.encode("utf-8")
        else:
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                table[i] = bytes([int(piece[3:5], 16)])
            else:
                table[i] = piece.replace("▁", " ").encode("utf-8")
    return table, kind


def _role_ids(tok) -> dict[str, int]:
    vocab = tok.get_vocab()
    out = {}
    for role in ROLES:
        if role in _TURN_TOKENS:
            found = [vocab[t] for t in _TURN_TOKENS[role] if t in vocab]
            i = found[0] if found else None
        else:
            i = getattr(tok, f"{role}_token_id", None)
        if i is not None and int(i) not in out.values():
            out[role] = int(i)
    return out


@dataclass
class VocabMap:
    """Direct mapping between drafter ids (Vd) and target ids (Vt)."""

    d2t: np.ndarray  # [Vd] int64, target id of each drafter id, -1 where none
    t2d: np.ndarray  # [Vt] int64, drafter id of each target id, -1 where none
    draft_bytes: list[bytes | None]  # [Vd]
    target_bytes: list[bytes | None]  # [Vt]
    draft_kind: str
    target_kind: str

    @property
    def shared(self) -> int:
        return int((self.d2t >= 0).sum())

    def direct(self, d: int) -> int:
        """The target id drafter id ``d`` maps to directly; -1 if none (or ``d`` is past the table)."""
        return int(self.d2t[d]) if d < len(self.d2t) else -1


def _fingerprint(tok, vocab_size: int) -> str:
    h = hashlib.sha256(tok.backend_tokenizer.to_str().encode("utf-8"))
    h.update(str(vocab_size).encode())
    return h.hexdigest()[:16]


def build(draft_tok, target_tok, draft_vocab: int, target_vocab: int) -> VocabMap:
    """The map for model vocab sizes ``draft_vocab``/``target_vocab`` (embedding rows, which
    may exceed the tokenizers' own sizes)."""
    dbytes, dkind = token_bytes(draft_tok, draft_vocab)
    tbytes, tkind = token_bytes(target_tok, target_vocab)
    by_bytes: dict[bytes, int] = {}
    for i, b in enumerate(tbytes):
        if b is not None and b not in by_bytes:
            by_bytes[b] = i
    d2t = np.full(draft_vocab, -1, dtype=np.int64)
    for i, b in enumerate(dbytes):
        if b is not None and b in by_bytes:
            d2t[i] = by_bytes[b]
    droles, troles = _role_ids(draft_tok), _role_ids(target_tok)
    for role in ROLES:
        if role in droles and role in troles and droles[role] < draft_vocab:
            d2t[droles[role]] = troles[role]
    t2d = np.full(target_vocab, -1, dtype=np.int64)
    for d in range(draft_vocab - 1, -1, -1):  # lowest drafter id wins
        if d2t[d] >= 0:
            t2d[d2t[d]] = d
    return VocabMap(d2t, t2d, dbytes, tbytes, dkind, tkind)


def _pack(table: list[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
    """Byte table -> (uint8 blob, [V, 2] int64 (offset, length); length -1 for None)."""
    blob = b"".join(b for b in table if b)
    spans = np.empty((len(table), 2), dtype=np.int64)
    off = 0
    for i, b in enumerate(table):
        spans[i] = (off, -1 if b is None else len(b))
        off += len(b or b"")
    return np.frombuffer(blob, dtype=np.uint8), spans


def _unpack(blob: np.ndarray, spans: np.ndarray) -> list[bytes | None]:
    raw = blob.tobytes()
    return [None if n < 0 else raw[o:o + n] for o, n in spans.tolist()]


def pair_key(draft_tok, target_tok, draft_vocab: int, target_vocab: int) -> str:
    """Identifies a (drafter, target) vocabulary pair by both tokenizers' content."""
    return f"{_fingerprint(draft_tok, draft_vocab)}-{_fingerprint(target_tok, target_vocab)}"


def load_or_build(draft_tok, target_tok, draft_vocab: int, target_vocab: int, key: str | None = None) -> VocabMap:
    """``build`` with an on-disk cache keyed by both tokenizers' content (``key``: their
    ``pair_key``, computed here if not given), held in memory for the process's later Sessions of
    the pair (a map is never changed once built)."""
    key = key or pair_key(draft_tok, target_tok, draft_vocab, target_vocab)
    if key not in _LOADED:
        _LOADED[key] = _load_or_build(draft_tok, target_tok, draft_vocab, target_vocab, key)
    return _LOADED[key]


def _load_or_build(draft_tok, target_tok, draft_vocab: int, target_vocab: int, key: str) -> VocabMap:
    path = subdir("vocab") / f"{key}.npz"
    if path.is_file():
        try:
            z = np.load(path, allow_pickle=False)
            if int(z["version"]) == FORMAT_VERSION:
                return VocabMap(z["d2t"], z["t2d"], _unpack(z["db"], z["do"]), _unpack(z["tb"], z["to"]),
                                str(z["dkind"]), str(z["tkind"]))
        except Exception:  # corrupt or foreign file: rebuild below
            pass
    vm = build(draft_tok, target_tok, draft_vocab, target_vocab)
    db, do = _pack(vm.draft_bytes)
    tb, to = _pack(vm.target_bytes)
    with atomic_path(path, ".npz") as tmp:  # np.savez adds .npz to a name without it
        np.savez(tmp, d2t=vm.d2t, t2d=vm.t2d, db=db, do=do, tb=tb, to=to, dkind=vm.draft_kind,
                 tkind=vm.target_kind, version=np.array(FORMAT_VERSION))
    return vm
