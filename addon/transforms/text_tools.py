"""Carry tools as text for upstreams without native tool calling (unified → unified).

Contract: pure. ``apply_text_tools`` puts the tools into the system prompt as text and
removes native ``tools`` / ``tool_choice``. The answer is parsed back by
``addon.textproto.parser`` in the stream stage or on the whole response."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from addon.model import (
    ClientError,
    Image,
    Message,
    Notes,
    OpaqueTool,
    Part,
    Request,
    Response,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    Tool,
    ToolCall,
    ToolCallStart,
    ToolResult,
)
from addon.textproto import bracket, invoke
from addon.textproto.parser import TextProtocol, TextProtocolParser
from addon.transforms.prompt import append_system, merge_same_role


@dataclass(frozen=True, slots=True)
class TextToolSettings:
    protocol: TextProtocol
    trigger: str | None = None
    """This request's ``invoke`` trigger (``invoke.make_trigger()``)."""
    desc_limit: int = 8000
    """``bracket``: tool descriptions are cut here, with "..."."""
    param_limit: int = 4000
    """``bracket``: parameter descriptions are cut here."""


def apply_text_tools(req: Request, s: TextToolSettings, notes: Notes) -> Request:
    """The protocol's instruction and the tool list in the system prompt, earlier tool calls
    and results replayed as text, native ``tools`` / ``tool_choice`` removed. With
    ``tool_choice`` ``none`` no tool text is added at all."""
    tools: list[Tool] = []
    for t in req.tools or ():
        if isinstance(t, OpaqueTool):
            raise ClientError(
                f"tool '{t.name or t.type}' of type '{t.type}' cannot be carried by the "
                f"{s.protocol} text protocol",
                param="tools",
                code="unsupported_tool",
            )
        tools.append(t)
    messages = merge_same_role(tuple(m for msg in req.messages for m in _replay(msg, s, notes)))
    if tools and (req.tool_choice is None or req.tool_choice.mode != "none"):
        if s.protocol == "invoke":
            assert s.trigger is not None
            text = invoke.render_instruction(s.trigger, tools, req.tool_choice)
        else:
            text = bracket.render_instruction(
                tools, req.tool_choice, desc_limit=s.desc_limit, param_limit=s.param_limit
            )
        messages = append_system(messages, text)
        notes[f"tools → {s.protocol} text protocol"] += len(tools)
    return dataclasses.replace(req, messages=messages, tools=None, tool_choice=None)


def _replay(m: Message, s: TextToolSettings, notes: Notes) -> list[Message]:
    """Tool calls and results of one message as text; a tool message becomes a user message."""
    if not any(isinstance(p, ToolCall | ToolResult) for p in m.parts):
        return [m]
    parts: list[Part] = []
    for p in m.parts:
        if isinstance(p, ToolCall):
            notes["tool calls replayed as text"] += 1
            call = (
                invoke.render_call(s.trigger or "", p)
                if s.protocol == "invoke"
                else bracket.render_call(p)
            )
            parts.append(Text(call if not parts else "\n" + call))
        elif isinstance(p, ToolResult):
            notes["tool results replayed as text"] += 1
            content, images = _result_text(p)
            text = (
                invoke.render_result(p.tool_call_id, content)
                if s.protocol == "invoke"
                else bracket.render_result(content)
            )
            parts.append(Text(text if not parts else "\n" + text))
            parts.extend(images)
        else:
            parts.append(p)
    role = "user" if m.role == "tool" else m.role
    return [dataclasses.replace(m, role=role, parts=tuple(parts), string_content=True, extra={})]


def _result_text(r: ToolResult) -> tuple[str, list[Image]]:
    if isinstance(r.content, str):
        text, images = r.content, []
    else:
        text = "\n".join(p.text for p in r.content if isinstance(p, Text))
        images = [p for p in r.content if isinstance(p, Image)]
    if r.is_error:
        text = f"[error] {text}"
    return text or "(empty result)", images


def parse_text_tools(resp: Response, parser: TextProtocolParser) -> Response:
    """A whole answer's text parsed like the stream: thinking, text and tool calls as parts."""
    text = "".join(p.text for p in resp.parts if isinstance(p, Text))
    events = [*parser.feed(text), *parser.finish()] if text else []
    # What the text held goes where the first text part was: the other parts (reasoning, calls
    # the upstream made natively) keep their places around it.
    at = next((i for i, p in enumerate(resp.parts) if isinstance(p, Text)), len(resp.parts))
    parts: list[Part] = [p for p in resp.parts[:at] if not isinstance(p, Text)]
    after: list[Part] = [p for p in resp.parts[at:] if not isinstance(p, Text)]
    calls: dict[int, ToolCall] = {}
    for e in events:
        if isinstance(e, TextDelta):
            parts.append(Text(e.text))
        elif isinstance(e, ThinkingDelta):
            parts.append(Thinking(e.text))
        elif isinstance(e, ToolCallStart):
            calls[e.index] = ToolCall(e.id, e.name, e.arguments)
            parts.append(calls[e.index])
    parts += after
    finish = resp.finish
    finish_raw = resp.finish_raw
    if calls and finish != "tool_calls":
        finish, finish_raw = "tool_calls", "tool_calls"
    return dataclasses.replace(resp, parts=tuple(parts), finish=finish, finish_raw=finish_raw)
