"""Section 1, in process: the stream, the text protocol and a request body through the
bridge's own code, each against a baseline of the same bytes (best of N; ratio = bridge /
baseline), and how fast the host runs two fixed pieces of work.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import Notes
from addon.stream.processor import StreamProcessor
from addon.stream.sse import LineDecoder
from addon.stream.stages import TextToolStage
from addon.textproto.parser import TextProtocolParser
from addon.transforms.tools import check_tools, sanitize_tool_schemas

TRIGGER = "<<CALL_bench123>>"

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "real"
RECORDING = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"


def best_of(n: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _reference_loop() -> int:
    total = 0
    for i in range(1000):
        total += i * i
    return total


_REFERENCE_EVENT = (
    b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"bench-model","choices":[{"index":0,"delta":{"content":"@s=5,t=1; "},'
    b'"finish_reason":null}]}'
)


def host(reps: int = 7) -> dict[str, Any]:
    """What the host is and how fast it runs two fixed pieces of work (best of ``reps``): a
    pure-Python loop of 1,000 steps and a msgspec read and write of one stream event. Runs
    on two hosts of the same VM type differ in speed, and not alike for every kind of work;
    these say which kind of host a table comes from."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    decode, encode = msgspec.json.Decoder().decode, msgspec.json.Encoder().encode

    def json_event() -> None:
        for _ in range(1000):
            encode(decode(_REFERENCE_EVENT))

    return {
        "cpu_model": model,
        "python_loop_us": best_of(reps, _reference_loop) * 1e6,
        "json_event_ns": best_of(reps, json_event) * 1e6,
    }


def stream_input(target: int = 1_000_000) -> bytes:
    path = FIXTURES / RECORDING
    if path.exists():
        one = path.read_bytes()
        one = one[: one.rindex(b"data: [DONE]")]
    else:  # a fresh checkout without ../shared: a synthetic stream of the same shape
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        one = b"".join(
            b"data: "
            + json.dumps(
                {**chunk, "choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
            ).encode()
            + b"\n\n"
            for i in range(50)
        )
    return one * (target // len(one) + 1) + b"data: [DONE]\n\n"


def chunks_of(data: bytes, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 64)
        out.append(data[i : i + n])
        i += n
    return out


def protocol_input(target: int = 1_000_000) -> bytes:
    """OpenAI SSE whose content deltas spell thinking, text and invoke calls."""
    text = (
        "<thinking>Look at the files first, then decide.</thinking>I will read two files.\n"
        f'{TRIGGER}\n<invoke name="Read">{{"path": "src/main.py", "limit": 200}}</invoke>\n'
        f'{TRIGGER}\n<invoke name="Shell">{{"command": "grep -rn TODO src | head"}}</invoke>\n'
    )
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    rng = random.Random(3)
    out: list[bytes] = []
    size = 0
    while size < target:
        pos = 0
        while pos < len(text):
            n = rng.randint(1, 12)
            delta = {"content": text[pos : pos + n]}
            line = (
                b"data: "
                + json.dumps({**base, "choices": [{"index": 0, "delta": delta}]}).encode()
                + b"\n\n"
            )
            out.append(line)
            size += len(line)
            pos += n
    return b"".join(out) + b"data: [DONE]\n\n"


def bench_stream(reps: int, protocol: bool = False) -> tuple[float, float, int]:
    data = protocol_input() if protocol else stream_input()
    pieces = chunks_of(data)

    def baseline() -> None:
        lines = LineDecoder()
        for piece in pieces:
            lines.feed(piece)
        lines.finish()

    def bridge() -> None:
        stages = []
        if protocol:
            parser = TextProtocolParser("invoke", trigger=TRIGGER, tools=("Read", "Shell"))
            stages.append(TextToolStage(parser))
        p = StreamProcessor(OPENAI.stream_decoder(), OPENAI.stream_encoder(), stages=stages)
        for piece in pieces:
            p.feed(piece)
        p.finish()
        assert p.error is None, p.error

    return best_of(reps, baseline), best_of(reps, bridge), len(data)


def request_body(target: int = 1_000_000) -> dict[str, Any]:
    tools = [
        {
            "name": f"Tool{i}",
            "description": "Does something useful. " * 20,
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "path": {"type": "string", "title": "Path"},
                    "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                },
                "required": ["path"],
            },
        }
        for i in range(40)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Cursor's agent. " * 200}
    ]
    i = 0
    while len(json.dumps(messages)) < target:
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look. " * 10},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i}",
                        "name": "Tool1",
                        "input": {"path": f"src/{i}.py"},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "x = 1\n" * 300}
                ],
            }
        )
        i += 1
    return {"model": "claude-sonnet-4.6", "stream": True, "messages": messages, "tools": tools}


def bench_request(reps: int) -> tuple[float, float, int]:
    raw = json.dumps(request_body()).encode()

    def baseline() -> None:
        json.dumps(json.loads(raw)).encode()

    def bridge() -> None:
        notes: Notes = Counter()
        req = OPENAI.decode_request(json.loads(raw), notes)
        check_tools(req)
        req = sanitize_tool_schemas(req, "strict", notes)
        json.dumps(OPENAI.encode_request(req, notes), ensure_ascii=False).encode()

    return best_of(reps, baseline), best_of(reps, bridge), len(raw)
