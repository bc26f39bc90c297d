"""Checks and rewrites of the tool list: unified ``Request`` in, ``Request`` out.

Contract: pure functions over ``addon.model``. A client mistake raises
``ClientError`` naming the tool; nothing here knows a wire format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from addon.model import ClientError, Notes, OpaqueTool, Request, SchemaProfile, Tool
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


def leave_out_tools(
    req: Request, runs: Callable[[OpaqueTool], bool], where: str, notes: Notes
) -> Request:
    """The tools ``where`` (``"the gemini upstream"``, ``"the invoke text protocol"``) cannot run
    taken out of the request, named in ``notes``: every ``OpaqueTool`` the upstream does not run
    (``runs``, its ``Dialect.runs``; nothing on a text protocol). A ``ClientError`` only where the
    client asked the upstream to run what was left out (a ``tool_choice`` naming it or a kind it
    cannot run, ``ToolChoice.kind``; a request whose every tool was left out, such as Claude
    Code's WebSearch request). The rule: docs/tools.md#tools-an-upstream-cannot-run."""
    choice = req.tool_choice
    kind = choice.kind if choice is not None else None
    if kind is not None and not runs(OpaqueTool(req.origin, None, kind, {})):
        raise ClientError(
            f"tool_choice asks for the '{kind}' tool, which {where} cannot run",
            param="tool_choice",
            code="unsupported_tool",
        )
    if not req.tools:
        return req
    left = [t for t in req.tools if isinstance(t, OpaqueTool) and not runs(t)]
    if not left:
        return req
    kept = tuple(t for t in req.tools if not (isinstance(t, OpaqueTool) and not runs(t)))
    forced = choice.name if choice is not None and choice.mode == "tool" else None
    named = next((t for t in left if forced is not None and t.name == forced), None)
    if named is not None:
        raise ClientError(
            f"tool_choice asks for tool '{named.name}' of type '{named.type}', which "
            f"{where} cannot run",
            param="tool_choice",
            code="unsupported_tool",
        )
    if not kept:
        (first, *_) = left
        raise ClientError(
            f"tool '{first.name or first.type}' has type '{first.type}', which {where} cannot "
            "run, and the request has no other tool; remove it from the request",
            param="tools",
            code="unsupported_tool",
        )
    names = ", ".join(_tool_label(t) for t in left)
    notes[f"tools {where} cannot run left out: {names}"] += 1
    return dataclasses.replace(req, tools=kept)


def _tool_label(t: OpaqueTool) -> str:
    """``multi_agent_v1 (namespace)``; a tool without a name of its own by its type."""
    return t.type if t.name in (None, t.type) else f"{t.name} ({t.type})"
