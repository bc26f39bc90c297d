"""JSON Schema sanitizing profiles for tool parameters.

Contract: a pure function ``sanitize_schema(schema, profile) -> schema`` that
returns a new object and never mutates its input. Cost is linear in the size of
the schema. It knows JSON Schema keywords, nothing about dialects or tools.

Profiles:
- ``none``: the schema is sent as the client wrote it.
- ``strict``: for upstreams (Gemini-backed and several OpenAI-compatible
  gateways) that reject parts of JSON Schema: drop ``additionalProperties``,
  ``$schema``, ``title`` and ``default``; collapse ``anyOf`` to its first
  non-null option; drop an empty ``required``. Keys of a ``properties`` map are
  field names, not keywords: a property called ``title`` or ``default`` stays.
"""

from __future__ import annotations

from typing import Any

from addon.model import SchemaProfile

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


def sanitize_schema(schema: Any, profile: SchemaProfile) -> Any:
    if profile == "none":
        return schema
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
