"""The reasoning store's SQLite backend: one table in the store's file (WAL), its entries evicted in
least-recently-used order.

Contract: stdlib only (``sqlite3``); called under ``ReasoningStore``'s lock, from the store
thread (``addon.shell.store_worker``) or a test. Layout: docs/reasoning.md#the-store."""

from __future__ import annotations

import json
import secrets
import sqlite3

from addon.stores.base import RATIOS_KEPT, SECRET_BYTES, Bounds, Put

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reasoning (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    size  INTEGER NOT NULL,
    used  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS reasoning_used ON reasoning (used);
CREATE TABLE IF NOT EXISTS calibration (
    key    TEXT PRIMARY KEY,
    ratios TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bridge_secret (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value BLOB NOT NULL
);
"""


class SqliteBackend:
    """One table, ``used`` indexed for eviction in LRU order. Autocommit: each statement is
    its own transaction (``put`` = one upsert, ``get`` = one read and one touch)."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            count, size = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM reasoning"
            ).fetchone()
        except sqlite3.Error:
            self._db.close()
            raise
        self._count: int = count
        self._bytes: int = size
        self._secret: bytes | None = None

    def secret(self) -> bytes:
        """Made once per file (the first process to ask writes it; the others read it)."""
        if self._secret is None:
            self._db.execute(
                "INSERT OR IGNORE INTO bridge_secret (id, value) VALUES (1, ?)",
                (secrets.token_bytes(SECRET_BYTES),),
            )
            row = self._db.execute("SELECT value FROM bridge_secret WHERE id = 1").fetchone()
            self._secret = bytes(row[0])
        return self._secret

    def get(self, key: str, now: float, ttl: float) -> str | None:
        row = self._db.execute("SELECT value, used FROM reasoning WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        text, used = row
        if ttl > 0 and now - used >= ttl:
            self._delete(key)
            return None
        self._db.execute("UPDATE reasoning SET used = ? WHERE key = ?", (now, key))
        return str(text)

    def get_many(self, keys: list[str], now: float, ttl: float) -> list[str | None]:
        return [self.get(k, now, ttl) for k in keys]

    def put(self, key: str, text: str, size: int, now: float, bounds: Bounds) -> None:
        old = self._db.execute("SELECT size FROM reasoning WHERE key = ?", (key,)).fetchone()
        self._db.execute(
            "INSERT OR REPLACE INTO reasoning (key, value, size, used) VALUES (?, ?, ?, ?)",
            (key, text, size, now),
        )
        if old is None:
            self._count += 1
        else:
            self._bytes -= old[0]
        self._bytes += size
        self.evict(now, bounds)

    def put_many(self, items: list[Put], now: float, bounds: Bounds) -> None:
        """Every value in one transaction (one commit), then the bounds."""
        self._db.execute("BEGIN")
        try:
            for item in items:
                if item.text is None:
                    self._delete(item.key)
                    continue
                old = self._db.execute(
                    "SELECT size FROM reasoning WHERE key = ?", (item.key,)
                ).fetchone()
                self._db.execute(
                    "INSERT OR REPLACE INTO reasoning (key, value, size, used) VALUES (?, ?, ?, ?)",
                    (item.key, item.text, item.size, now),
                )
                if old is None:
                    self._count += 1
                else:
                    self._bytes -= old[0]
                self._bytes += item.size
            self.evict(now, bounds)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            self._count, self._bytes = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM reasoning"
            ).fetchone()
            raise

    def evict(self, now: float, bounds: Bounds) -> None:
        ttl, max_entries, max_bytes = bounds.ttl, bounds.max_entries, bounds.max_bytes
        if ttl > 0:
            row = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM reasoning WHERE used <= ?",
                (now - ttl,),
            ).fetchone()
            if row[0]:
                self._db.execute("DELETE FROM reasoning WHERE used <= ?", (now - ttl,))
                self._count -= row[0]
                self._bytes -= row[1]
        while self._count > max_entries or self._bytes > max_bytes:
            # The oldest uses first, in batches: a few statements even for a big shrink.
            batch = max(1, min(self._count - max_entries, 512))
            rows = self._db.execute(
                "SELECT key, size FROM reasoning ORDER BY used LIMIT ?", (batch,)
            ).fetchall()
            if not rows:
                self._count, self._bytes = 0, 0
                return
            for key, size in rows:
                if self._count <= max_entries and self._bytes <= max_bytes:
                    return
                self._db.execute("DELETE FROM reasoning WHERE key = ?", (key,))
                self._count -= 1
                self._bytes -= size

    def delete(self, key: str) -> None:
        self._delete(key)

    def _delete(self, key: str) -> None:
        row = self._db.execute("SELECT size FROM reasoning WHERE key = ?", (key,)).fetchone()
        if row is not None:
            self._db.execute("DELETE FROM reasoning WHERE key = ?", (key,))
            self._count -= 1
            self._bytes -= row[0]

    def count(self) -> int:
        return self._count

    def size(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._db.execute("DELETE FROM reasoning")
        self._count, self._bytes = 0, 0

    def ratios(self, keys: list[str]) -> dict[str, list[float]]:
        """The calibration's ratios kept under each of ``keys`` (none kept: an empty list)."""
        out: dict[str, list[float]] = {}
        for key in keys:
            row = self._db.execute(
                "SELECT ratios FROM calibration WHERE key = ?", (key,)
            ).fetchone()
            out[key] = _ratios(row[0]) if row is not None else []
        return out

    def add_ratios(self, lessons: dict[str, list[float]]) -> None:
        """Each key's new ratios after its kept ones (the last ``RATIOS_KEPT``), in one
        transaction that holds the file's write lock from its read (another process's lessons
        in between are not lost)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for key, new in lessons.items():
                kept = self.ratios([key])[key]
                text = json.dumps([*kept, *new][-RATIOS_KEPT:])
                self._db.execute(
                    "INSERT OR REPLACE INTO calibration (key, ratios) VALUES (?, ?)", (key, text)
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()


def _ratios(text: str) -> list[float]:
    """A stored list of ratios read back (anything else: none)."""
    try:
        got = json.loads(text)
    except ValueError:
        return []
    if not isinstance(got, list):
        return []
    return [float(r) for r in got if isinstance(r, int | float) and r > 0]
