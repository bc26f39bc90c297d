"""An OpenAI chat-completions upstream on 127.0.0.1 for timing tests (issue 43): a streamed
request whose last user message says ``paced N P`` gets N ``chat.completion.chunk`` events,
one every P seconds, each carrying its send time (``t=<time.monotonic_ns()>;`` in its content:
the clock is the machine's, the client reads the same one); any other request gets a whole
answer as OpenAI writes one with a tool call, ``reasoning_content`` (what the bridge's store
captures) and ``usage`` (what its ledger counts). HTTP/1.1 with keep-alive; its own asyncio
loop on a thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from itertools import count
from types import TracebackType
from typing import Any

HOST = "127.0.0.1"
_ids = count(1)


def chunk(delta: dict[str, Any], finish: str | None = None, model: str = "gpt-4o") -> bytes:
    body = {
        "id": "chatcmpl-paced",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def whole_answer(model: str) -> dict[str, Any]:
    n = next(_ids)
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1767225600,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": f"I should read file {n} first.",
                    "tool_calls": [
                        {
                            "id": f"call_{n:06d}",
                            "type": "function",
                            "function": {"name": "Read", "arguments": '{"path": "a"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57},
    }


class PacedUpstream:
    def __init__(self) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> PacedUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> PacedUpstream:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                body = await _body(reader, head)
                request = json.loads(body) if body else {}
                await self._answer(writer, request)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, request: dict[str, Any]) -> None:
        model = str(request.get("model") or "gpt-4o")
        last = request.get("messages", [{}])[-1].get("content") or ""
        if not (request.get("stream") and str(last).startswith("paced ")):
            data = json.dumps(whole_answer(model)).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
            return
        _, events, pace = str(last).split()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        _write_chunk(writer, chunk({"role": "assistant", "content": ""}, model=model))
        start = time.monotonic()
        for i in range(int(events)):
            # Paced on the clock, not by sleeps added up: a late wake-up is not carried on.
            await asyncio.sleep(max(0.0, start + (i + 1) * float(pace) - time.monotonic()))
            _write_chunk(writer, chunk({"content": f"t={time.monotonic_ns()};"}, model=model))
            await writer.drain()
        _write_chunk(writer, chunk({}, "stop", model=model) + b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


async def _body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            out += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")  # the empty line after the last chunk
        return out
    return await reader.readexactly(int(headers.get("content-length", "0")))
