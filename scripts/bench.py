"""cursor-bridge benchmarks: each figure is a ratio against a baseline measured in the same run.

    scripts/bench            # all benchmarks
    scripts/bench --quick    # fewer repetitions

1. stream: ~1 MB of recorded OpenAI tool-call SSE, fed in random 1-64 byte chunks,
   through the full ``StreamProcessor`` (decode → unified events → encode) vs the
   baseline of only splitting the same bytes into SSE lines.
2. text protocol: ~1 MB of SSE whose text carries thinking tags and ``invoke`` calls,
   through the processor with the text-protocol parser, vs the same line-split baseline.
3. request: a ~1 MB Cursor-style body (flat tools, tool_use / tool_result history)
   through decode → transforms → encode vs the baseline ``json.loads`` + ``json.dumps``.
4. proxy: a 2,000-event stream through a real mitmdump on 127.0.0.1, rewritten (chat
   path) vs passed through (another path), same upstream, same bytes.

Ratios (not seconds) are what to compare across machines: both sides of a ratio
ran on the same machine a moment apart. Times are the best of N repetitions.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import Notes
from addon.stream.processor import StreamProcessor
from addon.stream.sse import LineDecoder
from addon.stream.stages import TextToolStage
from addon.textproto.parser import TextProtocolParser
from addon.transforms.tools import check_tools, sanitize_tool_schemas

TRIGGER = "<<CALL_bench123>>"

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
RECORDING = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"


def best_of(n: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


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


def bench_proxy(reps: int, events: int = 2000) -> tuple[float, float, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
    from tests.e2e.harness import Proxy, ScriptedUpstream, SSEReply, raw_request

    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body = (
        b"".join(
            b"data: "
            + json.dumps(
                {**base, "choices": [{"index": 0, "delta": {"content": f"token{i} "}}]}
            ).encode()
            + b"\n\n"
            for i in range(events - 1)
        )
        + b"data: [DONE]\n\n"
    )
    request = json.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    headers = {"content-type": "application/json"}
    with ScriptedUpstream() as upstream, Proxy(upstream.port) as proxy:
        upstream.script = lambda rec: SSEReply(body, chunk_min=200, chunk_max=2000, seed=1)

        def through(path: str) -> Callable[[], None]:
            def run() -> None:
                status, _, got = raw_request(proxy.port, "POST", path, request, headers)
                assert status == 200 and got.endswith(b"data: [DONE]\n\n"), got[-200:]

            return run

        through("/v1/chat/completions")()  # warm up both paths
        through("/v1/other")()
        rewritten = best_of(reps, through("/v1/chat/completions"))
        passed = best_of(reps, through("/v1/other"))
    return passed, rewritten, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 repetitions instead of 7")
    parser.add_argument("--no-proxy", action="store_true", help="skip the mitmdump benchmark")
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    print(f"cursor-bridge bench (best of {reps}; ratio = bridge / baseline, lower is better)")
    base, ours, size = bench_stream(reps)
    print(
        f"stream   {size / 1e6:5.2f} MB SSE, random 1-64 B chunks: processor {ours * 1e3:8.1f} ms"
        f" vs line split {base * 1e3:7.1f} ms  → ratio {ours / base:5.1f}x"
        f"  ({size / ours / 1e6:5.1f} MB/s)"
    )
    base, ours, size = bench_stream(reps, protocol=True)
    print(
        f"textproto {size / 1e6:4.2f} MB SSE with invoke calls:  processor {ours * 1e3:8.1f} ms"
        f" vs line split {base * 1e3:7.1f} ms  → ratio {ours / base:5.1f}x"
        f"  ({size / ours / 1e6:5.1f} MB/s)"
    )
    base, ours, size = bench_request(reps)
    print(
        f"request  {size / 1e6:5.2f} MB Cursor body: decode+transforms+encode {ours * 1e3:8.1f} ms"
        f" vs json.loads+dumps {base * 1e3:7.1f} ms  → ratio {ours / base:5.1f}x"
    )
    if not args.no_proxy:
        base, ours, size = bench_proxy(reps)
        print(
            f"proxy    2000-event stream via mitmdump: rewritten {ours * 1e3:8.1f} ms"
            f" vs passed through {base * 1e3:7.1f} ms  → ratio {ours / base:5.1f}x"
        )


if __name__ == "__main__":
    main()
