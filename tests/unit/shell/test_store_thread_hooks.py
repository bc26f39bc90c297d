"""The hooks on a store in a file (issue 43 point 1): every SQLite call of a flow — the restore's
read, the capture's write, the ledger's count — is made on the store thread, none on the
thread that runs mitmproxy's hooks; and what the flow left is in the file after ``done``."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mitmproxy import http
from mitmproxy.test import taddons, tutils

from addon.stores.ledger import open_ledger
from addon.stores.reasoning import ReasoningStore
from tests.unit.shell.test_proxy_hooks import CURSOR_BODY, Bridge, bridge, chat_answer, chat_flow

__all__ = ["bridge"]  # the fixture, used by name


def watch(target: object, names: tuple[str, ...], seen: list[str]) -> None:
    """Record the thread of every call of ``target``'s ``names``."""
    for name in names:
        method: Callable[..., Any] | None = getattr(target, name, None)
        if method is None:  # a backend of before ``put_many``
            continue

        def called(*args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            seen.append(threading.current_thread().name)
            return _method(*args, **kwargs)

        setattr(target, name, called)


def test_no_sqlite_call_is_made_on_the_hooks_thread(
    bridge: tuple[Bridge, taddons.context], tmp_path: Path
) -> None:
    addon, tctx = bridge
    path = tmp_path / "store.db"
    tctx.configure(addon.bundle.store, bridge_store=str(path))
    store = addon.store
    assert isinstance(store, ReasoningStore)
    seen: list[str] = []
    backend = store._backend  # the SQLite connection's every call
    watch(backend, ("get", "get_many", "put", "put_many", "delete", "evict", "secret"), seen)
    counters = addon.bundle.usage.ledger._counters  # type: ignore[attr-defined]
    watch(counters, ("add", "add_many"), seen)

    flow = chat_flow({**CURSOR_BODY, "stream": False})
    call = {"id": "call_9", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
    answer = chat_answer(
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Read it.",
            "tool_calls": [call],
        },
        "tool_calls",
    )
    answer["usage"] = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}

    async def one_flow() -> None:
        prefetch = getattr(addon.bundle, "prefetch", None)  # the request hook before the others
        waits = prefetch.request(flow) if prefetch is not None else None
        if waits is not None:
            await waits
        addon.request(flow)
        flow.response = tutils.tresp(
            headers=http.Headers(((b"content-type", b"application/json"),)),
            content=json.dumps(answer).encode(),
        )
        addon.responseheaders(flow)
        await addon.response(flow)

    asyncio.run(one_flow())
    addon.bundle.store.done()  # mitmproxy's end: what waits is written
    addon.bundle.usage.done()
    hooks = threading.current_thread().name
    assert seen, "the flow made no store call at all"
    assert hooks not in seen, seen
    assert set(seen) == {"cursor-bridge-store"}
    # What the flow left is in the file: the answer's reasoning, its usage.
    reopened = ReasoningStore(str(path))
    assert len(reopened) >= 1
    rows = open_ledger(str(path)).rows()
    assert sum(t.requests for t in rows.values()) == 1
