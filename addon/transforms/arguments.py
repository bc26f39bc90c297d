"""Tool-call arguments read as JSON, as leniently as needed, never changing what they say.

Contract: pure, never raises. Strict JSON first; then, losslessly, raw control characters in
strings and a JSON string holding the object (double encoding); then ``json-repair``
(imported when first needed). Two values back to back, or anything that is not an object,
comes back as ``None``. The loop guard reads arguments the same way."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Parsed:
    value: Any
    """The decoded value; ``None`` for empty or unreadable arguments."""
    repaired: bool = False
    empty: bool = False


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} does not fit in a float")
    return value


def _loads(text: str, *, strict: bool) -> Any:
    return json.loads(text, strict=strict, parse_constant=_refuse_constant, parse_float=_finite)


def parse_arguments(arguments: str) -> Parsed:
    """The arguments as a JSON value, as leniently as needed (step 1 of ``addon.transforms.repair``).
    Never raises."""
    if not arguments.strip():
        return Parsed(None, empty=True)
    try:
        value: Any = _loads(arguments, strict=True)
    except ValueError:
        pass
    except RecursionError:
        return Parsed(None)
    else:
        inner = _unwrap_string(value)
        return Parsed(inner, repaired=inner is not value)
    try:  # raw control characters in strings: read them as the characters they are
        value = _loads(arguments, strict=False)
    except ValueError:
        pass
    except RecursionError:
        return Parsed(None)
    else:
        return Parsed(_unwrap_string(value), repaired=True)
    if _several_values(arguments):
        return Parsed(None)
    from json_repair import repair_json

    try:
        # stream_stable: strings are kept as written (without it a string ending in "\n"
        # loses its trailing whitespace: a file's last newline).
        value = repair_json(
            arguments, return_objects=True, skip_json_loads=True, stream_stable=True
        )
    except (ValueError, RecursionError, IndexError, TypeError, KeyError):
        return Parsed(None)
    if isinstance(value, dict):
        return Parsed(value, repaired=True)
    return Parsed(None)


_DECODER = json.JSONDecoder(strict=False)


def _several_values(text: str) -> bool:
    """Two JSON values back to back (``{…}{…}``: two calls' arguments run together). Repair
    would keep one of them and lose the other: such arguments are left as they are."""
    start = len(text) - len(text.lstrip())
    try:
        _, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return False
    return text[end:].lstrip()[:1] in ("{", "[")


def _unwrap_string(value: Any) -> Any:
    """A JSON string holding a JSON object (arguments encoded twice) → that object."""
    if isinstance(value, str):
        try:
            inner = _loads(value, strict=False)
        except (ValueError, RecursionError):
            return value
        if isinstance(inner, dict):
            return inner
    return value
