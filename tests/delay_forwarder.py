"""A TCP forwarder on 127.0.0.1 that delays every answer of the server behind it: a slow Redis
(``delay`` seconds before each read of the server's is passed on), or a hung one (``freeze``:
the answers are held until ``thaw``; connections stay open, as with a server that stopped
answering). Runs its own asyncio loop on a thread; each client connection gets its own
connection to the server, requests passed on at once, answers in order.

Used by tests/e2e/test_store_off_loop.py (issue 43: the store off the event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

HOST = "127.0.0.1"


class DelayForwarder:
    """``127.0.0.1:port`` → ``127.0.0.1:target``, each answer held ``delay`` seconds."""

    def __init__(self, target: int, delay: float = 0.0) -> None:
        self.target = target
        self.delay = delay
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ---------------------------------------------------------------- the test's side

    def start(self) -> DelayForwarder:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def freeze(self) -> None:
        """Hold every answer from now on (a server that stopped answering)."""
        self._call(lambda: self._gate().clear())

    def thaw(self) -> None:
        self._call(lambda: self._gate().set())

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> DelayForwarder:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _call(self, fn: object) -> None:
        async def run() -> None:
            fn()  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # ---------------------------------------------------------------- the loop's side

    def _gate(self) -> asyncio.Event:
        if self._open is None:
            self._open = asyncio.Event()
            self._open.set()
        return self._open

    async def _start(self) -> None:
        self._gate()
        self._server = await asyncio.start_server(self._client, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        self._gate().set()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target)
        except OSError:
            writer.close()
            return
        tasks = [
            asyncio.create_task(self._pipe(reader, up_writer, answers=False)),
            asyncio.create_task(self._pipe(up_reader, writer, answers=True)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
            for w in (writer, up_writer):
                w.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, answers: bool
    ) -> None:
        while data := await reader.read(65536):
            if answers:
                await self._gate().wait()
                if self.delay > 0:
                    await asyncio.sleep(self.delay)
            writer.write(data)
            await writer.drain()
