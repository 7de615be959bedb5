"""What `omnidraft memory stats | clear` reads, says and does for one pair's memory: its size on disk and
against the bound, and per space its entries, how often a round found something in it, and how
the memory's proposals fared beside context copies and the drafter's drafts; forgetting a space,
or the whole memory (also an unreadable one: its files removed).

Knows the store; nothing about pairs or printing.
"""

from __future__ import annotations

from pathlib import Path

from omnidraft.errors import OmniDraftError
from omnidraft.memory.config import MemoryConfig
from omnidraft.memory.store import FILE, MemoryStore

SOURCES = ("memory", "context", "drafter")


def summarize(folder: Path, cfg: MemoryConfig = MemoryConfig()) -> dict | None:
    """The memory in ``folder`` as a JSON-able dict (None: there is none); an unreadable one says why."""
    if not (Path(folder) / FILE).exists():
        return None
    try:
        store = MemoryStore(folder, cfg)
    except OmniDraftError as err:
        return {"error": str(err)}
    try:
        spaces = []
        for s in store.stats():
            lookups = s.tally.get("lookups", {})
            spaces.append({
                "space": s.space, "entries": s.entries, "tokens": s.tokens, "bytes": s.bytes,
                "lookups": lookups.get("rounds", 0),
                "hit_rate": round(lookups["proposed"] / lookups["rounds"], 4) if lookups.get("rounds") else None,
                "acceptance": {src: round(t["accepted"] / t["proposed"], 4) if t["proposed"] else None
                               for src in SOURCES if (t := s.tally.get(src))},
                "accepted_tokens": {src: t["accepted"] for src in SOURCES if (t := s.tally.get(src))}})
        return {"file_bytes": store.file_bytes(), "charged_bytes": store.charged(), "max_bytes": cfg.max_bytes,
                "spaces": spaces}
    finally:
        store.close()


def forget(folder: Path, space: str | None = None) -> int:
    """Forget ``space``'s entries (None: every space's). An unreadable memory is removed whole.
    Returns the entries forgotten (-1: an unreadable file was removed)."""
    if not (Path(folder) / FILE).exists():
        return 0
    try:
        store = MemoryStore(folder)
    except OmniDraftError:
        for suffix in ("", "-wal", "-shm"):
            (Path(folder) / (FILE + suffix)).unlink(missing_ok=True)
        return -1
    try:
        return store.clear(space)
    finally:
        store.close()


def describe(name: str, st: dict | None) -> str:
    """``summarize``'s figures of pair ``name`` as lines of text."""
    if st is None or "error" in st:
        return f"{name}: {'no memory yet' if st is None else st['error']}"
    lines = [f"{name}: {st['file_bytes'] / 1e6:.1f} MB on disk, {st['charged_bytes'] / 2**20:.1f} of "
             f"{st['max_bytes'] / 2**20:.0f} MiB bound"]
    for sp in st["spaces"]:
        hits = "-" if sp["hit_rate"] is None else f"{sp['hit_rate']:.2f}"
        acc = ", ".join(f"{src} {a:.2f}" for src, a in sp["acceptance"].items() if a is not None) or "-"
        lines.append(f"  {sp['space']}: {sp['entries']} answers, {sp['tokens']} tokens; found in {hits} of "
                     f"{sp['lookups']} lookups; acceptance {acc}")
    return "\n".join(lines)
