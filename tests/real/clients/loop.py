"""A scripted upstream answer for a real client's tool loop, in any upstream dialect.

``ToolLoop`` is a ``ScriptedUpstream.script``: a request whose body holds the token (the
tool result came back) gets a text answer quoting it; a request offering the tool gets one
call of it; any other request (a title, a router, ``HEAD /``) gets a short text. Answers
are streamed or whole as the request asks, in the shape the real service writes (modelled
on ``../shared/fixtures/real/clients/*.response.sse``). Glossary: *turn 1* is the request
answered with the call, *turn 2* the one carrying its result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests import upstream_rules
from tests.e2e.harness import JSONReply, RawReply, Recorded, Reply, SSEReply, sse_from_payloads

MODEL = "test-model"
GEMINI_SIGNATURE = "c2NyaXB0ZWQtdGhvdWdodC1zaWduYXR1cmU="
"""The ``thoughtSignature`` on the scripted Gemini call (Gemini 3 sends one and wants it back)."""


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]
    id: str = "call_real_client_1"


def _sse(events: Iterable[tuple[str | None, Any]]) -> bytes:
    out = b""
    for name, payload in events:
        if name:
            out += f"event: {name}\n".encode()
        out += b"data: " + (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        out += b"\n\n"
    return out


# --------------------------------------------------------------------------- anthropic


def anthropic_message(text: str | None, call: Call | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    if call is not None:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{call.id}",
                "name": call.name,
                "input": call.arguments,
            }
        )
    return {
        "id": "msg_real_client",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "tool_use" if call else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_sse(text: str | None, call: Call | None) -> bytes:
    start = anthropic_message(None, None) | {"content": [], "stop_reason": None}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    index = 0
    if text is not None:
        events += [
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
        ]
        for word in _pieces(text):
            delta = {"type": "text_delta", "text": word}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    if call is not None:
        block = {"type": "tool_use", "id": f"toolu_{call.id}", "name": call.name, "input": {}}
        args = json.dumps(call.arguments)
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": args},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    stop = "tool_use" if call else "end_turn"
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(events)


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


# --------------------------------------------------------------------------- openai chat


def chat_message(text: str | None, call: Call | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call is not None:
        function = {"name": call.name, "arguments": json.dumps(call.arguments)}
        message["tool_calls"] = [{"id": call.id, "type": "function", "function": function}]
    return {
        "id": "chatcmpl-real-client",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chat_sse(text: str | None, call: Call | None) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-real-client",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": MODEL,
            "choices": [choice],
        }

    payloads: list[Any] = [chunk({"role": "assistant", "content": ""})]
    payloads += [chunk({"content": piece}) for piece in _pieces(text)] if text else []
    if call is not None:
        args = json.dumps(call.arguments)
        function = {"name": call.name, "arguments": ""}
        head = {"index": 0, "id": call.id, "type": "function", "function": function}
        payloads.append(chunk({"tool_calls": [head]}))
        payloads.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}))
    payloads.append(chunk({}, "tool_calls" if call else "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    payloads.append({**chunk({}), "choices": [], "usage": usage})
    return sse_from_payloads([*payloads, "[DONE]"])


# --------------------------------------------------------------------------- responses


def _responses_items(text: str | None, call: Call | None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if text is not None:
        part = {"type": "output_text", "text": text, "annotations": []}
        items.append(
            {
                "id": "msg_real_client",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    if call is not None:
        items.append(
            {
                "id": f"fc_{call.id}",
                "type": "function_call",
                "status": "completed",
                "arguments": json.dumps(call.arguments),
                "call_id": call.id,
                "name": call.name,
            }
        )
    return items


def responses_body(
    text: str | None, call: Call | None, status: str = "completed"
) -> dict[str, Any]:
    done = status == "completed"
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    return {
        "id": "resp_real_client",
        "object": "response",
        "created_at": 1700000000,
        "status": status,
        "model": MODEL,
        "output": _responses_items(text, call) if done else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
        "usage": usage if done else None,
        "error": None,
        "incomplete_details": None,
    }


def responses_sse(text: str | None, call: Call | None) -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": responses_body(None, None, "in_progress")},
        {"type": "response.in_progress", "response": responses_body(None, None, "in_progress")},
    ]
    for index, item in enumerate(_responses_items(text, call)):
        if item["type"] == "message":
            base = {"item_id": item["id"], "output_index": index, "content_index": 0}
            empty = {"type": "output_text", "text": "", "annotations": []}
            events += [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                },
                {"type": "response.content_part.added", **base, "part": empty},
                *(
                    {"type": "response.output_text.delta", **base, "delta": piece}
                    for piece in _pieces(text or "")
                ),
                {"type": "response.output_text.done", **base, "text": text},
                {"type": "response.content_part.done", **base, "part": item["content"][0]},
            ]
        else:
            base = {"item_id": item["id"], "output_index": index}
            added = {**item, "status": "in_progress", "arguments": ""}
            events += [
                {"type": "response.output_item.added", "output_index": index, "item": added},
                {
                    "type": "response.function_call_arguments.delta",
                    **base,
                    "delta": item["arguments"],
                },
                {
                    "type": "response.function_call_arguments.done",
                    **base,
                    "arguments": item["arguments"],
                },
            ]
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": responses_body(text, call)})
    return _sse((e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events))


# --------------------------------------------------------------------------- gemini


def gemini_chunk(text: str | None, call: Call | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    if call is not None:
        function_call = {"name": call.name, "args": call.arguments}
        parts.append({"functionCall": function_call, "thoughtSignature": GEMINI_SIGNATURE})
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": MODEL,
        "responseId": "real-client",
    }


def gemini_sse(text: str | None, call: Call | None) -> bytes:
    return sse_from_payloads([gemini_chunk(text, call)])


# --------------------------------------------------------------------------- the loop


def _tool_names(body: Any) -> set[Any]:
    names: set[Any] = set()
    for tool in body.get("tools") or () if isinstance(body, dict) else ():
        for decl in tool.get("functionDeclarations") or ():
            names.add(decl.get("name"))
        names.add(tool.get("name") or (tool.get("function") or {}).get("name"))
    return names


def answer(dialect: str, stream: bool, text: str | None, call: Call | None = None) -> Reply:
    """A reply in ``dialect`` (an upstream dialect of the bridge), streamed or whole."""
    if dialect == "anthropic":
        return (
            SSEReply(anthropic_sse(text, call))
            if stream
            else JSONReply(anthropic_message(text, call))
        )
    if dialect == "openai_chat":
        return SSEReply(chat_sse(text, call)) if stream else JSONReply(chat_message(text, call))
    if dialect == "openai_responses":
        return (
            SSEReply(responses_sse(text, call)) if stream else JSONReply(responses_body(text, call))
        )
    if dialect == "gemini":
        return SSEReply(gemini_sse(text, call)) if stream else JSONReply(gemini_chunk(text, call))
    raise ValueError(f"no scripted answers for upstream dialect {dialect!r}")


@dataclass
class ToolLoop:
    """The upstream's side of one tool loop; records which requests got which answer."""

    dialect: str
    call: Call
    token: str
    final_text: str = ""
    turns: list[tuple[str, Recorded]] = field(default_factory=list)
    """("call" | "final" | "side", request) in arrival order."""

    def __post_init__(self) -> None:
        if not self.final_text:
            self.final_text = f"The file holds the token {self.token}."

    def __call__(self, rec: Recorded) -> Reply:
        if rec.method != "POST":
            self.turns.append(("side", rec))
            return RawReply(b"")
        body = rec.json()
        check_request(self.dialect, body)
        stream = self._streamed(rec, body)
        if self.token in rec.body.decode(errors="replace"):
            self.turns.append(("final", rec))
            return answer(self.dialect, stream, self.final_text)
        if self.call.name in _tool_names(body):
            self.turns.append(("call", rec))
            return answer(self.dialect, stream, None, self.call)
        self.turns.append(("side", rec))
        return answer(self.dialect, stream, "Reading a file")

    def _streamed(self, rec: Recorded, body: Any) -> bool:
        if self.dialect == "gemini":
            return ":streamGenerateContent" in rec.path
        return isinstance(body, dict) and bool(body.get("stream"))

    def of(self, kind: str) -> list[Recorded]:
        return [rec for k, rec in self.turns if k == kind]


def tool_results(dialect: str, body: Any) -> list[tuple[str, str]]:
    """``(call id or name, result as text)`` for each tool result in a request body."""
    out: list[tuple[str, str]] = []
    if dialect == "anthropic":
        for message in body.get("messages", []):
            for block in message.get("content") if isinstance(message.get("content"), list) else ():
                if block.get("type") == "tool_result":
                    out.append((block.get("tool_use_id", ""), json.dumps(block.get("content"))))
    elif dialect == "openai_chat":
        for message in body.get("messages", []):
            if message.get("role") == "tool":
                out.append((message.get("tool_call_id", ""), json.dumps(message.get("content"))))
    elif dialect == "openai_responses":
        for item in body.get("input", []) if isinstance(body.get("input"), list) else ():
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                out.append((item.get("call_id", ""), json.dumps(item.get("output"))))
    elif dialect == "gemini":
        for content in body.get("contents", []):
            for part in content.get("parts", []):
                if "functionResponse" in part:
                    response = part["functionResponse"]
                    out.append((response.get("name", ""), json.dumps(response.get("response"))))
    else:
        raise ValueError(f"no tool results known for {dialect!r}")
    return out


def upstream_call_id(dialect: str, call: Call) -> str:
    """What a tool result in ``dialect`` names the scripted call by."""
    return {"anthropic": f"toolu_{call.id}", "gemini": call.name}.get(dialect, call.id)


UPSTREAMS = ["anthropic", "openai_chat", "openai_responses", "gemini"]
"""Every upstream dialect ``answer`` speaks."""


# --------------------------------------------------------------------------- request checks


def check_request(dialect: str, body: Any) -> None:
    """AssertionError where ``body`` breaks a rule the real service enforces
    (``tests.upstream_rules``); the scripted Gemini is a Gemini 3 model (its calls carry
    signatures and it wants them back)."""
    upstream_rules.check_request(dialect, body, "gemini-3" if dialect == "gemini" else "")
