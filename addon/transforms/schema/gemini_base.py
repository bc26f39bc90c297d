"""What the ``gemini`` profile's walker stands on: Gemini's keywords and limits, small value
tests, and the walker's state (its notes, its node budget). Words used across
``addon.transforms.schema.gemini*``: a *family* is the keywords of one type (object, array,
string, number), and Gemini answers 400 to a keyword on another type's node; a *stub* stands in
for a node the walker does not expand (a cycle, too deep, too large): its type and description."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any, TypeGuard

from addon.model import JSON

GEMINI_KEYWORDS = frozenset(
    {
        "type",
        "format",
        "description",
        "nullable",
        "enum",
        "properties",
        "required",
        "items",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "anyOf",
        "propertyOrdering",
        "title",
        "minProperties",
        "maxProperties",
    }
)
"""The keywords of Gemini's ``Schema`` object (function declarations, ``parameters``). The
``gemini`` profile emits a subset: ``title`` goes, as in ``strict``."""

GEMINI_MAX_DEPTH = 32
"""Nesting bound: a subschema deeper than this is replaced by its type and description."""
GEMINI_MAX_NODES = 5000
"""Size bound per schema (``$ref`` inlining can multiply a schema): later subschemas are cut."""
_MAX_STEPS = 64  # $ref / allOf expansions at one node
_MAX_LISTED = 50  # non-string enum values written into a description

_TYPES = ("string", "number", "integer", "boolean", "array", "object")
_FORMATS = {
    "string": ("date-time", "enum"),
    "integer": ("int32", "int64"),
    "number": ("float", "double"),
}
_OBJECT_KEYS = frozenset(
    {
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
        "propertyOrdering",
    }
)
_ARRAY_KEYS = frozenset(
    {
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "minContains",
        "maxContains",
        "minItems",
        "maxItems",
        "uniqueItems",
        "unevaluatedItems",
    }
)
_STRING_KEYS = frozenset(
    {"minLength", "maxLength", "pattern", "contentEncoding", "contentMediaType", "contentSchema"}
)
_NUMBER_KEYS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)
_KEYS_OF = {
    "object": _OBJECT_KEYS,
    "array": _ARRAY_KEYS,
    "string": _STRING_KEYS,
    "number": _NUMBER_KEYS,
    "integer": _NUMBER_KEYS,
    "boolean": frozenset(),
}
_TYPED_KEYS = _OBJECT_KEYS | _ARRAY_KEYS | _STRING_KEYS | _NUMBER_KEYS
# Keywords that describe a node rather than constrain it: on a union they stay on the outer
# node (description) or go, instead of being copied into every option.
_ANNOTATIONS = frozenset(
    {
        "description",
        "title",
        "default",
        "examples",
        "example",
        "$comment",
        "$schema",
        "$id",
        "$anchor",
        "$defs",
        "definitions",
        "deprecated",
        "readOnly",
        "writeOnly",
        "nullable",
    }
)
_LOWER_BOUNDS = frozenset({"minimum", "minLength", "minItems", "minProperties"})
_UPPER_BOUNDS = frozenset({"maximum", "maxLength", "maxItems", "maxProperties"})
_NAME = re.compile(r"[$A-Za-z][\w$-]{0,39}", re.ASCII)


def _num(value: Any) -> TypeGuard[int | float]:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _count(value: Any) -> int | None:
    """A non-negative whole number, as Gemini's int64 fields take it."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float)


def _type_names(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value.lower()]
    if isinstance(value, list):
        return [t.lower() for t in value if isinstance(t, str)]
    return None


def _is_null(option: Any) -> bool:
    """An option that only allows ``null``."""
    if not isinstance(option, dict):
        return False
    names = _type_names(option.get("type"))
    if names:
        return all(t == "null" for t in names)
    if "const" in option:
        return option["const"] is None
    values = option.get("enum")
    return isinstance(values, list) and bool(values) and all(v is None for v in values)


def _render(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = "…"
    return text if len(text) <= 200 else text[:199] + "…"


def _plain(node: JSON) -> JSON:
    """``node`` with lower-case types one level down: what a stub of it looks like if nothing
    is lost (compared shallowly, never recursing into the input)."""
    out = dict(node)
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    items = out.get("items")
    if isinstance(items, dict) and isinstance(items.get("type"), str):
        out["items"] = {**items, "type": items["type"].lower()}
    return out


class _Base:
    """The walker's state and its notes; ``node`` and ``stub`` are the walker's own
    (``gemini._Gemini``), declared here for the keyword families and ``$ref`` handling."""

    def __init__(self, root: Any, upper: bool) -> None:
        self.root = root
        self.upper = upper
        self.notes: Counter[str] = Counter()
        self.budget = GEMINI_MAX_NODES

    # ------------------------------------------------------------------ notes

    def note(self, what: str, detail: str | None = None, n: int = 1) -> None:
        self.notes[f"schema {what} (gemini)" + (f": {detail}" if detail else "")] += n

    def dropped(self, key: Any) -> None:
        name = key if isinstance(key, str) and _NAME.fullmatch(key) else "unknown keyword"
        self.note("keyword dropped", name)

    def replaced(self, value: Any) -> JSON:
        """A subschema that is not an object: ``true`` means any value, anything else is noted."""
        if value is not True:
            self.note("subschema that is not an object replaced")
        return {}

    def typ(self, name: str) -> str:
        return name.upper() if self.upper else name

    def node(self, node: Any, depth: int, refs: tuple[str, ...], *, root: bool = False) -> JSON:
        raise NotImplementedError

    def stub(self, node: JSON) -> JSON:
        raise NotImplementedError
