"""Checks and rewrites of the tool list: unified ``Request`` in, ``Request`` out.

Contract: pure functions over ``addon.model``. A client mistake raises
``ClientError`` naming the tool; nothing here knows a wire format.
"""

from __future__ import annotations

import dataclasses

from addon.model import ClientError, Notes, Request, SchemaProfile, Tool
from addon.transforms.schema import sanitize_schema


def check_tools(req: Request) -> None:
    """Two tools with one name make every upstream fail or call the wrong one: refuse them."""
    seen: dict[str, int] = {}
    for i, tool in enumerate(req.tools or ()):
        if tool.name is None:
            continue
        if tool.name in seen:
            raise ClientError(
                f"tool name '{tool.name}' is declared twice (tools[{seen[tool.name]}] and "
                f"tools[{i}]); tool names must be unique",
                param=f"tools[{i}]",
                code="duplicate_tool_name",
            )
        seen[tool.name] = i


def sanitize_tool_schemas(
    req: Request, profile: SchemaProfile, notes: Notes, *, upper_types: bool = False
) -> Request:
    """Each tool's parameter schema cleaned for ``profile``; ``gemini`` also counts each change
    it made (``schema … (gemini)``) besides the number of tools it changed, and writes Gemini's
    upper-case type names (``STRING``) with ``upper_types``."""
    if profile == "none" or not req.tools:
        return req
    tools = []
    for tool in req.tools:
        if isinstance(tool, Tool):
            clean = sanitize_schema(tool.parameters, profile, notes, upper_types=upper_types)
            if clean != tool.parameters:
                notes[f"tool schemas sanitized ({profile})"] += 1
                tool = dataclasses.replace(tool, parameters=clean)
        tools.append(tool)
    return dataclasses.replace(req, tools=tuple(tools))
