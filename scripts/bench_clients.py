#!/usr/bin/env python3
"""Which HTTP client the relay should read upstream streams with: each candidate's CPU per
event reading the bench's scripted upstream (``scripts/bench.py --serve-upstream``: an OpenAI
chat stream, ``Transfer-Encoding: chunked``, one SSE event per HTTP chunk, as OpenAI and
Anthropic send them), as the relay uses a client — the body's bytes handed to a writer (a
loopback connection to a discarding process) as they come.

Every figure is a ratio to a baseline of the same round: a raw socket read of the same bytes
(an asyncio ``Protocol`` writing each read as it came, nothing parsed). CPU is this process's
(``time.process_time``: the upstream and the discarding end are other processes), never wall
time: the machine is shared. Each candidate is measured ``--rounds`` times, in a rotated order;
the table gives the median ratio and its spread (min to max) over the rounds.

Candidates (a decoded body is written again as one HTTP chunk per piece the client yields,
as the relay must):
- ``wire passed``: ``addon/shell/outbound/http1.py`` as the relay uses it today (``passed_to``: the
  body's bytes, chunk framing included, read only for the chunk sizes);
- ``wire decoded``: the same client, its chunks decoded in its read callback and written as
  one chunk per read (what an upstream path that coalesces would do);
- ``aiohttp iter_any`` / ``aiohttp iter_chunks``: aiohttp's client (its C parser);
- ``httpx aiter_raw``: httpx over httpcore over h11 (anyio);
- ``httpcore``: httpcore's pool alone, its stream read;
- ``h11 large reads``: an asyncio ``Protocol`` feeding each 256 KiB read to ``h11``, the
  ``Data`` events of a read joined into one write.

Usage: ``.venv/bin/python scripts/bench_clients.py [--events 20000] [--rounds 5]
[--streams 1,10] [--json PATH]`` (needs ``aiohttp``: the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from addon.shell.outbound.http1 import Origin, Pool, ask  # noqa: E402

HOST = "127.0.0.1"
BODY = b'{"model":"bench-model","stream":true,"messages":[{"role":"user","content":"hi"}]}'
PATH = "/v1/chat/completions"
TIMEOUT = 120.0
X, DASH = "\u00d7", "\u2013"
WIRE = "wire decoded"
"""The second baseline: the relay's own client as the one upstream path reads a stream."""

DISCARD = r"""
import asyncio, sys
class D(asyncio.Protocol):
    def data_received(self, data): pass
async def main():
    s = await asyncio.get_running_loop().create_server(D, "127.0.0.1", 0)
    print("listening", s.sockets[0].getsockname()[1], flush=True)
    await asyncio.wait_for(s.serve_forever(), 3600)
asyncio.run(main())
"""


def frame(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


def request_bytes(port: int, events: int) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
        b"x-bench-events: %d\r\ncontent-length: %d\r\n\r\n%s"
        % (PATH.encode(), HOST.encode(), port, events, len(BODY), BODY)
    )


def headers(events: int) -> dict[str, str]:
    return {"content-type": "application/json", "x-bench-events": str(events)}


type Writer = tuple[asyncio.StreamReader, asyncio.StreamWriter]
type Read = Callable[[int, int, Writer], Awaitable[None]]
"""One stream: (upstream port, events, the writer's connection)."""


class Candidates:
    """Each candidate's client, made once (its connections kept alive across streams)."""

    def __init__(self) -> None:
        import aiohttp
        import httpcore
        import httpx

        self.pool = Pool()
        self.aiohttp = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )
        self.httpx = httpx.AsyncClient(timeout=TIMEOUT, trust_env=False)
        self.httpcore = httpcore.AsyncConnectionPool(max_connections=None)

    async def close(self) -> None:
        self.pool.close()
        await self.aiohttp.close()
        await self.httpx.aclose()
        await self.httpcore.aclose()

    def table(self) -> dict[str, Read]:
        return {
            "raw socket (baseline)": self.raw,
            "wire passed": self.wire_passed,
            "wire decoded": self.wire_decoded,
            "aiohttp iter_any": self.aiohttp_any,
            "aiohttp iter_chunks": self.aiohttp_chunks,
            "httpx aiter_raw": self.httpx_raw,
            "httpcore": self.httpcore_stream,
            "h11 large reads": self.h11_reads,
        }

    # ------------------------------------------------------------------ the candidates

    async def raw(self, port: int, events: int, out: Writer) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        w = out[1].transport

        class Raw(asyncio.Protocol):
            tail = b""

            def data_received(self, data: bytes) -> None:
                w.write(data)
                self.tail = (self.tail + data)[-5:]
                if self.tail == b"0\r\n\r\n" and not done.done():
                    done.set_result(None)

            def connection_lost(self, exc: Exception | None) -> None:
                if not done.done():
                    done.set_exception(ConnectionError("closed"))

        t, _ = await loop.create_connection(Raw, HOST, port)
        t.write(request_bytes(port, events))
        try:
            await done
        finally:
            t.close()

    async def wire_passed(self, port: int, events: int, out: Writer) -> None:
        origin = Origin("http", HOST, port, None, "", False)
        got = await ask(self.pool, origin, request_bytes(port, events), "POST", 5.0, [False])
        try:
            await got.passed_to(*out)
        finally:
            await got.aclose()

    async def wire_decoded(self, port: int, events: int, out: Writer) -> None:
        origin = Origin("http", HOST, port, None, "", False)
        got = await ask(self.pool, origin, request_bytes(port, events), "POST", 5.0, [False])
        w = out[1].transport
        try:
            got.wire._attach(lambda piece: w.write(frame(piece)), decode=True)
            assert got.wire.end is not None
            await got.wire.end
        finally:
            await got.aclose()

    async def aiohttp_any(self, port: int, events: int, out: Writer) -> None:
        url = f"http://{HOST}:{port}{PATH}"
        w = out[1]
        async with self.aiohttp.post(url, data=BODY, headers=headers(events)) as r:
            async for piece in r.content.iter_any():
                w.write(frame(piece))

    async def aiohttp_chunks(self, port: int, events: int, out: Writer) -> None:
        url = f"http://{HOST}:{port}{PATH}"
        w = out[1]
        async with self.aiohttp.post(url, data=BODY, headers=headers(events)) as r:
            async for piece, _ in r.content.iter_chunks():
                if piece:
                    w.write(frame(piece))

    async def httpx_raw(self, port: int, events: int, out: Writer) -> None:
        url = f"http://{HOST}:{port}{PATH}"
        w = out[1]
        async with self.httpx.stream("POST", url, content=BODY, headers=headers(events)) as r:
            async for piece in r.aiter_raw():
                w.write(frame(piece))

    async def httpcore_stream(self, port: int, events: int, out: Writer) -> None:
        url = f"http://{HOST}:{port}{PATH}"
        w = out[1]
        hs = [(k.encode(), v.encode()) for k, v in headers(events).items()]
        async with self.httpcore.stream("POST", url, headers=hs, content=BODY) as r:
            async for piece in r.aiter_stream():
                w.write(frame(piece))

    async def h11_reads(self, port: int, events: int, out: Writer) -> None:
        import h11

        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        w = out[1].transport
        conn = h11.Connection(h11.CLIENT)

        class Reads(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                conn.receive_data(data)
                pieces = []
                while True:
                    ev = conn.next_event()
                    if ev is h11.NEED_DATA:
                        break
                    if type(ev) is h11.Data:
                        pieces.append(ev.data)
                    elif type(ev) is h11.EndOfMessage:
                        if not done.done():
                            done.set_result(None)
                        break
                if pieces:
                    w.write(frame(b"".join(pieces)))

            def connection_lost(self, exc: Exception | None) -> None:
                if not done.done():
                    done.set_exception(ConnectionError("closed"))

        t, _ = await loop.create_connection(Reads, HOST, port)
        hs = [("host", f"{HOST}:{port}"), *headers(events).items()]
        hs.append(("content-length", str(len(BODY))))
        t.write(conn.send(h11.Request(method="POST", target=PATH, headers=hs)) or b"")
        t.write(conn.send(h11.Data(data=BODY)) or b"")
        t.write(conn.send(h11.EndOfMessage()) or b"")
        try:
            await done
        finally:
            t.close()


# ---------------------------------------------------------------------- the run


def start(argv: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    m = re.search(r"listening (\d+)", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"{argv[-1]} did not start: {line!r}")
    return proc, int(m.group(1))


async def measure(read: Read, port: int, sink: int, streams: int, events: int) -> float:
    """CPU seconds of this process for ``streams`` concurrent streams of ``events`` each."""
    outs = [await asyncio.open_connection(HOST, sink) for _ in range(streams)]
    try:
        await asyncio.wait_for(read(port, 10, outs[0]), TIMEOUT)  # warm: a connection kept
        await asyncio.sleep(0.05)
        before = time.process_time()
        await asyncio.wait_for(asyncio.gather(*(read(port, events, o) for o in outs)), TIMEOUT)
        spent = time.process_time() - before
    finally:
        for _, w in outs:
            w.close()
    return spent


async def run(args: argparse.Namespace) -> dict[str, object]:
    upstream, port = start([sys.executable, str(REPO / "scripts" / "bench.py"), "--serve-upstream"])
    discard, sink = start([sys.executable, "-c", DISCARD])
    cands = Candidates()
    table = cands.table()
    names = list(table)
    results: dict[str, dict[int, list[float]]] = {n: {s: [] for s in args.streams} for n in names}
    try:
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for streams in args.streams:
                per = max(1, args.events // streams)
                for name in order:
                    spent = await measure(table[name], port, sink, streams, per)
                    results[name][streams].append(spent / (per * streams) * 1e6)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        await cands.close()
        for p in (upstream, discard):
            p.terminate()
            p.wait(5)
    return {"results": results, "names": names}


def report(out: dict[str, object], args: argparse.Namespace) -> str:
    results = out["results"]
    assert isinstance(results, dict)
    base = "raw socket (baseline)"
    load = os.getloadavg()
    lines = [
        f"events: {args.events} per measurement (split over the streams); rounds: {args.rounds};"
        f" load average (uptime) at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "",
    ]
    for against in (base, WIRE):
        lines += [
            f"CPU per event, {X} {against} of the same round: median (min{DASH}max over the rounds)",
            "",
            "| client | "
            + " | ".join(f"{s} stream{'s' if s > 1 else ''}" for s in args.streams)
            + " |",
            "|---|" + "---|" * len(args.streams),
        ]
        for name, by in results.items():
            cells = []
            for s in args.streams:
                ratios = sorted(v / b for v, b in zip(by[s], results[against][s], strict=True))
                med = statistics.median(ratios)
                cells.append(f"{med:.2f}{X} ({ratios[0]:.2f}{DASH}{ratios[-1]:.2f})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    raw_us = [statistics.median(results[base][s]) for s in args.streams]
    lines += ["", "raw socket µs per event (median): " + ", ".join(f"{u:.2f}" for u in raw_us)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20000, help="events per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", default="1,10", help="concurrent streams, comma-separated")
    parser.add_argument("--json", type=Path, help="write the raw figures (µs per event) here")
    args = parser.parse_args()
    args.streams = [int(s) for s in args.streams.split(",") if s.strip()]
    out = asyncio.run(run(args))
    print(report(out, args))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
