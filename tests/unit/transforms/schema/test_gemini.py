"""The ``gemini`` schema profile: what Gemini's function declarations accept (issue 9)."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.config.options import parse_settings
from addon.config.routes_file import load_routes
from addon.model import SCHEMA_PROFILES, Notes, Request, Tool
from addon.transforms.schema import (
    GEMINI_KEYWORDS,
    GEMINI_MAX_DEPTH,
    GEMINI_MAX_NODES,
    gemini_schema,
    sanitize_schema,
)
from addon.transforms.tools import sanitize_tool_schemas

CLIENTS = Path("/work/shared/fixtures/real/clients")

# Gemini's Schema object (ai.google.dev/api/caching#Schema, function declarations): the fields,
# and which type each type-specific field belongs to (Gemini answers 400 "only allowed for
# OBJECT type" and the like otherwise).
ALLOWED = {
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
ONLY_FOR = {
    "properties": {"object"},
    "required": {"object"},
    "minProperties": {"object"},
    "maxProperties": {"object"},
    "propertyOrdering": {"object"},
    "items": {"array"},
    "minItems": {"array"},
    "maxItems": {"array"},
    "minLength": {"string"},
    "maxLength": {"string"},
    "pattern": {"string"},
    "enum": {"string"},
    "minimum": {"integer", "number"},
    "maximum": {"integer", "number"},
}
FORMATS = {
    "string": {"date-time", "enum"},
    "integer": {"int32", "int64"},
    "number": {"float", "double"},
}
TYPES = {"string", "number", "integer", "boolean", "array", "object"}


def problems(node: Any, path: str = "$", *, upper: bool = False) -> list[str]:
    """Everything in ``node`` Gemini would refuse, as ``path: problem`` lines."""
    if not isinstance(node, dict):
        return [f"{path}: not an object"]
    found = [f"{path}: keyword {k!r}" for k in node if k not in ALLOWED]
    if "anyOf" in node:
        options = node["anyOf"]
        if "type" in node:
            found.append(f"{path}: type next to anyOf")
        if not isinstance(options, list) or len(options) < 2:
            found.append(f"{path}: anyOf {options!r}")
            return found
        for i, option in enumerate(options):
            found += problems(option, f"{path}.anyOf[{i}]", upper=upper)
        extra = set(node) - {"anyOf", "description"}
        if extra:
            found.append(f"{path}: {sorted(extra)} next to anyOf")
        return found
    t = node.get("type")
    if not isinstance(t, str):
        return [*found, f"{path}: type {t!r}"]
    if (t != t.upper()) if upper else (t != t.lower()):
        found.append(f"{path}: type case {t!r}")
    t = t.lower()
    if t not in TYPES:
        return [*found, f"{path}: unknown type {t!r}"]
    for key, types in ONLY_FOR.items():
        if key in node and t not in types:
            found.append(f"{path}: {key} on {t}")
    if "description" in node and not isinstance(node["description"], str):
        found.append(f"{path}: description {node['description']!r}")
    if "nullable" in node and node["nullable"] is not True:
        found.append(f"{path}: nullable {node['nullable']!r}")
    if "format" in node and node["format"] not in FORMATS.get(t, ()):
        found.append(f"{path}: format {node['format']!r} on {t}")
    if "enum" in node:
        values = node["enum"]
        if not values or not all(isinstance(v, str) for v in values):
            found.append(f"{path}: enum {values!r}")
    for key in ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"):
        if key in node and not (type(node[key]) is int and node[key] >= 0):
            found.append(f"{path}: {key} {node[key]!r}")
    for key in ("minimum", "maximum"):
        if key in node and type(node[key]) not in (int, float):
            found.append(f"{path}: {key} {node[key]!r}")
    if "pattern" in node and not isinstance(node["pattern"], str):
        found.append(f"{path}: pattern {node['pattern']!r}")
    props = node.get("properties")
    if "properties" in node:
        if not isinstance(props, dict) or not props:
            found.append(f"{path}: properties {props!r}")
        else:
            for name, sub in props.items():
                found += problems(sub, f"{path}.properties[{name}]", upper=upper)
    for key in ("required", "propertyOrdering"):
        if key in node:
            names = node[key]
            if (
                not isinstance(names, list)
                or not names
                or len(set(names)) != len(names)
                or not set(names) <= set(props or ())
            ):
                found.append(f"{path}: {key} {names!r}")
    if t == "array":
        if not isinstance(node.get("items"), dict):
            found.append(f"{path}: array without items")
        else:
            found += problems(node["items"], f"{path}.items", upper=upper)
    return found


def clean(schema: Any, **kwargs: Any) -> tuple[Any, Notes]:
    notes: Notes = Counter()
    out = gemini_schema(schema, notes=notes, **kwargs)
    assert problems(out, upper=kwargs.get("upper_types", False)) == []
    return out, notes


def depth_of(node: Any) -> int:
    if isinstance(node, dict):
        return 1 + max((depth_of(v) for v in node.values()), default=0)
    if isinstance(node, list):
        return 1 + max((depth_of(v) for v in node), default=0)
    return 0


def size_of(node: Any) -> int:
    if isinstance(node, dict):
        return 1 + sum(size_of(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(size_of(v) for v in node)
    return 1


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


ANY = [
    {"type": "string"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "object"},
    {
        "type": "array",
        "items": {
            "anyOf": [
                {"type": "string"},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "object"},
            ]
        },
    },
]


# --------------------------------------------------------------------------- profile wiring


def test_profile_is_selectable_everywhere(tmp_path: Path) -> None:
    assert "gemini" in SCHEMA_PROFILES
    path = tmp_path / "routes.toml"
    path.write_text('[[routes]]\nname = "g"\nschema = "gemini"\n')
    (route,) = load_routes(path)
    assert route.schema_profile == "gemini"
    s = parse_settings(lambda name: "gemini" if name == "bridge_schema" else {}[name], {})
    assert s.schema == "gemini"


def test_sanitize_schema_and_tool_schemas_count_every_change() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "title": "A"}}}
    notes: Notes = Counter()
    assert sanitize_schema(schema, "gemini", notes) == obj(a={"type": "string"})
    assert notes == Counter({"schema keyword dropped (gemini): title": 1})
    req = Request(
        origin="openai_chat",
        model="m",
        messages=(),
        tools=(
            Tool("t", None, schema),
            Tool("u", None, obj(b={"type": "integer"})),
        ),
    )
    notes = Counter()
    out = sanitize_tool_schemas(req, "gemini", notes)
    assert out.tools is not None and out.tools[1] is req.tools[1]
    assert notes == Counter(
        {"tool schemas sanitized (gemini)": 1, "schema keyword dropped (gemini): title": 1}
    )
    out = sanitize_tool_schemas(req, "gemini", Counter(), upper_types=True)
    assert out.tools is not None and out.tools[1] == Tool(
        "u", None, {"type": "OBJECT", "properties": {"b": {"type": "INTEGER"}}}
    )
    strict = sanitize_tool_schemas(req, "strict", Counter(), upper_types=True)
    assert strict.tools is not None and strict.tools[1] is req.tools[1]


# --------------------------------------------------------------------------- $ref


def test_refs_are_inlined_from_defs_and_definitions_with_pointer_escapes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A"},
            "b": {"$ref": "#/definitions/B", "description": "the b"},
            "c": {"$ref": "#/$defs/x~1y~0z"},
            "d": {"$ref": "#/$defs/with%20space"},
            "e": {"$ref": "#/$defs/Chain"},
        },
        "$defs": {
            "A": {"type": "string", "description": "an A", "enum": ["p", "q"]},
            "x/y~z": {"type": "integer"},
            "with space": {"type": "boolean"},
            "Chain": {"$ref": "#/$defs/A", "description": "chained"},
        },
        "definitions": {"B": obj(n={"type": "number"}) | {"description": "a B"}},
    }
    before = copy.deepcopy(schema)
    out, notes = clean(schema)
    assert schema == before
    assert out == obj(
        a={"type": "string", "description": "an A", "enum": ["p", "q"]},
        b={"type": "object", "description": "the b", "properties": {"n": {"type": "number"}}},
        c={"type": "integer"},
        d={"type": "boolean"},
        e={"type": "string", "description": "chained", "enum": ["p", "q"]},
    )
    assert notes["schema $ref inlined (gemini)"] == 6
    assert notes["schema keyword dropped (gemini): $defs"] == 1
    assert notes["schema keyword dropped (gemini): definitions"] == 1


def test_recursive_ref_becomes_its_type_and_description() -> None:
    schema = {
        "$ref": "#/$defs/Node",
        "$defs": {
            "Node": {
                "type": "object",
                "description": "a tree node",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"$ref": "#"},
                },
            }
        },
    }
    out, notes = clean(schema)
    stub = {"type": "object", "description": "a tree node"}
    assert out == {
        "type": "object",
        "description": "a tree node",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": stub},
            # "#" is the root, whose $ref is the one being expanded.
            "parent": stub,
        },
    }
    assert notes["schema recursive $ref cut (gemini)"] == 2


def test_unresolvable_refs_are_dropped_and_counted() -> None:
    schema = obj(
        a={"$ref": "https://example.com/schema.json", "description": "remote"},
        b={"$ref": "#/$defs/Missing"},
        c={"$ref": "#anchor", "type": "integer"},
        d={"$ref": 7, "type": "string"},
    )
    out, notes = clean(schema)
    assert out["properties"]["a"] == {"description": "remote", "anyOf": ANY}
    assert out["properties"]["b"] == {"anyOf": ANY}
    assert out["properties"]["c"] == {"type": "integer"}
    assert out["properties"]["d"] == {"type": "string"}
    assert notes["schema $ref not resolved (gemini)"] == 4


def test_ref_explosion_is_bounded() -> None:
    # D0 → D1 twice → D2 twice → ...: 2**40 nodes if inlined naively.
    defs = {
        f"D{i}": obj(l={"$ref": f"#/$defs/D{i + 1}"}, r={"$ref": f"#/$defs/D{i + 1}"})
        for i in range(40)
    }
    defs["D40"] = {"type": "string"}
    out, notes = clean({"$ref": "#/$defs/D0", "$defs": defs})
    assert size_of(out) < 20 * GEMINI_MAX_NODES
    assert notes["schema cut (gemini): too large"] > 0 or notes["schema cut (gemini): too deep"] > 0


# --------------------------------------------------------------------------- unions and null


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "d"},
            {"type": "string", "description": "d", "nullable": True},
            id="anyOf-null",
        ),
        pytest.param(
            {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/A"}], "description": "outer"},
            {"type": "integer", "description": "outer", "nullable": True, "minimum": 0},
            id="oneOf-null-ref",
        ),
        pytest.param(
            {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
            {
                "anyOf": [
                    {"type": "string", "nullable": True},
                    {"type": "integer", "nullable": True},
                ]
            },
            id="anyOf-several-null",
        ),
        pytest.param(
            {"oneOf": [{"type": "string"}, {"type": "integer"}], "description": "id"},
            {"description": "id", "anyOf": [{"type": "string"}, {"type": "integer"}]},
            id="oneOf",
        ),
        pytest.param(
            {"type": ["string", "null"], "maxLength": 3},
            {"type": "string", "nullable": True, "maxLength": 3},
            id="type-list-null",
        ),
        pytest.param(
            {"type": ["string", "integer"], "maxLength": 3, "minimum": 1, "description": "x"},
            {
                "description": "x",
                "anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 1}],
            },
            id="type-list",
        ),
        pytest.param(
            {"type": "null"}, {"type": "string", "nullable": True}, id="null-alone-is-nullable"
        ),
        pytest.param(
            {"anyOf": [{"type": "null"}]},
            {"type": "string", "nullable": True},
            id="only-null-option",
        ),
        pytest.param(
            {
                "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
            },
            {
                "anyOf": [
                    obj(a={"type": "string"}, b={"type": "string"}) | {"required": ["a"]},
                    obj(a={"type": "string"}, b={"type": "string"}) | {"required": ["b"]},
                ]
            },
            id="constraints-copied-into-options",
        ),
        pytest.param(
            {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "boolean"}]},
            {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]},
            id="nested-flattened",
        ),
        pytest.param(
            {"anyOf": [{"type": "string", "title": "A"}, {"type": "string", "title": "B"}]},
            {"type": "string"},
            id="identical-options-merged",
        ),
    ],
)
def test_unions(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    root = {
        "type": "object",
        "properties": {"p": schema},
        "$defs": {"A": {"type": "integer", "minimum": 0}},
    }
    out, notes = clean(root)
    assert out["properties"]["p"] == expected
    assert sum(notes.values()) > 0


def test_pydantic_optional_field() -> None:
    schema = {
        "type": "object",
        "properties": {
            "limit": {
                "anyOf": [{"type": "integer"}, {"type": "null"}],
                "default": None,
                "title": "Limit",
                "description": "max rows",
            }
        },
        "required": [],
        "title": "Args",
    }
    out, notes = clean(schema)
    assert out == obj(limit={"type": "integer", "description": "max rows", "nullable": True})
    assert notes == Counter(
        {
            "schema null option → nullable (gemini)": 1,
            "schema keyword dropped (gemini): default": 1,
            "schema keyword dropped (gemini): title": 2,
            "schema keyword dropped (gemini): required": 1,
        }
    )


def test_all_of_is_merged() -> None:
    schema = {
        "allOf": [
            {"$ref": "#/$defs/Base"},
            obj(b={"type": "integer", "maximum": 9}) | {"required": ["b"]},
            {"properties": {"b": {"type": "number", "maximum": 5}}},
        ],
        "description": "merged",
        "$defs": {"Base": obj(a={"type": "string"}) | {"required": ["a"], "description": "base"}},
    }
    out, notes = clean(schema)
    assert out == {
        "type": "object",
        "description": "merged",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer", "maximum": 5}},
        "required": ["b", "a"],
    }
    assert notes["schema allOf merged (gemini)"] == 2  # the root, then property b


# --------------------------------------------------------------------------- const and enum


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"const": "x"}, {"type": "string", "enum": ["x"]}, id="const-string"),
        pytest.param(
            {"type": "string", "const": "x", "enum": ["y"]},
            {"type": "string", "enum": ["x"]},
            id="const-wins-over-enum",
        ),
        pytest.param(
            {"const": 3, "description": "three"},
            {"type": "integer", "description": "three\nAllowed values: 3"},
            id="const-integer-described",
        ),
        pytest.param(
            {"type": "integer", "enum": [1, 2, 4]},
            {"type": "integer", "description": "Allowed values: 1, 2, 4"},
            id="integer-enum-described",
        ),
        pytest.param(
            {"const": True}, {"type": "boolean", "description": "Allowed values: true"}, id="bool"
        ),
        pytest.param(
            {"enum": ["a", "b", None]},
            {"type": "string", "enum": ["a", "b"], "nullable": True},
            id="null-in-enum",
        ),
        pytest.param(
            {"type": "string", "enum": ["a", 1, "a"]},
            {"type": "string", "enum": ["a"]},
            id="string-enum-keeps-strings-once",
        ),
        pytest.param({"type": "string", "enum": []}, {"type": "string"}, id="empty-enum-dropped"),
        pytest.param(
            {"enum": [{"k": 1}, [1]]},
            {"anyOf": ANY, "description": 'Allowed values: {"k":1}, [1]'},
            id="structured-values-described",
        ),
    ],
)
def test_const_and_enum(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    out, notes = clean(obj(p=schema))
    assert out["properties"]["p"] == expected
    assert sum(notes.values()) > 0


# --------------------------------------------------------------------------- dropped keywords

DROPPED = {
    "propertyNames": {"type": "string"},
    "patternProperties": {"^x": {"type": "string"}},
    "additionalProperties": False,
    "unevaluatedProperties": False,
    "dependentRequired": {"a": ["b"]},
    "dependentSchemas": {"a": {"required": ["b"]}},
    "minContains": 1,
    "maxContains": 2,
    "contains": {"type": "string"},
    "uniqueItems": True,
    "exclusiveMinimum": 1,
    "multipleOf": 2,
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:x",
    "$comment": "c",
    "examples": [1],
    "example": 1,
    "default": 1,
    "title": "T",
    "if": {"type": "string"},
    "then": {"minLength": 1},
    "else": {"maxLength": 1},
    "not": {"type": "null"},
    "deprecated": True,
    "readOnly": True,
    "x-vendor": 1,
}


@pytest.mark.parametrize("keyword", sorted(DROPPED))
def test_keyword_gemini_rejects_is_dropped(keyword: str) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, keyword: DROPPED[keyword]}
    out, notes = clean(schema)
    assert keyword not in out
    if keyword == "exclusiveMinimum":  # not a number keyword on an object
        assert notes == Counter({"schema keyword dropped (gemini): exclusiveMinimum": 1})
    else:
        assert notes == Counter({f"schema keyword dropped (gemini): {keyword}": 1})


def test_keywords_of_another_type_are_dropped() -> None:
    out, notes = clean(
        obj(
            n={"type": "integer", "minLength": 1, "items": {"type": "string"}, "minimum": 0},
            s={"type": "string", "properties": {"a": {}}, "maxItems": 3, "maxLength": 5},
        )
    )
    assert out == obj(n={"type": "integer", "minimum": 0}, s={"type": "string", "maxLength": 5})
    assert notes == Counter(
        {
            "schema keyword dropped (gemini): minLength": 1,
            "schema keyword dropped (gemini): items": 1,
            "schema keyword dropped (gemini): properties": 1,
            "schema keyword dropped (gemini): maxItems": 1,
        }
    )


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"type": "integer", "exclusiveMinimum": 0}, {"minimum": 1}, id="int"),
        pytest.param(
            {"type": "integer", "exclusiveMinimum": 2.5, "minimum": 0}, {"minimum": 3}, id="int-max"
        ),
        pytest.param(
            {"type": "integer", "exclusiveMaximum": 10, "maximum": 100}, {"maximum": 9}, id="int-hi"
        ),
        pytest.param({"type": "number", "exclusiveMinimum": 0.5}, {"minimum": 0.5}, id="number"),
        pytest.param(
            {"type": "integer", "minimum": 0, "exclusiveMinimum": True}, {"minimum": 1}, id="draft4"
        ),
        pytest.param(
            {"type": "integer", "minimum": 0, "exclusiveMinimum": False}, {"minimum": 0}, id="off"
        ),
    ],
)
def test_exclusive_bounds_become_inclusive(
    schema: dict[str, Any], expected: dict[str, Any]
) -> None:
    out, _ = clean(obj(p=schema))
    assert out["properties"]["p"] == {"type": schema["type"], **expected}


@pytest.mark.parametrize(
    ("t", "fmt", "kept"),
    [
        ("string", "date-time", True),
        ("string", "uri", False),
        ("string", "email", False),
        ("string", "int64", False),
        ("integer", "int64", True),
        ("integer", "int32", True),
        ("integer", "float", False),
        ("number", "double", True),
        ("number", "float", True),
        ("boolean", "date-time", False),
    ],
)
def test_formats(t: str, fmt: str, kept: bool) -> None:
    out, notes = clean(obj(p={"type": t, "format": fmt}))
    assert out["properties"]["p"] == ({"type": t, "format": fmt} if kept else {"type": t})
    assert notes == (Counter() if kept else Counter({f"schema format dropped (gemini): {fmt}": 1}))


def test_enum_format_needs_an_enum() -> None:
    out, _ = clean(
        obj(
            a={"type": "string", "format": "enum", "enum": ["x"]},
            b={"type": "string", "format": "enum"},
        )
    )
    assert out == obj(a={"type": "string", "enum": ["x"], "format": "enum"}, b={"type": "string"})


# --------------------------------------------------------------------------- objects and arrays


def test_required_and_property_ordering_name_only_declared_properties() -> None:
    schema = obj(a={"type": "string"}, b={"type": "string"}) | {
        "required": ["a", "ghost", "a", 3],
        "propertyOrdering": ["b", "ghost", "a"],
    }
    out, notes = clean(schema)
    assert out["required"] == ["a"]
    assert out["propertyOrdering"] == ["b", "a"]
    assert notes == Counter(
        {
            "schema required entry dropped (gemini)": 3,
            "schema propertyOrdering entry dropped (gemini)": 1,
        }
    )


def test_empty_properties_are_dropped_so_the_object_stays_valid() -> None:
    out, notes = clean(
        {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False}
    )
    assert out == {"type": "object"}
    assert notes == Counter(
        {
            "schema empty properties dropped (gemini)": 1,
            "schema required entry dropped (gemini)": 1,
            "schema keyword dropped (gemini): additionalProperties": 1,
        }
    )
    out, _ = clean(obj(meta={"type": "object", "properties": {}}))
    assert out == obj(meta={"type": "object"})


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"type": "array"}, {"type": "array", "items": {"anyOf": ANY}}, id="no-items"),
        pytest.param(
            {"type": "array", "items": True}, {"type": "array", "items": {"anyOf": ANY}}, id="true"
        ),
        pytest.param(
            {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "minItems": 2,
            },
            {
                "type": "array",
                "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "minItems": 2,
            },
            id="prefixItems",
        ),
        pytest.param(
            {"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "number"}},
            {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]}},
            id="draft4-tuple",
        ),
        pytest.param(
            {"type": "array", "items": {"type": "string"}, "minItems": 1.0, "maxItems": "3"},
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
            id="counts",
        ),
    ],
)
def test_arrays(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    out, notes = clean(obj(p=schema))
    assert out["properties"]["p"] == expected
    assert sum(notes.values()) > 0


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"properties": {"a": {"type": "string"}}}, "object", id="properties"),
        pytest.param({"items": {"type": "string"}}, "array", id="items"),
        pytest.param({"enum": ["a"]}, "string", id="string-enum"),
        pytest.param({"minLength": 1}, "string", id="minLength"),
        pytest.param({"format": "date-time"}, "string", id="format"),
        pytest.param({"format": "int64"}, "integer", id="int-format"),
        pytest.param({"maximum": 3}, "number", id="maximum"),
        pytest.param({"default": False}, "boolean", id="default-bool"),
        pytest.param({"default": 2}, "integer", id="default-int"),
    ],
)
def test_a_node_without_type_gets_one(schema: dict[str, Any], expected: str) -> None:
    out, notes = clean(obj(p=schema))
    assert out["properties"]["p"]["type"] == expected
    assert notes[f"schema type added (gemini): {expected}"] == 1


def test_an_unconstrained_value_stays_any_value() -> None:
    # Claude Code's Workflow tool: "args … Pass arrays/objects as actual JSON values, NOT as a
    # JSON-encoded string" — so "any" must not become a string.
    out, notes = clean(obj(args={"description": "any JSON"}, flag={}, t=True))
    assert out == obj(
        args={"description": "any JSON", "anyOf": ANY}, flag={"anyOf": ANY}, t={"anyOf": ANY}
    )
    assert notes == Counter({"schema type added (gemini): any": 3})


def test_upper_types() -> None:
    schema = obj(
        a={"type": ["string", "null"]}, b={"type": "array", "items": {"type": "integer"}}, c={}
    )
    out, _ = clean(schema, upper_types=True)
    assert out["type"] == "OBJECT"
    assert out["properties"]["a"] == {"type": "STRING", "nullable": True}
    assert out["properties"]["b"] == {"type": "ARRAY", "items": {"type": "INTEGER"}}
    assert {o["type"] for o in out["properties"]["c"]["anyOf"]} == {
        "STRING",
        "NUMBER",
        "BOOLEAN",
        "OBJECT",
        "ARRAY",
    }
    # Upper-case types from a Gemini client come back lower-case by default.
    again, notes = clean(out)
    assert again == gemini_schema(schema) and notes == Counter()


# --------------------------------------------------------------------------- never raises


@pytest.mark.parametrize("schema", [None, True, False, [], "x", 3, 1.5, {}, {"type": 7}])
def test_a_root_that_is_not_a_schema_object_becomes_an_object(schema: Any) -> None:
    out, _ = clean(schema)
    assert out == {"type": "object"}


def test_deep_nesting_is_cut() -> None:
    schema: dict[str, Any] = {"type": "string", "description": "leaf"}
    for _ in range(300):
        schema = obj(x=schema)
    out, notes = clean(schema)
    assert depth_of(out) <= 2 * GEMINI_MAX_DEPTH + 4
    assert notes["schema cut (gemini): too deep"] == 1
    deep_list: Any = "x"
    for _ in range(300):
        deep_list = [deep_list]
    out, _ = clean(obj(p={"enum": [deep_list, 1]}, q={"type": deep_list, "items": deep_list}))
    assert out["properties"]["p"]["description"].startswith("Allowed values: [[[[")


def test_output_shares_nothing_mutable_with_the_input() -> None:
    schema = obj(a={"type": "string", "enum": ["x"]}) | {"required": ["a"]}
    out, _ = clean(schema)
    out["required"].append("zzz")
    out["properties"]["a"]["enum"].append("y")
    assert schema == obj(a={"type": "string", "enum": ["x"]}) | {"required": ["a"]}


# --------------------------------------------------------------------------- real tool schemas


def recorded_schemas() -> list[Any]:
    found = []
    for path in sorted(CLIENTS.glob("*.request.json")):
        body = json.loads(path.read_text())["body"]
        if not isinstance(body, dict):
            continue
        for tool in body.get("tools") or ():
            if "input_schema" in tool:  # Anthropic (Claude Code, AI SDK)
                found.append(pytest.param(tool["input_schema"], id=f"{path.stem}:{tool['name']}"))
            elif isinstance(tool.get("function"), dict):  # chat completions (OpenCode, AI SDK)
                fn = tool["function"]
                found.append(pytest.param(fn.get("parameters"), id=f"{path.stem}:{fn['name']}"))
            elif "parameters" in tool:  # Responses (Codex)
                name = tool.get("name", tool["type"])
                found.append(pytest.param(tool["parameters"], id=f"{path.stem}:{name}"))
            for fd in tool.get("functionDeclarations") or ():  # Gemini CLI
                found.append(
                    pytest.param(fd.get("parametersJsonSchema"), id=f"{path.stem}:{fd['name']}")
                )
    return found


RECORDED = recorded_schemas()


def test_recordings_have_tools() -> None:
    assert len(RECORDED) > 80


@pytest.mark.parametrize("schema", RECORDED)
def test_recorded_tool_schema(schema: Any) -> None:
    before = copy.deepcopy(schema)
    out, _ = clean(schema)
    assert schema == before
    assert out["type"] == "object"
    # Nothing a client declared is lost but what Gemini cannot take.
    assert set(out.get("properties", {})) == set(schema.get("properties", {}))
    again, notes2 = clean(out)
    assert again == out and notes2 == Counter()
    upper, _ = clean(schema, upper_types=True)
    assert upper["type"] == "OBJECT"


def test_recorded_notes_are_readable() -> None:
    notes: Notes = Counter()
    for param in RECORDED:
        gemini_schema(param.values[0], notes=notes)
    assert notes["schema keyword dropped (gemini): additionalProperties"] > 0
    assert notes["schema keyword dropped (gemini): propertyNames"] > 0
    assert notes["schema const → enum (gemini)"] > 0
    assert notes["schema exclusiveMinimum → minimum (gemini)"] > 0
    assert all(k.startswith("schema ") and "(gemini)" in k for k in notes)


# --------------------------------------------------------------------------- any input

KEYWORDS = sorted(
    {
        *ALLOWED,
        *DROPPED,
        "$ref",
        "$defs",
        "definitions",
        "allOf",
        "oneOf",
        "const",
        "prefixItems",
        "additionalItems",
        "exclusiveMaximum",
        "a",
    }
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=5)
    | st.floats(allow_nan=False, allow_infinity=False, width=16)
    | st.sampled_from(
        [
            "string",
            "integer",
            "number",
            "boolean",
            "array",
            "object",
            "null",
            "STRING",
            "date-time",
            "int64",
            "a",
            "b",
            "#",
            "#/$defs/a",
            "#/$defs/b",
            "#/definitions/a",
            "#/properties/a",
            "#/properties/a/items",
            "#/nowhere",
        ]
    )
)
schemas = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYWORDS), inner, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(schemas, st.booleans())
def test_any_schema_is_cleaned_without_raising(schema: Any, upper: bool) -> None:
    before = copy.deepcopy(schema)
    notes: Notes = Counter()
    out = gemini_schema(schema, upper_types=upper, notes=notes)
    assert schema == before
    assert problems(out, upper=upper) == []
    assert all(k.startswith("schema ") and "(gemini)" in k for k in notes)
    again_notes: Notes = Counter()
    assert gemini_schema(out, upper_types=upper, notes=again_notes) == out
    assert again_notes == Counter()
    assert all(k in GEMINI_KEYWORDS for k in out)
