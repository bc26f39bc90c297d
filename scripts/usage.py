"""The usage ledger (docs/observability.md#usage-ledger): tokens, cache read share and cost by
day, route, model, key name, client and user, as a table or CSV.

    scripts/usage --store redis://127.0.0.1:6379/0 --since 2026-01-01 --by day,model --csv

``--store`` is the proxy's ``bridge_store``: an SQLite file or a Redis URL; without it, the
gateway's (docs/deploy.md): redis://127.0.0.1:6379/0. An in-memory ledger lives in its proxy
only: ask it with the ``bridge.usage`` command. The ledger is only read, never changed. Costs
come from PyPI ``genai-prices`` (the ``usage`` extra); a model it does not know has no cost.
Every name is shown as what it is: control and bidi characters escaped, long ones cut in the
table (whole in CSV), a CSV cell a spreadsheet would run as a formula written with a ``'``
before it.
"""

from __future__ import annotations

import argparse
import datetime
import errno
import sys
from pathlib import Path
from urllib.parse import urlsplit

from addon.config.options import ConfigError, StoreLocation, parse_store_url
from addon.report.usage_table import csv_text, genai_prices, lines, parse_by, table_text
from addon.stores.ledger import DIMENSIONS, Rows, open_ledger
from addon.stores.reasoning import Notice, StoreError

PROG = "scripts/usage"
DEFAULT_STORE = "redis://127.0.0.1:6379/0"
"""The gateway setup's ``bridge_store`` (docs/deploy.md), read when no ``--store`` is given."""
REDIS_WAIT = 3.0
"""Seconds to wait for Redis to answer (connect, then each reply)."""


class Unreadable(Exception):
    """The ledger cannot be read: what to tell the person who ran the script."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--store",
        help=f"the proxy's bridge_store: an SQLite file or a redis:// URL (default: the "
        f"gateway's, {DEFAULT_STORE})",
    )
    parser.add_argument("--since", default="", help="the first day to show, YYYY-MM-DD (UTC)")
    parser.add_argument(
        "--by",
        default=",".join(DIMENSIONS),
        help=f"what to group by, comma-separated (default: {','.join(DIMENSIONS)})",
    )
    parser.add_argument("--csv", action="store_true", help="CSV with a header row")
    parser.add_argument(
        "--client-keys",
        metavar="FILE",
        help="the proxy's bridge_client_keys file: also show each client key's limits, what "
        "it used in the last 60 s and in its budget period, and what remains (a Redis store)",
    )
    args = parser.parse_args(argv)
    try:
        by = parse_by(args.by)
        if args.since:
            datetime.date.fromisoformat(args.since)
    except ValueError as e:
        parser.error(str(e))
    if args.store is None:
        store = DEFAULT_STORE
        say(f"no --store given: reading {store}, the gateway's bridge_store (docs/deploy.md)")
    else:
        store = args.store.strip()
    try:
        location = parse_store_url(store)  # the proxy's own reading of bridge_store
    except ConfigError as e:
        say(str(e))
        return 2
    try:
        rows = read(store, location, args.since)
    except Unreadable as e:
        say(str(e))
        return 1
    price = genai_prices()
    found = lines(rows, by, price)
    # A name the terminal's encoding cannot write is escaped, never a traceback.
    sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    sys.stdout.write(csv_text(found, by) if args.csv else table_text(found, by, price) + "\n")
    if args.client_keys:
        try:
            text = limits_of(args.client_keys, store, location)
        except Unreadable as e:
            say(str(e))
            return 1
        sys.stdout.write("\nclient keys' limits\n" + text + "\n")
    return 0


class _AnyVariable(dict[str, str]):
    """The environment as the limits table reads a keys file: a client's key is not needed,
    so a variable it names need not be set (each stands for a distinct key)."""

    def get(self, key: str, default: object = None) -> str:  # type: ignore[override]
        return f"(not read: {key}) " + "0" * 16


def limits_of(path: str, store: str, location: StoreLocation) -> str:
    """The limits table of the keys file at ``path`` over the store's counts. Raises
    ``Unreadable``: a bad file, or a store that holds no shared limits."""
    import time

    from addon.config.client_keys import ClientKeysError, load_client_keys
    from addon.report.usage_table import limits_text
    from addon.stores.limits import RedisLimits, usage_of
    from addon.stores.reasoning import memory_backend
    from addon.stores.redis_backend import RedisBackend

    try:
        keys = load_client_keys(path, _AnyVariable())
    except ClientKeysError as e:
        raise Unreadable(str(e)) from None
    if location.kind != "redis":
        raise Unreadable(
            "a client key's limits are counted in each proxy's memory unless bridge_store is "
            "a Redis URL: ask the proxy with the bridge.usage command"
        )
    lost: list[str] = []
    backend = RedisBackend(location.target, memory_backend(), lambda n: lost.append(n.text))
    try:
        rows = usage_of(RedisLimits(backend), keys.limits, time.time())
    finally:
        backend.close()
    if lost:
        raise Unreadable(f"Redis at {location.shown} stopped answering; try again")
    return limits_text(rows)


def say(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr)


def read(store: str, location: StoreLocation, since: str) -> Rows:
    """The ledger's rows at ``store`` (read as ``location``) from ``since``. Raises
    ``Unreadable``."""
    if location.kind == "redis":
        check_redis(location.target, location.shown)
    elif location.kind != "sqlite":
        raise Unreadable("--store is empty: give the proxy's bridge_store (a file or a URL)")
    elif not Path(location.target).is_file():
        what = "not a file" if Path(location.target).exists() else "no such file"
        raise Unreadable(
            f"{what}: {location.shown} (--store is the proxy's bridge_store: its SQLite file, "
            f"or a redis:// URL)"
        )
    lost: list[str] = []

    def notice(n: Notice) -> None:
        if location.kind == "redis":
            lost.append(n.text)  # Redis stopped answering
        else:
            say(n.text)  # the file made 0600: said, and the script carries on

    try:
        ledger = open_ledger(store, notify=notice, writes=False)
        try:
            rows = ledger.rows(since)
        finally:
            ledger.close()
    except StoreError as e:
        raise Unreadable(f"{e} (--store is the proxy's bridge_store)") from None
    if lost:  # Redis went away between the check and the read: never an empty table
        raise Unreadable(
            f"Redis at {location.shown} stopped answering while the ledger was read; try again"
        )
    return rows


def check_redis(url: str, shown: str) -> None:
    """Redis at ``url`` answers a PING. Raises ``Unreadable`` saying why not, and what to do."""
    try:
        import redis
    except ImportError:
        raise Unreadable(
            "reading a Redis ledger needs the redis package: pip install 'cursor-bridge[redis]'"
        ) from None
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=REDIS_WAIT, socket_timeout=REDIS_WAIT
        )
    except ValueError as e:
        raise Unreadable(f"not a Redis URL: {shown} ({e})") from None
    try:
        client.ping()
    except redis.AuthenticationError:
        if not urlsplit(url).password:
            raise Unreadable(
                f"Redis at {shown} wants a password: give it in --store "
                f"(redis://:PASSWORD@host:port/db, as in the workers' bridge_store)"
            ) from None
        raise Unreadable(
            f"Redis at {shown} refused the password: give the one in the workers' "
            f"bridge_store (redis://:PASSWORD@host:port/db)"
        ) from None
    except redis.TimeoutError:
        raise Unreadable(
            f"cannot reach Redis at {shown}: no answer in {REDIS_WAIT:g} s; check it runs "
            f"there, or pass --store"
        ) from None
    except redis.ConnectionError as e:
        raise Unreadable(
            f"cannot reach Redis at {shown}: {_why(e)}; start it or pass --store"
        ) from None
    except redis.exceptions.InvalidResponse:
        raise Unreadable(
            f"what answers at {shown} is not Redis (its answer is not Redis's protocol): "
            f"check the host and port, or pass --store"
        ) from None
    except redis.RedisError as e:
        raise Unreadable(f"Redis at {shown}: {e}") from None
    finally:
        client.close()


def _why(error: Exception) -> str:
    """A connection failure in a few words (``connection refused``), else redis-py's text."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            if cause.errno == errno.ECONNREFUSED:
                return "connection refused"
            return (cause.strerror or str(cause)).lower()
        cause = cause.__cause__ or cause.__context__
    text = str(error)
    if "Connection refused" in text:
        return "connection refused"
    return text or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
