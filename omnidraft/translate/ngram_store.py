"""Durable n-gram cache per (drafter, target) pair: one SQLite file in WAL mode.

Survives kill -9 at any instant (every flush is one transaction), keeps hit counts so LFU order
survives restarts, and lets several processes (the app and the fine-tuning daemon) flush at once
without losing entries: writers only insert new keys and add hit deltas. A foreign, newer or
corrupt file is moved aside with a warning and the cache starts empty. A store may be used from
any thread (an app's workers): its connection is shared under a lock. Knows SQLite and the
cache's packed entries; nothing about tokenizers or models.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import warnings
from pathlib import Path

from omnidraft.translate.ngram import NgramCache

FORMAT = "omnidraft-ngram/1"
_KEY_BYTES = 12  # packed ints are at most 4 * 19 = 76 bits


def _b(v: int) -> bytes:
    return v.to_bytes(_KEY_BYTES, "big")


def _i(b: bytes) -> int:
    return int.from_bytes(b, "big")


class NgramStore:
    def __init__(self, path: str | Path, pair_id: str):
        self.path = Path(path)
        self.pair_id = pair_id
        self._mutex = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = self._open()
        except (sqlite3.DatabaseError, ValueError) as err:
            self._quarantine(err)
            self.db = self._open()

    # ------------------------------------------------------------------ opening
    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            db.execute("CREATE TABLE IF NOT EXISTS entries (key BLOB PRIMARY KEY, value BLOB NOT NULL,"
                       " seeded INTEGER NOT NULL, hits INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID")
            db.execute("BEGIN IMMEDIATE")
            meta = dict(db.execute("SELECT k, v FROM meta").fetchall())
            if not meta:
                db.executemany("INSERT INTO meta VALUES (?, ?)", [("format", FORMAT), ("pair", self.pair_id)])
            db.execute("COMMIT")
            if meta and meta.get("format") != FORMAT:
                raise ValueError(f"unknown format {meta.get('format')!r}")
            if meta and meta.get("pair") != self.pair_id:
                raise ValueError(f"file belongs to pair {meta.get('pair')!r}")
            db.execute("SELECT count(*) FROM entries").fetchone()
            return db
        except BaseException:
            db.close()
            raise

    def _quarantine(self, err: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.path}{suffix}")
            if src.exists():
                os.replace(src, f"{aside}{suffix}")
        warnings.warn(f"n-gram cache {self.path} is unusable ({err}); moved to {aside}, starting empty",
                      RuntimeWarning, stacklevel=3)

    def close(self) -> None:
        with self._mutex:
            self.db.close()

    # ------------------------------------------------------------------ load / flush
    def count(self) -> tuple[int, int]:
        """(seeded, learned) entries on disk."""
        with self._mutex:
            rows = dict(self.db.execute("SELECT seeded, count(*) FROM entries GROUP BY seeded").fetchall())
        return rows.get(1, 0), rows.get(0, 0)

    def load_into(self, cache: NgramCache) -> int:
        """Fill ``cache`` with the most-hit entries that fit, least-hit first, so that eviction
        order follows the stored hits; LFU scores are the stored hit counts, LRU ones their rank.
        Returns entries loaded."""
        limit = cache.capacity if cache.capacity is not None else -1
        with self._mutex:
            rows = self.db.execute("SELECT key, value, seeded, hits FROM entries ORDER BY hits DESC "
                                   "LIMIT ?", (limit,)).fetchall()
        lfu = cache.policy == "lfu"
        n = cache.restore([(_i(key), _i(value), bool(seeded),
                            min(hits, 2**32 - 1) if lfu else rank)
                           for rank, (key, value, seeded, hits) in enumerate(reversed(rows))])
        cache.drain()
        return n

    def flush(self, cache: NgramCache) -> int:
        """Write entries added and hits counted since the last flush, in one transaction."""
        with self._mutex:
            return self._flush(cache)

    def _flush(self, cache: NgramCache) -> int:
        added, hits = cache.drain()
        if not added and not hits:
            return 0
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany("INSERT OR IGNORE INTO entries (key, value, seeded, hits) VALUES (?, ?, ?, 0)",
                                [(_b(k), _b(v), int(s)) for k, v, s in added])
            self.db.executemany("UPDATE entries SET hits = hits + ? WHERE key = ?",
                                [(n, _b(k)) for k, n in hits])
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            cache.added.extend(k for k, _, _ in added)  # keep them for the next flush
            for k, n in hits:
                cache.hits[k] = cache.hits.get(k, 0) + n
            raise
        return len(added)
