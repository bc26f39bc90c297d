"""Staged retry on signature errors: which upstream errors call for it (``next_stage``) and
the request of each stage (``stage_request``, unified → unified).

Contract: pure. The stages start from the unified request as first encoded (after restore):
they take away, never restore. The decision of each step is ``addon.plan.staged``'s; when and
what exactly: docs/reasoning.md ("When the staged retry asks again")."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any, Literal

from addon.model import (
    JSON,
    Image,
    Message,
    Notes,
    Part,
    Request,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from addon.textproto import bracket
from addon.transforms.prompt import merge_same_role

type Stage = Literal[1, 2]

_SIGNATURE_ERROR = re.compile(
    r"signature|reasoning_content|must start with a thinking block", re.IGNORECASE
)
"""What the real services say (see the tests for their words): Gemini "Function call is
missing a thought_signature in functionCall parts", Vertex "function call `X` in the 2. content
block is missing a `thought_signature`", "Corrupted thought signature.", "Thought signature is
not valid"; Anthropic "Invalid `signature` in `thinking` block" and "a final `assistant`
message must start with a thinking block" (thinking on, a tool turn without its thinking: stage
1 is the cure); DeepSeek "Missing `reasoning_content` field in the assistant message"; Kimi
"thinking is enabled but reasoning_content is missing in assistant tool call message"."""
_NAMES_TOOL = re.compile(r"(?<![a-z])(?:tool|function)", re.IGNORECASE)
"""``function call``, ``functionCall``, ``tool call``, ``tool_use``, ``#tool-calls`` (DeepSeek's
documentation link)."""
_SIGNATURE_KEYS = frozenset({"thoughtSignature", "thought_signature"})
_REASONING_KEYS = frozenset({"reasoning_content", "reasoning", "reasoning_details"})

STAGE_NOTES: dict[int, str] = {
    1: "staged retry, stage 1: thinking off, thinking blocks sent as text",
    2: "staged retry, stage 2: thinking, tool calls and tool results sent as text",
}
"""For the flow comment: which stage's answer the client got."""


def _text(message: str | bytes | None) -> str:
    if message is None:
        return ""
    if isinstance(message, bytes):
        return message.decode("utf-8", "replace")
    return message


def is_signature_error(status: int, message: str | bytes | None) -> bool:
    """An HTTP 400 whose message (or whole error body) is about signatures or reasoning."""
    return status == 400 and _SIGNATURE_ERROR.search(_text(message)) is not None


def names_tool(message: str | bytes | None) -> bool:
    """The error names a tool or a function call: stage 2 may help."""
    return _NAMES_TOOL.search(_text(message)) is not None


def next_stage(stage: int, status: int, message: str | bytes | None) -> Stage | None:
    """The stage to try after ``stage`` failed with ``status`` / ``message``, or None."""
    if not is_signature_error(status, message):
        return None
    if stage == 0:
        return 1
    if stage == 1 and names_tool(message):
        return 2
    return None


_REASONING_SWITCHES = frozenset({"reasoning_effort", "reasoning", "thinking", "enable_thinking"})
"""Reasoning switches a client's dialect kept as extra fields (an OpenAI client's
``reasoning_effort`` to an OpenAI-compatible upstream; DeepSeek's and Qwen's ``thinking`` /
``enable_thinking``): stage 1 turns thinking off, so they go too."""


def stage_request(req: Request, stage: Stage, notes: Notes | None = None) -> Request:
    """The request of ``stage``; ``notes`` get what was changed. Stage 1: thinking off,
    thinking blocks as text, every signature and reasoning extra taken off. Stage 2: tool calls
    and results as text too."""
    if stage not in (1, 2):
        raise ValueError(f"no stage {stage!r}: stages are 1 and 2")
    counts: Notes = notes if notes is not None else Counter()
    messages = tuple(_stage1(m, counts) for m in req.messages)
    messages = tuple(m for m in messages if m.parts or m.role in ("user", "system", "developer"))
    switches = sorted(k for k in _REASONING_SWITCHES if k in req.extra)
    if req.thinking is not None or switches:
        counts["thinking off (staged retry)"] += 1
    extra = _strip({k: v for k, v in req.extra.items() if k not in _REASONING_SWITCHES})
    if stage == 2:
        messages = merge_same_role(tuple(_as_text(m, counts) for m in messages))
    return dataclasses.replace(
        req, messages=messages, thinking=None, extra=extra if isinstance(extra, dict) else {}
    )


def _stage1(m: Message, notes: Notes) -> Message:
    parts: list[Part] = []
    for p in m.parts:
        match p:
            case Thinking():
                if p.text and not p.redacted:
                    notes["thinking blocks sent as text (staged retry)"] += 1
                    parts.append(Text(p.text))
                else:
                    notes["thinking blocks without text dropped (staged retry)"] += 1
            case ToolCall() | Text():
                parts.append(dataclasses.replace(p, extra=_strip(p.extra)))
            case ToolResult() if not isinstance(p.content, str):
                inner = tuple(
                    Text(q.text) if isinstance(q, Thinking) else q
                    for q in p.content
                    if not (isinstance(q, Thinking) and (q.redacted or not q.text))
                )
                parts.append(dataclasses.replace(p, content=inner))
            case _:
                parts.append(p)
    extra = {k: v for k, v in m.extra.items() if k not in _REASONING_KEYS}
    return dataclasses.replace(m, parts=tuple(parts), extra=_strip(extra))


def _strip(value: Any) -> Any:
    """``value`` without signature keys, at any depth (copies only what changes)."""
    if isinstance(value, dict):
        out: JSON = {}
        changed = False
        for k, v in value.items():
            if k in _SIGNATURE_KEYS:
                changed = True
                continue
            w = _strip(v)
            changed = changed or w is not v
            out[k] = w
        return out if changed else value
    if isinstance(value, list):
        items = [_strip(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def _as_text(m: Message, notes: Notes) -> Message:
    """Calls and results of one message as text; a tool message becomes a user message."""
    if not any(isinstance(p, ToolCall | ToolResult) for p in m.parts):
        return m
    parts: list[Part] = []
    for p in m.parts:
        if isinstance(p, ToolCall):
            notes["tool calls sent as text (staged retry)"] += 1
            text = bracket.render_call(p)
            parts.append(Text(text if not parts else "\n" + text))
        elif isinstance(p, ToolResult):
            notes["tool results sent as text (staged retry)"] += 1
            content, images = _result(p)
            text = bracket.render_result(content)
            parts.append(Text(text if not parts else "\n" + text))
            parts.extend(images)
        else:
            parts.append(p)
    role = "user" if m.role == "tool" else m.role
    return dataclasses.replace(m, role=role, parts=tuple(parts), string_content=True, extra={})


def _result(r: ToolResult) -> tuple[str, list[Image]]:
    if isinstance(r.content, str):
        text, images = r.content, []
    else:
        text = "\n".join(q.text for q in r.content if isinstance(q, Text))
        images = [q for q in r.content if isinstance(q, Image)]
    if r.is_error:
        text = f"[error] {text}"
    return text or "(empty result)", images
