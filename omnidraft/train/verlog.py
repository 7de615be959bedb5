"""The durable verification log: every generation's training record, per pair, in SQLite (WAL).

Appends are one transaction each, so a crash never leaves half a record; the log is bounded in
bytes per pair with oldest-first pruning. Readers page by id. One log may be used from any
thread (an app's workers): its connection is shared under a lock, one statement or transaction
at a time. Knows bytes and ids; nothing about models (records.py decodes the bytes).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

SCHEMA = 1
DEFAULT_MAX_BYTES = 256 << 20


class VerificationLog:
    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._mutex = threading.Lock()
        self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        self.db.execute("CREATE TABLE IF NOT EXISTS records (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                        "pair TEXT NOT NULL, created REAL NOT NULL, prompt TEXT NOT NULL, "
                        "size INTEGER NOT NULL, data BLOB NOT NULL)")
        self.db.execute("CREATE INDEX IF NOT EXISTS records_pair ON records (pair, id)")

    def close(self) -> None:
        with self._mutex:
            self.db.close()

    def append(self, pair: str, prompt: str, data: bytes) -> int:
        """Store one record; prune the pair's oldest past the byte bound. Returns its id."""
        with self._mutex:
            return self._append(pair, prompt, data)

    def _append(self, pair: str, prompt: str, data: bytes) -> int:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            cur = self.db.execute("INSERT INTO records (pair, created, prompt, size, data) VALUES (?, ?, ?, ?, ?)",
                                  (pair, time.time(), prompt, len(data), data))
            rid = cur.lastrowid
            total = self.db.execute("SELECT coalesce(sum(size), 0) FROM records WHERE pair = ?",
                                    (pair,)).fetchone()[0]
            if total > self.max_bytes:
                rows = self.db.execute("SELECT id, size FROM records WHERE pair = ? ORDER BY id",
                                       (pair,)).fetchall()
                cut, drop = total, []
                for i, size in rows:
                    if cut <= self.max_bytes or i == rid:
                        break
                    drop.append((i,))
                    cut -= size
                self.db.executemany("DELETE FROM records WHERE id = ?", drop)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return rid

    def read(self, pair: str, after: int = 0, limit: int = 1000) -> list[tuple[int, str, bytes]]:
        """(id, prompt, record bytes) with id > ``after``, oldest first."""
        with self._mutex:
            return self.db.execute("SELECT id, prompt, data FROM records WHERE pair = ? AND id > ? "
                                   "ORDER BY id LIMIT ?", (pair, after, limit)).fetchall()

    def count(self, pair: str, after: int = 0, skip_every: int = 0) -> int:
        """Records of ``pair`` with id > ``after``; with ``skip_every`` > 0, not counting ids that
        are multiples of it (the held-out ones). One indexed query: the idle daemon polls with it."""
        with self._mutex:
            return self.db.execute("SELECT count(*) FROM records WHERE pair = ? AND id > ? AND "
                                   "(? = 0 OR id % ? != 0)", (pair, after, skip_every, skip_every)).fetchone()[0]

    def stamp(self) -> tuple:
        """What an append changes (the size and time of the database and its WAL file), read
        with two stats and no query: the idle daemon compares it before it counts anything."""
        out = []
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                st = path.stat()
                out.append((st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                out.append(None)
        return tuple(out)

    def size(self, pair: str) -> int:
        with self._mutex:
            return self.db.execute("SELECT coalesce(sum(size), 0) FROM records WHERE pair = ?",
                                   (pair,)).fetchone()[0]

    def pairs(self) -> list[str]:
        with self._mutex:
            return [r[0] for r in self.db.execute("SELECT DISTINCT pair FROM records ORDER BY pair")]
