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
# One call and its result already in the conversation: a small model then calls reliably.
ASK_1 = "What is the weather in Paris?"
RESULT_1 = "18 C, sunny"
SAID_1 = "It is 18 C and sunny in Paris."
ASK_2 = "And in Berlin?"
LONG = "word " * 5000  # past --ctx-size 4096

CHAT_TOOL_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": RESULT_1},
    {"role": "assistant", "content": SAID_1},
    {"role": "user", "content": ASK_2},
]
ANTHROPIC_TOOL_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": RESULT_1}],
    },
    {"role": "assistant", "content": SAID_1},
    {"role": "user", "content": ASK_2},
]
RESPONSES_TOOL_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": RESULT_1},
    # llama-server answers 400 "Cannot determine type of 'item'" without "type" here.
    {"type": "message", "role": "assistant", "content": SAID_1},
    {"role": "user", "content": ASK_2},
]
# Turn 2 of a loop: the model's own call answered, it should now write text.
RESPONSES_AFTER_CALL: list[dict[str, Any]] = [
    {"role": "user", "content": ASK_1},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": RESULT_1},
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
    untyped = [
        item | {"type": None} if item.get("role") == "assistant" else item
        for item in RESPONSES_TOOL_TURNS
    ]
    out.append(
        (
            "responses_error_untyped_assistant.json",
            "/v1/responses",
            _responses(
                False, input=[{k: v for k, v in i.items() if v is not None} for i in untyped]
            ),
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
