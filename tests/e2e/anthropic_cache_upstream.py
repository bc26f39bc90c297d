"""A scripted Anthropic upstream that caches prompts as Anthropic does, for ``ScriptedUpstream``.

``CachingAnthropic`` is a ``ScriptedUpstream.script``: a POST to ``…/v1/messages`` is checked
and accounted by a ``tests.anthropic_cache.PromptCache`` (refused with Anthropic's 400, or
answered with the usage Anthropic would report: whole, or streamed when the body says
``"stream": true``); ``…/v1/messages/count_tokens`` gets the prompt's estimate; anything else
a 404 in Anthropic's shape. What it reported is kept per request in ``served``::

    upstream = ScriptedUpstream().start()
    cached = CachingAnthropic(answer=lambda body, n: content_blocks(None, [call]))
    upstream.script = cached
    ...  # drive a client through a Proxy
    cached.served[-1].usage.cache_read_input_tokens
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.anthropic_cache import (
    CacheRefused,
    CacheUsage,
    PromptCache,
    breakpoint_count,
    content_blocks,
    error_body,
    message_body,
    message_sse,
    read_prompt,
)
from tests.e2e.harness import JSONReply, Recorded, Reply, SSEReply

type Answerer = Callable[[dict[str, Any], int], list[dict[str, Any]]]
"""(request body, its 0-based number among accounted requests) → the answer's content blocks
(``tests.anthropic_cache.content_blocks``)."""


def say_ok(body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The default answer: one short text."""
    return content_blocks("ok")


@dataclass(frozen=True)
class Served:
    """One request to ``/v1/messages`` and what the upstream reported for it."""

    path: str
    stream: bool
    breakpoints: int
    """Breakpoints the body asked for (valid or not; the automatic one where it takes a slot)."""
    usage: CacheUsage | None
    """None: refused."""
    refusal: str | None = None
    """Anthropic's message, when refused."""


class CachingAnthropic:
    """``ScriptedUpstream.script`` for an Anthropic upstream with prompt caching."""

    def __init__(
        self,
        cache: PromptCache | None = None,
        answer: Answerer = say_ok,
        *,
        chunk_max: int = 17,
        seed: int = 0,
    ) -> None:
        self.cache = cache if cache is not None else PromptCache()
        self.answer = answer
        self.chunk_max = chunk_max
        self.seed = seed
        self.served: list[Served] = []
        self._lock = threading.Lock()

    def __call__(self, rec: Recorded) -> Reply:
        bare = rec.path.split("?", 1)[0]
        if rec.method != "POST" or not bare.endswith(("/v1/messages", "/v1/messages/count_tokens")):
            error = {"type": "not_found_error", "message": f"{rec.method} {bare}: not found"}
            return JSONReply({"type": "error", "error": error}, status=404)
        try:
            body = json.loads(rec.body)
        except ValueError:
            return JSONReply(error_body("The request body is not valid JSON."), status=400)
        if not isinstance(body, dict):
            return JSONReply(error_body("The request body must be a JSON object."), status=400)
        if bare.endswith("/count_tokens"):
            return JSONReply({"input_tokens": read_prompt(body).total_tokens})
        return self._messages(rec.path, body)

    def _messages(self, path: str, body: dict[str, Any]) -> Reply:
        stream = body.get("stream") is True
        count = breakpoint_count(body)
        with self._lock:
            try:
                usage = self.cache.account(body)
            except CacheRefused as e:
                self.served.append(Served(path, stream, count, None, e.message))
                return JSONReply(e.body, status=400)
            n = sum(1 for s in self.served if s.usage is not None)
            self.served.append(Served(path, stream, count, usage))
        content = self.answer(body, n)
        message_id = f"msg_cache_{n:04d}"
        model = str(body.get("model") or "")
        if stream:
            sse = message_sse(message_id, model, content, usage)
            return SSEReply(sse, chunk_max=self.chunk_max, seed=self.seed + n)
        return JSONReply(message_body(message_id, model, content, usage))

    def reset(self) -> None:
        """Forget what was served and every cache entry."""
        with self._lock:
            self.served.clear()
            self.cache.clear()
