"""JSON Schema sanitizing profiles for tool parameters.

Contract: a pure function ``sanitize_schema(schema, profile, notes) -> schema``
that returns a new object and never mutates its input. Cost is linear in the
size of the schema (``gemini``: in the size of its output, which is bounded).
It knows JSON Schema keywords, nothing about dialects or tools.

Profiles:
- ``none``: the schema is sent as the client wrote it.
- ``strict``: for upstreams (Gemini-backed and several OpenAI-compatible
  gateways) that reject parts of JSON Schema: drop ``additionalProperties``,
  ``$schema``, ``title`` and ``default``; collapse ``anyOf`` to its first
  non-null option; drop an empty ``required``. Keys of a ``properties`` map are
  field names, not keywords: a property called ``title`` or ``default`` stays.
- ``gemini``: what Gemini's function declarations accept (a subset of OpenAPI
  3.0's schema object): everything ``strict`` removes, and ``$ref`` inlined,
  unions turned into ``nullable`` / ``anyOf``, ``const`` turned into ``enum``,
  every node given a type, and keywords Gemini rejects dropped. See
  ``gemini_schema``; each change is counted in the notes.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any, TypeGuard
from urllib.parse import unquote

from addon.model import JSON, Notes, SchemaProfile

_DROP = frozenset({"additionalProperties", "$schema", "title", "default"})
# Keywords whose value maps names to subschemas (the names are data, not keywords).
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
# Keywords whose value is one subschema or a list of them.
_SCHEMA_VALUES = frozenset(
    {
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "anyOf",
        "oneOf",
        "allOf",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)


def sanitize_schema(
    schema: Any, profile: SchemaProfile, notes: Notes | None = None, *, upper_types: bool = False
) -> Any:
    """``schema`` cleaned for ``profile``; ``gemini`` counts what it changed in ``notes`` and
    writes upper-case type names with ``upper_types`` (other profiles ignore it)."""
    if profile == "none":
        return schema
    if profile == "gemini":
        return gemini_schema(schema, upper_types=upper_types, notes=notes)
    return _strict(schema)


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    any_of = node.get("anyOf")
    while isinstance(any_of, list) and any_of:  # an option may itself be an anyOf
        options = [o for o in any_of if not (isinstance(o, dict) and o.get("type") == "null")]
        chosen = options[0] if options else any_of[0]
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        if isinstance(chosen, dict):
            # The option's own keywords win; the outer description stays if the option has none.
            merged.update(chosen)
        node = merged
        any_of = node.get("anyOf")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "required" and value == []:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _strict(sub) for name, sub in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = _strict(value)
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- gemini

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


def gemini_schema(schema: Any, *, upper_types: bool = False, notes: Notes | None = None) -> JSON:
    """``schema`` as Gemini's function declarations take it; every change counted in ``notes``.

    The result uses only ``GEMINI_KEYWORDS``, every node has a ``type`` or an ``anyOf``, and a
    keyword appears only on the type Gemini allows it for (it answers 400 to ``properties`` on a
    string, ``enum`` on an integer, an array without ``items``, an empty ``properties``).

    - ``$ref`` (local JSON pointers: ``#/$defs/X``, ``#/definitions/X``, ``#``, ``~0``/``~1``
      and %-escapes) is inlined, its sibling keywords kept; a ``$ref`` inside its own expansion
      becomes its target's type (``object`` if it has none) and description. Other refs go.
      ``allOf`` is merged into its node (properties and ``required`` united, types and enums
      intersected, the tighter bound kept).
    - Unions: a ``null`` option of ``anyOf`` / ``oneOf`` (``oneOf`` is sent as ``anyOf``),
      ``"null"`` in a type list and ``null`` in ``enum`` become ``nullable: true``. One option
      left is merged into its node (the node's description wins); several stay an ``anyOf``
      with the node's other constraints copied into each option and ``nullable`` on each.
      ``type: ["string", "integer"]`` becomes an ``anyOf`` of one option per type, each with the
      keywords of its type. A schema that allows only null is a nullable string.
    - ``const`` becomes a one-value ``enum``. Gemini takes ``enum`` only for strings: values of
      another type (``enum: [1, 2]``, ``const: true``) are listed in the description
      ("Allowed values: 1, 2") and the type kept, so the model still sends a number, which is
      what the client's tool expects; a string enum keeps only its string values.
    - A node without a type gets one inferred from its keywords, values or default; with
      nothing to go on (``{}``, ``true``, a description alone) it is any JSON value: an
      ``anyOf`` of string, number, boolean, object and array (the root: an object).
    - ``exclusiveMinimum`` / ``exclusiveMaximum`` become ``minimum`` / ``maximum`` (exact for
      integers, one bound looser for numbers). ``format`` stays only where Gemini takes it
      (``date-time`` and ``enum`` for strings, ``int32`` / ``int64``, ``float`` / ``double``).
      ``required`` and ``propertyOrdering`` keep only declared properties; an empty
      ``properties`` goes (``{"type": "object"}`` is valid, ``"properties": {}`` is not); an
      array without ``items`` gets ``items`` (any value). Tuple ``items`` /
      ``prefixItems`` become one ``items``: their ``anyOf``.
    - Everything else (``additionalProperties``, ``patternProperties``, ``propertyNames``,
      ``not``, ``if``/``then``/``else``, ``title``, ``default``, ``examples``, ...) is dropped.

    Types are lower-case (the public API takes both in ``parameters`` and
    ``parametersJsonSchema``); ``upper_types=True`` writes Gemini's enum names (``STRING``) for
    endpoints that want them. Never raises: a non-object schema counts as ``{}``, nesting is
    bounded by ``GEMINI_MAX_DEPTH`` and size by ``GEMINI_MAX_NODES``. The input is not mutated
    and the output shares nothing mutable with it. Applying it to its own output changes
    nothing. Notes read ``schema <change> (gemini)[: <keyword>]``, e.g.
    ``schema keyword dropped (gemini): propertyNames``, ``schema $ref inlined (gemini)``.
    """
    cleaner = _Gemini(schema, upper_types)
    out = cleaner.node(schema, 0, (), root=True)
    if notes is not None:
        notes.update(cleaner.notes)
    return out


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


class _Gemini:
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

    # ------------------------------------------------------------------ one node

    def node(self, node: Any, depth: int, refs: tuple[str, ...], *, root: bool = False) -> JSON:
        if not isinstance(node, dict):
            node = self.replaced(node)
        self.budget -= 1
        if depth > GEMINI_MAX_DEPTH:
            return self.cut(node, "too deep")
        if self.budget < 0:
            return self.cut(node, "too large")
        node, refs = self.expand(node, refs)
        if "anyOf" in node or "oneOf" in node:
            return self.union(node, depth, refs, root)
        types, nullable = self.types(node)
        if len(types) > 1:
            self.note("type list → anyOf")
            for key in node:
                if key in _TYPED_KEYS and not any(key in _KEYS_OF[t] for t in types):
                    self.dropped(key)
            options = [
                {
                    k: v
                    for k, v in node.items()
                    if k not in _ANNOTATIONS
                    and k != "type"
                    and (k not in _TYPED_KEYS or k in _KEYS_OF[t])
                }
                | {"type": t}
                for t in types
            ]
            outer = {k: v for k, v in node.items() if k in _ANNOTATIONS}
            if nullable:
                outer["nullable"] = True
            return self.union({**outer, "anyOf": options}, depth, refs, root)
        if types:
            t: str | None = types[0]
        elif _is_null(node):  # only null: Gemini has no null type, a nullable string says it
            t = "string"
            self.note("type added", t)
        else:
            t = None
        return self.single(node, t, nullable, depth, refs, root)

    def types(self, node: JSON, *, quiet: bool = False) -> tuple[list[str], bool]:
        """The node's known types (lower-case, without ``null``) and whether it may be null."""
        nullable = node.get("nullable") is True
        if "type" not in node:
            return [], nullable
        raw = node["type"]
        names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        known: list[str] = []
        null = unknown = False
        for name in names:
            low = name.lower() if isinstance(name, str) else None
            if low == "null":
                null = True
            elif low in _TYPES:
                if low not in known:
                    known.append(low)
            else:
                unknown = True
        if not quiet:
            if null:
                self.note("null type → nullable")
            if unknown or not names:
                self.note("unknown type dropped")
        return known, nullable or null

    def single(
        self,
        node: JSON,
        t: str | None,
        nullable: bool,
        depth: int,
        refs: tuple[str, ...],
        root: bool,
    ) -> JSON:
        values: list[Any] | None = None
        if "const" in node:
            values = [node["const"]]
            self.note("const → enum")
        elif isinstance(node.get("enum"), list):
            values = node["enum"]
        if values is not None and any(v is None for v in values):
            values = [v for v in values if v is not None]
            nullable = True
            self.note("null enum value → nullable")
        if t is None:
            t = self.infer(node, values, root)
            self.note("type added", t)
        consumed = {"type", "const", "nullable", "description"}
        if values is not None:
            consumed.add("enum")
        if "nullable" in node and not isinstance(node["nullable"], bool):
            self.dropped("nullable")
        desc = node.get("description")
        if "description" in node and not isinstance(desc, str):
            self.dropped("description")
            desc = None
        out: JSON = {} if t == "any" else {"type": self.typ(t)}
        if values is not None:
            if t == "string":
                kept: list[str] = []
                seen: set[str] = set()
                for v in values:
                    if isinstance(v, str) and v not in seen:
                        seen.add(v)
                        kept.append(v)
                if len(kept) != len(values):
                    self.note("enum value dropped", n=len(values) - len(kept))
                if kept:
                    out["enum"] = kept
                elif not values:
                    self.dropped("enum")
            elif values:
                listed = ", ".join(_render(v) for v in values[:_MAX_LISTED])
                if len(values) > _MAX_LISTED:
                    listed += ", …"
                desc = (f"{desc}\n" if desc else "") + f"Allowed values: {listed}"
                self.note("enum moved to the description", f"{t} values")
            else:
                self.dropped("enum")
        if desc is not None:
            out["description"] = desc
        if t == "any":
            out["anyOf"] = self.any_value(depth, nullable)
        elif nullable:
            out["nullable"] = True
        if t == "object":
            consumed |= self.object_keys(node, out, depth, refs)
        elif t == "array":
            consumed |= self.array_keys(node, out, depth, refs)
        elif t == "string":
            consumed |= self.string_keys(node, out)
        elif t in ("integer", "number"):
            consumed |= self.number_keys(node, out, t)
        if "format" in node:
            consumed.add("format")
            fmt = node["format"]
            if (
                isinstance(fmt, str)
                and fmt in _FORMATS.get(t, ())
                and (fmt != "enum" or "enum" in out)
            ):
                out["format"] = fmt
            else:
                name = fmt if isinstance(fmt, str) and _NAME.fullmatch(fmt) else "other"
                self.note("format dropped", name)
        for key in node:
            if key not in consumed:
                self.dropped(key)
        return out

    def infer(self, node: JSON, values: list[Any] | None, root: bool) -> str:
        keys = node.keys()
        if not keys.isdisjoint(_OBJECT_KEYS):
            return "object"
        if not keys.isdisjoint(_ARRAY_KEYS):
            return "array"
        if values:
            if all(isinstance(v, str) for v in values):
                return "string"
            if all(isinstance(v, bool) for v in values):
                return "boolean"
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return "integer"
            if all(_num(v) for v in values):
                return "number"
            if any(isinstance(v, str) for v in values):
                return "string"
        fmt = node.get("format")
        if fmt in _FORMATS["integer"]:
            return "integer"
        if fmt in _FORMATS["number"]:
            return "number"
        if not keys.isdisjoint(_STRING_KEYS) or isinstance(fmt, str):
            return "string"
        if not keys.isdisjoint(_NUMBER_KEYS):
            return "number"
        default = node.get("default")
        for kind, name in (
            (bool, "boolean"),
            (int, "integer"),
            (float, "number"),
            (str, "string"),
            (list, "array"),
            (dict, "object"),
        ):
            if isinstance(default, kind):
                return name
        return "object" if root else "any"

    def any_value(self, depth: int, nullable: bool) -> list[JSON]:
        """Options for a value the schema does not constrain: Gemini wants a type on every node,
        and a string alone would make the model stringify objects and arrays. The array option
        is left out near the depth bound, so that the result stays within it."""
        scalars = ("string", "number", "boolean", "object")
        options: list[JSON] = [{"type": self.typ(t)} for t in scalars]
        if depth + 3 <= GEMINI_MAX_DEPTH:
            items = {"anyOf": [{"type": self.typ(t)} for t in scalars]}
            options.append({"type": self.typ("array"), "items": items})
        if nullable:
            for option in options:
                option["nullable"] = True
        return options

    def object_keys(self, node: JSON, out: JSON, depth: int, refs: tuple[str, ...]) -> set[str]:
        raw = node.get("properties")
        props: JSON = {}
        if isinstance(raw, dict):
            for name, sub in raw.items():
                props[name] = self.node(sub, depth + 1, refs)
            if not props:
                self.note("empty properties dropped")
        elif "properties" in node:
            self.dropped("properties")
        if props:
            out["properties"] = props
        if "required" in node:
            raw = node["required"]
            if isinstance(raw, list):
                required: list[str] = []
                for name in raw:
                    if isinstance(name, str) and name in props and name not in required:
                        required.append(name)
                if len(required) != len(raw):
                    self.note("required entry dropped", n=len(raw) - len(required))
                if required:
                    out["required"] = required
                elif not raw:
                    self.dropped("required")
            else:
                self.dropped("required")
        for key in ("minProperties", "maxProperties"):
            if key in node:
                self.bound(node, out, key)
        if "propertyOrdering" in node:
            raw = node["propertyOrdering"]
            order: list[str] = []
            if isinstance(raw, list):
                for name in raw:
                    if isinstance(name, str) and name in props and name not in order:
                        order.append(name)
            if order and len(order) == len(raw):
                out["propertyOrdering"] = order
            elif order:
                out["propertyOrdering"] = order
                self.note("propertyOrdering entry dropped", n=len(raw) - len(order))
            else:
                self.dropped("propertyOrdering")
        return {"properties", "required", "minProperties", "maxProperties", "propertyOrdering"}

    def array_keys(self, node: JSON, out: JSON, depth: int, refs: tuple[str, ...]) -> set[str]:
        consumed = {"items", "prefixItems", "minItems", "maxItems"}
        items = node.get("items")
        prefix = node.get("prefixItems")
        if isinstance(items, list):  # draft 4-7 tuple form; additionalItems is the rest
            prefix, rest = items, node.get("additionalItems")
            consumed.add("additionalItems")
        else:
            rest = items
            if "prefixItems" in node and not isinstance(prefix, list):
                self.dropped("prefixItems")
        schema: Any
        if isinstance(prefix, list) and prefix:
            options = [*prefix, rest] if isinstance(rest, dict) or rest is True else list(prefix)
            self.note("tuple items → one items schema")
            schema = options[0] if len(options) == 1 else {"anyOf": options}
        elif isinstance(rest, dict):
            schema = rest
        else:
            if "items" in node and not isinstance(items, list):
                schema = self.replaced(rest)
            else:
                self.note("array items added")
                schema = {}
        out["items"] = self.node(schema, depth + 1, refs)
        for key in ("minItems", "maxItems"):
            if key in node:
                self.bound(node, out, key)
        return consumed

    def string_keys(self, node: JSON, out: JSON) -> set[str]:
        for key in ("minLength", "maxLength"):
            if key in node:
                self.bound(node, out, key)
        if "pattern" in node:
            if isinstance(node["pattern"], str):
                out["pattern"] = node["pattern"]
            else:
                self.dropped("pattern")
        return {"minLength", "maxLength", "pattern"}

    def bound(self, node: JSON, out: JSON, key: str) -> None:
        value = _count(node[key])
        if value is None:
            self.dropped(key)
        else:
            out[key] = value

    def number_keys(self, node: JSON, out: JSON, t: str) -> set[str]:
        low: int | float | None = None
        high: int | float | None = None
        for key in ("minimum", "maximum"):
            if key in node:
                if _num(node[key]):
                    if key == "minimum":
                        low = node[key]
                    else:
                        high = node[key]
                else:
                    self.dropped(key)
        exclusive_min, exclusive_max = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
        if isinstance(exclusive_min, bool):  # draft 4: a flag on minimum
            if exclusive_min and low is not None:
                low = math.floor(low) + 1 if t == "integer" else low
                self.note("exclusiveMinimum → minimum")
        elif _num(exclusive_min):
            bound = math.floor(exclusive_min) + 1 if t == "integer" else exclusive_min
            low = bound if low is None else max(low, bound)
            self.note("exclusiveMinimum → minimum")
        elif "exclusiveMinimum" in node:
            self.dropped("exclusiveMinimum")
        if isinstance(exclusive_max, bool):
            if exclusive_max and high is not None:
                high = math.ceil(high) - 1 if t == "integer" else high
                self.note("exclusiveMaximum → maximum")
        elif _num(exclusive_max):
            bound = math.ceil(exclusive_max) - 1 if t == "integer" else exclusive_max
            high = bound if high is None else min(high, bound)
            self.note("exclusiveMaximum → maximum")
        elif "exclusiveMaximum" in node:
            self.dropped("exclusiveMaximum")
        if low is not None:
            out["minimum"] = low
        if high is not None:
            out["maximum"] = high
        return {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}

    # ------------------------------------------------------------------ unions

    def union(self, node: JSON, depth: int, refs: tuple[str, ...], root: bool) -> JSON:
        outer = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
        options: list[Any] | None = None
        for key in ("anyOf", "oneOf"):
            if key not in node:
                continue
            value = node[key]
            if not isinstance(value, list) or not value or options is not None:
                self.dropped(key)
            else:
                options = value
                if key == "oneOf":
                    self.note("oneOf → anyOf")
        if options is None:
            return self.node(outer, depth + 1, refs, root=root)
        nullable = outer.get("nullable") is True
        kept = [o for o in options if not _is_null(o)]
        if len(kept) < len(options):
            nullable = True
            self.note("null option → nullable")
        if not kept:  # only null: as {"type": "null"}
            return self.node({**outer, "type": "null"}, depth + 1, refs, root=root)
        if len(kept) == 1:
            only = kept[0] if isinstance(kept[0], dict) else self.replaced(kept[0])
            merged = self.merge(outer, only)
            if nullable:
                merged["nullable"] = True
            return self.node(merged, depth + 1, refs, root=root)
        constraints = {k: v for k, v in outer.items() if k not in _ANNOTATIONS}
        branches: list[JSON] = []
        for option in kept:
            merged = self.merge(
                constraints, option if isinstance(option, dict) else self.replaced(option)
            )
            if nullable:
                merged["nullable"] = True
            branch = self.node(merged, depth + 1, refs)
            for b in branch["anyOf"] if set(branch) == {"anyOf"} else [branch]:
                if b not in branches:
                    branches.append(b)
        for key in outer:
            if key in _ANNOTATIONS and key not in ("description", "nullable"):
                self.dropped(key)
        desc = outer.get("description")
        if "description" in outer and not isinstance(desc, str):
            self.dropped("description")
            desc = None
        if len(branches) == 1:
            (only_branch,) = branches
            if desc is not None and "description" not in only_branch:
                return {**only_branch, "description": desc}
            return only_branch
        out: JSON = {}
        if desc is not None:
            out["description"] = desc
        out["anyOf"] = branches
        return out

    # ------------------------------------------------------------------ $ref and allOf

    def expand(self, node: JSON, refs: tuple[str, ...]) -> tuple[JSON, tuple[str, ...]]:
        """``$ref`` and ``allOf`` merged into the node, so that one schema is left."""
        for _ in range(_MAX_STEPS):
            if "$ref" in node:
                ref = node["$ref"]
                rest = {k: v for k, v in node.items() if k != "$ref"}
                target = self.resolve(ref) if isinstance(ref, str) else None
                if target is None:
                    self.note("$ref not resolved")
                    node = rest
                elif ref in refs:
                    self.note("recursive $ref cut")
                    node = self.merge(rest, self.stub(target))
                else:
                    self.note("$ref inlined")
                    refs = (*refs, ref)
                    node = self.merge(rest, target)
            elif "allOf" in node:
                parts = node["allOf"]
                node = {k: v for k, v in node.items() if k != "allOf"}
                if not isinstance(parts, list):
                    self.dropped("allOf")
                    continue
                self.note("allOf merged")
                for part in parts:
                    node = self.merge(node, part if isinstance(part, dict) else self.replaced(part))
            else:
                return node, refs
        self.note("cut", "too many $ref / allOf steps")
        return {k: v for k, v in node.items() if k not in ("$ref", "allOf")}, refs

    def resolve(self, ref: str) -> JSON | None:
        """The subschema a local ``$ref`` points at (a JSON pointer into the root), if any."""
        if not ref.startswith("#"):
            return None
        pointer = unquote(ref[1:])
        if pointer and not pointer.startswith("/"):
            return None  # a plain-name anchor: not supported
        target: Any = self.root
        for token in pointer.split("/")[1:] if pointer else ():
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif (
                isinstance(target, list)
                and token.isascii()
                and token.isdigit()
                and len(token) < 10
                and int(token) < len(target)
            ):
                target = target[int(token)]
            else:
                return None
        if isinstance(target, bool):
            return {}
        return target if isinstance(target, dict) else None

    def merge(self, a: JSON, b: JSON) -> JSON:
        """Both schemas at once (``allOf``): ``a``'s annotations win, constraints combine."""
        out = dict(a)
        for key, value in b.items():
            if key not in out:
                out[key] = value
                continue
            mine = out[key]
            if key == "$ref":
                if not (isinstance(mine, str) and mine == value):
                    before = out.get("allOf")
                    out["allOf"] = [*(before if isinstance(before, list) else ()), {"$ref": value}]
            elif key == "allOf" and isinstance(mine, list) and isinstance(value, list):
                out[key] = [*mine, *value]
            elif key == "properties" and isinstance(mine, dict) and isinstance(value, dict):
                props = dict(mine)
                for name, sub in value.items():
                    props[name] = {"allOf": [props[name], sub]} if name in props else sub
                out[key] = props
            elif key == "required" and isinstance(mine, list) and isinstance(value, list):
                out[key] = [*mine, *(r for r in value if isinstance(r, str) and r not in mine)]
            elif key == "type":
                out[key] = self.meet(mine, value)
            elif key == "enum" and isinstance(mine, list) and isinstance(value, list):
                common = [v for v in mine if _scalar(v) and v in value]
                if common:
                    out[key] = common
                else:
                    self.note("allOf conflict", "enum")
            elif key in _LOWER_BOUNDS and _num(mine) and _num(value):
                out[key] = max(mine, value)
            elif key in _UPPER_BOUNDS and _num(mine) and _num(value):
                out[key] = min(mine, value)
            elif key == "items" and isinstance(mine, dict) and isinstance(value, dict):
                out[key] = {"allOf": [mine, value]}
            elif key == "nullable" and isinstance(mine, bool) and isinstance(value, bool):
                out[key] = mine and value
            elif key in ("anyOf", "oneOf") and mine is not value:
                self.note("allOf conflict", key)
        return out

    def meet(self, a: Any, b: Any) -> Any:
        """The types both ``a`` and ``b`` allow (an integer is a number)."""
        mine, theirs = _type_names(a), _type_names(b)
        if mine is None:
            return b
        if theirs is None:
            return a
        both: list[str] = []
        for t in mine:
            if t in theirs:
                m = t
            elif (t == "integer" and "number" in theirs) or (t == "number" and "integer" in theirs):
                m = "integer"
            else:
                continue
            if m not in both:
                both.append(m)
        if not both:
            self.note("allOf conflict", "type")
            return a
        return both[0] if len(both) == 1 else both

    # ------------------------------------------------------------------ stand-ins

    def stub(self, node: JSON) -> JSON:
        """A permissive stand-in: the node's own type (``object`` if none) and description."""
        types, nullable = self.types(node, quiet=True)
        t = types[0] if types else "object"
        out: JSON = {"type": t}
        if t == "array":
            out["items"] = {"type": "string"}
        if isinstance(node.get("description"), str):
            out["description"] = node["description"]
        if nullable:
            out["nullable"] = True
        return out

    def cut(self, node: JSON, why: str) -> JSON:
        stub = self.stub(node)
        if stub != _plain(node):
            self.note("cut", why)
        if self.upper:
            stub["type"] = stub["type"].upper()
            if "items" in stub:
                stub["items"] = {"type": "STRING"}
        return stub
