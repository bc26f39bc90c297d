"""The ``strict`` schema profile: what several gateways (and Gemini-backed ones) reject, dropped.

Contract: ``strict_schema(schema)`` returns a new schema, never mutating its input; linear in
its size. Keys of a ``properties`` map are field names, not keywords: a property called
``title`` or ``default`` stays."""

from __future__ import annotations

from typing import Any

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


def strict_schema(node: Any) -> Any:
    """Drops ``additionalProperties``, ``$schema``, ``title`` and ``default``; collapses
    ``anyOf`` to its first non-null option; drops an empty ``required``."""
    if isinstance(node, list):
        return [strict_schema(x) for x in node]
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
            out[key] = {name: strict_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = strict_schema(value)
        else:
            out[key] = value
    return out
