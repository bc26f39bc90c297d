"""End to end: Cursor-shaped OpenAI and Claude Code-shaped Anthropic clients → mitmdump → Gemini.

The scripted upstream checks what it gets the way Gemini does: the path and key of its API
(public: ``/v1beta/models/{model}:streamGenerateContent?alt=sse`` with ``x-goog-api-key``;
Code Assist: ``/v1internal:…`` with a Bearer token and the body wrapped with the route's
project), roles that alternate, every ``functionCall`` answered by a ``functionResponse`` of the
same name in the next turn, and no schema keyword Gemini refuses. It then plays a 3-turn tool
loop: two parallel calls, one call, a text answer. Both clients must run the loop to the end,
streamed and whole, against both wrappers.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anthropic
import openai
import pytest

from tests.e2e.clients import claude_code_loop, cursor_loop, read_and_list
from tests.e2e.harness import (
    JSONReply,
    Proxy,
    Recorded,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    sse_from_payloads,
)

KEY = "AIza-e2e-gemini-SECRET-key"
MODEL = "gemini-3-pro-preview"
PROJECT = "proj-e2e-123"
SIGNATURE = "c2lnbmF0dXJlLW9mLXR1cm4tMQ=="

ALLOWED_SCHEMA_KEYS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "propertyOrdering",
    "minProperties",
    "maxProperties",
}

READ_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File to read"},
        "limit": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}]},
        "mode": {"$ref": "#/$defs/mode"},
    },
    "required": ["path"],
    "additionalProperties": False,
    "$defs": {"mode": {"type": "string", "enum": ["text", "bytes"]}},
}
LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pattern": {"type": "string"}},
    "propertyNames": {"pattern": "^[a-z]+$"},
}


# --------------------------------------------------------------------------- the Gemini upstream


def check_schema(schema: Any, where: str) -> None:
    if isinstance(schema, dict):
        bad = set(schema) - ALLOWED_SCHEMA_KEYS
        assert not bad, f"{where}: Gemini refuses {sorted(bad)}"
        for name, sub in (schema.get("properties") or {}).items():
            check_schema(sub, f"{where}.{name}")
        if "items" in schema:
            check_schema(schema["items"], f"{where}[]")
        for i, sub in enumerate(schema.get("anyOf") or ()):
            check_schema(sub, f"{where}|{i}")


def check_contents(contents: list[dict[str, Any]]) -> None:
    """What Gemini refuses: roles other than user/model, two turns of one role in a row, a
    function call not answered (by name, in order) in the turn after it."""
    assert contents and contents[0]["role"] == "user", contents[:1]
    for before, after in itertools.pairwise(contents):
        assert before["role"] != after["role"], "roles must alternate"
    for i, turn in enumerate(contents):
        assert turn["role"] in ("user", "model")
        calls = [p["functionCall"]["name"] for p in turn["parts"] if "functionCall" in p]
        if not calls:
            continue
        answers = contents[i + 1]["parts"] if i + 1 < len(contents) else []
        names = [p["functionResponse"]["name"] for p in answers if "functionResponse" in p]
        assert names == calls, (calls, names)


def turn_of(contents: list[dict[str, Any]]) -> int:
    return sum(1 for c in contents if c["role"] == "model") + 1


def answer_parts(turn: int) -> list[dict[str, Any]]:
    if turn == 1:
        return [
            {"text": "Two files to read.", "thought": True},
            {
                "functionCall": {"name": "Read", "args": {"path": "a.txt"}},
                "thoughtSignature": SIGNATURE,
            },
            {"functionCall": {"name": "Read", "args": {"path": "b.txt"}}},
        ]
    if turn == 2:
        return [{"functionCall": {"name": "List", "args": {"pattern": "*.txt"}}}]
    return [{"text": "a says A, b says B; "}, {"text": "two text files."}]


def chunks_for(turn: int) -> list[dict[str, Any]]:
    parts = answer_parts(turn)
    out = []
    for i, part in enumerate(parts):
        chunk: dict[str, Any] = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}],
            "modelVersion": MODEL,
            "responseId": f"resp-{turn}",
        }
        if i == len(parts) - 1:
            chunk["candidates"][0]["finishReason"] = "STOP"
            chunk["usageMetadata"] = {
                "promptTokenCount": 100 * turn,
                "candidatesTokenCount": 10,
                "thoughtsTokenCount": 5,
                "totalTokenCount": 100 * turn + 15,
            }
        out.append(chunk)
    return out


def whole_for(turn: int) -> dict[str, Any]:
    chunks = chunks_for(turn)
    body = chunks[-1]
    body["candidates"][0]["content"]["parts"] = answer_parts(turn)
    return body


class Gemini:
    """The scripted upstream's ``script``: validates like Gemini, answers the loop's turn."""

    def __init__(self, code_assist: bool) -> None:
        self.code_assist = code_assist
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        path, _, query = rec.path.partition("?")
        if path.endswith(":countTokens"):
            return self.count(rec, path)
        if self.code_assist:
            m = re.fullmatch(r"/v1internal:(streamGenerateContent|generateContent)", path)
            assert m, rec.path
            assert rec.headers.get("authorization") == f"Bearer {KEY}"
            envelope = rec.json()
            assert envelope["model"] == MODEL and envelope["project"] == PROJECT
            assert isinstance(envelope.get("user_prompt_id"), str)
            body = envelope["request"]
        else:
            m = re.fullmatch(
                rf"/v1beta/models/{MODEL}:(streamGenerateContent|generateContent)", path
            )
            assert m, rec.path
            assert rec.headers.get("x-goog-api-key") == KEY
            body = rec.json()
        assert "authorization" not in rec.headers or self.code_assist
        assert "x-api-key" not in rec.headers
        stream = m.group(1) == "streamGenerateContent"
        assert (query == "alt=sse") == stream, rec.path
        self.bodies.append(body)
        check_contents(body["contents"])
        for tool in body.get("tools") or []:
            for decl in tool["functionDeclarations"]:
                check_schema(decl.get("parameters"), decl["name"])
        turn = turn_of(body["contents"])
        wrap: Callable[[dict[str, Any]], dict[str, Any]] = (
            (lambda c: {"response": c, "traceId": "trace-e2e"})
            if self.code_assist
            else (lambda c: c)
        )
        if not stream:
            return JSONReply(wrap(whole_for(turn)))
        sse = b"".join(
            b"data: " + json.dumps(wrap(c)).encode() + b"\r\n\r\n" for c in chunks_for(turn)
        )
        return SSEReply(sse, chunk_min=1, chunk_max=13, seed=turn)

    def count(self, rec: Recorded, path: str) -> JSONReply:
        body = rec.json()
        if self.code_assist:
            assert path == "/v1internal:countTokens", path
            assert rec.headers.get("authorization") == f"Bearer {KEY}"
            inner = body["request"]
        else:
            assert path == f"/v1beta/models/{MODEL}:countTokens", path
            assert rec.headers.get("x-goog-api-key") == KEY
            inner = body["generateContentRequest"]
        assert inner["model"] == f"models/{MODEL}"
        check_contents(inner["contents"])
        self.bodies.append(inner)
        return JSONReply({"totalTokens": 4242})


# --------------------------------------------------------------------------- proxies


def routes_file(tmp: Path, upstream: str) -> Path:
    project = f'project = "{PROJECT}"\n' if upstream == "gemini_code_assist" else ""
    path = tmp / f"routes-{upstream}.toml"
    path.write_text(
        f"""
[[routes]]
name = "cursor-gemini"
path = "*/chat/completions"
client = "openai_chat"
upstream = "{upstream}"
{project}
[[routes]]
name = "claude-gemini"
path = "*/v1/messages"
client = "anthropic"
upstream = "{upstream}"
{project}"""
    )
    return path


@pytest.fixture(params=["gemini", "gemini_code_assist"])
def gemini_proxy(
    request: pytest.FixtureRequest,
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    tmp_path: Path,
) -> Iterator[tuple[Proxy, Gemini]]:
    name = cast(str, request.param)
    script = Gemini(code_assist=name == "gemini_code_assist")
    upstream.script = script
    proxy = start_proxy(bridge_routes=str(routes_file(tmp_path, name)))
    yield proxy, script
    assert KEY not in proxy.log_text()
    assert "Traceback" not in proxy.log_text()


# --------------------------------------------------------------------------- the loops

CURSOR_TOOLS: list[Any] = [
    # Cursor's flat Anthropic-style tool and a standard nested one, side by side.
    {"name": "Read", "description": "Read a file", "input_schema": READ_SCHEMA},
    {
        "type": "function",
        "function": {"name": "List", "description": "List files", "parameters": LIST_SCHEMA},
    },
]


CLAUDE_TOOLS: list[Any] = [
    {"name": "Read", "description": "Read a file", "input_schema": READ_SCHEMA},
    {"name": "List", "description": "List files", "input_schema": LIST_SCHEMA},
]
RUN_TOOL = read_and_list({"a.txt": "A", "b.txt": "B"})


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_cursor_tool_loop_on_gemini(gemini_proxy: tuple[Proxy, Gemini], stream: bool) -> None:
    proxy, gemini = gemini_proxy
    loop = cursor_loop(
        proxy.base_url, stream, key=KEY, model=MODEL, tools=CURSOR_TOOLS, run_tool=RUN_TOOL
    )
    assert loop.calls == [["Read", "Read"], ["List"], []]
    assert loop.text == "a says A, b says B; two text files."
    assert len(gemini.bodies) == 3
    last = gemini.bodies[-1]
    assert last["systemInstruction"]["parts"][0]["text"] == "You are Cursor's agent."
    replies = [p["functionResponse"] for p in last["contents"][2]["parts"]]
    assert [r["name"] for r in replies] == ["Read", "Read"]
    assert "A" in json.dumps(replies[0]["response"]) and "B" in json.dumps(replies[1]["response"])


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_claude_code_tool_loop_on_gemini(gemini_proxy: tuple[Proxy, Gemini], stream: bool) -> None:
    proxy, gemini = gemini_proxy
    thinking = {"type": "enabled", "budget_tokens": 1024}
    loop = claude_code_loop(
        proxy.base_url,
        stream,
        key=KEY,
        model=MODEL,
        tools=CLAUDE_TOOLS,
        run_tool=RUN_TOOL,
        thinking=thinking,
    )
    assert loop.calls == [["Read", "Read"], ["List"], []]
    assert all(m.usage.input_tokens > 0 for m in loop.answers[:-1])  # the turns that call
    assert loop.text == "a says A, b says B; two text files."
    first = gemini.bodies[0]
    config = first["generationConfig"]["thinkingConfig"]
    assert config["includeThoughts"] is True and config["thinkingBudget"] == 1024
    assert first["systemInstruction"]["parts"][0]["text"] == "You are Claude Code."


# --------------------------------------------------------------------------- JSON-array framing


def test_a_json_array_stream_from_gemini_reaches_an_openai_client_as_sse(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """Without ``alt=sse`` Gemini streams one JSON array (``application/json``), split anywhere."""
    routes = tmp_path / "routes.toml"
    routes.write_text(
        f"""
[[routes]]
name = "array"
upstream = "gemini"
upstream_path = "/v1beta/models/{MODEL}:streamGenerateContent?alt=json"
"""
    )
    array = ("[" + ",\r\n".join(json.dumps(c) for c in chunks_for(1)) + "]").encode()
    upstream.enqueue(
        SSEReply(
            array, chunk_min=1, chunk_max=7, seed=3, headers={"content-type": "application/json"}
        )
    )
    proxy = start_proxy(bridge_routes=str(routes))
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "read"}],
            tools=CURSOR_TOOLS,
            stream=True,
        )
    )
    names = [
        tc.function.name
        for c in chunks
        if c.choices
        for tc in c.choices[0].delta.tool_calls or ()
        if tc.function and tc.function.name
    ]
    assert names == ["Read", "Read"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert "Traceback" not in proxy.log_text()


def test_a_gemini_client_without_alt_sse_gets_a_json_array(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """Gemini CLI's framing on the client side: no ``alt=sse`` → one JSON array back."""
    deltas = [
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}
            ],
        }
        for text in ("Hello ", "there")
    ]
    deltas.append(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    )
    upstream.enqueue(SSEReply(sse_from_payloads([*deltas, "[DONE]"]), seed=2))
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    status, headers, raw = raw_request(
        proxy.port,
        "POST",
        f"/v1beta/models/{MODEL}:streamGenerateContent",
        json.dumps(body).encode(),
        {"content-type": "application/json", "x-goog-api-key": KEY},
    )
    assert status == 200, raw[:300]
    assert headers["content-type"].startswith("application/json")
    items = json.loads(raw)
    assert isinstance(items, list) and items
    text = "".join(
        p.get("text", "")
        for item in items
        for c in item.get("candidates", ())
        for p in c.get("content", {}).get("parts", ())
    )
    assert text == "Hello there"
    (rec,) = upstream.requests
    assert rec.path == "/v1/chat/completions"
    assert rec.headers.get("authorization") == f"Bearer {KEY}"


def test_claude_codes_count_tokens_is_geminis_count(gemini_proxy: tuple[Proxy, Gemini]) -> None:
    proxy, gemini = gemini_proxy
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=15)
    counted = client.messages.count_tokens(
        model=MODEL,
        system="You are Claude Code.",
        messages=[{"role": "user", "content": "How long is this?"}],
    )
    assert counted.input_tokens == 4242
    (inner,) = gemini.bodies
    assert inner["systemInstruction"]["parts"][0]["text"] == "You are Claude Code."


def test_a_gemini_error_reaches_the_client_in_its_shape_with_its_status(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    error = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted",
            "status": "RESOURCE_EXHAUSTED",
        }
    }
    upstream.enqueue(JSONReply(error, status=429), JSONReply(error, status=429))
    proxy = start_proxy(bridge_routes=str(routes_file(tmp_path, "gemini")))
    claude = anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=15)
    with pytest.raises(anthropic.RateLimitError) as caught:
        claude.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert "Resource has been exhausted" in str(caught.value)
    cursor = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    with pytest.raises(openai.RateLimitError) as raised:
        cursor.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert "Resource has been exhausted" in str(raised.value)
    assert KEY not in proxy.log_text()
