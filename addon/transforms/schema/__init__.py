"""JSON Schema sanitizing profiles for tool parameters.

Contract: a pure function ``sanitize_schema(schema, profile, notes) -> schema`` that returns a
new object and never mutates its input. It knows JSON Schema keywords, nothing about dialects
or tools. Profiles: ``none`` (as written), ``strict`` (``strict.py``), ``gemini``
(``gemini.py``): docs/tools.md#tool-schema-profiles."""

from __future__ import annotations

from typing import Any

from addon.model import Notes, SchemaProfile
from addon.transforms.schema.gemini import gemini_schema
from addon.transforms.schema.gemini_base import GEMINI_KEYWORDS, GEMINI_MAX_DEPTH, GEMINI_MAX_NODES
from addon.transforms.schema.strict import strict_schema

__all__ = [
    "GEMINI_KEYWORDS",
    "GEMINI_MAX_DEPTH",
    "GEMINI_MAX_NODES",
    "gemini_schema",
    "sanitize_schema",
    "strict_schema",
]


def sanitize_schema(
    schema: Any, profile: SchemaProfile, notes: Notes | None = None, *, upper_types: bool = False
) -> Any:
    """``schema`` cleaned for ``profile``; ``gemini`` counts what it changed in ``notes`` and
    writes upper-case type names with ``upper_types`` (other profiles ignore it). Cost is
    linear in the size of the schema (``gemini``: in the size of its output, which is
    bounded). What each profile does: ``bridge_schema`` in docs/options.md."""
    if profile == "none":
        return schema
    if profile == "gemini":
        return gemini_schema(schema, upper_types=upper_types, notes=notes)
    return strict_schema(schema)
