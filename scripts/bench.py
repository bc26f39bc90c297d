"""cursor-bridge benchmarks: every figure is a ratio against a baseline measured in the same run.

    scripts/bench                  # everything (several minutes)
    scripts/bench --quick          # a reduced version of everything (under a minute, 2 cores)
    scripts/bench --no-proxy       # only section 1
    scripts/bench --json out.json  # also write the raw numbers

Section 1, in process (best of N repetitions; ratio = bridge / baseline):

1. stream: ~1 MB of recorded OpenAI tool-call SSE, fed in random 1-64 byte chunks,
   through the full ``StreamProcessor`` (decode → unified events → encode) vs the
   baseline of only splitting the same bytes into SSE lines.
2. text protocol: ~1 MB of SSE whose text carries thinking tags and ``invoke`` calls,
   through the processor with the text-protocol parser, vs the same line-split baseline.
3. request: a ~1 MB Cursor-style body (flat tools, tool_use / tool_result history)
   through decode → transforms → encode vs the baseline ``json.loads`` + ``json.dumps``.

Section 2, real processes on 127.0.0.1 (ratio = bridge column / bare mitmdump column):

- a scripted upstream (a child process, asyncio) that answers every POST like an
  OpenAI chat-completions server: ``x-bench-events: N`` chat.completion.chunk events,
  each with ``@s=SEQ,t=MONOTONIC_NS;`` (its send time) in its text, unpaced or at
  ``x-bench-pace`` events/s, each event its own HTTP chunk as OpenAI and Anthropic send
  them (``x-bench-per-chunk`` asks for bursts); a non-streamed answer carries ``@r=NS;``, when the whole
  request body had arrived. With an ``invoke`` trigger in the request it ends the
  stream with a call in that protocol.
- proxies, each a mitmdump in reverse mode before it: bare mitmdump (no addon,
  ``stream_large_bodies=1`` so that it streams), a second bare mitmdump measured like the
  others (its ratio to the first is what the machine's noise alone does to a ratio), then
  the bridge on each route: OpenAI →
  OpenAI (a Cursor-style chat request with tools), Anthropic → OpenAI (Claude Code's
  ``/v1/messages``), the ``invoke`` text protocol (a second bridge with
  ``bridge_tool_mode=invoke``), Gemini → OpenAI and Responses → OpenAI. One process per
  column, so CPU and memory are each route's own; every child runs with one hash seed.
- a load generator (this process, asyncio, raw HTTP/1.1) that finds the stamps in what
  reaches the client in each dialect: events/s, added delay (arrival - upstream send
  time, both ``CLOCK_MONOTONIC``), lost and reordered events. CPU of the proxy and the
  upstream comes from ``/proc/PID/stat``, the load generator's from ``getrusage``;
  memory is ``VmRSS``.

Measurements: unpaced streams (1, 10, 50 at once; the client reads each connection at
most every ``LAZY_READ_S``, so that its own system calls leave the CPU to the proxy; a
full run adds 10 streams of 16-event chunks), in short windows with bare mitmdump measured
between every two windows of the other columns, each ratio taken against the bare windows
either side of it (``unpaced_paired``: the machine's changes of speed cancel out); paced
streams (100 events/s each, K at once, starts spread over the first second; after the
grid of K, halfway between each column's last K within the bound and its first past it);
1 MB and 10 MB request bodies (time until the upstream has the whole body, p50); RSS
after many small non-streamed requests. ``--quick`` shortens all of it. Ratios (not seconds) are what to compare
across machines; on a 2-core machine the proxy, the upstream and the load generator
share the cores, which is why their CPU is shown next to each other.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import random
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
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

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
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


# =========================================================================== section 2
# Real processes on 127.0.0.1: a scripted upstream, mitmdumps, a load generator.

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
MAIN_SCRIPT = REPO / "addon" / "main.py"
MITMDUMP = Path(sys.executable).parent / "mitmdump"
CLK_TCK = os.sysconf("SC_CLK_TCK")
X = "\u00d7"
"""The multiplication sign of ratios."""
NONE = "\u2013"
"""An en dash: no figure."""

IO_TIMEOUT = 30.0
"""Any single socket read, write or connect in the upstream and the load generator."""
START_TIMEOUT = 90.0
"""A mitmdump (several start at once on two cores) until it answers."""
MAX_BODY = 64 * 1024 * 1024
"""The largest request body the upstream reads, or response body the load generator keeps."""

STAMP = re.compile(rb"@s=(\d{1,9}),t=(\d{1,20});|@n=(\d{1,9});")
"""An event's stamp (sequence number, send time), or the count of events at the end."""
RECEIVED = re.compile(rb"@r=(\d{1,20});")
TRIGGER_RE = re.compile(rb"<<CALL_[A-Za-z0-9_]{1,64}>>")
CARRY = 48
"""Bytes kept between reads so a stamp split across them is still found (a stamp is < 40)."""

_CHUNK_HEAD = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"bench-model","choices":[{"index":0,"delta":'
)
EVENT = _CHUNK_HEAD + b'{"content":"@s=%d,t=%d; "},"finish_reason":null}]}\n\n'
"""One upstream event; ``%d`` twice: sequence number and send time (monotonic ns)."""
FIRST_EVENT = _CHUNK_HEAD + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
TEXT_EVENT = _CHUNK_HEAD + b'{"content":%s},"finish_reason":null}]}\n\n'
LAST_EVENTS = (
    _CHUNK_HEAD + b'{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"bench-model","choices":[],"usage":{"prompt_tokens":50,'
    b'"completion_tokens":%d,"total_tokens":%d}}\n\n'
    b"data: [DONE]\n\n"
)
ANSWER = (
    b'{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,'
    b'"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant",'
    b'"content":"@r=%d; Done: the file reads as expected."},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":50,"completion_tokens":9,"total_tokens":59}}'
)
BATCH = 16
"""Unpaced streams: events per write (as many HTTP chunks as ``x-bench-per-chunk`` says)."""
MAX_EVENTS = 10_000_000
"""Per stream, whatever the request asks."""
UPSTREAM_LIFETIME = 4 * 3600.0
"""The scripted upstream exits after this many seconds whatever happens."""
SLOTS = 10
"""Paced streams tick every 1/(pace * SLOTS) s, each stream in one slot: sends are spread."""
LAZY_READ_S = 0.002
"""Unpaced streams: the client reads at most this often per connection (``Conn``)…"""
LAZY_RCVBUF = 4 << 20
"""…and asks the kernel to hold this much for it meanwhile (``SO_RCVBUF``; Linux caps it at
``net.core.rmem_max``)."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (nan for none)."""
    if not values:
        return float("nan")
    rank = max(1, min(len(values), -int(-q * len(values) // 1)))
    return values[rank - 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- upstream


@dataclass(eq=False)
class _PacedStream:
    writer: asyncio.StreamWriter
    events: int
    tail: bytes
    done: asyncio.Future[None]
    seq: int = 0


class ScriptedUpstream:
    """The OpenAI-shaped upstream; runs in its own process (``--serve-upstream``)."""

    MAX_PACE = 1000.0
    """Events/s per paced stream, at most."""

    def __init__(self) -> None:
        self.slots: list[set[_PacedStream]] = [set() for _ in range(SLOTS)]
        self.next_slot = 0
        self.pace = 0.0
        self.wake = asyncio.Event()

    async def serve(self) -> None:
        server = await asyncio.start_server(self.handle, HOST, 0, backlog=2048)
        port = server.sockets[0].getsockname()[1]
        print(f"listening {port}", flush=True)
        ticker = asyncio.create_task(self.tick())
        try:
            async with server:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(server.serve_forever(), UPSTREAM_LIFETIME)
        finally:
            ticker.cancel()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(1_000_000):  # requests on one keep-alive connection
                request = await self.read_request(reader)
                if request is None:
                    break
                headers, body, received = request
                if b'"stream":true' in body or b'"stream": true' in body:
                    await self.stream(writer, headers, body)
                else:
                    answer = ANSWER % received
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(answer), answer)
                    )
                    await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
                if headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def read_request(
        reader: asyncio.StreamReader,
    ) -> tuple[dict[str, str], bytes, int] | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 300)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            return None
        headers: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            size = int(headers["content-length"])
            if size > MAX_BODY:
                raise ValueError("request body too large")
            body = await asyncio.wait_for(reader.readexactly(size), IO_TIMEOUT)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            total = 0
            for _ in range(MAX_BODY):
                size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), IO_TIMEOUT)
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    for _ in range(100):  # trailers, then the empty line
                        if await asyncio.wait_for(reader.readuntil(b"\r\n"), IO_TIMEOUT) == b"\r\n":
                            break
                    break
                total += size
                if total > MAX_BODY:
                    raise ValueError("request body too large")
                parts.append(await asyncio.wait_for(reader.readexactly(size + 2), IO_TIMEOUT))
            body = b"".join(p[:-2] for p in parts)
        else:
            body = b""
        return headers, body, time.monotonic_ns()

    async def stream(
        self, writer: asyncio.StreamWriter, headers: dict[str, str], body: bytes
    ) -> None:
        """``x-bench-events`` events at ``x-bench-pace`` per second, or (pace 0) as fast as
        the proxy takes them, ``x-bench-per-chunk`` events per HTTP chunk (1, as OpenAI and
        Anthropic send them, unless a burst is asked for)."""
        events = max(0, min(MAX_EVENTS, int(headers.get("x-bench-events", "100"))))
        pace = float(headers.get("x-bench-pace", "0"))
        per_chunk = max(1, min(BATCH, int(headers.get("x-bench-per-chunk", "1"))))
        call = b""
        if b"<<CALL_" in body and (m := TRIGGER_RE.search(body)):
            # The model's side of the invoke protocol: a call after the text.
            text = f'\n{m.group().decode()}\n<invoke name="read_file">{{"path": "src/main.py"}}</invoke>'
            pieces = [text[i : i + 12] for i in range(0, len(text), 12)]
            call = b"".join(TEXT_EVENT % json.dumps(p).encode() for p in pieces)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        _write_chunk(writer, FIRST_EVENT)
        if pace > 0:
            self.pace = pace
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            st = _PacedStream(writer, events, _tail(events, call), done)
            slot = self.slots[self.next_slot % SLOTS]
            self.next_slot += 1
            slot.add(st)
            self.wake.set()
            try:
                await asyncio.wait_for(done, events / pace + 120)
            finally:
                slot.discard(st)
        else:
            seq = 0
            for _ in range(events):  # bounded: at least one event per turn
                if seq >= events:
                    break
                n = min(BATCH, events - seq)
                now = time.monotonic_ns()
                events_now = [EVENT % (s, now) for s in range(seq, seq + n)]
                chunks = [b"".join(events_now[i : i + per_chunk]) for i in range(0, n, per_chunk)]
                writer.write(b"".join([b"%x\r\n%s\r\n" % (len(c), c) for c in chunks]))
                seq += n
                await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
                await asyncio.sleep(0)  # let the other streams write too
            _write_chunk(writer, _tail(seq, call))
        writer.write(b"0\r\n\r\n")
        await asyncio.wait_for(writer.drain(), IO_TIMEOUT)

    async def tick(self) -> None:
        """Every paced stream gets one event per 1/pace s, in its slot of that period; idle
        (no paced stream) it sleeps until one comes."""
        loop = asyncio.get_running_loop()
        n = 0
        start = loop.time()
        for _ in range(int(UPSTREAM_LIFETIME * self.MAX_PACE * SLOTS)):
            if not any(self.slots):
                self.wake.clear()
                await self.wake.wait()
                start, n = loop.time(), 0
            period = 1.0 / min(self.MAX_PACE, self.pace or 100.0) / SLOTS
            next_at = start + (n + 1) * period
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -1.0:  # far behind (paused, or overloaded): start afresh
                start, n = loop.time(), 0
                continue
            slot = self.slots[n % SLOTS]
            n += 1
            for st in list(slot):
                if st.done.done() or st.writer.is_closing():
                    slot.discard(st)
                    if not st.done.done():
                        st.done.set_exception(ConnectionError("client went away"))
                    continue
                if st.seq < st.events:
                    _write_chunk(st.writer, EVENT % (st.seq, time.monotonic_ns()))
                    st.seq += 1
                if st.seq >= st.events:
                    _write_chunk(st.writer, st.tail)
                    slot.discard(st)
                    st.done.set_result(None)


def _tail(count: int, call: bytes) -> bytes:
    """The stream's end: how many events it had (``@n=COUNT;``), the call, finish, [DONE]."""
    return TEXT_EVENT % (b'"@n=%d;"' % count) + call + LAST_EVENTS % (count, count + 50)


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    if data:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def serve_upstream() -> None:
    asyncio.run(ScriptedUpstream().serve())


# --------------------------------------------------------------------------- load generator


class Delays:
    """Arrival minus send time of every event; those sent in ``window`` (monotonic ns) also
    in ``steady``: after every stream has started and before the first one ends."""

    def __init__(self, window: tuple[int, int] | None) -> None:
        self.all: list[int] = []
        self.steady: list[int] = []
        self.lo, self.hi = window or (0, 2**63)

    def add(self, sent: int, now: int) -> None:
        self.all.append(now - sent)
        if self.lo <= sent < self.hi:
            self.steady.append(now - sent)


class Stamps:
    """Finds the upstream's stamps in a client-dialect body as it arrives (split anywhere)."""

    def __init__(self, events: int, delays: Delays | None = None) -> None:
        self.seen = bytearray(events)
        self.unique = 0
        self.reordered = 0
        self.highest = -1
        self.total: int | None = None
        """How many events the upstream sent (its ``@n=`` at the end), once that arrived."""
        self.delays = delays
        self.carry = b""
        self.sample = bytearray()
        """The first 64 kB as received, for checks (the invoke call) and error messages."""

    @property
    def lost(self) -> int:
        return (self.total if self.total is not None else len(self.seen)) - self.unique

    def feed(self, data: bytes, now: int) -> None:
        if len(self.sample) < 65536:
            self.sample += data[: 65536 - len(self.sample)]
        if self.total is not None and self.unique >= self.total:
            # Every event the upstream sent has arrived: what follows can only repeat them
            # (a Responses stream ends with its whole text four times over), and reading
            # those stamps one by one made the load generator the bottleneck of that column.
            return
        buf = self.carry + data if self.carry else data
        end = 0
        seen, delays = self.seen, self.delays
        for m in STAMP.finditer(buf):
            end = m.end()
            seq_text = m.group(1)
            if seq_text is None:
                self.total = int(m.group(3))
                continue
            seq = int(seq_text)
            if seq >= len(seen):
                if seq >= MAX_EVENTS:
                    continue
                seen.extend(bytes(max(seq + 1 - len(seen), len(seen))))
            if seen[seq]:
                continue  # a repeat (Responses' final events carry the whole text again)
            seen[seq] = 1
            self.unique += 1
            if seq < self.highest:
                self.reordered += 1
            else:
                self.highest = seq
            if delays is not None:
                delays.add(int(m.group(2)), now)
        self.carry = buf[end:][-CARRY:]


class Collect:
    """Keeps a (small) body whole."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def feed(self, data: bytes, now: int) -> None:
        self.size += len(data)
        if self.size > MAX_BODY:
            raise ValueError("response body too large")
        self.parts.append(data)

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


type Sink = Stamps | Collect


class ResponseParser:
    """Incremental HTTP/1.1 response parser: content-length, chunked or until close."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.buf = bytearray()
        self.state = "head"
        self.remaining = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.body: list[bytes] = []
        """Body bytes of the read being parsed, for the sink."""

    def feed(self, data: bytes, now: int) -> bool:
        """True once the response is complete. The body bytes of one read go to the sink in
        one piece (a read holds many HTTP chunks: the sink scans them once), and the read is
        walked by offset, never copied per chunk."""
        try:
            return self._feed(bytes(self.buf) + data if self.buf else data)
        finally:
            if self.body:
                self.sink.feed(self.body[0] if len(self.body) == 1 else b"".join(self.body), now)
                self.body.clear()

    def _feed(self, buf: bytes) -> bool:
        pos, end = 0, len(buf)
        for _ in range(end + 2):  # each turn consumes bytes or stops
            state = self.state
            if state == "head":
                i = buf.find(b"\r\n\r\n", pos)
                if i < 0:
                    if end - pos > 65536:
                        raise ValueError("response head too long")
                    break
                self._head(buf[pos:i].decode("latin-1"))
                pos = i + 4
            elif state == "close":
                if pos < end:
                    self.body.append(buf[pos:])
                pos = end
                break
            elif state in ("length", "data"):
                if pos >= end:
                    break
                take = min(self.remaining, end - pos)
                self.body.append(buf[pos : pos + take])
                pos += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = "crlf" if state == "data" else "done"
            elif state == "crlf":
                if end - pos < 2:
                    break
                pos += 2
                self.state = "size"
            elif state == "size":
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    break
                size = int(buf[pos:i].split(b";")[0], 16)
                pos = i + 2
                self.state, self.remaining = ("trailer", 0) if size == 0 else ("data", size)
            elif state == "trailer":
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    break
                if i == pos:
                    self.state = "done"
                pos = i + 2
            if self.state == "done":
                break
        else:
            raise AssertionError("parser made no progress")
        self.buf = bytearray(buf[pos:]) if pos < end else bytearray()
        return self.state == "done"

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        version, _, rest = lines[0].partition(" ")
        self.status = int(rest.split(" ", 1)[0])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        conn = self.headers.get("connection", "").lower()
        self.keep_alive = conn != "close" and not (version == "HTTP/1.0" and conn != "keep-alive")
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.state = "size"
        elif "content-length" in self.headers:
            self.remaining = int(self.headers["content-length"])
            self.state = "length" if self.remaining else "done"
        elif self.status in (204, 304):
            self.state = "done"
        else:
            self.state, self.keep_alive = "close", False

    def closed(self) -> bool:
        """The connection ended: True if that completes the response."""
        if self.state == "close":
            self.state = "done"
        return self.state == "done"


class Conn(asyncio.Protocol):
    """One client connection; requests one at a time (keep-alive).

    ``lazy`` (unpaced runs): after each read the connection rests ``LAZY_READ_S`` before it
    reads again, so that a read takes what arrived meanwhile. An eager reader wakes for every
    chunk the proxy writes: on a 2-core machine its system calls would take the CPU the proxy
    is measured on. Paced runs read eagerly (the delay of each event is measured)."""

    def __init__(self, lazy: bool = False) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.waiter: asyncio.Future[ResponseParser] | None = None
        self.open = False
        self.lazy = lazy

    @classmethod
    async def connect(cls, port: int, lazy: bool = False) -> Conn:
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: cls(lazy), HOST, port), IO_TIMEOUT
        )
        return conn

    def _rest(self) -> None:
        transport = self.transport
        if transport is not None and self.open:
            transport.pause_reading()
            asyncio.get_running_loop().call_later(LAZY_READ_S, self._wake)

    def _wake(self) -> None:
        if self.transport is not None and self.open and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.open = True
        sock = transport.get_extra_info("socket")
        if self.lazy and sock is not None:
            # What the proxy writes while this connection rests must fit in the kernel's
            # buffer, or the proxy waits for the load generator (mitmproxy reads nothing more
            # while a client's writes are pending). With the default buffer the Responses
            # column's one-stream windows measured 0.79 times bare's events/s, 0.88 with this
            # one (its CPU per event 1.19 and 1.07 times bare's); OpenAI→OpenAI and
            # Anthropic→OpenAI moved by 0.02 at most.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, LAZY_RCVBUF)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        parser, waiter = self.parser, self.waiter
        if parser is None or waiter is None or waiter.done():
            return
        try:
            if parser.feed(data, now):
                waiter.set_result(parser)
            elif self.lazy:
                self._rest()
        except Exception as e:
            waiter.set_exception(e)

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        parser, waiter = self.parser, self.waiter
        if parser is None or waiter is None or waiter.done():
            return
        if parser.closed():
            waiter.set_result(parser)
        else:
            waiter.set_exception(ConnectionError(f"connection closed mid-response ({exc})"))

    async def request(self, raw: bytes, sink: Sink, timeout: float) -> ResponseParser:
        assert self.transport is not None
        if not self.open:
            raise ConnectionError("connection closed")
        self.parser = ResponseParser(sink)
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await asyncio.wait_for(self.waiter, timeout)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


# --------------------------------------------------------------------------- requests

LONG_DESCRIPTION = (
    "Reads a file from the local filesystem. The path must be absolute or relative to "
    "the workspace root. Lines are numbered from 1; use offset and limit for long files. "
)
TOOLS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "read_file",
        LONG_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to read."},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    (
        "run_terminal_cmd",
        "Runs a shell command in the workspace and returns its output. " * 3,
        {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "is_background": {"type": "boolean"},
                "explanation": {"type": "string"},
            },
            "required": ["command"],
        },
    ),
    (
        "edit_file",
        "Replaces old_string by new_string in a file; old_string must be unique. " * 3,
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
            },
            "required": ["path", "old_string", "new_string"],
        },
    ),
    (
        "grep_search",
        "Searches the workspace with ripgrep; returns matching lines. " * 3,
        {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "include_pattern": {"type": "string"},
                "case_sensitive": {"type": "boolean"},
            },
            "required": ["query"],
        },
    ),
]
SYSTEM = "You are a coding agent working in the user's repository. Be brief and exact."
SMALL_TEXT = "Please read src/main.py and tell me why the tests fail."


def body_for(dialect: str, stream: bool, text: str) -> tuple[str, dict[str, str], bytes]:
    """Path, extra headers and JSON body of a chat request with tools in ``dialect``."""
    headers: dict[str, str]
    doc: dict[str, Any]
    if dialect == "openai":
        path, headers = "/v1/chat/completions", {"authorization": "Bearer sk-bench"}
        doc = {
            "model": "gpt-4.1",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": text},
            ],
            "tools": [
                {"type": "function", "function": {"name": n, "description": d, "parameters": p}}
                for n, d, p in TOOLS
            ],
            "stream": stream,
        }
        if stream:
            doc["stream_options"] = {"include_usage": True}
    elif dialect == "anthropic":
        path = "/v1/messages"
        headers = {"x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01"}
        doc = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "system": [{"type": "text", "text": SYSTEM}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
            "tools": [{"name": n, "description": d, "input_schema": p} for n, d, p in TOOLS],
            "stream": stream,
        }
    elif dialect == "responses":
        path, headers = "/v1/responses", {"authorization": "Bearer sk-bench"}
        doc = {
            "model": "gpt-5",
            "instructions": SYSTEM,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
            "tools": [
                {"type": "function", "name": n, "description": d, "parameters": p}
                for n, d, p in TOOLS
            ],
            "stream": stream,
        }
    elif dialect == "gemini":
        action = "streamGenerateContent?alt=sse" if stream else "generateContent"
        path = f"/v1beta/models/gemini-2.5-pro:{action}"
        headers = {"x-goog-api-key": "bench-key"}
        doc = {
            "systemInstruction": {"parts": [{"text": SYSTEM}]},
            "contents": [{"role": "user", "parts": [{"text": text}]}],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": n, "description": d, "parameters": p} for n, d, p in TOOLS
                    ]
                }
            ],
        }
    else:
        raise ValueError(dialect)
    return path, headers, json.dumps(doc).encode()


def http_request(
    port: int,
    dialect: str,
    *,
    stream: bool,
    text: str = SMALL_TEXT,
    events: int = 0,
    pace: float = 0.0,
    per_chunk: int = 1,
) -> bytes:
    path, extra, body = body_for(dialect, stream, text)
    # Gemini streams are asked for by the path, and the upstream looks for "stream": true
    # in the body it gets, so the bridge's OpenAI body says it for every streamed route.
    lines = [
        f"POST {path} HTTP/1.1",
        f"host: {HOST}:{port}",
        "content-type: application/json",
        "accept: text/event-stream" if stream else "accept: application/json",
        "user-agent: cursor-bridge-bench/1",
        f"content-length: {len(body)}",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    if stream:
        lines += [f"x-bench-events: {events}", f"x-bench-pace: {pace:g}"]
        lines.append(f"x-bench-per-chunk: {per_chunk}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def long_text(size: int) -> str:
    line = "    return compute(value, other) + offset  # a line of the pasted file\n"
    return (line * (size // len(line) + 1))[:size]


# --------------------------------------------------------------------------- processes


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when this process dies (Linux prctl)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in {"http_proxy", "https_proxy", "all_proxy"}
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONUNBUFFERED"] = "1"
    # One hash seed for every child, so that identical processes at least lay out their dicts
    # and sets alike (the second bare mitmdump's column shows the noise that is left).
    env["PYTHONHASHSEED"] = "0"
    return env


class Proc:
    """A child process: CPU seconds and RSS from /proc, log in a file, always stopped."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env=_child_env(),
                preexec_fn=_die_with_parent,
            )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu(self) -> float:
        """User + system CPU seconds so far."""
        with open(f"/proc/{self.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def start_upstream(tmp: Path) -> tuple[Proc, int]:
    log = tmp / "upstream.log"
    proc = Proc(
        "upstream", [sys.executable, str(Path(__file__).resolve()), "--serve-upstream"], log
    )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if m := re.search(r"listening (\d+)", log.read_text(errors="replace")):
            return proc, int(m.group(1))
        if not proc.alive():
            break
        time.sleep(0.05)
    raise RuntimeError(f"the scripted upstream did not start:\n{proc.log_tail()}")


@dataclass(frozen=True)
class Config:
    key: str
    title: str
    dialect: str
    bridge: bool = True
    options: tuple[tuple[str, str], ...] = ()


CONFIGS: tuple[Config, ...] = (
    Config("bare", "bare mitmdump", "openai", bridge=False),
    Config("bare2", "bare mitmdump again (the noise)", "openai", bridge=False),
    Config("openai", "OpenAI→OpenAI (Cursor)", "openai"),
    Config("anthropic", "Anthropic→OpenAI (Claude Code)", "anthropic"),
    Config("invoke", "`invoke` text protocol", "openai", options=(("bridge_tool_mode", "invoke"),)),
    Config("gemini", "Gemini→OpenAI", "gemini"),
    Config("responses", "Responses→OpenAI", "responses"),
)


@dataclass
class Proxy:
    config: Config
    proc: Proc
    port: int


def mitmdump_argv(config: Config, upstream: int, port: int, confdir: Path) -> list[str]:
    argv = [str(MITMDUMP)]
    if config.bridge:
        argv += ["-s", str(MAIN_SCRIPT)]
    argv += ["--mode", f"reverse:http://{HOST}:{upstream}", "--listen-host", HOST]
    argv += ["--listen-port", str(port)]
    settings = {
        "connection_strategy": "lazy",
        "confdir": str(confdir),
        "flow_detail": "0",
        **({} if config.bridge else {"stream_large_bodies": "1"}),
        **dict(config.options),
    }
    for k, v in settings.items():
        argv += ["--set", f"{k}={v}"]
    return argv


def spawn_proxy(config: Config, upstream: int, tmp: Path) -> Proxy:
    confdir = tmp / f"confdir-{config.key}"
    confdir.mkdir(exist_ok=True)
    port = free_port()
    argv = mitmdump_argv(config, upstream, port, confdir)
    return Proxy(config, Proc(config.key, argv, tmp / f"mitmdump-{config.key}.log"), port)


def can_connect(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_proxies(configs: Sequence[Config], upstream: int, tmp: Path) -> list[Proxy]:
    """Start them all at once; wait until each listens (a port taken meanwhile: retried)."""
    proxies = [spawn_proxy(c, upstream, tmp) for c in configs]
    deadline = time.monotonic() + START_TIMEOUT
    pending = list(range(len(proxies)))
    retries = 0
    while pending:
        for i in list(pending):
            p = proxies[i]
            if not p.proc.alive():
                log = p.proc.log_tail()
                if "address already in use" in log.lower() and retries < 5:
                    retries += 1
                    proxies[i] = spawn_proxy(p.config, upstream, tmp)
                    continue
                raise RuntimeError(f"mitmdump ({p.config.title}) exited during startup:\n{log}")
            text = p.proc.log.read_text(errors="replace")
            if "listening at" in text and can_connect(p.port):
                if any(s in text for s in ("Error logged during startup", "Traceback")):
                    raise RuntimeError(f"mitmdump ({p.config.title}) logged an error:\n{text}")
                pending.remove(i)
        if pending and time.monotonic() > deadline:
            names = ", ".join(proxies[i].config.title for i in pending)
            raise RuntimeError(f"mitmdump not ready after {START_TIMEOUT:.0f} s: {names}")
        time.sleep(0.05)
    return proxies


@contextlib.contextmanager
def running_processes(
    configs: Sequence[Config],
) -> Iterator[tuple[Proc, int, list[Proxy]]]:
    """The upstream and one mitmdump per config; all of them stopped on the way out."""
    procs: list[Proc] = []
    with tempfile.TemporaryDirectory(prefix="cursor-bridge-bench-") as name:
        tmp = Path(name)
        try:
            upstream, port = start_upstream(tmp)
            procs.append(upstream)
            proxies = start_proxies(configs, port, tmp)
            procs += [p.proc for p in proxies]
            yield upstream, port, proxies
        finally:
            for proc in procs:
                with contextlib.suppress(Exception):
                    proc.stop()
            # spawn_proxy may have left a process behind if start_proxies raised
            for child in _children():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)


def _children() -> list[int]:
    """Our direct children still running (/proc/self/task/*/children)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(x) for x in (task / "children").read_text().split()]
    return out


# --------------------------------------------------------------------------- measuring


@dataclass
class CpuSnapshot:
    wall: float
    proxy: float
    upstream: float
    loadgen: float


def _loadgen_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def snapshot(proxy: Proxy, upstream: Proc) -> CpuSnapshot:
    return CpuSnapshot(time.monotonic(), proxy.proc.cpu(), upstream.cpu(), _loadgen_cpu())


def cpu_since(before: CpuSnapshot, proxy: Proxy, upstream: Proc) -> dict[str, float]:
    now = snapshot(proxy, upstream)
    return {
        "wall_s": now.wall - before.wall,
        "proxy_cpu_s": now.proxy - before.proxy,
        "upstream_cpu_s": now.upstream - before.upstream,
        "loadgen_cpu_s": now.loadgen - before.loadgen,
    }


async def one_stream(
    port: int,
    dialect: str,
    events: int,
    pace: float,
    delays: Delays | None,
    start_after: float = 0.0,
    per_chunk: int = 1,
) -> Stamps:
    """One streamed request: ``events`` events, at ``pace`` per second or (0) unpaced (read
    lazily, ``Conn``)."""
    if start_after:
        await asyncio.sleep(start_after)
    stamps = Stamps(events, delays)
    conn = await Conn.connect(port, lazy=not pace)
    try:
        raw = http_request(
            port, dialect, stream=True, events=events, pace=pace, per_chunk=per_chunk
        )
        timeout = (events / pace if pace else events / 2000) + 60
        resp = await conn.request(raw, stamps, timeout)
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {bytes(stamps.sample[:300])!r}")
        if stamps.total is None:
            raise RuntimeError("the stream ended without the upstream's last events")
    finally:
        conn.close()
    return stamps


async def warm_up(proxy: Proxy) -> dict[str, Any]:
    """One small request and one short stream; fail early with the log if they do not work."""
    dialect = proxy.config.dialect
    conn = await Conn.connect(proxy.port)
    try:
        sink = Collect()
        resp = await conn.request(http_request(proxy.port, dialect, stream=False), sink, 30)
        if resp.status != 200 or not RECEIVED.search(sink.body):
            raise RuntimeError(f"HTTP {resp.status}: {sink.body[:300]!r}")
    finally:
        conn.close()
    stamps = await one_stream(proxy.port, dialect, 20, 0.0, None)
    if stamps.unique != 20:
        raise RuntimeError(f"{stamps.unique} of 20 events arrived: {bytes(stamps.sample[:600])!r}")
    invoke_call = b"tool_calls" in stamps.sample and b"read_file" in stamps.sample
    if proxy.config.key == "invoke" and not invoke_call:
        raise RuntimeError(f"no tool call parsed from the invoke text: {bytes(stamps.sample)!r}")
    return {"invoke_call_parsed": invoke_call}


async def small_requests(
    proxy: Proxy, upstream: Proc, total: int, concurrency: int
) -> dict[str, Any]:
    """``total`` small non-streamed requests on ``concurrency`` keep-alive connections."""
    raw = http_request(proxy.port, proxy.config.dialect, stream=False)
    errors = 0
    rss_before = proxy.proc.rss_mb()

    async def worker(n: int) -> None:
        nonlocal errors
        conn: Conn | None = None
        try:
            for _ in range(n):
                if conn is None or not conn.open:
                    conn = await Conn.connect(proxy.port)
                sink = Collect()
                try:
                    resp = await conn.request(raw, sink, IO_TIMEOUT)
                except (ConnectionError, TimeoutError):
                    errors += 1
                    conn.close()
                    conn = None
                    continue
                if resp.status != 200:
                    errors += 1
                if not resp.keep_alive:
                    conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()

    before = snapshot(proxy, upstream)
    share = [
        total // concurrency + (1 if i < total % concurrency else 0) for i in range(concurrency)
    ]
    await asyncio.gather(*(worker(n) for n in share))
    cpu = cpu_since(before, proxy, upstream)
    await asyncio.sleep(0.2)  # let the proxy finish closing connections
    return {
        "requests": total,
        "errors": errors,
        "requests_per_s": total / cpu["wall_s"],
        "rss_before_mb": rss_before,
        "rss_after_mb": proxy.proc.rss_mb(),
        **cpu,
    }


async def unpaced_window(
    proxy: Proxy, upstream: Proc, streams: int, each: int, per_chunk: int = 1
) -> dict[str, Any]:
    """One window: ``streams`` at once, ``each`` events each, as fast as they go."""
    dialect = proxy.config.dialect
    before = snapshot(proxy, upstream)
    results = await asyncio.gather(
        *(
            one_stream(proxy.port, dialect, each, 0.0, None, per_chunk=per_chunk)
            for _ in range(streams)
        ),
        return_exceptions=True,
    )
    cpu = cpu_since(before, proxy, upstream)
    ok = [r for r in results if isinstance(r, Stamps)]
    failed = [r for r in results if not isinstance(r, Stamps)]
    received = sum(s.unique for s in ok)
    wall = cpu["wall_s"]
    return {
        "streams": streams,
        "events_per_stream": each,
        "events_received": received,
        "events_per_s": received / wall,
        "proxy_cpu_us_per_event": 1e6 * cpu["proxy_cpu_s"] / received if received else float("nan"),
        "proxy_cpu_pct": 100 * cpu["proxy_cpu_s"] / wall,
        "upstream_cpu_pct": 100 * cpu["upstream_cpu_s"] / wall,
        "loadgen_cpu_pct": 100 * cpu["loadgen_cpu_s"] / wall,
        "lost": sum(s.lost for s in ok) + each * len(failed),
        "reordered": sum(s.reordered for s in ok),
        "failed_streams": len(failed),
        "first_error": repr(failed[0]) if failed else None,
        "rss_after_mb": proxy.proc.rss_mb(),
        **cpu,
    }


async def unpaced(
    proxy: Proxy,
    upstream: Proc,
    streams: int,
    seconds: float,
    min_events: int,
    rate_hint: float | None = None,
    per_chunk: int = 1,
) -> dict[str, Any]:
    """``streams`` at once, each as fast as it goes, about ``seconds`` long and at least
    ``min_events`` events (so that starting the requests is a small part of it).

    mitmproxy reads from the upstream whatever the client takes (no backpressure), so an
    upstream that stops after some time would not bound the run: the number of events is
    set instead, from ``rate_hint`` (events/s) or from shorter runs' rates (a few, each up
    to 10 times longer than the one before, until one lasts at least half of ``seconds``);
    the last run is the result."""
    guess = int(rate_hint * seconds / streams) if rate_hint else 4000 // streams
    each = min(MAX_EVENTS, max(min_events, guess))
    for attempt in range(5):
        r = await unpaced_window(proxy, upstream, streams, each, per_chunk)
        if r["wall_s"] >= seconds / 2 or attempt == 4 or each >= MAX_EVENTS:
            break
        if r["failed_streams"]:
            break  # the figures say so; a longer run would not help
        grow = min(10.0, seconds / max(r["wall_s"], 1e-3))
        each = min(MAX_EVENTS, max(each + 1, int(each * grow)))
    return r


PAIRED = ("events_per_s", "proxy_cpu_us_per_event")
"""The unpaced figures whose ratio to bare is taken pair by pair (``unpaced_paired``)."""


async def unpaced_paired(
    plan: Plan,
    upstream: Proc,
    proxies: Sequence[Proxy],
    streams: int,
    per_chunk: int,
    say: Progress,
    kind: str,
) -> dict[str, dict[str, Any]]:
    """Unpaced throughput as ratios that the machine's changes of speed do not set.

    This VM runs at one speed for some seconds, then at another (bare mitmdump's best and
    worst 3 s rounds of one run differ by 1.8 times). So bare mitmdump (``proxies[0]``) is
    measured between every two windows of the other columns, each window about
    ``plan.unpaced_seconds`` long: bare, A, bare, B, bare, …, each round in another order.
    A window's ratio is its figure over the geometric mean of the bare windows either side
    of it (a change of speed that lasts longer than a window cancels out); a column's ratio
    is the median of its ``plan.unpaced_rounds`` pairs, its figures the median of its
    windows. What was lost or reordered in any window stays counted.

    Every column gets the same load: the events per stream that make bare mitmdump's window
    about ``plan.unpaced_seconds`` long (a slower column's window lasts longer). Starting a
    stream costs every proxy something, more so with many at once: with fewer events per
    stream, a slower column would pay that cost over fewer events and look slower still."""
    base, others = proxies[0], list(proxies[1:])
    seconds = plan.unpaced_seconds
    each: dict[str, int] = {}
    errors: dict[str, str] = {}
    for p in proxies:  # the events a window needs for ``seconds``: bare's, else each column's
        try:
            r = await unpaced(
                p, upstream, streams, seconds, plan.unpaced_min_events, None, per_chunk
            )
        except Exception as e:
            errors[p.config.key] = f"{type(e).__name__}: {e}"[:500]
            continue
        rate = r["events_per_s"] * seconds / streams
        each[p.config.key] = min(MAX_EVENTS, max(plan.unpaced_min_events, int(rate)))
        if p is base:
            each = dict.fromkeys((q.config.key for q in proxies), each[base.config.key])
            break
    windows: dict[str, list[dict[str, Any]]] = {p.config.key: [] for p in proxies}
    pairs: dict[str, dict[str, list[float]]] = {
        p.config.key: {k: [] for k in PAIRED} for p in others
    }

    async def window(p: Proxy) -> dict[str, Any] | None:
        key = p.config.key
        if key in errors:
            return None
        try:
            r = await unpaced_window(p, upstream, streams, each[key], per_chunk)
        except Exception as e:
            errors[key] = f"{type(e).__name__}: {e}"[:500]
            say(f"{kind:9} {key:9} {streams:3}: ERROR {errors[key][:200]}")
            return None
        windows[key].append(r)
        say(
            f"{kind:9} {key:9} {streams:3} {X} {r['events_per_stream']}: {r['events_per_s']:7.0f}"
            f" ev/s, {r['proxy_cpu_us_per_event']:5.1f} µs/event, lost {r['lost']}, failed"
            f" {r['failed_streams']}, CPU % proxy {r['proxy_cpu_pct']:.0f} upstream"
            f" {r['upstream_cpu_pct']:.0f} load gen {r['loadgen_cpu_pct']:.0f}"
            f" in {r['wall_s']:.2f} s"
        )
        return r

    before = await window(base)
    for turn in range(plan.unpaced_rounds * len(others)):
        if before is None:
            break  # bare mitmdump failed: nothing left to pair with
        p = others[(turn + turn // len(others)) % len(others)]  # each round in another order
        r = await window(p)
        after = await window(base)
        if r is not None and after is not None:
            for k in PAIRED:
                pairs[p.config.key][k].append(r[k] / (before[k] * after[k]) ** 0.5)
        before = after
    out: dict[str, dict[str, Any]] = {}
    for p in proxies:
        key = p.config.key
        if not windows[key]:
            out[key] = {"error": errors.get(key, "no window measured")}
            continue
        out[key] = summarize_windows(windows[key], pairs.get(key))
        if key in errors:
            out[key]["error_later"] = errors[key]
    return out


def summarize_windows(
    windows: Sequence[dict[str, Any]], pairs: dict[str, list[float]] | None
) -> dict[str, Any]:
    """A column's windows as one measurement: the median of each figure, the sum of what
    was lost, and (not bare) each paired figure's ratios, sorted, with their median."""

    out: dict[str, Any] = {
        k: statistics.median(w[k] for w in windows)
        for k in (
            *PAIRED,
            "proxy_cpu_pct",
            "upstream_cpu_pct",
            "loadgen_cpu_pct",
            "wall_s",
        )
    }
    out.update(
        streams=windows[0]["streams"],
        events_per_stream=windows[0]["events_per_stream"],
        windows=len(windows),
        events_per_s_each=[w["events_per_s"] for w in windows],
        lost=sum(w["lost"] for w in windows),
        reordered=sum(w["reordered"] for w in windows),
        failed_streams=sum(w["failed_streams"] for w in windows),
        first_error=next((w["first_error"] for w in windows if w["first_error"]), None),
        rss_after_mb=windows[-1]["rss_after_mb"],
    )
    for k, ratios in (pairs or {}).items():
        if ratios:
            out[f"{k}_ratios"] = sorted(ratios)
            out[f"{k}_ratio"] = statistics.median(ratios)
    return out


async def paced(
    proxy: Proxy, upstream: Proc, streams: int, events: int, pace: float, spread: float
) -> dict[str, Any]:
    """``streams`` streams of ``events`` at ``pace`` each, their starts spread over ``spread``
    seconds. Delays and CPU are taken in the steady state (all streams started, none ended
    yet; from 0.1 s after the last start); delays over the whole run are in the JSON too."""
    start = time.monotonic_ns()
    lo, hi = start + int((spread + 0.1) * 1e9), start + int(events / pace * 1e9)
    steady = hi - lo >= 200_000_000
    delays = Delays((lo, hi) if steady else None)
    rss: list[float] = []
    window: list[CpuSnapshot] = []
    stop = asyncio.Event()

    async def sample() -> None:
        for _ in range(1_000_000):
            due = lo if not window else hi
            if steady and len(window) < 2 and time.monotonic_ns() >= due:
                window.append(snapshot(proxy, upstream))
            rss.append(proxy.proc.rss_mb())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05 if steady and len(window) < 2 else 0.25)
            if stop.is_set():
                return

    sampler = asyncio.create_task(sample())
    before = snapshot(proxy, upstream)
    try:
        results = await asyncio.gather(
            *(
                one_stream(
                    proxy.port, proxy.config.dialect, events, pace, delays, i * spread / streams
                )
                for i in range(streams)
            ),
            return_exceptions=True,
        )
    finally:
        stop.set()
        await sampler
    cpu = cpu_since(before, proxy, upstream)
    if len(window) == 2:
        a, b = window
        span = b.wall - a.wall
        pct = [100 * (b.proxy - a.proxy) / span, 100 * (b.upstream - a.upstream) / span]
        pct.append(100 * (b.loadgen - a.loadgen) / span)
    else:  # no steady window: the whole run
        span = cpu["wall_s"]
        pct = [100 * cpu[k] / span for k in ("proxy_cpu_s", "upstream_cpu_s", "loadgen_cpu_s")]
    ok = [r for r in results if isinstance(r, Stamps)]
    failed = [r for r in results if not isinstance(r, Stamps)]
    chosen = delays.steady if steady else delays.all
    chosen.sort()
    delays.all.sort()
    return {
        "streams": streams,
        "events_per_stream": events,
        "pace": pace,
        "steady_window_s": span if len(window) == 2 else None,
        "delay_samples": len(chosen),
        "delay_p50_ms": percentile(chosen, 0.50) / 1e6,
        "delay_p99_ms": percentile(chosen, 0.99) / 1e6,
        "delay_max_ms": (chosen[-1] / 1e6) if chosen else float("nan"),
        "delay_all_p50_ms": percentile(delays.all, 0.50) / 1e6,
        "delay_all_p99_ms": percentile(delays.all, 0.99) / 1e6,
        "delay_all_max_ms": (delays.all[-1] / 1e6) if delays.all else float("nan"),
        "lost": sum(s.lost for s in ok) + events * len(failed),
        "reordered": sum(s.reordered for s in ok),
        "failed_streams": len(failed),
        "first_error": repr(failed[0]) if failed else None,
        "proxy_cpu_pct": pct[0],
        "upstream_cpu_pct": pct[1],
        "loadgen_cpu_pct": pct[2],
        "rss_max_mb": max(rss) if rss else float("nan"),
        **cpu,
    }


async def body_to_upstream(proxy: Proxy, raw: bytes) -> float:
    """Seconds from the first byte sent until the upstream had the whole body."""
    conn = await Conn.connect(proxy.port)
    try:
        sink = Collect()
        sent = time.monotonic_ns()
        resp = await conn.request(raw, sink, 120)
        m = RECEIVED.search(sink.body)
        if resp.status != 200 or not m:
            raise RuntimeError(f"HTTP {resp.status}: {sink.body[:300]!r}")
        return (int(m.group(1)) - sent) / 1e9
    finally:
        conn.close()


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Plan:
    requests: int
    """Small non-streamed requests per proxy, for its memory."""
    unpaced_streams: tuple[int, ...]
    unpaced_seconds: float
    """Each unpaced window lasts about this long (its event count is set from a pilot)."""
    unpaced_min_events: int
    """Events per unpaced stream, at least."""
    paced_streams: tuple[int, ...]
    paced_events: int
    pace: float
    spread: float
    """Paced stream starts are spread over this many seconds."""
    body_sizes: tuple[int, ...]
    body_reps: int
    paced_retry: bool = False
    """A paced K past the bound (the K before within it) is measured once more."""
    paced_halvings: int = 0
    """After the grid, the K halfway between each column's last K within the bound and its
    first past it is measured, this many times over."""
    unpaced_rounds: int = 1
    """Unpaced: windows of each column, each between two of bare mitmdump's
    (``unpaced_paired``)."""
    burst_streams: tuple[int, ...] = ()
    """Unpaced again, the upstream writing ``BATCH`` events per HTTP chunk (a bursty upstream,
    or a gateway that buffers): mitmproxy's own cost per chunk is then spread over more
    events than the bridge's."""
    concurrency: int = 8
    """Keep-alive connections for the small requests."""


FULL = Plan(
    requests=10_000,
    unpaced_streams=(1, 10, 50),
    unpaced_seconds=1.0,
    unpaced_min_events=400,
    paced_streams=(25, 50, 100, 150, 200, 250, 300, 400, 500),
    paced_events=600,
    pace=100.0,
    spread=1.0,
    body_sizes=(10**6, 10**7),
    body_reps=11,
    paced_retry=True,
    paced_halvings=3,
    unpaced_rounds=5,
    burst_streams=(10,),
)
QUICK = Plan(
    requests=250,
    unpaced_streams=(1, 10, 50),
    unpaced_seconds=0.3,
    unpaced_min_events=100,
    paced_streams=(25, 100),
    paced_events=80,
    pace=100.0,
    spread=0.2,
    body_sizes=(10**6, 10**7),
    body_reps=3,
)


class Progress:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f} s] {text}", flush=True)


async def guarded(
    out: dict[str, Any],
    name: str,
    measurement: Coroutine[Any, Any, dict[str, Any]],
    say: Progress,
    label: str,
) -> dict[str, Any] | None:
    """Run one measurement; an error is recorded (and shown) instead of ending the run."""
    try:
        result = await measurement
    except Exception as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        say(f"{label}: ERROR {type(e).__name__}: {str(e)[:200]}")
        return None
    out[name] = result
    return result


async def measure(
    plan: Plan, upstream: Proc, proxies: list[Proxy], say: Progress
) -> dict[str, dict[str, Any]]:
    res: dict[str, dict[str, Any]] = {p.config.key: {} for p in proxies}
    for p in proxies:
        res[p.config.key]["warm_up"] = await warm_up(p)
        res[p.config.key]["rss_idle_mb"] = p.proc.rss_mb()
    say("all proxies answer: " + ", ".join(f"{p.config.key} pid {p.proc.pid}" for p in proxies))

    for p in proxies:
        key = p.config.key
        job = small_requests(p, upstream, plan.requests, plan.concurrency)
        if r := await guarded(res[key], "memory", job, say, f"memory {key}"):
            say(
                f"memory    {key:9} {r['requests']} requests: {r['requests_per_s']:5.0f}/s,"
                f" RSS {r['rss_before_mb']:.0f} → {r['rss_after_mb']:.0f} MB, errors {r['errors']}"
            )

    async def paced_k(p: Proxy, k: int, tries: int) -> None:
        """K paced streams through ``p``; a try past the bound is followed by another, up to
        ``tries`` (the better of them counts: the capacity is not set by one slow moment)."""
        key = p.config.key
        for attempt in range(tries):
            job = paced(p, upstream, k, plan.paced_events, plan.pace, plan.spread)
            before = res[key].get(f"paced_{k}")
            r = await guarded(res[key], f"paced_{k}", job, say, f"paced {k} {key}")
            if r is None:
                if before is not None:  # the first try stands
                    res[key][f"paced_{k}"] = before
                return
            say(
                f"paced     {key:9} K={k:3}: delay p50 {r['delay_p50_ms']:6.2f} ms"
                f" p99 {r['delay_p99_ms']:7.2f} ms, lost {r['lost']}, reordered"
                f" {r['reordered']}, CPU % proxy {r['proxy_cpu_pct']:.0f} upstream"
                f" {r['upstream_cpu_pct']:.0f} load gen {r['loadgen_cpu_pct']:.0f},"
                f" RSS {r['rss_max_mb']:.0f} MB"
            )
            if before is not None:
                keep = before if before["delay_p99_ms"] < r["delay_p99_ms"] else r
                res[key][f"paced_{k}"] = {**keep, "attempts": attempt + 1}
            if _within(res[key][f"paced_{k}"]):
                return

    for i, k in enumerate(plan.paced_streams):
        for p in proxies:
            key = p.config.key
            # A K past the bound, where the K before was within it, is measured once more.
            past = [res[key].get(f"paced_{j}") for j in plan.paced_streams[max(0, i - 2) : i]]
            if len(past) == 2 and not any(_within(m) for m in past):
                # Two Ks in a row past the bound: more streams only take longer to say so.
                continue
            earlier = past[-1] if past else None
            await paced_k(p, k, 2 if plan.paced_retry and (i == 0 or _within(earlier)) else 1)

    # The grid's steps are a quarter of a column's capacity or more: the K halfway between the
    # last within the bound and the first past it, ``paced_halvings`` times, all columns taking
    # turns (a slow stretch of the machine falls on all of them alike).
    for _ in range(plan.paced_halvings):
        for p in proxies:
            cap = paced_capacity(res[p.config.key])
            if cap["k"] and cap["past"] and cap["past"] - cap["k"] >= 4:
                await paced_k(p, (cap["k"] + cap["past"]) // 2, 2 if plan.paced_retry else 1)

    for p in proxies:
        res[p.config.key]["paced_capacity"] = paced_capacity(res[p.config.key])

    runs = [("unpaced", n, 1) for n in plan.unpaced_streams]
    runs += [("burst", n, BATCH) for n in plan.burst_streams]
    for kind, n, per_chunk in runs:
        row = await unpaced_paired(plan, upstream, proxies, n, per_chunk, say, kind)
        for key, m in row.items():
            res[key][f"{kind}_{n}"] = m
        say(
            f"{kind:9} {n:3} streams, ratio to bare (median of pairs): "
            + ", ".join(
                f"{key} {m['events_per_s_ratio']:.2f}{X}"
                for key, m in row.items()
                if "events_per_s_ratio" in m
            )
        )

    for size in plan.body_sizes:
        raws = {
            p.config.key: http_request(p.port, p.config.dialect, stream=False, text=long_text(size))
            for p in proxies
        }
        times: dict[str, list[float]] = {p.config.key: [] for p in proxies}
        errors: dict[str, str] = {}
        # Configs interleaved: drift hits them all alike. The first ``BODY_WARMUP`` rounds are
        # not counted: a proxy's first bodies of a size take memory fresh from the system
        # (page faults), which a proxy that keeps serving such bodies has done already; the
        # first one's time is kept apart (``first_ms``).
        firsts: dict[str, float] = {}
        for rep in range(BODY_WARMUP + plan.body_reps):
            for p in proxies:
                if p.config.key in errors:
                    continue
                try:
                    took = await body_to_upstream(p, raws[p.config.key])
                except Exception as e:
                    errors[p.config.key] = f"{type(e).__name__}: {e}"[:500]
                    continue
                if rep == 0:
                    firsts[p.config.key] = took
                if rep >= BODY_WARMUP:
                    times[p.config.key].append(took)
        for p in proxies:
            key = p.config.key
            if key in errors:
                res[key][f"body_{size}"] = {"error": errors[key]}
                say(f"body      {key:9} {size / 1e6:g} MB: ERROR {errors[key][:200]}")
                continue
            ts = sorted(times[key])
            res[key][f"body_{size}"] = {
                "bytes": len(raws[key]),
                "p50_ms": percentile(ts, 0.5) * 1e3,
                "min_ms": ts[0] * 1e3,
                "first_ms": firsts[key] * 1e3,
                "all_ms": [t * 1e3 for t in times[key]],
            }
            say(
                f"body      {key:9} {size / 1e6:g} MB → upstream: p50 {percentile(ts, 0.5) * 1e3:7.1f} ms"
                f" (min {ts[0] * 1e3:.1f}; the first body {firsts[key] * 1e3:.1f})"
            )
        raws.clear()
    for p in proxies:
        res[p.config.key]["end"] = {"rss_mb": p.proc.rss_mb()}
    return res


BODY_WARMUP = 3
"""Rounds of request bodies before the counted ones (``measure``)."""
PACED_BOUND_MS = 50.0
"""The added delay (p99) a user starts to notice: paced capacity is the largest K under it."""


def paced_capacity(results: dict[str, Any]) -> dict[str, Any]:
    """The largest K of a column's paced runs (the grid's and the halvings') whose p99 added
    delay stayed within ``PACED_BOUND_MS`` with nothing lost, every smaller K within it too
    (the issue's "paced streams before p99 passes 50 ms"): ``k`` (0: not even the
    smallest), ``past`` (the first K past the bound, or None), ``text`` as the table shows
    it."""
    measured = sorted(
        int(name[6:]) for name in results if name.startswith("paced_") and name[6:].isdigit()
    )
    best, past = 0, None
    for k in measured:
        if not _within(results[f"paced_{k}"]):
            past = k
            break
        best = k
    if past is None:
        text = f"≥ {best}"
    elif best == 0:
        text = f"< {past}"
    else:
        text = f"{best} (not {past})"
    return {"k": best, "past": past, "text": text, "measured": measured}


def _within(m: object) -> bool:
    """A paced measurement within the bound: p99 added delay ≤ ``PACED_BOUND_MS``, nothing
    lost, no stream failed."""
    return (
        isinstance(m, dict)
        and "error" not in m
        and m.get("delay_p99_ms", float("inf")) <= PACED_BOUND_MS
        and not m.get("lost")
        and not m.get("failed_streams")
    )


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` on ``cpus`` only."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), cpus)


def pin_processes(upstream: Proc, proxies: Sequence[Proxy]) -> str | None:
    """The proxies on one CPU of their own, the upstream and the load generator on the
    others: what is measured never waits for the load behind it, and never moves between
    CPUs mid-run (left to the scheduler on this 2-core VM, a proxy that had been idle
    sometimes shared a CPU with the load generator for a whole window, its CPU per event
    up by a fifth). None where that cannot be done (one CPU, no affinity calls), else what
    was done."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if len(cpus) < 2:
        return None
    mine, rest = {cpus[-1]}, set(cpus[:-1])
    try:
        for p in proxies:
            pin(p.proc.pid, mine)
        pin(upstream.pid, rest)
        pin(os.getpid(), rest)
    except OSError:
        return None
    return f"proxies on CPU {cpus[-1]}, upstream and load generator on CPU {', '.join(map(str, sorted(rest)))}"


def run_proxies(
    plan: Plan, configs: Sequence[Config], say: Progress, pinned: bool = True
) -> tuple[dict[str, Any], str]:
    """Each column's measurements, and where the processes ran."""
    with running_processes(configs) as (upstream, port, proxies):
        say(f"upstream pid {upstream.pid} on {HOST}:{port}; {len(proxies)} mitmdumps listening")
        how = pin_processes(upstream, proxies) if pinned else None
        placed = how or "processes not pinned to CPUs" + (
            " (one CPU, or no way to set affinity here)" if pinned else " (--no-pin)"
        )
        say(placed)
        results = asyncio.run(measure(plan, upstream, proxies, say))
        for p in proxies:
            # What the proxy logged beyond its start: errors would put the figures in doubt.
            text = p.proc.log.read_text(errors="replace")
            noted = [
                line
                for line in text.splitlines()
                if re.search(r"traceback|error|warn|exception", line, re.IGNORECASE)
            ]
            results[p.config.key]["log"] = {"lines": len(text.splitlines()), "noted": noted[:20]}
            if noted:
                say(
                    f"{p.config.key}: {len(noted)} log line(s) with errors/warnings, e.g. {noted[0]}"
                )
    return results, placed


# --------------------------------------------------------------------------- the table


def _ratio(value: float, base: float) -> str:
    if not (base and base == base and value == value):  # zero or nan
        return ""
    return f" ({value / base:.2f}{X})"


def _num(value: float, digits: int = 0) -> str:
    if value != value:
        return NONE
    return f"{value:,.{digits}f}"


@dataclass
class Row:
    label: str
    cell: Callable[[dict[str, Any], dict[str, Any] | None], str]
    """(this column's measurement, bare's measurement or None for bare) → the cell."""
    measurement: str


def rows(plan: Plan, results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []

    def value(
        key: str, digits: int = 0, ratio: bool = True
    ) -> Callable[[dict[str, Any], dict[str, Any] | None], str]:
        def cell(m: dict[str, Any], base: dict[str, Any] | None) -> str:
            text = _num(float(m[key]), digits)
            if ratio and base is not None and key in base:
                text += _ratio(float(m[key]), float(base[key]))
            return text

        return cell

    def paired(key: str, digits: int = 0) -> Callable[[dict[str, Any], dict[str, Any] | None], str]:
        """The column's median, its ratio to bare the median of its pairs' (the lowest and
        highest pair after it); where no pair was measured, as ``value`` writes it."""
        plain = value(key, digits)

        def cell(m: dict[str, Any], base: dict[str, Any] | None) -> str:
            ratios = m.get(f"{key}_ratios")
            if base is None or not ratios:
                return plain(m, base)
            text = _num(float(m[key]), digits)
            mid = float(m[f"{key}_ratio"])
            if len(ratios) == 1:
                return text + f" ({mid:.2f}{X})"
            return text + f" ({mid:.2f}{X}, {ratios[0]:.2f}-{ratios[-1]:.2f})"

        return cell

    def pair(a: str, b: str, digits: int) -> Callable[[dict[str, Any], dict[str, Any] | None], str]:
        def cell(m: dict[str, Any], base: dict[str, Any] | None) -> str:
            text = f"{_num(float(m[a]), digits)} / {_num(float(m[b]), digits)}"
            if base is not None and a in base and b in base:
                ra, rb = _ratio(float(m[a]), float(base[a])), _ratio(float(m[b]), float(base[b]))
                if ra and rb:
                    text += f" ({ra[2:-2]}{X} / {rb[2:-2]}{X})"
            return text

        return cell

    def cpu_pct(m: dict[str, Any], base: dict[str, Any] | None) -> str:
        text = (
            f"{m['proxy_cpu_pct']:.0f} / {m['upstream_cpu_pct']:.0f} / {m['loadgen_cpu_pct']:.0f}"
        )
        if base is not None and base.get("proxy_cpu_pct"):
            text += f" ({m['proxy_cpu_pct'] / base['proxy_cpu_pct']:.2f}{X})"
        return text

    def lost(m: dict[str, Any], base: dict[str, Any] | None) -> str:
        text = f"{m['lost']} / {m['reordered']}"
        return text + (f", {m['failed_streams']} streams failed" if m["failed_streams"] else "")

    runs = [(f"unpaced_{n}", n, "") for n in plan.unpaced_streams]
    runs += [(f"burst_{n}", n, f", {BATCH} events per HTTP chunk") for n in plan.burst_streams]
    windows = (
        f"{plan.unpaced_rounds} windows of ~{plan.unpaced_seconds:g} s, each between two of"
        " bare's; median, and the lowest-highest pair"
        if plan.unpaced_rounds > 1
        else f"a window of ~{plan.unpaced_seconds:g} s between two of bare's"
    )
    for name, n, burst in runs:
        label = f"unpaced, {n} stream{'s' if n > 1 else ''} at once{burst} ({windows})"
        out.append(Row(f"{label}: events/s", paired("events_per_s"), name))
        out.append(Row(f"{label}: lost / reordered events", lost, name))
        out.append(
            Row(f"{label}: proxy CPU per event, µs", paired("proxy_cpu_us_per_event", 1), name)
        )
        out.append(Row(f"{label}: CPU % proxy / upstream / load gen", cpu_pct, name))
    for k in plan.paced_streams:
        name = f"paced_{k}"
        label = f"paced, K={k} {X} {plan.paced_events} events at {plan.pace:g}/s, steady state"
        out.append(
            Row(
                f"{label}: added delay p50 / p99, ms", pair("delay_p50_ms", "delay_p99_ms", 2), name
            )
        )
        out.append(Row(f"{label}: lost / reordered events", lost, name))
        out.append(Row(f"{label}: CPU % proxy / upstream / load gen", cpu_pct, name))
        out.append(Row(f"{label}: proxy RSS max, MB", value("rss_max_mb"), name))

    def capacity(m: dict[str, Any], base: dict[str, Any] | None) -> str:
        text = str(m["text"])
        if base is not None and base.get("k") and m.get("k"):
            text += f" ({m['k'] / base['k']:.2f}{X})"
        return text

    out.append(
        Row(
            f"paced: most streams (of K = {', '.join(map(str, plan.paced_streams))}"
            + (
                ", then halfway between the last within and the first past, "
                + {1: "once", 2: "twice"}.get(plan.paced_halvings, f"{plan.paced_halvings} times")
                if plan.paced_halvings
                else ""
            )
            + f") with p99 added delay ≤ {PACED_BOUND_MS:g} ms",
            capacity,
            "paced_capacity",
        )
    )
    for size in plan.body_sizes:
        out.append(
            Row(
                f"{size / 1e6:g} MB request body until the upstream has it, p50 of {plan.body_reps}"
                f" (after {BODY_WARMUP} not counted), ms",
                value("p50_ms", 1),
                f"body_{size}",
            )
        )
        out.append(
            Row(
                f"{size / 1e6:g} MB request body until the upstream has it, the first a proxy"
                " sees (memory fresh from the system), ms",
                value("first_ms", 1),
                f"body_{size}",
            )
        )
    out.append(
        Row(f"{plan.requests:,} small requests: requests/s", value("requests_per_s"), "memory")
    )
    out.append(Row("RSS after start + warm-up, MB", value("rss_before_mb"), "memory"))
    out.append(
        Row(f"RSS after {plan.requests:,} small requests, MB", value("rss_after_mb"), "memory")
    )
    out.append(
        Row("RSS at the end of the run (right after the 10 MB bodies), MB", value("rss_mb"), "end")
    )
    return out


def proxy_table(plan: Plan, configs: Sequence[Config], results: dict[str, Any]) -> str:
    head = "| measurement | " + " | ".join(c.title for c in configs) + " |"
    lines = [head, "|---" * (len(configs) + 1) + "|"]
    for row in rows(plan, results):
        cells = []
        base_m = results.get("bare", {}).get(row.measurement)
        if not isinstance(base_m, dict) or "error" in base_m:
            base_m = None
        for c in configs:
            m = results.get(c.key, {}).get(row.measurement)
            if not isinstance(m, dict):
                cells.append(NONE)
            elif "error" in m:
                cells.append("error")
            else:
                try:
                    cells.append(row.cell(m, None if c.key == "bare" else base_m))
                except (KeyError, TypeError, ValueError, ZeroDivisionError):
                    cells.append(NONE)
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def inprocess_table(results: dict[str, Any]) -> str:
    names = {
        "stream": "1 MB OpenAI tool-call SSE, random 1-64 B chunks: full processor vs SSE line split",
        "textproto": "1 MB SSE with thinking + `invoke` calls: processor with the text parser vs line split",
        "request": "1 MB Cursor body: decode + transforms + encode vs `json.loads` + `json.dumps`",
    }
    lines = ["| benchmark | bridge | baseline | ratio |", "|---|---|---|---|"]
    for key, label in names.items():
        r = results.get(key)
        if not r:
            continue
        speed = f" ({r['mb_per_s']:.1f} MB/s)" if "mb_per_s" in r else ""
        lines.append(
            f"| {label} | {r['bridge_ms']:.0f} ms | {r['baseline_ms']:.0f} ms |"
            f" {r['ratio']:.1f}{X}{speed} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def run_inprocess(reps: int, say: Progress) -> dict[str, Any]:
    out: dict[str, Any] = {"reps": reps}
    for key, protocol in (("stream", False), ("textproto", True)):
        base, ours, size = bench_stream(reps, protocol=protocol)
        out[key] = {
            "bytes": size,
            "bridge_ms": ours * 1e3,
            "baseline_ms": base * 1e3,
            "ratio": ours / base,
            "mb_per_s": size / ours / 1e6,
        }
        say(
            f"{key:9} {size / 1e6:4.2f} MB SSE: processor {ours * 1e3:7.1f} ms vs line split"
            f" {base * 1e3:6.1f} ms → {ours / base:4.1f}{X} ({size / ours / 1e6:.1f} MB/s)"
        )
    base, ours, size = bench_request(reps)
    out["request"] = {
        "bytes": size,
        "bridge_ms": ours * 1e3,
        "baseline_ms": base * 1e3,
        "ratio": ours / base,
    }
    say(
        f"request   {size / 1e6:4.2f} MB Cursor body: decode+transforms+encode {ours * 1e3:6.1f} ms"
        f" vs json.loads+dumps {base * 1e3:6.1f} ms → {ours / base:4.1f}{X}"
    )
    return out


def _raise_nofile() -> None:
    """Room for 400 streams: each is a socket here, two in mitmdump, one in the upstream."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 8192 if hard == resource.RLIM_INFINITY else min(8192, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a reduced run (under a minute)")
    parser.add_argument("--no-proxy", action="store_true", help="only the in-process section")
    parser.add_argument("--json", metavar="PATH", type=Path, help="write the raw numbers here")
    parser.add_argument(
        "--routes",
        metavar="KEYS",
        default=",".join(c.key for c in CONFIGS[1:]),
        help="columns besides bare mitmdump, which is always measured; comma-separated"
        " (default: all of " + ", ".join(c.key for c in CONFIGS[1:]) + ")",
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="leave the proxies, the upstream and the load generator to the scheduler (default:"
        " the proxies on the last CPU, the rest on the others)",
    )
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream()
        return

    # SIGTERM ends the run like Ctrl-C: the finally blocks stop every child.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wanted = {k.strip() for k in args.routes.split(",") if k.strip()}
    unknown = wanted - {c.key for c in CONFIGS}
    if unknown:
        parser.error(f"unknown route(s) {', '.join(sorted(unknown))}")
    configs = [c for c in CONFIGS if c.key == "bare" or c.key in wanted]
    plan = QUICK if args.quick else FULL
    reps = 3 if args.quick else 7
    say = Progress()
    report: dict[str, Any] = {
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": sys.platform,
            **host(),
        },
    }
    m = report["machine"]
    say(
        f"host: {m['cpu_model'] or 'CPU model unknown'}; a 1,000-step Python loop"
        f" {m['python_loop_us']:.1f} µs, a msgspec read and write of one stream event"
        f" {m['json_event_ns']:.0f} ns"
    )
    say(f"section 1: in process (best of {reps}; ratio = bridge / baseline, lower is better)")
    report["in_process"] = run_inprocess(reps, say)
    tables = ["### In process\n", inprocess_table(report["in_process"])]
    if not args.no_proxy:
        _raise_nofile()
        say("section 2: mitmdump on 127.0.0.1 (ratio = bridge column / bare mitmdump column)")
        report["plan"] = plan.__dict__
        report["configs"] = {c.key: c.title for c in configs}
        report["proxy"], placed = run_proxies(plan, configs, say, pinned=not args.no_pin)
        report["machine"]["placement"] = placed
        tables += [
            "\n### Through mitmdump on 127.0.0.1\n",
            f"Ratios in parentheses: bridge column / bare mitmdump. {os.cpu_count()} CPUs"
            f" ({placed}); CPU is shown for the proxy, the scripted upstream and the load"
            f" generator. Host: {m['cpu_model'] or 'CPU model unknown'}; a 1,000-step Python"
            f" loop takes {m['python_loop_us']:.1f} µs, a msgspec read and write of one"
            f" stream event {m['json_event_ns']:.0f} ns.\n",
            proxy_table(plan, configs, report["proxy"]),
        ]
    say("done")
    print()
    print("\n".join(tables))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nraw numbers: {args.json}")


if __name__ == "__main__":
    main()
