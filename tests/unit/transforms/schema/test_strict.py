"""The ``strict`` schema profile and the tool checks around it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from addon.transforms.schema import sanitize_schema


def test_strict_drops_keywords_recursively_but_keeps_fields_named_like_them() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Args",
        "type": "object",
        "additionalProperties": False,
        "required": ["title"],
        "properties": {
            "title": {"type": "string", "title": "Title", "default": "x"},
            "default": {"type": "integer", "default": 3},
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": [],
                    "properties": {},
                },
            },
        },
    }
    assert sanitize_schema(schema, "strict") == {
        "type": "object",
        "required": ["title"],
        "properties": {
            "title": {"type": "string"},
            "default": {"type": "integer"},
            "items": {"type": "array", "items": {"type": "object", "properties": {}}},
        },
    }


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param(
            {"anyOf": [{"type": "null"}, {"type": "string"}], "description": "d"},
            {"type": "string", "description": "d"},
            id="null-first",
        ),
        pytest.param(
            {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            {"type": "integer"},
            id="first-non-null",
        ),
        pytest.param({"anyOf": [{"type": "null"}]}, {"type": "null"}, id="only-null"),
        pytest.param(
            {"anyOf": [{"anyOf": [{"type": "null"}, {"type": "boolean", "title": "B"}]}]},
            {"type": "boolean"},
            id="nested",
        ),
        pytest.param(
            {
                "type": "object",
                "properties": {
                    "a": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}], "default": None}
                },
            },
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
            id="pydantic-optional",
        ),
    ],
)
def test_strict_collapses_any_of(schema: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sanitize_schema(schema, "strict") == expected


def test_none_profile_returns_the_schema_as_written() -> None:
    schema = {"type": "object", "additionalProperties": False}
    assert sanitize_schema(schema, "none") is schema


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["type", "title", "default", "anyOf", "properties", "items", "required", "x"]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@given(json_values)
def test_strict_never_mutates_its_input_and_is_idempotent(schema: Any) -> None:
    before = copy.deepcopy(schema)
    once = sanitize_schema(schema, "strict")
    assert schema == before
    assert sanitize_schema(once, "strict") == once
