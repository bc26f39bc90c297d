"""The bridge's web searches (docs/tools.md#web-search): one GET per search to the route's
backend (``addon.config.search_backend``; SearXNG's ``/search?q=…&format=json``), with the
backend's timeout, read by ``addon.plan.web_search.read_searxng``. One log line per search
naming the route, the backend's URL and the query; the backend's key (``key_env``) is sent
as ``Authorization: Bearer`` and never written anywhere. A search that fails tells the model
``unavailable``; it never fails the client's answer.

Each search counts against the flow's client key (``gate``: ``ClientLimits.search``; docs/deploy.md
#limits-per-client-key): one request in its ``rpm`` window and the backend's ``price`` in its
budget, reserved before the backend is asked; a key with none left gets the search refused —
the model is told why, and the client sees the search's error in its own dialect's shape — never
a free search (a search the client's hang-up stops is settled as run: the backend was asked).

The results are shown with the flow's keys redacted (``secrets``): a page that quotes one would
reach the client where no answer redaction sees it (Anthropic's base64 ``encrypted_content``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from addon.config.search_backend import SearchBackend
from addon.dialects.searches import Found, Searched
from addon.plan import short
from addon.plan.web_search import WebSearch, read_searxng, searxng_request
from addon.redact import NO_SECRETS, Secrets, redact, redact_exact
from addon.shell.notes import log

if TYPE_CHECKING:
    import httpx

    from addon.plan.limits import Ask


MAX_ANSWER = 16 * 1024 * 1024
"""Bytes of a backend's answer read at most: more is refused (the model told ``unavailable``),
not buffered."""


class SearchGate(Protocol):
    """A client key's limits, asked before each search (``ClientLimits``)."""

    async def search(self, label: str, client: str | None, price: float) -> Ask | str | None: ...
    async def searched(self, ask: Ask, ran: bool) -> None: ...


class Searches:
    """Runs searches on a route's backend; one httpx client (no environment proxy)."""

    name = "cursor_bridge_searches"

    def __init__(
        self, env: Mapping[str, str] | None = None, gate: SearchGate | None = None
    ) -> None:
        self._env = env if env is not None else os.environ
        self._client: httpx.AsyncClient | None = None
        self.gate = gate

    async def run(
        self,
        label: str,
        search: WebSearch,
        call_id: str,
        query: str,
        secrets: Secrets = NO_SECRETS,
    ) -> Searched:
        """One search for the model's call ``call_id``: its results (``secrets``, the flow's
        keys, redacted in them), else ``unavailable``; counted against the flow's client key
        first (``gate``), its error code when refused."""
        gate = self.gate
        held = await gate.search(label, search.client, search.backend.price) if gate else None
        if isinstance(held, str):  # logged by the gate, naming the client key and the limit
            return Searched(call_id, query, error=held)
        try:
            found = await self._run(label, search, call_id, query)
        except asyncio.CancelledError:  # the client hung up: the backend was asked all the same
            if gate is not None and held is not None:
                await gate.searched(held, True)
            raise
        if gate is not None and held is not None:
            await gate.searched(held, found.error is None)
        if not secrets or not found.results:
            return found
        return dataclasses.replace(found, results=tuple(_hidden(f, secrets) for f in found.results))

    async def _run(self, label: str, search: WebSearch, call_id: str, query: str) -> Searched:
        import httpx

        backend = search.backend
        url, params = searxng_request(backend, query)
        log.info("%s: web search on %s: %s", label, redact(backend.url), redact(short(query)))
        headers = self._headers(label, backend)
        if headers is None:
            return Searched(call_id, query, error="unavailable")
        key = headers.get("authorization", "").removeprefix("Bearer ")

        def clean(text: str) -> str:
            return redact(redact_exact(text, [key]) if key else text)

        try:
            async with asyncio.timeout(backend.timeout):  # the whole answer, not each read
                status, body = await self._get(url, params, headers, backend.timeout)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError, TimeoutError) as e:
            why = "no answer in the timeout" if isinstance(e, TimeoutError) else short(e)
            log.warning("%s: web search failed: %s", label, clean(why or type(e).__name__))
            return Searched(call_id, query, error="unavailable")
        if body is None:
            log.warning("%s: web search backend's answer is over %d bytes", label, MAX_ANSWER)
            return Searched(call_id, query, error="unavailable")
        found = read_searxng(status, body, search.ask, backend.max_results)
        if isinstance(found, str):
            log.warning("%s: web search backend refused: %s", label, clean(found))
            return Searched(call_id, query, error="unavailable")
        return Searched(call_id, query, found)

    async def _get(
        self, url: str, params: Any, headers: dict[str, str], timeout: float
    ) -> tuple[int, bytes | None]:
        """The backend's status and body; None: the body passed ``MAX_ANSWER`` (not read on)."""
        async with self._http().stream(
            "GET", url, params=params, headers=headers, timeout=timeout
        ) as got:
            body = bytearray()
            async for piece in got.aiter_bytes():
                body += piece
                if len(body) > MAX_ANSWER:
                    return got.status_code, None
            return got.status_code, bytes(body)

    def _headers(self, label: str, backend: SearchBackend) -> dict[str, str] | None:
        headers = {"accept": "application/json"}
        if backend.key_env is None:
            return headers
        key = self._env.get(backend.key_env)
        if not key:
            log.warning(
                "%s: web search: the environment variable %s (search.key_env) is not set",
                label,
                backend.key_env,
            )
            return None
        headers["authorization"] = f"Bearer {key}"
        return headers

    def _http(self) -> httpx.AsyncClient:
        import httpx

        if self._client is None:
            logging.getLogger("httpx").setLevel(logging.WARNING)
            self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False)
        return self._client

    async def done(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _hidden(found: Found, secrets: Secrets) -> Found:
    """A result with every form of the flow's keys replaced."""
    return dataclasses.replace(
        found, url=secrets(found.url), title=secrets(found.title), content=secrets(found.content)
    )
