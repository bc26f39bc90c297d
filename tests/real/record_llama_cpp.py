"""Record what llama.cpp's ``llama-server`` really answers (issue 28).

``python -m tests.real.record_llama_cpp [OUT]`` starts the server (``tests.real.llama_cpp``),
sends each request of ``EXCHANGES`` and writes the answer body, bytes as sent, to
``OUT/<name>.json`` or ``.sse`` (default ``tests/fixtures/llama_cpp``), and the request
bodies, statuses and headers to ``OUT/index.json``. Requests are short (small
``max_tokens``, ``temperature`` 0) so the files stay small and the answers repeatable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.real.llama_cpp import REPO, LlamaServer, locate

OUT = REPO / "tests" / "fixtures" / "llama_cpp"
MODEL = "smollm2"
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "unused"}
# Dropped from the index: they change on every run and say nothing about the dialect.
VOLATILE_HEADERS = {"date"}

WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}
WEATHER_DESC = "Current weather in a city"
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": WEATHER_DESC,
            "parameters": WEATHER_PARAMS,
        },
    }
]
ANTHROPIC_TOOLS = [
    {"name": "get_weather", "description": WEATHER_DESC, "input_schema": WEATHER_PARAMS}
]
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": WEATHER_DESC,
        "parameters": WEATHER_PARAMS,
    }
]
SAYS = "Say hello in five words."
# Two calls and their results already in the conversation, no text answer between them: the
# small model then calls again (with a text answer between, it answers in text).
ASK_1 = "What is the weather in Paris?"
ASK_2 = "And in Rome?"
ASK_3 = "And in Berlin?"
RESULT = "18 C, sunny"
LONG = "word " * 5000  # past --ctx-size 4096


def _chat_call(n: int, city: str) -> list[dict[str, Any]]:
    call = {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{n}", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": f"call_{n}", "content": RESULT},
    ]


def _anthropic_call(n: int, city: str, then: str) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "get_weather", "input": {"city": city}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": RESULT}
    return [
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result, {"type": "text", "text": then}]},
    ]


def _responses_call(n: int, city: str) -> list[dict[str, Any]]:
    args = f'{{"city": "{city}"}}'
    return [
        {"type": "function_call", "call_id": f"call_{n}", "name": "get_weather", "arguments": args},
        {"type": "function_call_output", "call_id": f"call_{n}", "output": RESULT},
    ]


CHAT_TOOL_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    *_chat_call(1, "Paris"),
    {"role": "user", "content": ASK_2},
    *_chat_call(2, "Rome"),
    {"role": "user", "content": ASK_3},
]
ANTHROPIC_TOOL_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    *_anthropic_call(1, "Paris", ASK_2),
    *_anthropic_call(2, "Rome", ASK_3),
]
RESPONSES_TOOL_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    *_responses_call(1, "Paris"),
    {"role": "user", "content": ASK_2},
    *_responses_call(2, "Rome"),
    {"role": "user", "content": ASK_3},
]
# Turn 2 of a loop: the model's own call answered, it should now write text.
RESPONSES_AFTER_CALL: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    *_responses_call(1, "Paris"),
]
# llama-server refuses an assistant message item without "type" (the spec allows it).
RESPONSES_UNTYPED_ASSISTANT: list[dict[str, Any]] = [
    *RESPONSES_AFTER_CALL,
    {"role": "assistant", "content": "It is 18 C and sunny in Paris."},
    {"role": "user", "content": ASK_3},
]


def _chat(stream: bool, **body: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": MODEL, "temperature": 0, "max_tokens": 24, "stream": stream}
    if stream:
        base["stream_options"] = {"include_usage": True}
    return base | body


def _anthropic(stream: bool, **body: Any) -> dict[str, Any]:
    return {"model": MODEL, "temperature": 0, "max_tokens": 24, "stream": stream} | body


def _responses(stream: bool, **body: Any) -> dict[str, Any]:
    return {"model": MODEL, "temperature": 0, "max_output_tokens": 24, "stream": stream} | body


def _exchanges() -> list[tuple[str, str, dict[str, Any]]]:
    """(file stem, path, body) for every recorded exchange."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for stream, ext in ((False, "json"), (True, "sse")):
        suffix = "_stream" if stream else ""
        out += [
            (
                f"chat_text{suffix}.{ext}",
                "/v1/chat/completions",
                _chat(stream, messages=[{"role": "user", "content": SAYS}]),
            ),
            (
                f"chat_tools{suffix}.{ext}",
                "/v1/chat/completions",
                _chat(
                    stream,
                    max_tokens=64,
                    messages=CHAT_TOOL_TURNS,
                    tools=CHAT_TOOLS,
                    tool_choice="required",
                ),
            ),
            (
                f"messages_text{suffix}.{ext}",
                "/v1/messages",
                _anthropic(
                    stream, system="Be brief.", messages=[{"role": "user", "content": SAYS}]
                ),
            ),
            (
                f"messages_tools{suffix}.{ext}",
                "/v1/messages",
                _anthropic(
                    stream,
                    max_tokens=64,
                    messages=ANTHROPIC_TOOL_TURNS,
                    tools=ANTHROPIC_TOOLS,
                    tool_choice={"type": "any"},
                ),
            ),
            (
                f"responses_text{suffix}.{ext}",
                "/v1/responses",
                _responses(stream, instructions="Be brief.", input=SAYS),
            ),
            (
                f"responses_tools{suffix}.{ext}",
                "/v1/responses",
                _responses(
                    stream,
                    max_output_tokens=64,
                    input=RESPONSES_TOOL_TURNS,
                    tools=RESPONSES_TOOLS,
                    tool_choice="required",
                ),
            ),
            (
                f"responses_after_call{suffix}.{ext}",
                "/v1/responses",
                _responses(stream, input=RESPONSES_AFTER_CALL, tools=RESPONSES_TOOLS),
            ),
            (
                f"chat_error_context{suffix}.{ext}",
                "/v1/chat/completions",
                _chat(stream, messages=[{"role": "user", "content": LONG}]),
            ),
            (
                f"messages_error_context{suffix}.{ext}",
                "/v1/messages",
                _anthropic(stream, messages=[{"role": "user", "content": LONG}]),
            ),
            (
                f"responses_error_context{suffix}.{ext}",
                "/v1/responses",
                _responses(stream, input=LONG),
            ),
        ]
    out.append(
        (
            "messages_count_tokens.json",
            "/v1/messages/count_tokens",
            {"model": MODEL, "messages": ANTHROPIC_TOOL_TURNS, "tools": ANTHROPIC_TOOLS},
        )
    )
    out.append(
        (
            "messages_error_no_max_tokens.json",
            "/v1/messages",
            {"model": MODEL, "messages": [{"role": "user", "content": SAYS}]},
        )
    )
    out.append(
        (
            "responses_error_untyped_assistant.json",
            "/v1/responses",
            _responses(False, input=RESPONSES_UNTYPED_ASSISTANT),
        )
    )
    out.append(
        (
            "chat_error_bad_json.json",
            "/v1/chat/completions",
            {"model": MODEL, "messages": "not a list"},
        )
    )
    return out


def _short(body: dict[str, Any]) -> dict[str, Any]:
    """The request as the index shows it: the long filler text named, not repeated."""
    text = json.dumps(body)
    return json.loads(text.replace(LONG, "<'word ' * 5000>")) if LONG in text else body


def record_from(
    base_url: str, out: Path, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Send every exchange to ``base_url``; write the bodies and return the index entries."""
    out.mkdir(parents=True, exist_ok=True)
    index: list[dict[str, Any]] = []
    for name, path, body in _exchanges():
        # One connection each: llama-server drops a kept-alive connection after a stream.
        with httpx.Client(timeout=120.0) as client:
            sent = dict(ANTHROPIC_HEADERS) if path.startswith("/v1/messages") else {}
            sent |= headers or {}
            with client.stream("POST", base_url + path, json=body, headers=sent) as r:
                raw = b"".join(r.iter_raw())
            (out / name).write_bytes(raw)
            index.append(
                {
                    "file": name,
                    "method": "POST",
                    "path": path,
                    "request": _short(body),
                    "status": r.status_code,
                    "headers": [
                        [k, v] for k, v in r.headers.multi_items() if k not in VOLATILE_HEADERS
                    ],
                }
            )
            print(f"{r.status_code} {path} -> {name} ({len(raw)} bytes)", file=sys.stderr)
    return index


def record(out: Path = OUT) -> None:
    """Start llama-server, record every exchange, write ``out/index.json``."""
    with LlamaServer.start(locate()) as server:
        index = record_from(server.base_url, out)
        argv = [Path(server.argv[0]).name, *server.argv[1:]]
    meta = {"version": server.paths.version, "argv": argv, "exchanges": index}
    (out / "index.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
