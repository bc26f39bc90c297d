"""The usage ledger as a table: rows grouped ``--by`` some of its dimensions, with the cache
read share, the cost from a maintained price table and totals (``scripts/usage``,
``bridge.usage``).

Contract: plain values; no mitmproxy, no logging. A model the price table does not know has no
cost (an empty cell, its requests counted as ``unpriced``), never a guessed one."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from addon.usage import DIMENSIONS, METRICS, LedgerKey, Rows, Tokens

type Price = Callable[[str, str, Tokens], Decimal | None]
"""The cost in US dollars of ``tokens`` of ``model`` on ``day``; None: the table does not
know the model."""

NO_PRICES = "no cost: the price table (PyPI genai-prices) is not installed: pip install 'cursor-bridge[usage]'"


def genai_prices() -> Price | None:
    """A ``Price`` from PyPI ``genai-prices`` (pydantic's maintained price table, the ``usage``
    extra), at the prices of the row's day; None when it is not installed: every cost cell is
    then empty and the table says why (``NO_PRICES``)."""
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price
    except ImportError:
        return None

    def price(model: str, day: str, tokens: Tokens) -> Decimal | None:
        if not model:
            return None
        # genai-prices' input_tokens is the whole prompt (uncached + read + written).
        usage = PriceUsage(
            input_tokens=tokens.prompt,
            cache_read_tokens=tokens.cache_read,
            cache_write_tokens=tokens.cache_write,
            output_tokens=tokens.output,
        )
        try:
            when = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            when = None
        try:
            return calc_price(usage, model, genai_request_timestamp=when).total_price
        except (LookupError, ValueError):
            return None

    return price


@dataclass(slots=True)
class Line:
    """One line of the table: the labels it is grouped by, its counts, its cost."""

    labels: tuple[str, ...]
    tokens: Tokens
    cost: Decimal | None = None
    """The priced requests' cost; None when none of them had a price."""
    unpriced: int = 0
    """Requests whose model has no price (their cost is not in ``cost``)."""

    def add(self, tokens: Tokens, cost: Decimal | None) -> None:
        self.tokens = self.tokens + tokens
        if cost is None:
            self.unpriced += tokens.requests
        else:
            self.cost = cost if self.cost is None else self.cost + cost

    @property
    def cache_share(self) -> str:
        """The read tokens' part of the whole prompt, whole percent (half up); empty: none."""
        prompt = self.tokens.prompt
        if not prompt:
            return ""
        return f"{(200 * self.tokens.cache_read + prompt) // (2 * prompt)}%"


def parse_by(text: str) -> tuple[str, ...]:
    """``--by day,route``: dimensions in ``DIMENSIONS``, in the order given. Raises
    ``ValueError`` naming a dimension it does not know."""
    by = tuple(part.strip() for part in text.split(",") if part.strip())
    for name in by:
        if name not in DIMENSIONS:
            raise ValueError(f"--by: {name!r} is none of {', '.join(DIMENSIONS)}")
    return by or DIMENSIONS


def lines(rows: Rows, by: Sequence[str], price: Price | None) -> list[Line]:
    """``rows`` grouped by ``by``, sorted by their labels; each row priced at its own day and
    model before it is added to its group."""
    index = [DIMENSIONS.index(name) for name in by]
    out: dict[tuple[str, ...], Line] = {}
    for key, tokens in rows.items():
        labels = key.labels()
        group = tuple(labels[i] for i in index)
        line = out.get(group)
        if line is None:
            line = out[group] = Line(group, Tokens())
        line.add(tokens, _cost(price, key, tokens))
    return [out[k] for k in sorted(out)]


def total(found: Sequence[Line], width: int) -> Line:
    """Every line added up (labelled ``total``)."""
    out = Line(("total", *[""] * (width - 1)) if width else (), Tokens())
    for line in found:
        out.tokens = out.tokens + line.tokens
        out.unpriced += line.unpriced
        if line.cost is not None:
            out.cost = line.cost if out.cost is None else out.cost + line.cost
    return out


HEADER = (*METRICS, "cache_share", "cost_usd", "unpriced")


def _cells(line: Line, places: int) -> list[str]:
    cost = "" if line.cost is None else f"{line.cost:.{places}f}"
    unpriced = str(line.unpriced) if line.unpriced else ""
    return [
        *line.labels,
        *map(str, line.tokens.values()),
        line.cache_share,
        cost,
        unpriced,
    ]


def table_text(found: Sequence[Line], by: Sequence[str], price: Price | None) -> str:
    """The lines and their total as an aligned text table (numbers to the right)."""
    header = [*by, *HEADER]
    body = [_cells(line, 4) for line in found]
    body.append(_cells(total(found, len(by)), 4))
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def row(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < len(by) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [row(header), row(["-" * w for w in widths])]
    out += [row(cells) for cells in body[:-1]]
    out += [row(["-" * w for w in widths]), row(body[-1])]
    if price is None:
        out.append(NO_PRICES)
    elif not found:
        out.insert(2, "(no usage counted)")
    return "\n".join(out)


def csv_text(found: Sequence[Line], by: Sequence[str]) -> str:
    """The lines as CSV with a header row (no total: a sheet adds it up); costs in full."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*by, *HEADER])
    for line in found:
        writer.writerow(_cells(line, 8))
    return buffer.getvalue()


def _cost(price: Price | None, key: LedgerKey, tokens: Tokens) -> Decimal | None:
    if price is None:
        return None
    return price(key.model, key.day, tokens)
