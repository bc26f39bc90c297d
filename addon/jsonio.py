"""Strict JSON, fast: orjson on the hot paths, the standard library where orjson says no.

Contract: ``loads`` reads RFC 8259 JSON only — no ``NaN``, ``Infinity``, ``-Infinity``, no float
that overflows (``1e400``): ``ValueError`` for those, as for anything else that is not JSON;
nesting too deep raises ``RecursionError``. ``dumps`` / ``dumpb`` write compact JSON (no
spaces), non-ASCII as UTF-8; ``dumps`` gives text, ``dumpb`` bytes.

orjson (measured against msgspec and the standard library on the bridge's stream chunks: it
decodes as fast as msgspec, about 3.5 times the standard library, and encodes fastest, about 18 times)
refuses a few things that are valid input or output for the bridge; those go through the
standard library instead, with the same results as before:

- a string escape of a lone surrogate (``"\\ud83d"``, valid JSON text; its ``str`` cannot be
  UTF-8): read by ``json``; written with ASCII escapes (``dumpb``) or as is (``dumps``);
- integers beyond 64 bits: read and written by ``json``;
- nesting deeper than orjson's limit: ``json`` decides (``RecursionError`` when too deep).

Values the bridge writes all come from strictly parsed input, so no ``NaN`` can reach
``dumps``; orjson would write it as ``null``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

_JSONDecodeError = orjson.JSONDecodeError


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} does not fit in a float")
    return value


def _strict_stdlib(text: str | bytes) -> Any:
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def loads(data: str | bytes) -> Any:
    """Strict JSON (see the module docstring). ``bytes`` must be UTF-8."""
    try:
        return orjson.loads(data)
    except _JSONDecodeError:
        # orjson's refusals that are still JSON (lone surrogate escapes, big integers, deep
        # nesting) are read by the standard library; the rest fails there too, with its words.
        return _strict_stdlib(data)


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept; always UTF-8-encodable (see ``dumpb``)."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, UnicodeDecodeError):
        return _dumps_stdlib(value).decode()


def dumpb(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes; a string with a lone surrogate (which cannot be UTF-8) makes
    the whole value written with ASCII escapes instead, still valid JSON."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return _dumps_stdlib(value)


def _dumps_stdlib(value: Any) -> bytes:
    """What orjson refuses (a lone surrogate, an integer past 64 bits): the standard library's
    compact JSON, with ASCII escapes where UTF-8 cannot hold the text."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
