"""The ``bracket`` protocol (legacy): ``[Calling tool: NAME]`` then ``Input: {json on one line}``.

Contract: pure text rendering over unified ``Tool`` / ``ToolCall``; parsing
lives in ``parser``. Long descriptions are cut (the limits are options) so
that a client's 40 verbose tools do not eat the upstream's context.
"""

from __future__ import annotations

from typing import Any

from addon.model import Tool, ToolCall, ToolChoice


def render_call(call: ToolCall) -> str:
    return f"[Calling tool: {call.name}]\nInput: {call.arguments or '{}'}"


def render_result(content: str) -> str:
    return f"[Tool Result]\n{content}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit)] + "..."


def _param_lines(schema: dict[str, Any], param_limit: int) -> list[str]:
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return ["(no parameters)"]
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    lines = []
    for name, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "any")
        if isinstance(kind, list):
            kind = " | ".join(str(k) for k in kind)
        flag = " (required)" if name in (required or []) else ""
        desc = spec.get("description")
        tail = f" - {_cut(str(desc), param_limit)}" if desc else ""
        lines.append(f"- {name}: {kind}{flag}{tail}")
    return lines


def render_instruction(
    tools: list[Tool], choice: ToolChoice | None, *, desc_limit: int, param_limit: int
) -> str:
    lines = [
        "# Tool Call Format",
        "You can call tools. To call one, write exactly these two lines:",
        "[Calling tool: TOOL_NAME]",
        'Input: {"argument": "value"}',
        "The Input is one JSON object on a single line, matching the tool's parameters. Several "
        "calls may follow each other. After your calls, stop: the results come back as "
        "[Tool Result] blocks in the next message.",
    ]
    if choice is not None and choice.mode == "required":
        lines.append("You must call at least one tool in this answer.")
    elif choice is not None and choice.mode == "tool":
        lines.append(f"You must call the tool {choice.name} in this answer.")
    lines += ["", "## Available Tools"]
    for t in tools:
        lines += ["", f"### {t.name}"]
        if t.description:
            lines.append(_cut(t.description, desc_limit))
        lines.append("Parameters:")
        lines += _param_lines(t.parameters, param_limit)
    return "\n".join(lines)
