"""The Kiro credentials addon: a route's ``token_file`` read, refreshed at its ``refresh_url`` when
it expired (one refresh per file at a time, written back atomically), for the rewrite of each
request (``take``): the token of the route the flow goes to (the fallback's pick, where it has
one), kept by route on the flow's record. An unreadable file answers a 500 in the client's dialect; a failed refresh
tries the old token; tokens are never logged or written. Async, before the rewrite, because a
refresh is a request of its own. docs/dialects/kiro.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mitmproxy import http

if TYPE_CHECKING:
    import httpx

from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.dialects.kiro.token import (
    KiroToken,
    TokenError,
    dump_token,
    parse_token,
    refresh_body,
    refresh_url,
    refreshed,
)
from addon.model import ClientError
from addon.plan import RouteCredentials, dump, short
from addon.shell.flows import Flows
from addon.shell.headers import json_response
from addon.shell.host_filter import outside_proxy_hosts
from addon.shell.notes import append_comment, log, log_internal_error
from addon.shell.settings import BridgeSettings

REFRESH_TIMEOUT = 20.0


class KiroAuth:
    name = "cursor_bridge_kiro_auth"

    def __init__(
        self,
        settings: BridgeSettings,
        clock: Callable[[], float] = time.time,
        flows: Flows | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._flows = flows if flows is not None else Flows()
        self._locks: dict[str, asyncio.Lock] = {}
        self._client: httpx.AsyncClient | None = None
        self._tokens: dict[str, tuple[str, ...]] = {}
        """Each token file's tokens as last read or refreshed: keys of the proxy's, redacted
        from every answer (``held_tokens``)."""

    # ------------------------------------------------------------------ hooks

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """Nothing for flows that do not go to a token-file route; for those, a coroutine that
        mitmproxy awaits before the rewrite addon's ``request`` runs. The route is the one the
        fallback addon picked (the record's ``chain``), else the one matched (its ``match``)."""
        if flow.response is not None or flow.error is not None or not flow.live:
            return None
        try:
            found = self._flows.route_match(flow, self._settings.settings)
            chain = self._flows.open(flow.id).chain
            route = chain.route if chain is not None else found.route
            if route is None or route.token_file is None:  # only a kiro route has one (Route)
                return None
            if outside_proxy_hosts(flow):
                return None
        except Exception as e:
            log_internal_error("cursor-bridge: kiro credentials", e)
            return None
        return self._request(flow, route)

    async def _request(self, flow: http.HTTPFlow, route: Route) -> None:
        why: str | None = None
        try:
            token = await self.token(route)
        except TokenError as e:
            why = str(e)
        except Exception as e:
            log_internal_error(f"cursor-bridge [{route.name}]: kiro credentials", e)
            why = f"internal error ({type(e).__name__})"
        if why is not None:
            self._refuse(flow, route, why)
            return
        creds = RouteCredentials(token.access_token, token.profile_arn)
        self._flows.open(flow.id).credentials[route.name] = creds

    async def done(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def take(self, flow_id: str, route: Route) -> RouteCredentials | None:
        """The credentials read for this flow's ``route`` (once)."""
        record = self._flows.get(flow_id)
        return record.credentials.pop(route.name, None) if record is not None else None

    # ------------------------------------------------------------------ tokens

    def held_tokens(self) -> tuple[str, ...]:
        """Every Kiro token read or refreshed (access and refresh tokens), by value."""
        return tuple(t for tokens in self._tokens.values() for t in tokens)

    async def token(self, route: Route) -> KiroToken:
        """The route's token, refreshed first when it has expired. Raises ``TokenError``."""
        assert route.token_file is not None
        path = Path(route.token_file).expanduser()
        token = await self._token(route, path)
        self._tokens[str(path)] = tuple(t for t in (token.access_token, token.refresh_token) if t)
        return token

    async def _token(self, route: Route, path: Path) -> KiroToken:
        token = _read(path)
        if not token.expired(self._clock()) or token.refresh_token is None:
            return token
        lock = self._locks.setdefault(str(path), asyncio.Lock())
        async with lock:
            token = _read(path)  # another request may have refreshed it meanwhile
            if not token.expired(self._clock()):
                return token
            return await self._refresh(route, path, token)

    async def _refresh(self, route: Route, path: Path, token: KiroToken) -> KiroToken:
        label = f"cursor-bridge [{route.name}]"
        url = refresh_url(token, route.refresh_url)
        import httpx  # loaded when a token is first refreshed

        try:
            answer = await self._http().post(url, json=refresh_body(token))
        except (httpx.HTTPError, httpx.InvalidURL, ValueError, TokenError) as e:
            log.warning("%s: Kiro token refresh failed (%s)", label, type(e).__name__)
            return token
        if not (200 <= answer.status_code < 300):
            log.warning("%s: Kiro token refresh answered HTTP %d", label, answer.status_code)
            return token
        try:
            new = refreshed(token, json.loads(answer.content), self._clock())
        except (ValueError, TokenError) as e:
            log.warning("%s: Kiro token refresh answer not usable: %s", label, short(str(e)))
            return token
        try:
            _write(path, dump_token(new))
        except OSError as e:
            log.warning(
                "%s: refreshed Kiro token not written back to %s: %s",
                label,
                short(str(path)),
                short(e.strerror or type(e).__name__),
            )
        log.info("%s: Kiro token refreshed", label)
        return new

    def _http(self) -> httpx.AsyncClient:
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(
                trust_env=False, timeout=httpx.Timeout(REFRESH_TIMEOUT, connect=10.0)
            )
        return self._client

    def _refuse(self, flow: http.HTTPFlow, route: Route, why: str) -> None:
        label = f"cursor-bridge [{route.name}]"
        message = (
            f"the bridge's route '{route.name}' takes its Kiro token from "
            f"{route.token_file}, which cannot be used: {why}"
        )
        log.warning("%s: %s", label, short(message))
        error = ClientError(message, status=500, code="bridge_configuration")
        flow.response = json_response(500, dump(DIALECTS[route.client].encode_error(error)))
        append_comment(flow, f"{label}: answered 500: Kiro token file not usable ({short(why)})")


def _read(path: Path) -> KiroToken:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TokenError(f"cannot read it ({e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError:
        raise TokenError("not UTF-8 text") from None
    return parse_token(text)


def _write(path: Path, text: str) -> None:
    """Atomically: a temporary file beside it, renamed over it (its permissions kept)."""
    mode = path.stat().st_mode & 0o777
    fd, tmp = tempfile.mkstemp(prefix=".kiro-token-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
