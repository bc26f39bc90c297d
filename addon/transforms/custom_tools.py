"""Custom (freeform) tools for upstreams that only have function tools (unified → unified).

Contract: pure functions over ``addon.model``; nothing here knows a wire format. Why: OpenAI's
custom tools (Codex's ``apply_patch``, Cursor's ``ApplyPatch``) take raw text, not a JSON
object; ``wrap_custom_tools`` carries (*wraps*) each as a function, the ``unwrap_*`` functions
give the client its custom call back. In full: docs/tools.md#custom-tools."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from addon.model import (
    JSON,
    Message,
    Notes,
    Part,
    Request,
    Response,
    Tool,
    ToolCall,
    ToolResult,
)

INPUT = "input"
"""The one parameter of a wrapped custom tool."""

NOTE = "custom tools → function tools"


def input_schema() -> JSON:
    """The parameters of a wrapped custom tool (a fresh object: schema stages edit in place)."""
    return {
        "type": "object",
        "properties": {
            INPUT: {
                "type": "string",
                "description": "The raw input text for this tool, exactly as the tool takes it "
                "(free-form text, not JSON).",
            }
        },
        "required": [INPUT],
    }


def describe_format(fmt: JSON) -> str:
    """The note appended to a wrapped tool's description: what ``input`` must hold."""
    head = (
        f"This tool takes free-form text, not JSON: put the raw text the tool takes, "
        f"unchanged, into the string parameter `{INPUT}`."
    )
    kind = fmt.get("type")
    if kind == "text":
        return head
    if kind == "grammar":
        syntax = fmt.get("syntax")
        definition = fmt.get("definition")
        what = f"{syntax} grammar" if isinstance(syntax, str) and syntax else "grammar"
        if isinstance(definition, str) and definition:
            return f"{head} The text must match this {what}:\n{definition}"
        return f"{head} The text must match the tool's {what}."
    # A format this code does not know: hand it to the model as it is.
    return f"{head} Its format: {json.dumps(fmt, ensure_ascii=False)}"


def wrap_custom_tools(req: Request, notes: Notes) -> tuple[Request, frozenset[str]]:
    """Custom tools as function tools with one string parameter ``input``; history re-encoded.

    Returns the request (the same object when nothing was custom) and the wrapped tool names.
    """
    names: list[str] = []
    tools = req.tools
    if tools and any(isinstance(t, Tool) and t.format is not None for t in tools):
        new_tools = []
        for t in tools:
            if isinstance(t, Tool) and t.format is not None:
                names.append(t.name)
                t = _wrap_tool(t, t.format)
            new_tools.append(t)
        tools = tuple(new_tools)
        notes[NOTE] += len(names)
    messages = tuple(_plain_message(m) for m in req.messages)
    changed_history = any(a is not b for a, b in zip(messages, req.messages, strict=True))
    if tools is req.tools and not changed_history:
        return req, frozenset()
    return dataclasses.replace(req, tools=tools, messages=messages), frozenset(names)


def _wrap_tool(t: Tool, fmt: JSON) -> Tool:
    note = describe_format(fmt)
    description = f"{t.description.rstrip()}\n\n{note}" if t.description else note
    return Tool(t.name, description, input_schema(), strict=t.strict)


def _plain_message(m: Message) -> Message:
    """``m`` with custom calls and results made plain (the same object when there were none)."""
    if not any(isinstance(p, ToolCall | ToolResult) and p.custom for p in m.parts):
        return m
    parts: list[Part] = []
    for p in m.parts:
        if isinstance(p, ToolCall) and p.custom:
            args = json.dumps({INPUT: p.arguments}, ensure_ascii=False)
            p = dataclasses.replace(p, arguments=args, custom=False)
        elif isinstance(p, ToolResult) and p.custom:
            p = dataclasses.replace(p, custom=False)
        parts.append(p)
    return dataclasses.replace(m, parts=tuple(parts))


# --------------------------------------------------------------------------- response side


def unwrap_custom_input(arguments: str) -> str:
    """The raw input of a wrapped custom tool's call, from the function arguments the model wrote:
    ``{"input": "…"}``, a one-string object, a bare string, a cut-off ``{"input": "…``, else the
    arguments unchanged, so that no text is lost (docs/tools.md#custom-tools)."""
    try:
        value: Any = json.loads(arguments, strict=False)
    except ValueError:
        partial = _partial_input(arguments)
        return arguments if partial is None else partial
    if isinstance(value, dict):
        inner = value.get(INPUT)
        if isinstance(inner, str):
            return inner
        if len(value) == 1:
            (only,) = value.values()
            if isinstance(only, str):
                return only
        return arguments
    if isinstance(value, str):
        return value
    return arguments


_INPUT_PREFIX = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_CUT_ESCAPE = re.compile(r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _partial_input(text: str) -> str | None:
    """The ``input`` string of an object cut off after (or just after the end of) that string.

    ``None`` when ``text`` does not begin with the ``input`` key, or when anything but
    whitespace and a closing brace follows the string (that would be content to lose).
    """
    m = _INPUT_PREFIX.match(text)
    if m is None:
        return None
    out: list[str] = []
    i, n = m.end(), len(text)
    while i < n:
        c = text[i]
        if c == '"':
            if text[i + 1 :].strip() not in ("", "}"):
                return None
            break
        if c != "\\":
            j = i + 1
            while j < n and text[j] not in '"\\':
                j += 1
            out.append(text[i:j])
            i = j
            continue
        if i + 1 >= n:  # a lone backslash at the cut
            out.append(text[i:])
            break
        e = text[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == "u":
            hex4 = text[i + 2 : i + 6]
            if not all(h in _HEX for h in hex4):
                return None  # a broken \uXXXX: not JSON that was merely cut off
            code = int(hex4, 16) if len(hex4) == 4 else None
            if code is None or (0xD800 <= code < 0xDC00 and _CUT_ESCAPE.fullmatch(text, i + 6)):
                # Cut inside a \uXXXX, or between the two halves of a surrogate pair: the
                # unfinished escape stays the text it was.
                out.append(text[i:])
                break
            out.append(chr(code))
            i += 6
        else:
            return None  # an invalid escape: not JSON that was merely cut off
    # Surrogate pairs arrive as two \uXXXX escapes: join them into one character.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def unwrap_custom_calls(resp: Response, names: frozenset[str]) -> Response:
    """A whole answer's calls of wrapped custom tools back as custom calls with their raw input
    (streamed: ``addon.stream.custom_calls.CustomToolStage``)."""
    if not names or not any(isinstance(p, ToolCall) and p.name in names for p in resp.parts):
        return resp
    parts = tuple(
        dataclasses.replace(p, arguments=unwrap_custom_input(p.arguments), custom=True)
        if isinstance(p, ToolCall) and p.name in names and not p.custom
        else p
        for p in resp.parts
    )
    return dataclasses.replace(resp, parts=parts)
