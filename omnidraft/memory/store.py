"""A pair's memory on disk: every remembered entry (an answer the target committed, after the part
of its prompt that was new), in target ids, in one SQLite file (WAL) under the pair's folder.

- **Spaces**: each entry belongs to one space (the local user's, or one per API key of a server);
  readers ask for one space's entries only, so a space never sees another's.
- **Bounded**: every entry is charged what it costs on disk and in an index in RAM
  (config.entry_bytes); past ``max_bytes`` over all spaces, the least useful entries go first
  (those whose proposals were last accepted longest ago; an entry never used counts from when it
  was written), down to ``low_water`` of the bound, in the transaction that added the entry.
  Each eviction or clear moves the ``epoch`` on: a process whose index holds entries since gone
  builds it again.
- **Crash-safe**: an entry is written in one transaction with a CRC of its ids; ``kill -9`` at any
  point loses at most the entry in flight. A file that is not a database or fails SQLite's quick
  check is refused with one line (the caller runs without a memory); a row whose CRC does not match
  is skipped.
- **Shared**: any thread (one connection under a lock) and any process (SQLite's locking).

Also kept per space: how the memory's proposals, context copies and drafts fared (``tally``), and
how often a round looked the memory up and found something, for ``omnidraft memory stats``.

Knows SQLite and ids as bytes; nothing about indexes or decoding.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from omnidraft.errors import OmniDraftError
from omnidraft.memory.config import MemoryConfig, entry_bytes

SCHEMA = 1
FILE = "memory.sqlite"


@dataclass(frozen=True)
class SpaceStats:
    space: str
    entries: int
    tokens: int
    bytes: int  # charged against the bound
    tally: dict  # source -> {"rounds", "proposed", "accepted"}; "lookups" -> {"rounds", "found"}


class MemoryStore:
    """The memory file of one pair (``folder``/memory.sqlite)."""

    def __init__(self, folder: Path, cfg: MemoryConfig = MemoryConfig()):
        self.path = Path(folder) / FILE
        self.cfg = cfg
        self._mutex = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OmniDraftError(f"the memory folder {self.path.parent} cannot be made: {err.strerror}",
                                 "name a folder that can be (or turn the memory off)") from None
        try:
            self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # a new file gives evicted pages back
            check = self.db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('epoch', '0')")
            self.db.execute("CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                            "space TEXT NOT NULL, created REAL NOT NULL, useful REAL NOT NULL, "
                            "helped INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL, size INTEGER NOT NULL, "
                            "crc INTEGER NOT NULL, ids BLOB NOT NULL)")
            self.db.execute("CREATE INDEX IF NOT EXISTS entries_space ON entries (space, id)")
            self.db.execute("CREATE INDEX IF NOT EXISTS entries_useful ON entries (useful, id)")
            self.db.execute("CREATE TABLE IF NOT EXISTS tally (space TEXT NOT NULL, source TEXT NOT NULL, "
                            "rounds INTEGER NOT NULL, proposed INTEGER NOT NULL, accepted INTEGER NOT NULL, "
                            "PRIMARY KEY (space, source))")
        except sqlite3.DatabaseError as err:
            raise OmniDraftError(f"the memory at {self.path} is unreadable ({err})",
                                 "`omnidraft memory clear` starts it afresh; the pair runs without it meanwhile")

    def close(self) -> None:
        with self._mutex:
            self.db.close()

    def epoch(self) -> int:
        """Moves on whenever entries are evicted or cleared."""
        with self._mutex:
            return int(self.db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()[0])

    def add(self, space: str, ids: list[int], helped: dict[int, int] | None = None,
            tally: dict[str, tuple[int, int, int]] | None = None) -> int | None:
        """Remember ``ids`` in ``space`` (none: only the rest), credit the entries whose proposals
        ``helped`` (entry id -> tokens accepted), add ``tally`` (source -> rounds, proposed,
        accepted) and evict past the bound, in one transaction. Returns the new entry's id."""
        now = time.time()
        data = np.asarray(ids, "<u4").tobytes()
        with self._mutex:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for entry, tokens in (helped or {}).items():
                    self.db.execute("UPDATE entries SET useful = ?, helped = helped + ? WHERE id = ?",
                                    (now, tokens, entry))
                for source, (rounds, proposed, accepted) in (tally or {}).items():
                    self.db.execute("INSERT INTO tally VALUES (?, ?, ?, ?, ?) ON CONFLICT (space, source) DO UPDATE "
                                    "SET rounds = rounds + ?, proposed = proposed + ?, accepted = accepted + ?",
                                    (space, source, rounds, proposed, accepted, rounds, proposed, accepted))
                rid = None
                if ids:
                    rid = self.db.execute(
                        "INSERT INTO entries (space, created, useful, tokens, size, crc, ids) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (space, now, now, len(ids), entry_bytes(len(ids)), zlib.crc32(data), data)).lastrowid
                    self._evict(rid)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return rid

    def _evict(self, keep: int) -> None:
        """Past the bound: the least useful entries (not ``keep``) go, down to the low water mark."""
        total = self.db.execute("SELECT coalesce(sum(size), 0) FROM entries").fetchone()[0]
        if total <= self.cfg.max_bytes:
            return
        goal = int(self.cfg.max_bytes * self.cfg.low_water)
        drop = []
        for rid, size in self.db.execute("SELECT id, size FROM entries ORDER BY useful, id"):
            if total <= goal:
                break
            if rid != keep:
                drop.append((rid,))
                total -= size
        self.db.executemany("DELETE FROM entries WHERE id = ?", drop)
        self.db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
        self.db.execute("PRAGMA incremental_vacuum")

    def entries(self, space: str, after: int = 0) -> tuple[list[tuple[int, np.ndarray]], int]:
        """(entries of ``space`` with id > ``after``, oldest first, as (id, ids); rows skipped as
        damaged)."""
        with self._mutex:
            rows = self.db.execute("SELECT id, crc, ids FROM entries WHERE space = ? AND id > ? ORDER BY id",
                                   (space, after)).fetchall()
        good = [(rid, np.frombuffer(data, "<u4").astype(np.int32)) for rid, crc, data in rows
                if len(data) % 4 == 0 and zlib.crc32(data) == crc]
        return good, len(rows) - len(good)

    def clear(self, space: str | None = None) -> int:
        """Forget ``space``'s entries and tally (None: every space's). Returns the entries dropped."""
        with self._mutex:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                where, args = ("", ()) if space is None else (" WHERE space = ?", (space,))
                dropped = self.db.execute(f"DELETE FROM entries{where}", args).rowcount
                self.db.execute(f"DELETE FROM tally{where}", args)
                self.db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("PRAGMA incremental_vacuum")
        return dropped

    def stats(self) -> list[SpaceStats]:
        """Each space's entries, tokens, bytes charged and tally."""
        with self._mutex:
            sizes = self.db.execute("SELECT space, count(*), coalesce(sum(tokens), 0), coalesce(sum(size), 0) "
                                    "FROM entries GROUP BY space").fetchall()
            tallies = self.db.execute("SELECT space, source, rounds, proposed, accepted FROM tally").fetchall()
        out: dict[str, SpaceStats] = {s: SpaceStats(s, n, t, b, {}) for s, n, t, b in sizes}
        for space, source, rounds, proposed, accepted in tallies:
            out.setdefault(space, SpaceStats(space, 0, 0, 0, {})).tally[source] = {
                "rounds": rounds, "proposed": proposed, "accepted": accepted}
        return [out[s] for s in sorted(out)]

    def charged(self) -> int:
        """Bytes charged against the bound, every space together."""
        with self._mutex:
            return self.db.execute("SELECT coalesce(sum(size), 0) FROM entries").fetchone()[0]

    def file_bytes(self) -> int:
        """The file and its write-ahead log on disk."""
        return sum(p.stat().st_size for p in (self.path, self.path.with_name(FILE + "-wal")) if p.exists())
