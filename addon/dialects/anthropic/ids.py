"""Tool-call ids that Anthropic accepts, made from any other dialect's ids, and back.

Contract: pure, stateless, reversible; applied by the anthropic dialect only. Nothing
remembers a mapping: the id carries it. Details: docs/dialects/anthropic.md#module-notes."""

from __future__ import annotations

import base64
import binascii
import re

PREFIX = "toolu_b64_"
"""Marks an escaped id. Valid ids that happen to start with it are escaped too."""
PATTERN = re.compile(r"[a-zA-Z0-9_-]+")
"""Anthropic's pattern for tool_use ids (matched whole)."""


def to_anthropic(tool_id: str) -> str:
    """``tool_id`` unchanged when Anthropic accepts it as is (``^[a-zA-Z0-9_-]+$``, not
    starting with ``PREFIX``), else escaped as ``PREFIX`` + its URL-safe base64."""
    if PATTERN.fullmatch(tool_id) and not tool_id.startswith(PREFIX):
        return tool_id
    raw = tool_id.encode("utf-8", "surrogatepass")
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def from_anthropic(tool_id: str) -> str:
    """The id ``to_anthropic`` was given; an id it cannot have produced comes back unchanged."""
    if not tool_id.startswith(PREFIX):
        return tool_id
    encoded = tool_id[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        original = raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError):
        return tool_id
    # Only the canonical escape of an id that needed escaping is ours: anything else (a
    # made-up id with our prefix) stays as it is, so that no two ids decode to one.
    return original if to_anthropic(original) == tool_id else tool_id
