"""How much of turn k's upstream prompt turn k+1 repeats as an identical leading run.

Upstreams that cache automatically (OpenAI, DeepSeek, Gemini, llama.cpp) reuse a prompt's
prefix only when its bytes repeat. ``upstream_bodies`` sends an agent loop of ``turns`` turns
(a long system prompt, ten tools, a tool call and its result per turn), written by a client of
one dialect, through the plan (``addon.plan.decide``) of a route to another, and returns what
the upstream got each turn; ``prompt`` lays one body out in the order a model reads it (tools,
system, messages; ``cache_control`` left out: it does not change what is cached) and
``reuse(a, b)`` is the share of ``a`` that ``b`` starts with."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import (
    Message,
    Request,
    Text,
    ThinkingConfig,
    Tool,
    ToolCall,
    ToolMode,
    ToolResult,
)
from addon.plan import Incoming, Rewrite, decide
from addon.stores.reasoning import ReasoningStore

MODEL = "claude-sonnet-4-6"
CLIENT_PATHS: dict[str, tuple[str, str]] = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*", f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"),
}
UPSTREAMS = ("openai_chat", "anthropic", "openai_responses", "gemini", "kiro")
TOOL_NAMES = ("read_file", "write_file", "list_dir", "grep", "run", "edit", "search", "fetch",
              "todo", "ask")  # fmt: skip


def system_prompt(words: int = 4500) -> str:
    """About ``words`` words of varied text (a ~6k-token agent system prompt)."""
    lines = [
        f"Rule {i}: when a task touches module m{i % 37} check its tests t{i % 11} first, "
        f"and keep changes under {i % 50 + 10} lines."
        for i in range(words // 20)
    ]
    return "You are a coding agent.\n" + "\n".join(lines)


def tools() -> tuple[Tool, ...]:
    return tuple(
        Tool(
            name,
            f"The {name} tool: " + "does one thing well. " * 8,
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "A path in the project."},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
            },
        )
        for name in TOOL_NAMES
    )


def conversation(turn: int, thinking: bool = False) -> Request:
    """The unified request of turn ``turn`` (1-based) of the agent loop; ``thinking``: the
    client asks for reasoning (a thinking hint where the upstream has no switch)."""
    messages: list[Message] = [
        Message("system", (Text(system_prompt()),)),
        Message("user", (Text("Fix the failing test in the parser module, please."),)),
    ]
    for i in range(1, turn):
        name = TOOL_NAMES[i % len(TOOL_NAMES)]
        call = ToolCall(f"call_{i:03d}", name, json.dumps({"path": f"src/m{i}.py"}))
        messages.append(Message("assistant", (Text(f"Step {i}: looking at m{i}."), call)))
        result = f"line {i}: def f{i}(x): return x + {i}\n" * 40
        messages.append(Message("tool", (ToolResult(call.id, result, name=name),)))
    return Request(
        origin="test",
        model=MODEL,
        messages=tuple(messages),
        tools=tools(),
        stream=True,
        stream_explicit=True,
        thinking=ThinkingConfig(True, 4096) if thinking else None,
    )


def client_body(client: str, turn: int, thinking: bool = False) -> bytes:
    """Turn ``turn`` as a client of ``client`` sends it."""
    body = DIALECTS[client].encode_request(conversation(turn, thinking), Counter())
    if client == "gemini":
        body.pop("model", None)
    if client == "anthropic" and thinking:
        # The encoder turns thinking off for a tool loop without signed thinking; a client
        # asks for it on every turn (Claude Code).
        body["thinking"] = {"type": "enabled", "budget_tokens": 4096}
    return json.dumps(body).encode()


def route(client: str, upstream: str, mode: ToolMode, **keys: Any) -> Route:
    return Route(
        name="r",
        path=CLIENT_PATHS[client][0],
        client=client,  # type: ignore[arg-type]
        upstream=upstream,  # type: ignore[arg-type]
        tool_mode=mode,
        project="p-1" if upstream == "gemini_code_assist" else None,
        **keys,
    )


def upstream_bodies(
    client: str, upstream: str, mode: ToolMode, turns: int, thinking: bool = False, **keys: Any
) -> list[dict[str, Any]]:
    """What the upstream got on each turn of the loop (one reasoning store for all)."""
    r = route(client, upstream, mode, **keys)
    settings = Settings(routes=(r,))
    store = ReasoningStore()
    out: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        raw = client_body(client, turn, thinking)
        inc = Incoming("POST", "api.example.com", CLIENT_PATHS[client][1], {}, raw)
        d = decide(settings, r, inc, {}, store=store)
        assert isinstance(d, Rewrite), d
        out.append(json.loads(d.body))
    return out


def prompt(upstream: str, body: dict[str, Any]) -> str:
    """``body`` in the order a model reads it, without ``cache_control``."""
    match upstream:
        case "openai_chat":
            pieces = [body.get("tools"), *body["messages"]]
        case "anthropic":
            # A string is one text block to Anthropic (the same cached prefix): a message
            # whose block carried a breakpoint last turn is written as an array.
            pieces = [body.get("tools"), _blocks(body.get("system"))]
            pieces += [{**m, "content": _blocks(m["content"])} for m in body["messages"]]
        case "openai_responses":
            pieces = [body.get("tools"), body.get("instructions"), *body["input"]]
        case "gemini" | "gemini_code_assist":
            inner = body["request"] if upstream == "gemini_code_assist" else body
            pieces = [inner.get("tools"), inner.get("systemInstruction"), *inner["contents"]]
        case "kiro":
            # Kiro sends the tools with the current message; its service puts them first.
            state = body["conversationState"]
            current = json.loads(json.dumps(state["currentMessage"]))
            message = current.get("userInputMessage", {})
            context = message.get("userInputMessageContext", {})
            tools = context.pop("tools", None)
            if not context:  # history entries carry no context at all
                message.pop("userInputMessageContext", None)
            pieces = [tools, *state.get("history", []), current]
        case _:
            raise ValueError(upstream)
    return "\n".join(json.dumps(_without_marks(p), ensure_ascii=False) for p in pieces)


def reuse(before: str, after: str) -> float:
    """The share of ``before`` that ``after`` starts with."""
    n = 0
    for a, b in zip(before, after, strict=False):
        if a != b:
            break
        n += 1
    return n / len(before) if before else 1.0


def _blocks(content: Any) -> Any:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _without_marks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_marks(v) for v in value]
    return value
