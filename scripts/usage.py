"""The usage ledger (docs/observability.md#usage-ledger): tokens, cache read share and cost by
day, route, model, key name and client, as a table or CSV.

    scripts/usage --store redis://127.0.0.1:6379/0 --since 2026-01-01 --by day,model --csv

``--store`` is the proxy's ``bridge_store``: an SQLite file or a Redis URL (an in-memory
ledger lives in its proxy only: ask it with the ``bridge.usage`` command). Costs come from
PyPI ``genai-prices`` (the ``usage`` extra); a model it does not know has no cost.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from addon.config import ConfigError, parse_store_url
from addon.store import Notice, StoreError
from addon.usage import DIMENSIONS, open_ledger
from addon.usage_table import csv_text, genai_prices, lines, parse_by, table_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/usage", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--store", required=True, help="the proxy's bridge_store: an SQLite file or a redis:// URL"
    )
    parser.add_argument("--since", default="", help="the first day to show, YYYY-MM-DD (UTC)")
    parser.add_argument(
        "--by",
        default=",".join(DIMENSIONS),
        help=f"what to group by, comma-separated (default: {','.join(DIMENSIONS)})",
    )
    parser.add_argument("--csv", action="store_true", help="CSV with a header row")
    args = parser.parse_args(argv)
    try:
        by = parse_by(args.by)
        if args.since:
            datetime.date.fromisoformat(args.since)
    except ValueError as e:
        parser.error(str(e))
    store = args.store.strip()
    try:
        location = parse_store_url(store)  # the proxy's own reading of bridge_store
    except ConfigError as e:
        print(f"scripts/usage: {e}", file=sys.stderr)
        return 2
    if location.kind != "redis" and not Path(location.target).is_file():
        print(f"scripts/usage: no such file: {store}", file=sys.stderr)
        return 2
    lost: list[str] = []

    def notice(n: Notice) -> None:
        if location.kind == "redis":
            lost.append(n.text)  # Redis does not answer
        else:
            print(f"scripts/usage: {n.text}", file=sys.stderr)  # the file made 0600

    try:
        ledger = open_ledger(store, notify=notice)
        rows = ledger.rows(args.since)
        ledger.close()
    except StoreError as e:
        print(f"scripts/usage: {e}", file=sys.stderr)
        return 1
    if lost:  # a Redis that does not answer: say so, never an empty table
        print(f"scripts/usage: {lost[0]}", file=sys.stderr)
        return 1
    price = genai_prices()
    found = lines(rows, by, price)
    sys.stdout.write(csv_text(found, by) if args.csv else table_text(found, by, price) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
