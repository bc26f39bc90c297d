"""The usage ledger: every answered flow's tokens, added to counters by day, route, model, key
name, client and user, in the store's backend (``bridge_store``: memory, SQLite, Redis).

Contract: plain values, stdlib only (``sqlite3``; ``redis`` through ``addon.stores.redis_backend``); no
mitmproxy, no logging (the shell logs what ``StoreError`` says). Nothing secret goes in: a key
is named by its variable, never its value; a credential-looking ``user`` is hashed."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from addon.model import Usage
from addon.stores.reasoning import CANNOT_PRIVATE, Notice, StoreError, private_file, store_location

if TYPE_CHECKING:
    from addon.stores.redis_backend import RedisBackend

METRICS = ("requests", "input", "cache_read", "cache_write", "output", "reasoning", "searches")
"""What each row counts, in this order (the table's columns, the SQLite columns, the Redis
fields' last element)."""
DIMENSIONS = ("day", "route", "model", "key", "client", "user")
"""What a row is counted under (``LedgerKey``'s fields; ``scripts/usage --by``)."""
MAX_MEMORY_ROWS = 50_000
"""Rows an in-memory ledger holds at most: past it a new row's user is ``OTHER`` (a client
that sends a new ``user`` on every request cannot grow the process without bound)."""
OTHER = "(other)"
MAX_LABEL = 64
"""Characters of a client's ``user`` kept as it came."""

_PLAIN_LABEL = re.compile(r"[\w.@+:/-]{1,64}")
_SECRET_LOOK = re.compile(
    r"^(sk-|sk_|pk-|rk-|xai-|gsk_|AIza|ya29\.|ghp_|gho_|github_pat_|hf_|eyJ|Bearer\b)"
    r"|[A-Za-z0-9+/_=-]{32,}",
    re.IGNORECASE,
)
"""A ``user`` that may be a credential: a known key prefix, or a long run of key-like
characters (a token, a hash, a JWT)."""


@dataclass(frozen=True, slots=True)
class LedgerKey:
    """What one row is counted under (``DIMENSIONS``)."""

    day: str
    """The day the flow ended, UTC, ``YYYY-MM-DD``."""
    route: str
    """The route that served the flow (a chain's: the one that answered)."""
    model: str
    """The model as sent upstream (what the upstream bills; ``FlowPlan.unified``)."""
    key: str
    """The route's ``api_key_env`` name (never its value; a key pool's: the one the attempt
    sent); empty: the client's own key."""
    client: str
    """The name of the client key (``bridge_client_keys``) the request carried; empty when
    none was asked for. Never what the request's body says (``user`` is its own column)."""
    user: str = ""
    """The ``user`` the request's body carried (``user_label``: a credential-looking one
    hashed), empty when none: what the client says of itself, not who it is."""

    def labels(self) -> tuple[str, str, str, str, str, str]:
        return (self.day, self.route, self.model, self.key, self.client, self.user)


@dataclass(frozen=True, slots=True)
class Tokens:
    """Counts one row adds up (``METRICS``): a flow adds one request and its answer's usage."""

    requests: int = 0
    input: int = 0
    """Prompt tokens neither read from nor written to a cache (``Usage.input_tokens``)."""
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    """Every answer token, reasoning included."""
    reasoning: int = 0
    searches: int = 0
    """Web searches the bridge ran for the answer (docs/tools.md#web-search); an upstream's
    own searches are in its tokens, not here."""

    @classmethod
    def of(cls, usage: Usage | None, searches: int = 0) -> Tokens:
        """One request with ``usage``'s counts (what it did not report counts 0) and the
        web searches the bridge ran for it."""
        if usage is None:
            return cls(requests=1, searches=searches)
        return cls(
            1,
            usage.input_tokens or 0,
            usage.cache_read_tokens or 0,
            usage.cache_write_tokens or 0,
            usage.output_tokens or 0,
            usage.reasoning_tokens or 0,
            searches,
        )

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(*(a + b for a, b in zip(self.values(), other.values(), strict=True)))

    @property
    def prompt(self) -> int:
        """Every prompt token: uncached, read and written."""
        return self.input + self.cache_read + self.cache_write


type Rows = dict[LedgerKey, Tokens]


def user_label(user: str | None) -> str:
    """The ``user`` column: the ``user`` the client sent, kept as it is when short and plain,
    else ``user:`` and 12 hex digits of its SHA-256 (a credential or a long id never lands in
    the ledger as it came); empty when none."""
    if not user:
        return ""
    if _PLAIN_LABEL.fullmatch(user) and not _SECRET_LOOK.search(user):
        return user
    return "user:" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:12]


class Counters(Protocol):
    """Where the ledger's rows are (memory, SQLite, Redis). ``add`` is one call to the backend;
    both raise the backend's own errors (the ledger wraps them)."""

    def add(self, key: LedgerKey, tokens: Tokens) -> None: ...
    def add_many(self, rows: Rows) -> None: ...
    def rows(self, since: str = "") -> Rows: ...
    def close(self) -> None: ...


class MemoryCounters:
    """This process's rows (bounded: ``MAX_MEMORY_ROWS``)."""

    def __init__(self, limit: int = MAX_MEMORY_ROWS) -> None:
        self._rows: Rows = {}
        self._limit = limit

    def add(self, key: LedgerKey, tokens: Tokens) -> None:
        rows = self._rows
        if key not in rows and len(rows) >= self._limit:
            key = LedgerKey(key.day, key.route, key.model, key.key, key.client, OTHER)
        old = rows.get(key)
        rows[key] = tokens if old is None else old + tokens

    def add_many(self, rows: Rows) -> None:
        for key, tokens in rows.items():
            self.add(key, tokens)

    def rows(self, since: str = "") -> Rows:
        return {k: t for k, t in self._rows.items() if k.day >= since}

    def take(self) -> Rows:
        """Every row, and none kept (what a Redis ledger kept while Redis was away)."""
        rows, self._rows = self._rows, {}
        return rows

    def __len__(self) -> int:
        return len(self._rows)

    def close(self) -> None:
        pass


_LABELS = ("day", "route", "model", "key_name", "client", "user")
"""The SQLite table's label columns (``LedgerKey``'s fields; ``key`` is ``key_name``)."""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS usage (
    day TEXT NOT NULL, route TEXT NOT NULL, model TEXT NOT NULL,
    key_name TEXT NOT NULL, client TEXT NOT NULL, user TEXT NOT NULL DEFAULT '',
    {", ".join(f"{m} INTEGER NOT NULL DEFAULT 0" for m in METRICS)},
    PRIMARY KEY ({", ".join(_LABELS)})
);
"""
_UPSERT = (
    f"INSERT INTO usage ({', '.join(_LABELS)}, {', '.join(METRICS)}) "
    f"VALUES ({', '.join('?' * (len(_LABELS) + len(METRICS)))}) "
    f"ON CONFLICT ({', '.join(_LABELS)}) DO UPDATE SET "
    + ", ".join(f"{m} = {m} + excluded.{m}" for m in METRICS)
)
_BEFORE_USER = "usage_before_user"
"""The table of a ledger written before the ``user`` column, while ``_migrate`` copies it."""
_ADD_SEARCHES = "ALTER TABLE usage ADD COLUMN searches INTEGER NOT NULL DEFAULT 0"
"""A table written before the ``searches`` column gets it (its rows: 0 searches)."""
MIGRATION_WAIT_MS = 10_000
"""How long opening a ledger waits for another process's migration of the same file."""


class SqliteCounters:
    """One table, ``usage``, in the store's file (its own connection; WAL, as the store's):
    a row per ledger key, one upsert per flow (autocommit). A table of before the ``user``
    or the ``searches`` column is made today's once, at the first open that may write
    (``_migrate``: its rows kept, with an empty ``user`` and 0 searches); ``writes=False``
    (``scripts/usage``) reads any of them and changes nothing in the file."""

    def __init__(self, path: str, *, writes: bool = True) -> None:
        import sqlite3

        where = str(Path(path).expanduser())
        if writes:
            self._db = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
        else:
            uri = "file:" + quote(where) + "?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA busy_timeout=200")
            if writes:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._migrate()
                self._db.executescript(_SCHEMA)
            self._columns = self._table_columns()
        except sqlite3.Error:
            self._db.close()
            raise

    def _table_columns(self) -> set[str]:
        return {row[1] for row in self._db.execute("PRAGMA table_info(usage)")}

    def _migrate(self) -> None:
        """A ``usage`` table of before the ``user`` column (its key: day, route, model,
        key_name, client) becomes today's in one transaction: renamed, today's created, every
        row copied with ``user`` empty, the old one dropped; one of before the ``searches``
        column gets it (0 in every row). Another process opening the file meanwhile waits
        (``MIGRATION_WAIT_MS``) and finds it done."""
        columns = self._table_columns()
        if not columns or {"user", "searches"} <= columns:
            return
        db = self._db
        db.execute(f"PRAGMA busy_timeout={MIGRATION_WAIT_MS}")
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = self._table_columns()  # not done by another process meanwhile?
            if "user" not in columns:
                kept = [m for m in METRICS if m in columns]
                old = ", ".join(("day", "route", "model", "key_name", "client", *kept))
                db.execute(f"ALTER TABLE usage RENAME TO {_BEFORE_USER}")
                db.execute(_SCHEMA.strip().removesuffix(";"))
                db.execute(f"INSERT INTO usage ({old}, user) SELECT {old}, '' FROM {_BEFORE_USER}")
                db.execute(f"DROP TABLE {_BEFORE_USER}")
            elif "searches" not in columns:
                db.execute(_ADD_SEARCHES)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.execute("PRAGMA busy_timeout=200")

    def add(self, key: LedgerKey, tokens: Tokens) -> None:
        self._db.execute(_UPSERT, (*key.labels(), *tokens.values()))

    def add_many(self, rows: Rows) -> None:
        """Every row's upsert in one transaction (one commit)."""
        self._db.execute("BEGIN")
        try:
            self._db.executemany(_UPSERT, [(*k.labels(), *t.values()) for k, t in rows.items()])
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def rows(self, since: str = "") -> Rows:
        if not self._columns:  # a file whose ledger never counted (read only)
            self._columns = self._table_columns()
            if not self._columns:
                return {}
        # A table of before a column: its value for every row.
        user = "user" if "user" in self._columns else "''"
        metrics = ", ".join(m if m in self._columns else "0" for m in METRICS)
        cursor = self._db.execute(
            f"SELECT day, route, model, key_name, client, {user}, {metrics} "
            "FROM usage WHERE day >= ?",
            (since,),
        )
        width = len(_LABELS)
        return merge((LedgerKey(*row[:width]), Tokens(*row[width:])) for row in cursor)

    def close(self) -> None:
        self._db.close()


class UsageLedger:
    """The ledger: ``count`` a flow, read ``rows``; over one ``Counters`` backend, under a lock
    (SQLite's connection is shared by the hooks' thread and a command's). One ``count`` per
    flow (in memory), or the rows of up to a second at once from the store thread
    (``count_many``: one SQLite transaction, one Redis round trip). Layouts per backend:
    docs/observability.md#usage-ledger."""

    def __init__(self, counters: Counters, where: str, errors: tuple[type[Exception], ...]):
        self._counters = counters
        self.where = where
        """Where the rows are, for a line (a Redis URL without its password)."""
        self._errors = errors
        self._lock = threading.Lock()

    def count(self, key: LedgerKey, tokens: Tokens) -> None:
        """Add ``tokens`` under ``key``. Raises ``StoreError``."""
        with self._lock:
            self._guard(lambda: self._counters.add(key, tokens))

    def count_many(self, rows: Rows) -> None:
        """Add every row at once (the store thread's flush: one SQLite transaction, one Redis
        pipeline). Raises ``StoreError``."""
        if rows:
            with self._lock:
                self._guard(lambda: self._counters.add_many(rows))

    @property
    def in_memory(self) -> bool:
        """Whether the rows are in this process's memory (no I/O: counted on the spot)."""
        return isinstance(self._counters, MemoryCounters)

    def rows(self, since: str = "") -> Rows:
        """Every row of ``since`` (``YYYY-MM-DD``) and later. Raises ``StoreError``."""
        with self._lock:
            return self._guard(lambda: self._counters.rows(since))

    def close(self) -> None:
        with self._lock:
            self._guard(self._counters.close)

    def _guard[T](self, op: Callable[[], T]) -> T:
        try:
            return op()
        except self._errors as e:
            raise StoreError(f"usage ledger ({self.where}): {e}") from e


def open_ledger(
    path: str,
    *,
    shared: RedisBackend | None = None,
    notify: Callable[[Notice], None] | None = None,
    writes: bool = True,
) -> UsageLedger:
    """The ledger for ``bridge_store`` = ``path`` (``parse_store_url``): empty → memory, a
    file → SQLite (the ``usage`` table of that file, made 0600), a Redis URL → Redis
    (``shared``: the reasoning store's connection to it, else a new one that tells
    ``notify``). ``writes=False``: a reader's (``scripts/usage``), which neither creates nor
    migrates a table. Raises ``StoreError`` (a value no store reads, a file SQLite cannot
    open, no ``redis`` package, a bad URL)."""
    path = path.strip()
    location = store_location(path)
    if location.kind == "redis":
        try:
            import redis

            from addon.stores.reasoning import memory_backend
            from addon.stores.redis_backend import RedisBackend
        except ImportError:
            raise StoreError(
                "a Redis ledger needs the redis package: pip install 'cursor-bridge[redis]'"
            ) from None
        own = shared is None
        if shared is None:
            try:
                shared = RedisBackend(
                    location.target,
                    memory_backend(),
                    notify or (lambda _: None),
                    where=location.shown,
                )
            except (ValueError, TypeError, redis.RedisError) as e:
                raise StoreError(f"cannot open the usage ledger {location.shown}: {e}") from e
        counters = RedisCounters(shared, own=own)
        return UsageLedger(counters, f"Redis {shared.where}", (redis.RedisError,))
    if location.kind == "sqlite":
        import sqlite3

        if (changed := private_file(location.target)) and notify is not None:
            notify(Notice(changed, warning=changed.endswith(CANNOT_PRIVATE)))
        try:
            sqlite = SqliteCounters(location.target, writes=writes)
            return UsageLedger(sqlite, f"SQLite file {path}", (sqlite3.Error,))
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the usage ledger {path!r}: {e}") from e
    return UsageLedger(MemoryCounters(), "memory", ())


class RedisCounters:
    """A hash per day, ``cursor-bridge:usage:<day>``, shared by every worker: its fields are
    JSON arrays ``[route, model, key, client, user, metric]``, each an ``HINCRBY`` counter
    (a field of before the ``user`` column, ``[route, model, key, client, metric]``, is read
    with an empty user and added to the same row); the set ``cursor-bridge:usage:days`` names
    the days. A flow's ``add`` is one pipeline (one round
    trip). While Redis is away the rows wait in this process's memory and go with the next
    ``add`` once it is back (``RedisBackend.call``)."""

    def __init__(self, backend: RedisBackend, *, own: bool = False) -> None:
        from addon.stores.redis_backend import PREFIX

        self._backend = backend
        self._own = own
        """The connection is the ledger's (closed with it), not the reasoning store's."""
        self._prefix = f"{PREFIX}usage:"
        self._waiting = MemoryCounters()

    def add(self, key: LedgerKey, tokens: Tokens) -> None:
        self.add_many({key: tokens})

    def add_many(self, rows: Rows) -> None:
        """Every row (and those waiting since Redis was away) in one pipeline."""

        def shared() -> None:
            before = self._waiting.take()
            try:
                self._write(merge([*before.items(), *rows.items()]))
            except Exception:
                # Not written: what waited waits again; ``rows`` are the caller's to keep
                # (Redis lost: ``local`` below waits them; any other error: the ledger raises).
                self._waiting.add_many(before)
                raise

        self._backend.call(shared, lambda: self._waiting.add_many(rows))

    def _write(self, rows: Rows) -> None:
        pipe = self._backend.client.pipeline(transaction=False)
        days: set[str] = set()
        for key, tokens in rows.items():
            days.add(key.day)
            labels = key.labels()[1:]
            for metric, n in zip(METRICS, tokens.values(), strict=True):
                if n:
                    field = json.dumps([*labels, metric], separators=(",", ":"))
                    pipe.hincrby(self._prefix + key.day, field, n)
        if days:
            pipe.sadd(self._prefix + "days", *sorted(days))
        pipe.execute()

    def rows(self, since: str = "") -> Rows:
        def shared() -> Rows:
            client = self._backend.client
            days = sorted(
                d for d in (_text(b) for b in client.smembers(self._prefix + "days")) if d >= since
            )
            pipe = client.pipeline(transaction=False)
            for day in days:
                pipe.hgetall(self._prefix + day)
            found: list[tuple[LedgerKey, Tokens]] = []
            for day, table in zip(days, pipe.execute(), strict=True):
                for field, n in table.items():
                    labels = json.loads(field)
                    if not isinstance(labels, list) or len(labels) not in (5, 6):
                        continue  # not a field this ledger writes
                    *names, metric = (str(v) for v in labels)
                    if metric not in METRICS:
                        continue
                    counts = dict.fromkeys(METRICS, 0)
                    counts[metric] = int(n)
                    found.append((LedgerKey(day, *names), Tokens(**counts)))
            return merge([*found, *self._waiting.rows(since).items()])

        return self._backend.call(shared, lambda: self._waiting.rows(since))

    def close(self) -> None:
        if self._own:
            self._backend.close()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def merge(rows: Iterable[tuple[LedgerKey, Tokens]]) -> Rows:
    """Rows added up by key."""
    out: Rows = {}
    for key, tokens in rows:
        old = out.get(key)
        out[key] = tokens if old is None else old + tokens
    return out
