"""Strict JSON, fast: msgspec, and the standard library where msgspec says no.

Contract: ``loads`` reads RFC 8259 JSON only (``ValueError`` for anything else); ``dumps`` /
``dumpb`` write compact JSON (no spaces), non-ASCII as UTF-8, as text / bytes. What msgspec
refuses that is still JSON (a lone surrogate escape, deep nesting) goes through ``json``, with
the same results. Why msgspec (measured): docs/speed.md#why-msgspec."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from itertools import groupby
from typing import Any

import msgspec

fast_loads = msgspec.json.Decoder().decode
"""msgspec alone, for a hot path that has its own way out when it says no…"""
REFUSED = (msgspec.DecodeError, ValueError, RecursionError)
"""…with one of these (invalid UTF-8 is a ``UnicodeDecodeError``, a ``ValueError``)."""
fast_strings = msgspec.json.Decoder(list[str]).decode
"""A JSON array of strings and nothing else, msgspec alone (anything else: ``REFUSED``)."""

_encode = msgspec.json.Encoder().encode


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} does not fit in a float")
    return value


def _strict_stdlib(text: str | bytes) -> Any:
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8")
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def loads(data: str | bytes) -> Any:
    """Strict JSON: RFC 8259 only — no ``NaN``, ``Infinity``, ``-Infinity``, no float that
    overflows (``1e400``): ``ValueError`` for those, as for anything else that is not JSON
    (invalid UTF-8 included); nesting too deep raises ``RecursionError``. Integers keep every
    digit, however long. ``bytes`` must be UTF-8."""
    try:
        return fast_loads(data)
    except REFUSED:
        # msgspec's refusals that are still JSON (lone surrogate escapes, deep nesting) are
        # read by the standard library; the rest fails there too, with its words.
        return _strict_stdlib(data)


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept; always UTF-8-encodable (see ``dumpb``)."""
    return dumpb(value).decode()


def dumpb(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes; a string with a lone surrogate (which cannot be UTF-8) makes
    the whole value written with ASCII escapes instead, still valid JSON."""
    try:
        return _encode(value)
    except (TypeError, ValueError, OverflowError):  # a lone surrogate: UnicodeEncodeError
        return _dumps_stdlib(value)


def _dumps_stdlib(value: Any) -> bytes:
    """What msgspec refuses (a lone surrogate): the standard library's compact JSON, with
    ASCII escapes where UTF-8 cannot hold the text."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


_MISSING = object()


def same(a: Any, b: Any, budget: int) -> bool:
    """Whether two values read by ``loads`` are the same JSON, types included (``1`` is not
    ``1.0`` nor ``true``), the order of object keys aside. Values shared by both (the same
    object) are not looked into; past ``budget`` containers and values that are not shared,
    the answer is False (the caller writes the value anew)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        kind = type(x)
        if kind is not type(y):
            return False
        budget -= 1
        if budget < 0:
            return False
        if kind is dict:
            if len(x) != len(y):
                return False
            for key, value in x.items():
                other = y.get(key, _MISSING)
                if other is _MISSING:
                    return False
                stack.append((value, other))
        elif kind is list:
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def join_texts(parts: Iterable[str | bytes]) -> str:
    """Texts joined: strings as they are, and plain texts kept as their JSON strings
    (printable ASCII without a backslash or a quote inside, quotes included), read as such:
    a run of them is joined and its quotes dropped at once (a stream's text may be
    thousands of pieces)."""
    return "".join(
        "".join(run) if kind is str else b"".join(run).decode("ascii").replace('"', "")  # type: ignore[arg-type]
        for kind, run in groupby(parts, type)
    )
