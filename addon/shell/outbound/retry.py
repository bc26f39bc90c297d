"""The retry addon: the requests the bridge sends itself, the way mitmproxy sends a flow's.

``resend`` / ``send`` (the request again, or with another body), ``attempt`` (another route's,
read whole), ``open`` (a chain's attempt for the relay, left open once its headers came); one
httpx client per way out, through ``--mode upstream:…`` when the flow came that way, never the
environment's proxies, so a retry and its key go only where the request went."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mitmproxy import ctx, http
from mitmproxy.addons.upstream_auth import parse_upstream_auth
from mitmproxy.proxy import mode_specs

if TYPE_CHECKING:
    import httpx

from addon.config.options import RETRY_OPTIONS, ConfigError, parse_retry_timeout
from addon.plan import short
from addon.plan.fallback import NoAnswer, Reason
from addon.shell.notes import append_comment, log
from addon.shell.option_checks import OptionChecks, add_options
from addon.shell.outbound.http1 import Opened, Origin, Pool, ProxyRefused, UpstreamClosed, ask

_HOP_BY_HOP = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
     "proxy-connection", "proxy-authorization", "trailer"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RetryAnswer:
    """An upstream's answer to a retry: status, content type and the whole (decoded) body."""

    status: int
    content_type: str
    content: bytes
    retry_after: str | None = None
    """The ``Retry-After`` header, when the answer had one."""


class Retry(OptionChecks):
    name = "cursor_bridge_retry"

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str] | None, httpx.AsyncClient] = {}
        """One client per way out: ``None`` direct, else (upstream proxy URL, its auth)."""
        self._timeout = float(RETRY_OPTIONS[0].default)
        self._pool = Pool()
        """The relay's attempts' kept-alive connections (``open``)."""

    def load(self, loader: Any) -> None:
        add_options(loader, RETRY_OPTIONS)

    def configure(self, updated: set[str]) -> None:
        if "bridge_retry_timeout" in updated:
            try:
                self._timeout = parse_retry_timeout(ctx.options.bridge_retry_timeout)
            except ConfigError as e:
                self.refuse(str(e))
                return
            if self._clients:
                import httpx

                for client in self._clients.values():
                    client.timeout = httpx.Timeout(self._timeout, connect=15.0)

    async def resend(self, flow: http.HTTPFlow, label: str) -> bytes | None:
        """The body of a 2xx answer to the same request, or None (logged, commented)."""
        answer = await self.send(flow, label)
        if answer is None:
            return None
        if not (200 <= answer.status < 300):
            log.warning("%s: retry got HTTP %d", label, answer.status)
            append_comment(flow, f"retry got HTTP {answer.status}")
            return None
        return answer.content

    async def send(
        self, flow: http.HTTPFlow, label: str, body: bytes | None = None
    ) -> RetryAnswer | None:
        """The upstream's answer (any status, read whole and decoded) to the flow's request
        sent again — with ``body`` instead of its own when given (a staged retry) — or None
        when it could not be sent (logged, commented)."""
        import httpx  # loaded when a flow is first retried

        req = flow.request
        headers = _sendable(req.headers)
        try:
            answer = await self._client(flow).request(
                req.method, req.url, headers=headers, content=req.content if body is None else body
            )
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as e:
            log.warning("%s: retry failed: %s", label, short(f"{type(e).__name__}: {e}"))
            append_comment(flow, f"retry failed ({type(e).__name__})")
            return None
        return RetryAnswer(
            answer.status_code, answer.headers.get("content-type", ""), answer.content
        )

    async def attempt(
        self, flow: http.HTTPFlow, request: http.Request, timeout: float
    ) -> RetryAnswer | str:
        """Another route's request (``request``: its address, headers and body, as the
        rewrite set them) sent the way mitmproxy sends the flow's: the answer read whole, or
        why none came (``connection refused``, ``timed out before the first byte`` …).
        ``timeout``: the route's, to the first byte (and between reads)."""
        return await self.attempt_via(upstream_proxy(flow), request, timeout)

    async def attempt_via(
        self, via: tuple[str, str] | None, request: http.Request, timeout: float
    ) -> RetryAnswer | str:
        """``attempt`` for a request of no flow (a vision route's caption call): ``via`` the
        upstream proxy the flow came through (``upstream_proxy``), or None."""
        import httpx

        headers = _sendable(request.headers)
        limit = httpx.Timeout(timeout, connect=min(timeout, 15.0))
        try:
            answer = await self._client_via(via).request(
                request.method,
                request.url,
                headers=headers,
                content=request.content,
                timeout=limit,
            )
        except httpx.HTTPError as e:
            return _why(e).detail
        except (httpx.InvalidURL, ValueError) as e:
            return f"request failed ({type(e).__name__})"
        return RetryAnswer(
            answer.status_code,
            answer.headers.get("content-type", ""),
            answer.content,
            answer.headers.get("retry-after"),
        )

    async def open(
        self, flow: http.HTTPFlow, request: http.Request, timeout: float
    ) -> Opened | NoAnswer:
        """``request`` sent the way mitmproxy sends the flow's, its answer open once its
        headers came (the body still to read), or why none came within ``timeout`` seconds
        (the route's, to the first byte; the connect itself at most 15 s). Only the
        request's own headers go (``addon.shell.outbound.http1``: no client library's defaults)."""
        return await self.open_via(upstream_proxy(flow), request, timeout)

    async def open_via(
        self, via: tuple[str, str] | None, request: http.Request, timeout: float
    ) -> Opened | NoAnswer:
        """``open`` for a request of no flow (a key's probe): ``via`` the upstream proxy a
        flow came through (``upstream_proxy``), or None."""
        proxy, auth = via if via is not None else (None, "")
        origin = Origin(request.scheme, request.host, request.port, proxy, auth, _ssl_insecure())
        sent = [False]
        try:
            data = _request_bytes(request, origin)
            async with asyncio.timeout(timeout):
                return await ask(self._pool, origin, data, request.method, min(timeout, 15.0), sent)
        except TimeoutError:
            how = "timed out before the first byte" if sent[0] else "connect timed out"
            return NoAnswer(Reason.TIMED_OUT, how)
        except ConnectionRefusedError:
            return NoAnswer(Reason.UNREACHABLE, "connection refused")
        except (ssl.SSLError, ssl.CertificateError):
            return NoAnswer(Reason.UNREACHABLE, "TLS handshake failed")
        except socket.gaierror:
            return NoAnswer(Reason.UNREACHABLE, "name not resolved")
        except UpstreamClosed:
            return NoAnswer(Reason.UNREACHABLE, "the upstream closed the connection")
        except ProxyRefused:
            return NoAnswer(Reason.UNREACHABLE, "request failed (ProxyError)")
        except OSError:
            return NoAnswer(Reason.UNREACHABLE, "connection failed")
        except ValueError as e:
            return NoAnswer(Reason.UNREACHABLE, f"request failed ({type(e).__name__})")

    def _client(self, flow: http.HTTPFlow) -> httpx.AsyncClient:
        return self._client_via(upstream_proxy(flow))

    def _client_via(self, via: tuple[str, str] | None) -> httpx.AsyncClient:
        import httpx

        client = self._clients.get(via)
        if client is None:
            # httpx logs each request's URL at info level: a query may hold a key (?key=).
            logging.getLogger("httpx").setLevel(logging.WARNING)
            proxy = None
            if via is not None:
                url, auth = via
                proxy = httpx.Proxy(url, headers={"Proxy-Authorization": auth} if auth else None)
            # trust_env=False: the retry and its key never go to a proxy named by the
            # environment (HTTPS_PROXY where the bridge runs), only where the request went.
            # No cap on connections: mitmproxy has none, and a fallback chain's every
            # stream is an attempt here (a capped pool would queue the 101st past its
            # first-byte timeout).
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(self._timeout, connect=15.0),
                verify=not _ssl_insecure(),
                trust_env=False,
                proxy=proxy,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
            )
            self._clients[via] = client
        return client

    async def done(self) -> None:
        self._pool.close()
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


def _sendable(headers: http.Headers) -> list[tuple[str, str]]:
    """The headers an attempt sends: the request's own, hop-by-hop ones left out."""
    return [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in headers.fields
        if k.decode("latin-1").lower() not in _HOP_BY_HOP
    ]


def _request_bytes(request: http.Request, origin: Origin) -> bytes:
    """The request as HTTP/1.1: absolute-form through a proxy for ``http://``, its own
    headers (hop-by-hop ones left out), ``Host`` and ``Content-Length`` as httpx set them."""
    body = request.raw_content or b""
    forward = origin.proxy is not None and origin.scheme == "http"
    target = request.url if forward else request.path
    default = 443 if origin.scheme == "https" else 80
    host = request.host if ":" not in request.host else f"[{request.host}]"
    authority = host if request.port == default else f"{host}:{request.port}"
    lines = [f"{request.method} {target} HTTP/1.1".encode(), b"Host: " + authority.encode("idna")]
    lines += [
        k + b": " + v
        for k, v in request.headers.fields
        if k.lower().decode("latin-1") not in _HOP_BY_HOP
    ]
    if body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(b"Content-Length: %d" % len(body))
    if forward and origin.proxy_auth:
        lines.append(b"Proxy-Authorization: " + origin.proxy_auth.encode("latin-1"))
    head = b"\r\n".join(lines)
    if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
        raise ValueError("a header holds a line break")
    return head + b"\r\n\r\n" + body


def _why(e: httpx.HTTPError) -> NoAnswer:
    """Why an attempt got no answer, in a few words (never the URL: a query may hold a key)."""
    import httpx

    if isinstance(e, httpx.ConnectTimeout):
        return NoAnswer(Reason.TIMED_OUT, "connect timed out")
    if isinstance(e, httpx.TimeoutException):
        return NoAnswer(Reason.TIMED_OUT, "timed out before the first byte")
    return NoAnswer(Reason.UNREACHABLE, _unreachable(e))


def _unreachable(e: httpx.HTTPError) -> str:
    import httpx

    if isinstance(e, httpx.ConnectError):
        causes = _causes(e)
        if any(isinstance(c, ConnectionRefusedError) for c in causes):
            return "connection refused"
        if any(isinstance(c, ssl.SSLError) for c in causes) or "ssl" in str(e).lower():
            return "TLS handshake failed"
        if any(isinstance(c, socket.gaierror) for c in causes):
            return "name not resolved"
        return "connection failed"
    if isinstance(e, httpx.RemoteProtocolError):
        return "the upstream closed the connection"
    return f"request failed ({type(e).__name__})"


def _causes(e: BaseException) -> list[BaseException]:
    """``e`` and what caused it, down the chain (httpx wraps the socket's error)."""
    out: list[BaseException] = []
    seen: BaseException | None = e
    while seen is not None and len(out) < 16:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def upstream_proxy(flow: http.HTTPFlow) -> tuple[str, str] | None:
    """``(proxy URL, Proxy-Authorization value or "")`` when the flow came in through
    ``--mode upstream:…``: mitmproxy sent it through that proxy, so does the retry."""
    mode = flow.client_conn.proxy_mode
    if not isinstance(mode, mode_specs.UpstreamMode):
        return None
    host, port = mode.address
    host = f"[{host}]" if ":" in host else host
    try:
        auth_spec = ctx.options.upstream_auth
    except (AttributeError, KeyError):
        auth_spec = None
    auth = parse_upstream_auth(auth_spec).decode("latin-1") if auth_spec else ""
    return f"{mode.scheme}://{host}:{port}", auth


def _ssl_insecure() -> bool:
    try:
        return bool(ctx.options.ssl_insecure)
    except (AttributeError, KeyError):
        return False
