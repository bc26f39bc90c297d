"""The retry addon: asks the upstream once more, when the rewrite says so.

It owns the HTTP client (httpx) and its option (``bridge_retry_timeout``). The
request is sent again exactly as the upstream got it (rewritten body, path and
headers, hop-by-hop headers removed), through the same upstream address. The
retried answer is delivered whole: a stream cannot be restarted mid-way.
"""

from __future__ import annotations

from typing import Any

import httpx
from mitmproxy import ctx, http

from addon.config import RETRY_OPTIONS, ConfigError, parse_retry_timeout
from addon.plan import short
from addon.shell.common import add_options, append_comment, log, options_error

_HOP_BY_HOP = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
     "proxy-connection", "proxy-authorization", "trailer"}
)  # fmt: skip


class Retry:
    name = "cursor_bridge_retry"

    def __init__(self) -> None:
        self._http: httpx.AsyncClient | None = None
        self._timeout = float(RETRY_OPTIONS[0].default)

    def load(self, loader: Any) -> None:
        add_options(loader, RETRY_OPTIONS)

    def configure(self, updated: set[str]) -> None:
        if "bridge_retry_timeout" in updated:
            try:
                self._timeout = parse_retry_timeout(ctx.options.bridge_retry_timeout)
            except ConfigError as e:
                raise options_error(str(e)) from e
            if self._http is not None:
                self._http.timeout = httpx.Timeout(self._timeout, connect=15.0)

    async def resend(self, flow: http.HTTPFlow, label: str) -> bytes | None:
        """The body of a 2xx answer to the same request, or None (logged, commented)."""
        req = flow.request
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in req.headers.fields
            if k.decode("latin-1").lower() not in _HOP_BY_HOP
        ]
        if self._http is None:
            # trust_env=False: the retry and its key never go to a proxy named by the
            # environment (HTTPS_PROXY where the bridge runs), only where the request went.
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(self._timeout, connect=15.0),
                verify=not _ssl_insecure(),
                trust_env=False,
            )
        try:
            answer = await self._http.request(
                req.method, req.url, headers=headers, content=req.content
            )
        except httpx.HTTPError as e:
            log.warning("%s: retry failed: %s", label, short(f"{type(e).__name__}: {e}"))
            append_comment(flow, f"retry failed ({type(e).__name__})")
            return None
        if not (200 <= answer.status_code < 300):
            log.warning("%s: retry got HTTP %d", label, answer.status_code)
            append_comment(flow, f"retry got HTTP {answer.status_code}")
            return None
        return answer.content

    async def done(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _ssl_insecure() -> bool:
    try:
        return bool(ctx.options.ssl_insecure)
    except (AttributeError, KeyError):
        return False
