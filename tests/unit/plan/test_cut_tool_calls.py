"""Issue 26: a stream that ends badly inside a tool call never delivers that call.

Every client dialect, every upstream dialect, native (argument repair on: the call is held;
off: it streams as it comes) and text-protocol (``invoke``) routes, through the plan's own
processor (``decide`` → ``addon.plan.answer.stream_processor``): the upstream's stream holds text, then a
call whose arguments are cut at any point (hypothesis draws it), and ends there — cut (no
finish) or with the upstream's own error event.

What a client may never get is a call it can run:

- held calls (repair on, a text protocol): nothing of the call at all — no ``tool_calls``
  delta, no ``tool_use`` block, no ``function_call`` item, no ``functionCall`` part;
- a call that streamed as it came (repair off): the fragments the client already has stay,
  but the call is never finished — no ``finish_reason``, no ``content_block_stop`` for its
  block, no ``response.function_call_arguments.done`` / ``output_item.done``, no
  ``functionCall`` part (Gemini clients get a call whole, at its end);

and every stream ends with the error in the client's dialect, the text before the call intact.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import FlowPlan, Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, stream_processor
from tests import eventstream_frames as ef

CLIENTS = ["openai_chat", "anthropic", "openai_responses", "gemini"]
UPSTREAMS = ["openai_chat", "anthropic", "openai_responses", "gemini", "kiro"]
MODES = ["held", "streamed", "invoke"]
ENDINGS = ["cut", "error"]

TEXT = "Let me read it. "
ARGS = json.dumps({"path": "src/app/main.py", "limit": 20})
SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["path"],
}
PATHS = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*:*enerateContent", "/v1beta/models/m:streamGenerateContent?alt=sse"),
}


def request_body(client: str) -> dict[str, Any]:
    user = "read src/app/main.py"
    match client:
        case "anthropic":
            return {
                "model": "m",
                "max_tokens": 100,
                "stream": True,
                "tools": [{"name": "Read", "description": "Read a file", "input_schema": SCHEMA}],
                "messages": [{"role": "user", "content": user}],
            }
        case "openai_responses":
            tool = {"type": "function", "name": "Read", "description": "Read", "parameters": SCHEMA}
            return {"model": "m", "stream": True, "input": user, "tools": [tool]}
        case "gemini":
            return {
                "contents": [{"role": "user", "parts": [{"text": user}]}],
                "tools": [
                    {
                        "functionDeclarations": [
                            {"name": "Read", "description": "Read", "parameters": SCHEMA}
                        ]
                    }
                ],
            }
        case _:
            fn = {"name": "Read", "description": "Read a file", "parameters": SCHEMA}
            return {
                "model": "m",
                "stream": True,
                "tools": [{"type": "function", "function": fn}],
                "messages": [{"role": "user", "content": user}],
            }


def plan_for(client: str, upstream: str, mode: str) -> FlowPlan:
    glob, path = PATHS[client]
    route = Route(name="r", client=client, path=glob, upstream=upstream)  # type: ignore[arg-type]
    s = Settings(
        tool_repair="off" if mode == "streamed" else "on",
        tool_mode="invoke" if mode == "invoke" else "native",
    )
    body = json.dumps(request_body(client)).encode()
    inc = Incoming("POST", "h", path, {"authorization": "Bearer t"}, body)
    d = decide(s, route, inc, {})
    assert isinstance(d, Rewrite), d
    if mode == "invoke":
        assert d.plan.protocol == "invoke" and d.plan.trigger
    return d.plan


# --------------------------------------------------------------------------- upstream streams


def sse(pairs: list[tuple[str | None, Any]]) -> bytes:
    out = b""
    for name, data in pairs:
        if name is not None:
            out += b"event: " + name.encode() + b"\n"
        out += b"data: " + json.dumps(data).encode() + b"\n\n"
    return out


def halves(s: str) -> list[str]:
    return [p for p in (s[: len(s) // 2], s[len(s) // 2 :]) if p]


def chat(texts: list[str], args: str | None, ending: str) -> bytes:
    env = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any]) -> tuple[None, Any]:
        return None, {**env, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}

    pairs = [chunk({"role": "assistant", "content": ""})]
    pairs += [chunk({"content": t}) for t in texts]
    if args is not None:
        start = {"index": 0, "id": "call_1", "type": "function"}
        pairs.append(
            chunk({"tool_calls": [{**start, "function": {"name": "Read", "arguments": ""}}]})
        )
        pairs += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]})
            for a in halves(args)
        ]
    if ending == "error":
        pairs.append((None, {"error": {"message": "overloaded", "type": "server_error"}}))
    return sse(pairs)


def anthropic(texts: list[str], args: str | None, ending: str) -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
               "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
    pairs: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": message})
    ]
    pairs.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}}))  # fmt: skip
    for t in texts:
        delta = {"type": "text_delta", "text": t}
        pairs.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    pairs.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    if args is not None:
        block = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
        pairs.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": 1, "content_block": block},
            )
        )
        for a in halves(args):
            delta = {"type": "input_json_delta", "partial_json": a}
            pairs.append(
                ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": delta})
            )
    if ending == "error":
        pairs.append(
            (
                "error",
                {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}},
            )
        )
    return sse(pairs)


def responses(texts: list[str], args: str | None, ending: str) -> bytes:
    created = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress",
               "model": "m", "output": []}  # fmt: skip
    pairs: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "response": created})
    ]
    item = {
        "id": "msg_1",
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    pairs.append(
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": item},
        )
    )
    for t in texts:
        pairs.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_1",
                                                     "output_index": 0, "content_index": 0, "delta": t}))  # fmt: skip
    done = {
        **item,
        "status": "completed",
        "content": [{"type": "output_text", "text": "".join(texts)}],
    }
    pairs.append(
        (
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 0, "item": done},
        )
    )
    if args is not None:
        fc = {"id": "fc_1", "type": "function_call", "status": "in_progress", "call_id": "call_1",
              "name": "Read", "arguments": ""}  # fmt: skip
        pairs.append(
            (
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": 1, "item": fc},
            )
        )
        for a in halves(args):
            pairs.append(("response.function_call_arguments.delta",
                          {"type": "response.function_call_arguments.delta", "item_id": "fc_1",
                           "output_index": 1, "delta": a}))  # fmt: skip
    if ending == "error":
        failed = {
            **created,
            "status": "failed",
            "error": {"code": "server_error", "message": "overloaded"},
        }
        pairs.append(("response.failed", {"type": "response.failed", "response": failed}))
    return sse(pairs)


def gemini(texts: list[str], args: str | None, ending: str) -> bytes:
    def chunk(part: dict[str, Any]) -> tuple[None, Any]:
        return None, {"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}],
                      "modelVersion": "m", "responseId": "r1"}  # fmt: skip

    pairs = [chunk({"text": t}) for t in texts]
    if args is not None:
        # Vertex's streamed arguments: a call opened with willContinue, a string argument in
        # pieces; its closing part never comes. ``args`` here: the path's value so far.
        pairs.append(chunk({"functionCall": {"name": "Read", "willContinue": True}}))
        for a in halves(args):
            partial = {"jsonPath": "$.path", "stringValue": a, "willContinue": True}
            pairs.append(chunk({"functionCall": {"partialArgs": [partial], "willContinue": True}}))
    if ending == "error":
        pairs.append(
            (None, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})
        )
    return sse(pairs)


def kiro(texts: list[str], args: str | None, ending: str) -> bytes:
    events: list[tuple[str, Any]] = [("assistantResponseEvent", {"content": t}) for t in texts]
    if args is not None:
        events.append(("toolUseEvent", {"name": "Read", "toolUseId": "tooluse_1", "input": ""}))
        events += [
            ("toolUseEvent", {"name": "Read", "toolUseId": "tooluse_1", "input": a})
            for a in halves(args)
        ]
    out = ef.stream(events)
    if ending == "error":
        out += ef.exception("ThrottlingException", "overloaded")
    return out


BUILDERS = {"openai_chat": chat, "anthropic": anthropic, "openai_responses": responses,
            "gemini": gemini, "kiro": kiro}  # fmt: skip


def upstream_body(plan: FlowPlan, upstream: str, mode: str, cut: int, ending: str) -> bytes:
    """Text, then a call cut ``cut`` characters into what makes it (its arguments, or on a
    text-protocol route its whole markup), then the ending."""
    if mode == "invoke":
        markup = f'{plan.trigger}\n<invoke name="Read">{ARGS}</invoke>'
        # Cut before the closing tag is whole: the call never ended.
        markup = markup[: min(cut, len(markup) - 1)]
        return BUILDERS[upstream]([TEXT, *halves(markup)], None, ending)
    args = ARGS[: min(cut, len(ARGS) - 1)]
    if upstream == "gemini":
        args = "src/app/main.py"[: min(cut, 14)]
    return BUILDERS[upstream]([TEXT], args, ending)


def run(plan: FlowPlan, body: bytes, sizes: list[int]) -> bytes:
    processor = stream_processor(plan, AnswerState.of(plan), None)
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(body):
        size = sizes[i % len(sizes)] if sizes else len(body)
        out += processor.feed(body[pos : pos + size])
        pos, i = pos + size, i + 1
    out += processor.finish()
    return b"".join(out)


# --------------------------------------------------------------------------- what the client got


def client_events(raw: bytes) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            text = "\n".join(data)
            out.append((name, text if text == "[DONE]" else json.loads(text)))
    return out


def seen(client: str, raw: bytes) -> dict[str, Any]:
    """What the client got: its text; the calls it saw start; the calls it was told are
    finished (what it would run); whether the stream ended with an error and nothing claims
    it complete."""
    evs = client_events(raw)
    text, started, finished = "", [], []
    failed = False
    match client:
        case "openai_chat":
            finish = None
            for _, d in evs:
                if d == "[DONE]":
                    continue
                for c in d.get("choices", ()):
                    text += c["delta"].get("content") or ""
                    started += [tc.get("function", {}).get("name") for tc in c["delta"].get("tool_calls") or ()
                                if tc.get("id")]  # fmt: skip
                    finish = c.get("finish_reason") or finish
            if finish is not None:
                finished = started
            # The error is the last chunk (a Responses upstream's response.failed is its
            # stream's end: a [DONE] may follow it); never a finish reason.
            chunks = [d for _, d in evs if d != "[DONE]"]
            failed = "error" in chunks[-1] and finish is None
        case "anthropic":
            blocks: dict[int, str] = {}
            for name, d in evs:
                if name == "content_block_start" and d["content_block"]["type"] == "tool_use":
                    blocks[d["index"]] = d["content_block"]["name"]
                    started.append(d["content_block"]["name"])
                elif name == "content_block_stop" and d["index"] in blocks:
                    finished.append(blocks[d["index"]])
                elif name == "content_block_delta" and d["delta"]["type"] == "text_delta":
                    text += d["delta"]["text"]
            names = [n for n, _ in evs]
            failed = (
                names[-1] == "error"
                and "message_stop" not in names
                and "message_delta" not in names
            )
        case "openai_responses":
            for name, d in evs:
                if name == "response.output_item.added" and d["item"]["type"] == "function_call":
                    started.append(d["item"]["name"])
                elif name == "response.output_item.done" and d["item"]["type"] == "function_call":
                    finished.append(d["item"]["name"])
                elif name == "response.function_call_arguments.done":
                    finished.append("arguments.done")
                elif name == "response.output_text.delta":
                    text += d["delta"]
            final = evs[-1][1]["response"]
            finished += [o["name"] for o in final.get("output", []) if o["type"] == "function_call"]
            failed = evs[-1][0] == "response.failed"
        case _:
            for _, d in evs:
                for c in d.get("candidates") or ():
                    for p in c.get("content", {}).get("parts", []):
                        text += p.get("text", "") if not p.get("thought") else ""
                        if "functionCall" in p:
                            started.append(p["functionCall"]["name"])
                            finished.append(p["functionCall"]["name"])
            failed = "error" in evs[-1][1] and not any(
                c.get("finishReason") for _, d in evs for c in d.get("candidates") or ()
            )
    return {"text": text, "started": started, "finished": finished, "failed": failed}


def check(client: str, mode: str, raw: bytes, clean_end: bool = False) -> None:
    """``clean_end``: the upstream cannot show this cut (Kiro has no finish event: a body that
    ends in text ended), so the stream may end cleanly — still with no call."""
    got = seen(client, raw)
    assert got["failed"] or clean_end, raw.decode()[-600:]
    assert got["finished"] == [], raw.decode()[-1500:]  # never a call it can run
    if mode != "streamed":
        assert got["started"] == [], raw.decode()[-1500:]  # held: nothing of it at all
    if mode == "invoke":
        # A cut stream's unfinished text call is the text it was (never a call).
        assert got["text"].startswith(TEXT), got["text"]
    else:
        assert got["text"] == TEXT


# --------------------------------------------------------------------------- the matrix


def kiro_text_end(upstream: str, mode: str, ending: str) -> bool:
    return upstream == "kiro" and mode == "invoke" and ending == "cut"


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_call_cut_by_the_streams_end_never_reaches_the_client_whole(
    client: str, upstream: str, mode: str, ending: str
) -> None:
    plan = plan_for(client, upstream, mode)
    cut = len(ARGS) - 1 if mode != "invoke" else 10_000  # complete-looking but for one byte
    body = upstream_body(plan, upstream, mode, cut, ending)
    check(client, mode, run(plan, body, []), clean_end=kiro_text_end(upstream, mode, ending))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    client=st.sampled_from(CLIENTS),
    upstream=st.sampled_from(UPSTREAMS),
    mode=st.sampled_from(MODES),
    ending=st.sampled_from(ENDINGS),
    cut=st.integers(1, 200),
    sizes=st.lists(st.integers(1, 64), max_size=4),
)
def test_any_cut_point_inside_a_call_leaves_no_call_the_client_can_run(
    client: str, upstream: str, mode: str, ending: str, cut: int, sizes: list[int]
) -> None:
    plan = plan_for(client, upstream, mode)
    body = upstream_body(plan, upstream, mode, cut, ending)
    check(client, mode, run(plan, body, sizes), clean_end=kiro_text_end(upstream, mode, ending))


@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_call_that_ended_before_the_cut_is_still_delivered(client: str, upstream: str) -> None:
    """Only unended calls are dropped: the same stream with a whole call, cut after it (a
    Gemini call closes with its part; an Anthropic block with its stop …), still gives the
    call — the cut itself still shows."""
    plan = plan_for(client, upstream, "held")
    match upstream:
        case "openai_chat":
            # OpenAI ends calls only with the finish: a whole call is one that finished.
            body = chat([TEXT], ARGS, "cut")
            body += b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,'
            body += (
                b'"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
            )
        case "anthropic":
            body = anthropic([TEXT], ARGS, "cut")
            body += b'event: content_block_stop\ndata: {"type":"content_block_stop","index":1}\n\n'
        case "openai_responses":
            body = responses([TEXT], ARGS, "cut")
            fc = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
                  "name": "Read", "arguments": ARGS}  # fmt: skip
            body += sse([("response.output_item.done",
                          {"type": "response.output_item.done", "output_index": 1, "item": fc})])  # fmt: skip
        case "gemini":
            body = gemini([TEXT], None, "cut")
            body += sse([(None, {"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "Read", "args": json.loads(ARGS)}}]}, "index": 0}]})])  # fmt: skip
        case _:
            body = kiro([TEXT], ARGS, "cut")
            body += ef.stream(
                [("toolUseEvent", {"name": "Read", "toolUseId": "tooluse_1", "stop": True})]
            )
    got = seen(client, run(plan, body, [7]))
    assert got["started"] == ["Read"], got
    if upstream in ("openai_chat", "kiro"):
        # OpenAI: finished, then cut before [DONE] (the client has its finish_reason); Kiro
        # has no finish event: a body that ends after a stopped call ended cleanly.
        return
    assert got["failed"] and got["text"] == TEXT


@pytest.mark.parametrize("client", [c for c in CLIENTS if c != "openai_chat"])
def test_a_failure_of_the_bridge_inside_a_held_call_never_delivers_it(client: str) -> None:
    """The shell's way out (``abort``, a bug of ours) ends the client's stream with an error:
    the held call never ended, so it is dropped there too."""
    plan = plan_for(client, "openai_chat", "held")
    processor = stream_processor(plan, AnswerState.of(plan), None)
    body = chat([TEXT], ARGS[:-1], "cut")
    raw = b"".join(processor.feed(body)) + b"".join(processor.abort("a bug of ours"))
    got = seen(client, raw)
    assert got["failed"] and got["started"] == [] and got["text"] == TEXT
