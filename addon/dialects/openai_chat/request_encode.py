"""Unified ``Request`` → an OpenAI ``chat/completions`` request.

Contract: ``Request`` in, JSON body out, for a chat upstream; a chat client's unmodelled
fields (``Request.extra``) go back unchanged. The decoder is ``request``. Tool kinds of other
dialects must have been left out before (``addon.transforms.tools.leave_out_tools``): the
encoder refuses any that reach it."""

from __future__ import annotations

import json

from addon.dialects.anthropic.blocks import CACHE_KEY, cache_control
from addon.model import (
    JSON,
    CacheMark,
    ClientError,
    Image,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Part,
    Request,
    Text,
    Thinking,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
)

from .request import NAME

EMPTY_RESULT = "(empty result)"
"""Sent instead of an empty tool result: several backends reject empty tool content."""


def encode_request(req: Request, notes: Notes) -> JSON:
    body: JSON = {"model": req.model, "messages": _encode_messages(req.messages)}
    p = req.params
    for key, value in (
        ("max_tokens", p.max_tokens),
        ("temperature", p.temperature),
        ("top_p", p.top_p),
        # OpenAI itself rejects top_k; only a client that sent it in this dialect gets it back.
        ("top_k", p.top_k if req.origin == NAME else None),
        ("user", p.user),
        ("seed", p.seed),
        ("presence_penalty", p.presence_penalty),
        ("frequency_penalty", p.frequency_penalty),
        ("service_tier", p.service_tier),
        ("prompt_cache_key", p.cache_key),
    ):
        if value is not None:
            body[key] = value
    if p.stop is not None:
        body["stop"] = list(p.stop)
    if req.origin == NAME:
        body.update(req.extra)
    thinking = req.thinking
    if req.origin != NAME and thinking is not None and thinking.enabled:
        # Another dialect's reasoning switch (Anthropic ``thinking`` / ``output_config.effort``,
        # Responses ``reasoning.effort``) as ``reasoning_effort``, in the values chat upstreams
        # take (minimal | low | medium | high; only an OpenAI client says minimal, so it
        # stays): ``xhigh`` (Anthropic's ``max``) → high; without an effort, a thinking budget
        # ≤ 4096 → low, ≤ 16384 → medium, more → high (the same steps as the Responses
        # encoder); adaptive or no budget → medium. A route turns this off by clearing
        # ``Request.thinking`` (plan, ``reasoning = "off"``).
        effort: str = (
            ("high" if thinking.effort == "xhigh" else thinking.effort)
            if thinking.effort is not None
            else "medium"
            if thinking.budget_tokens is None
            else "low"
            if thinking.budget_tokens <= 4096
            else "medium"
            if thinking.budget_tokens <= 16384
            else "high"
        )
        body.setdefault("reasoning_effort", effort)
    if req.tools is not None:
        body["tools"] = [_encode_tool(t) for t in req.tools]
        _wrap_custom_calls(body, req)
    if req.tool_choice is not None:
        body["tool_choice"] = _encode_tool_choice(req.tool_choice)
        if req.tool_choice.disable_parallel and "parallel_tool_calls" not in body:
            body["parallel_tool_calls"] = False
    if req.stream or req.stream_explicit:
        body["stream"] = req.stream
    if req.stream and req.origin != NAME:
        # Clients of other dialects expect usage at the end of a stream (Anthropic's
        # message_delta); OpenAI only sends it when asked.
        body.setdefault("stream_options", {"include_usage": True})
    return body


_CUSTOM_INPUT: JSON = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
}
"""Parameters of a custom tool sent as a function tool (when no transform did it before)."""


def _wrap_custom_calls(body: JSON, req: Request) -> None:
    """History calls of a custom tool sent as a function tool: raw input → ``{"input": …}``."""
    fallback = {t.name for t in req.tools or () if isinstance(t, Tool) and t.format is not None}
    custom = {
        p.id
        for m in req.messages
        for p in m.parts
        if isinstance(p, ToolCall) and p.custom and p.name in fallback
    }
    if not custom:
        return
    for msg in body["messages"]:
        for call in msg.get("tool_calls") or ():
            if call.get("id") in custom:
                fn = call["function"]
                fn["arguments"] = json.dumps({"input": fn["arguments"]}, ensure_ascii=False)


def _encode_tool(t: Tool | OpaqueTool) -> JSON:
    if isinstance(t, Tool) and t.format is not None:
        # A custom (freeform) tool that no transform rewrote: a function with one string
        # parameter ``input`` (its calls in the history are wrapped alike: _wrap_custom_calls).
        custom: JSON = {"name": t.name}
        if t.description is not None:
            custom["description"] = t.description
        custom["parameters"] = json.loads(json.dumps(_CUSTOM_INPUT))  # schema stages edit in place
        return {"type": "function", "function": custom}
    if isinstance(t, OpaqueTool):
        if t.origin == NAME:
            return t.data
        # Other dialects' kinds (Codex's ``namespace`` and ``web_search``, Anthropic's server
        # tools …) were left out before (leave_out_tools); one that reaches here is refused.
        raise ClientError(
            f"tool '{t.name}' has type '{t.type}', a server tool that an OpenAI-compatible "
            "upstream cannot run; remove it from the request",
            param="tools",
            code="unsupported_tool",
        )
    fn: JSON = {"name": t.name}
    if t.description is not None:
        fn["description"] = t.description
    fn["parameters"] = t.parameters
    if t.strict is not None:
        fn["strict"] = t.strict
    fn.update(t.extra.get("function", {}))
    out: JSON = {"type": "function", "function": fn}
    out.update(t.extra.get("tool", {}))
    return _marked(out, t.cache)


def _encode_tool_choice(c: ToolChoice) -> str | JSON:
    if c.mode == "tool":
        return {"type": "function", "function": {"name": c.name}}
    return c.mode


def _encode_messages(messages: tuple[Message, ...]) -> list[JSON]:
    out: list[JSON] = []
    for m in messages:
        if m.role == "tool" or any(isinstance(p, ToolResult) for p in m.parts):
            out.extend(_encode_tool_results(m))
        elif m.role == "assistant":
            out.append(_encode_assistant(m))
        else:
            msg: JSON = {"role": m.role, "content": _encode_content(m.parts, m.string_content)}
            msg.update(m.extra)
            out.append(msg)
    return out


def _encode_assistant(m: Message) -> JSON:
    content = [p for p in m.parts if not isinstance(p, ToolCall | Thinking)]
    calls = [p for p in m.parts if isinstance(p, ToolCall)]
    thinking = [p.text for p in m.parts if isinstance(p, Thinking) and not p.redacted]
    msg: JSON = {"role": "assistant"}
    if not content:
        msg["content"] = None if calls else ""
    else:
        msg["content"] = _encode_content(tuple(content), m.string_content)
    if thinking:
        msg["reasoning_content"] = "".join(thinking)
    if calls:
        msg["tool_calls"] = [_encode_tool_call(c) for c in calls]
    msg.update(m.extra)
    return msg


def _encode_tool_call(c: ToolCall) -> JSON:
    fn: JSON = {"name": c.name, "arguments": c.arguments}
    fn.update(c.extra.get("function", {}))
    out: JSON = {"id": c.id, "type": "function", "function": fn}
    out.update({k: v for k, v in c.extra.items() if k != "function"})
    return out


def _encode_tool_results(m: Message) -> list[JSON]:
    """Tool results become ``tool`` messages; the message's other parts follow as one user turn."""
    out: list[JSON] = []
    rest: list[Part] = []
    for p in m.parts:
        if not isinstance(p, ToolResult):
            rest.append(p)
            continue
        content: str | list[JSON]
        if isinstance(p.content, str):
            content = p.content
        elif m.role == "tool" and not m.string_content:  # a native tool message: keep its array
            content = [_encode_part(q) for q in p.content]
        else:
            content = "\n".join(q.text for q in p.content if isinstance(q, Text))
            rest.extend(
                q for q in p.content if isinstance(q, Image)
            )  # tool messages carry no images
        if content == "" or content == []:
            content = EMPTY_RESULT
        if p.is_error and isinstance(content, str) and m.role != "tool":
            content = f"[tool error] {content}"
        if p.cache is not None:  # the mark goes on the message's last content part
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
            content = [*parts[:-1], _marked(dict(parts[-1]), p.cache)]
        msg: JSON = {"role": "tool", "tool_call_id": p.tool_call_id, "content": content}
        if p.name is not None:
            msg["name"] = p.name
        if m.role == "tool":
            msg.update(m.extra)
        out.append(msg)
    if rest:
        user: JSON = {"role": "user", "content": _encode_content(tuple(rest), False)}
        if m.role != "tool":
            user.update(m.extra)
        out.append(user)
    return out


def _encode_content(parts: tuple[Part, ...], string_content: bool) -> str | list[JSON] | None:
    if string_content and all(
        isinstance(p, Text) and not p.extra and p.cache is None for p in parts
    ):
        return "".join(p.text for p in parts if isinstance(p, Text))
    return [_encode_part(p) for p in parts]


def _marked(part: JSON, mark: CacheMark | None) -> JSON:
    """A content part with Anthropic's ``cache_control``, the shape OpenRouter and LiteLLM
    pass on to Anthropic and Gemini models; the plan leaves marks in only for a route that
    says ``cache_control = "keep"`` or ``"auto"``."""
    if mark is not None:
        part[CACHE_KEY] = cache_control(mark)
    return part


def _encode_part(p: Part) -> JSON:
    match p:
        case Text():
            return _marked({"type": "text", "text": p.text, **p.extra}, p.cache)
        case Image():
            ref: JSON = {"url": p.url}
            if p.detail is not None:
                ref["detail"] = p.detail
            return _marked({"type": "image_url", "image_url": ref, **p.extra}, p.cache)
        case Opaque():
            return p.data
        case Thinking():
            return {"type": "text", "text": p.text}
        case ToolCall() | ToolResult():
            raise AssertionError(f"{p.kind} parts are encoded by their message")
