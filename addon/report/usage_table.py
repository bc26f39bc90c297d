"""The usage ledger as a table: rows grouped ``--by`` some of its dimensions, with the cache
read share, the cost from a maintained price table and totals (``scripts/usage``,
``bridge.usage``).

Contract: plain values; no mitmproxy, no logging. A model the price table does not know has no
cost (an empty cell, its requests counted as ``unpriced``), never a guessed one. Every label is
text a client chose (a model, a ``user``) or could have: it is written so that it cannot act
on what shows it (``shown``: no control or bidi character reaches a terminal or a sheet;
``table_cell``: cut to ``MAX_CELL``; ``csv_cell``: never read as a formula)."""

from __future__ import annotations

import csv
import io
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from addon.config.client_keys import Limits
from addon.stores.ledger import DIMENSIONS, METRICS, LedgerKey, Rows, Tokens
from addon.stores.limits import Used

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


def limits_pricer() -> Callable[[str, int, int, int, int], float | None] | None:
    """The client keys' budgets' price table (``addon.plan.limits.Pricer``): genai-prices
    at today's prices, in US dollars; None when it is not installed (then only a route's
    ``price`` prices a model)."""
    price = genai_prices()
    if price is None:
        return None
    table = price

    def usd(
        model: str, prompt: int, cache_read: int, cache_write: int, output: int
    ) -> float | None:
        tokens = Tokens(1, prompt, cache_read, cache_write, output)
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        found = table(model, day, tokens)
        return None if found is None else float(found)

    return usd


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
MAX_CELL = 60
"""Columns a text cell of the table takes at most: a longer one is cut, ending ``…`` (CSV
writes it whole)."""
FORMULA_START = frozenset("=+-@\t\r")
"""What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection"): a CSV text
cell starting with one (after any spaces) is written with a ``'`` before it."""
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
"""Unicode categories written as escapes: controls (C0, DEL, C1), format characters (the bidi
marks, embeddings, overrides and isolates U+200E/F, U+202A-E, U+2066-9; zero-width ones),
lone surrogates, line and paragraph separators."""


def shown(text: str) -> str:
    """``text`` as one line that shows what it is: a control, format (bidi) or separator
    character, and the backslash, as a Python-style backslash escape (``\\n``, ``\\x1b``,
    ``\\u202e``); any other character as it is. Two different names never show alike."""
    if text.isprintable() and "\\" not in text:  # none of them is printable
        return text
    return "".join(_escape(c) for c in text)


def _escape(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    if unicodedata.category(c) not in _HIDDEN:
        return c
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal: 2 for a wide character, 0 for a combining one."""
    if text.isascii():
        return len(text)
    return sum(_char_width(c) for c in text)


def _char_width(c: str) -> int:
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in "WF" else 1


def table_cell(text: str) -> str:
    """A label for the text table: ``shown``, and cut to ``MAX_CELL`` columns (``…`` last)."""
    out = shown(text)
    if len(out) <= MAX_CELL and _width(out) <= MAX_CELL:
        return out
    kept: list[str] = []
    used = 0
    for c in out:
        used += _char_width(c)
        if used > MAX_CELL - 1 or len(kept) >= 2 * MAX_CELL:
            break
        kept.append(c)
    return "".join(kept) + "…"


def csv_cell(text: str) -> str:
    """A label for CSV: ``shown`` (whole), with a ``'`` before it when it, or the text it
    shows, would start a formula (``FORMULA_START``)."""
    out = shown(text)
    return "'" + out if _starts_formula(text) or _starts_formula(out) else out


def _starts_formula(text: str) -> bool:
    return text.lstrip(" ")[:1] in FORMULA_START


def _cells(line: Line, places: int, label: Callable[[str], str]) -> list[str]:
    cost = "" if line.cost is None else f"{line.cost:.{places}f}"
    unpriced = str(line.unpriced) if line.unpriced else ""
    return [
        *map(label, line.labels),
        *map(str, line.tokens.values()),
        line.cache_share,
        cost,
        unpriced,
    ]


def table_text(found: Sequence[Line], by: Sequence[str], price: Price | None) -> str:
    """The lines and their total as an aligned text table (numbers to the right); each label
    a ``table_cell``."""
    header = [*by, *HEADER]
    body = [_cells(line, 4, table_cell) for line in found]
    body.append(_cells(total(found, len(by)), 4, table_cell))
    widths = [max(_width(row[i]) for row in [header, *body]) for i in range(len(header))]

    def row(cells: Sequence[str]) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)):
            pad = " " * (w - _width(c))
            out.append(c + pad if i < len(by) else pad + c)
        return "  ".join(out).rstrip()

    out = [row(header), row(["-" * w for w in widths])]
    out += [row(cells) for cells in body[:-1]]
    out += [row(["-" * w for w in widths]), row(body[-1])]
    if price is None:
        out.append(NO_PRICES)
    elif not found:
        out.insert(2, "(no usage counted)")
    return "\n".join(out)


def csv_text(found: Sequence[Line], by: Sequence[str]) -> str:
    """The lines as CSV with a header row (no total: a sheet adds it up); costs in full; each
    label a ``csv_cell`` (numbers as numbers)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*by, *HEADER])
    for line in found:
        writer.writerow(_cells(line, 8, csv_cell))
    return buffer.getvalue()


def _cost(price: Price | None, key: LedgerKey, tokens: Tokens) -> Decimal | None:
    if price is None:
        return None
    return price(key.model, key.day, tokens)


LIMITS_HEADER = (
    "client",
    "rpm",
    "tpm",
    "parallel",
    "budget_period",
    "spent_usd",
    "budget_usd",
    "remaining_usd",
)


def limits_cells(name: str, limits: Limits, period: str, used: Used) -> list[str]:
    """One client key's row: each limit as ``used/limit`` (``used/-`` without one), the
    period's spend (settled, and the estimates of requests under way), its budget and what
    remains."""

    def of(n: int, most: int | None) -> str:
        return f"{n}/{most if most is not None else '-'}"

    budget = limits.budget_usd
    spent = used.spent_nano / 1e9
    return [
        name,
        of(used.requests, limits.rpm),
        of(used.tokens, limits.tpm),
        of(used.parallel, limits.max_parallel),
        period or "-",
        f"{spent:.4f}" if budget is not None else "",
        f"{budget:g}" if budget is not None else "",
        f"{max(0.0, budget - spent):.4f}" if budget is not None else "",
    ]


def limits_text(rows: Sequence[tuple[str, Limits, str, Used]]) -> str:
    """Each client key's limits, what it used in the last 60 s and in its budget period, and
    what remains, as an aligned table (``scripts/usage --client-keys``, ``bridge.usage``)."""
    if not rows:
        return "(no client key has a limit)"
    body = [[table_cell(c) if i == 0 else c for i, c in enumerate(limits_cells(*r))] for r in rows]
    table = [list(LIMITS_HEADER), *body]
    widths = [max(_width(row[i]) for row in table) for i in range(len(LIMITS_HEADER))]

    def row(cells: Sequence[str]) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)):
            pad = " " * (w - _width(c))
            out.append(c + pad if i in (0, 4) else pad + c)
        return "  ".join(out).rstrip()

    lines = [row(table[0]), row(["-" * w for w in widths]), *(row(r) for r in body)]
    lines.append(
        "rpm, tpm, parallel: used in the last 60 s (now) / the limit; spent: settled in the "
        "period plus the estimates of requests under way"
    )
    return "\n".join(lines)
