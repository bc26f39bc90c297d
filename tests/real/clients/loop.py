"""A scripted upstream answer for a real client's tool loop, in any upstream dialect.

``ToolLoop`` is a ``ScriptedUpstream.script`` playing rounds of calls, each call reading a
file that holds a token: a request offering the tool gets the first round's calls (one, or
several in parallel); a request whose body holds every token of the rounds so far (their
results came back) gets the next round, or after the last a text quoting every token; any
other request (a title, a router, ``HEAD /``) gets a short text. Answers are streamed or
whole as the request asks (or whole always: ``whole``), in the shape the real service
writes (modelled on ``../shared/fixtures/real/clients/*.response.sse``). Glossary: *turn 1*
is the request answered with the first calls, *turn 2* the one carrying their results.
Kiro and Gemini Code Assist upstreams are subclasses in ``wrapped``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests import upstream_rules
from tests.e2e.harness import JSONReply, RawReply, Recorded, Reply, SSEReply, sse_from_payloads

MODEL = "test-model"
GEMINI_SIGNATURE = "c2NyaXB0ZWQtdGhvdWdodC1zaWduYXR1cmU="
"""The ``thoughtSignature`` on the first scripted Gemini call of a turn (Gemini 3 sends one
and wants it back)."""


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


def anthropic_message(text: str | None, calls: Sequence[Call] = ()) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    for call in calls:
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
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_sse(text: str | None, calls: Sequence[Call] = ()) -> bytes:
    start = anthropic_message(None) | {"content": [], "stop_reason": None}
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
    for call in calls:
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
        index += 1
    stop = "tool_use" if calls else "end_turn"
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


def chat_message(text: str | None, calls: Sequence[Call] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in calls
        ]
    return {
        "id": "chatcmpl-real-client",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chat_sse(text: str | None, calls: Sequence[Call] = ()) -> bytes:
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
    for index, call in enumerate(calls):
        args = json.dumps(call.arguments)
        function = {"name": call.name, "arguments": ""}
        head = {"index": index, "id": call.id, "type": "function", "function": function}
        payloads.append(chunk({"tool_calls": [head]}))
        payloads.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": args}}]}))
    payloads.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    payloads.append({**chunk({}), "choices": [], "usage": usage})
    return sse_from_payloads([*payloads, "[DONE]"])


# --------------------------------------------------------------------------- responses


def _responses_items(text: str | None, calls: Sequence[Call]) -> list[dict[str, Any]]:
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
    for call in calls:
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
    text: str | None, calls: Sequence[Call] = (), status: str = "completed"
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
        "output": _responses_items(text, calls) if done else [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
        "usage": usage if done else None,
        "error": None,
        "incomplete_details": None,
    }


def responses_sse(text: str | None, calls: Sequence[Call] = ()) -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": responses_body(None, (), "in_progress")},
        {"type": "response.in_progress", "response": responses_body(None, (), "in_progress")},
    ]
    for index, item in enumerate(_responses_items(text, calls)):
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
    events.append({"type": "response.completed", "response": responses_body(text, calls)})
    return _sse((e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events))


# --------------------------------------------------------------------------- gemini


_RESPONSE_IDS = itertools.count(1)
"""Gemini names each answer anew (``responseId``); a client's call ids may be made from it."""


def gemini_chunk(text: str | None, calls: Sequence[Call] = ()) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    for index, call in enumerate(calls):
        part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.arguments}}
        if index == 0:
            part["thoughtSignature"] = GEMINI_SIGNATURE
        parts.append(part)
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": MODEL,
        "responseId": f"real-client-{next(_RESPONSE_IDS)}",
    }


def gemini_sse(text: str | None, calls: Sequence[Call] = ()) -> bytes:
    return sse_from_payloads([gemini_chunk(text, calls)])


# --------------------------------------------------------------------------- the loop


def _tool_names(body: Any) -> set[Any]:
    names: set[Any] = set()
    for tool in body.get("tools") or () if isinstance(body, dict) else ():
        for decl in tool.get("functionDeclarations") or ():
            names.add(decl.get("name"))
        names.add(tool.get("name") or (tool.get("function") or {}).get("name"))
    return names


def answer(dialect: str, stream: bool, text: str | None, calls: Sequence[Call] = ()) -> Reply:
    """A reply in ``dialect`` (an upstream dialect of the bridge), streamed or whole."""
    if dialect == "anthropic":
        return (
            SSEReply(anthropic_sse(text, calls))
            if stream
            else JSONReply(anthropic_message(text, calls))
        )
    if dialect == "openai_chat":
        return SSEReply(chat_sse(text, calls)) if stream else JSONReply(chat_message(text, calls))
    if dialect == "openai_responses":
        return (
            SSEReply(responses_sse(text, calls))
            if stream
            else JSONReply(responses_body(text, calls))
        )
    if dialect == "gemini":
        return SSEReply(gemini_sse(text, calls)) if stream else JSONReply(gemini_chunk(text, calls))
    raise ValueError(f"no scripted answers for upstream dialect {dialect!r}")


type Round = Sequence[tuple[Call, str]]
"""The calls of one model turn, each with the token its result must carry."""


@dataclass(frozen=True)
class Turn:
    kind: str
    """"call" (answered with a round of calls), "final", "side", "refused" or "cut"."""
    rec: Recorded
    stream: bool
    """The request asked for a stream."""
    round: int = 0
    """"call": which round answered it."""


@dataclass
class ToolLoop:
    """The upstream's side of one tool loop; records which requests got which answer.

    ``rounds``: the calls of turn 1, turn 2 … (``[[(call, token)]]``: one call, then the text);
    ``whole``: answer whole even a request that asks for a stream (the bridge must stream it
    to the client); ``cut_streams``: answer every request for a stream with a 200 event
    stream that ends before its first event (a client with a non-streaming fallback then
    asks again whole; recorded as "cut"). Subclasses (``wrapped``) change what a request is refused for, where its
    body is, and how answers and tool results are written."""

    dialect: str
    rounds: Sequence[Round]
    whole: bool = False
    cut_streams: bool = False
    final_text: str = ""
    turns: list[Turn] = field(default_factory=list)
    route_extra: ClassVar[str] = ""
    """Route keys (TOML lines) the upstream needs beyond ``client`` and ``upstream``."""

    def __post_init__(self) -> None:
        if not self.final_text:
            self.final_text = "The files hold the tokens " + ", ".join(self.tokens) + "."

    @property
    def pairs(self) -> list[tuple[Call, str]]:
        return [pair for calls in self.rounds for pair in calls]

    @property
    def tokens(self) -> list[str]:
        return [token for _, token in self.pairs]

    def __call__(self, rec: Recorded) -> Reply:
        if rec.method != "POST":
            self.turns.append(Turn("side", rec, False))
            return RawReply(b"")
        refused = self.refusal(rec)
        if refused is not None:
            self.turns.append(Turn("refused", rec, False))
            return refused
        body = self.body(rec)
        stream = self.streamed(rec, body)
        if stream and self.cut_streams:
            self.turns.append(Turn("cut", rec, True))
            return SSEReply(b"")
        text = rec.body.decode(errors="replace")
        done = 0
        while done < len(self.rounds) and all(t in text for _, t in self.rounds[done]):
            done += 1
        if done == len(self.rounds):
            self.turns.append(Turn("final", rec, stream))
            return self.reply(stream and not self.whole, self.final_text, ())
        if done or self.rounds[0][0][0].name in self.tool_names(body):
            self.turns.append(Turn("call", rec, stream, done))
            return self.reply(stream and not self.whole, None, [c for c, _ in self.rounds[done]])
        self.turns.append(Turn("side", rec, stream))
        return self.reply(stream and not self.whole, "Reading a file", ())

    def refusal(self, rec: Recorded) -> Reply | None:
        """The real service's refusal of ``rec``, or None (an AssertionError: the harness's 500)."""
        check_request(self.dialect, rec.json())
        return None

    def body(self, rec: Recorded) -> Any:
        """The request in the upstream dialect (unwrapped where the service wraps it)."""
        return rec.json()

    def streamed(self, rec: Recorded, body: Any) -> bool:
        if self.dialect == "gemini":
            return ":streamGenerateContent" in rec.path
        return isinstance(body, dict) and bool(body.get("stream"))

    def tool_names(self, body: Any) -> set[Any]:
        return _tool_names(body)

    def reply(self, stream: bool, text: str | None, calls: Sequence[Call]) -> Reply:
        return answer(self.dialect, stream, text, calls)

    def results(self, rec: Recorded) -> list[tuple[str, str]]:
        """``(call id or name, result as text)`` for each tool result ``rec`` carries."""
        return tool_results(self.dialect, self.body(rec))

    def result_id(self, call: Call) -> str:
        return upstream_call_id(self.dialect, call)

    def of(self, kind: str) -> list[Recorded]:
        return [turn.rec for turn in self.turns if turn.kind == kind]


class CutOnce(ToolLoop):
    """The first streamed answer broken off (issue 42): its first half of events, then the
    connection closed without the last chunk; every other answered as ``ToolLoop`` does. The
    broken one is recorded as a "broken" turn after its own."""

    def reply(self, stream: bool, text: str | None, calls: Sequence[Call]) -> Reply:
        got = super().reply(stream, text, calls)
        if not stream or not isinstance(got, SSEReply) or self.of("broken"):
            return got
        self.turns.append(Turn("broken", self.turns[-1].rec, True))
        events = [e for e in got.body.split(b"\n\n") if e.strip()]
        return SSEReply(b"\n\n".join(events[: max(1, len(events) // 2)]) + b"\n\n", abort=True)


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
