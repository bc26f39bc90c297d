"""The Kiro token file: read on each request, refreshed when it expires (against a local
scripted server, never the network), written back; never logged."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects.kiro.token import (
    TokenError,
    parse_time,
    parse_token,
    refresh_body,
    refresh_url,
    refreshed,
)
from addon.shell.kiro_auth import KiroAuth
from addon.shell.settings import BridgeSettings
from tests.e2e.harness import JSONReply, Recorded, ScriptedUpstream

ACCESS = "aoa-ACCESS-token-SECRET-1"
REFRESH = "aor-REFRESH-token-SECRET-1"
NOW = 1_800_000_000.0


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def token_file(tmp_path: Path, expires: float, **extra: Any) -> Path:
    path = tmp_path / "kiro-auth-token.json"
    data = {
        "accessToken": ACCESS,
        "refreshToken": REFRESH,
        "expiresAt": iso(expires),
        "authMethod": "social",
        "provider": "Github",
        "profileArn": "arn:aws:codewhisperer:us-east-1:1:profile/FILE",
        **extra,
    }
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def flow(path: str = "/v1/chat/completions") -> http.HTTPFlow:
    req = tutils.treq(
        host="q.us-east-1.amazonaws.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=path.encode(),
        headers=http.Headers(((b"authorization", b"Bearer client-key"),)),
        content=b"{}",
    )
    return tflow.tflow(req=req)


def auth_for(route: Route, now: float = NOW) -> KiroAuth:
    settings = Settings(routes=(route,))
    return KiroAuth(BridgeSettings(settings), clock=lambda: now)


@pytest.fixture
def server() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as s:
        yield s


# --------------------------------------------------------------------------- pure


def test_the_token_file_is_parsed_without_showing_the_token() -> None:
    t = parse_token(
        json.dumps({"accessToken": ACCESS, "refreshToken": REFRESH, "expiresAt": iso(NOW)})
    )
    assert t.access_token == ACCESS and t.expires_at == NOW and t.region == "us-east-1"
    assert ACCESS not in repr(t) and REFRESH not in repr(t)
    assert t.expired(NOW - 30) and not t.expired(NOW - 120)
    for bad in ("nope", "[]", "{}", '{"accessToken": ""}'):
        with pytest.raises(TokenError) as e:
            parse_token(bad)
        assert ACCESS not in str(e.value)
    assert parse_time(NOW * 1000) == NOW and parse_time("2030-01-01T00:00:00") is not None
    assert parse_time("soon") is None and parse_time(True) is None


def test_refresh_urls_and_bodies() -> None:
    social = parse_token(json.dumps({"accessToken": "a", "refreshToken": "r", "region": "eu-1"}))
    assert refresh_url(social, None) == "https://prod.eu-1.auth.desktop.kiro.dev/refreshToken"
    assert refresh_body(social) == {"refreshToken": "r"}
    idc = parse_token(
        json.dumps({"accessToken": "a", "refreshToken": "r", "clientId": "c", "clientSecret": "s"})
    )
    assert refresh_url(idc, None) == "https://oidc.us-east-1.amazonaws.com/token"
    assert refresh_body(idc)["grantType"] == "refresh_token"
    assert refresh_url(idc, "http://127.0.0.1:9/r") == "http://127.0.0.1:9/r"
    new = refreshed(social, {"accessToken": "b", "expiresIn": 3600}, NOW)
    assert new.access_token == "b" and new.refresh_token == "r" and new.expires_at == NOW + 3600
    assert new.raw["region"] == "eu-1"
    with pytest.raises(TokenError):
        refreshed(social, {"error": "invalid_grant"}, NOW)


# --------------------------------------------------------------------------- the addon


def test_a_fresh_token_is_read_for_the_flow(tmp_path: Path) -> None:
    path = token_file(tmp_path, NOW + 3600)
    route = Route(name="k", upstream="kiro", token_file=str(path))
    auth = auth_for(route)
    f = flow()
    pending = auth.request(f)
    assert pending is not None
    asyncio.run(pending)  # type: ignore[arg-type]
    creds = auth.take(f.id, route)
    assert creds is not None and creds.key == ACCESS
    assert creds.profile_arn == "arn:aws:codewhisperer:us-east-1:1:profile/FILE"
    assert auth.take(f.id, route) is None
    # other routes and paths are not this addon's
    assert auth_for(Route(name="o")).request(flow()) is None
    assert auth.request(flow("/v1/embeddings")) is None


def test_an_expired_token_is_refreshed_and_written_back(
    tmp_path: Path, server: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    path = token_file(tmp_path, NOW - 10, region="us-east-1", clientIdHash="keep-me")
    bodies: list[Any] = []

    def answer(rec: Recorded) -> JSONReply:
        assert rec.path == "/refreshToken"
        bodies.append(rec.json())
        return JSONReply({"accessToken": "aoa-NEW", "refreshToken": "aor-NEW", "expiresIn": 3600})

    server.script = answer
    route = Route(
        name="k",
        upstream="kiro",
        token_file=str(path),
        refresh_url=f"{server.base_url}/refreshToken",
    )
    auth = auth_for(route)
    caplog.set_level(logging.DEBUG)

    async def two_at_once() -> None:
        f1, f2 = flow(), flow()
        await asyncio.gather(auth.request(f1), auth.request(f2))  # type: ignore[arg-type]
        assert auth.take(f1.id, route).key == auth.take(f2.id, route).key == "aoa-NEW"  # type: ignore[union-attr]
        await auth.done()

    asyncio.run(two_at_once())
    assert bodies == [{"refreshToken": REFRESH}]  # one refresh for both requests
    saved = json.loads(path.read_text())
    assert saved["accessToken"] == "aoa-NEW" and saved["refreshToken"] == "aor-NEW"
    assert saved["clientIdHash"] == "keep-me" and saved["profileArn"].endswith("FILE")
    assert parse_time(saved["expiresAt"]) == NOW + 3600
    assert path.stat().st_mode & 0o777 == 0o600
    assert "Kiro token refreshed" in caplog.text
    for secret in (ACCESS, REFRESH, "aoa-NEW", "aor-NEW"):
        assert secret not in caplog.text


def test_a_failed_refresh_keeps_the_token_and_says_so(
    tmp_path: Path, server: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    path = token_file(tmp_path, NOW - 10)
    server.script = lambda rec: JSONReply({"message": f"bad {REFRESH}"}, status=401)
    route = Route(
        name="k", upstream="kiro", token_file=str(path), refresh_url=f"{server.base_url}/r"
    )
    auth = auth_for(route)
    f = flow()
    asyncio.run(auth.request(f))  # type: ignore[arg-type]
    assert auth.take(f.id, route).key == ACCESS  # type: ignore[union-attr]
    assert "refresh answered HTTP 401" in caplog.text
    assert REFRESH not in caplog.text and ACCESS not in caplog.text
    assert json.loads(path.read_text())["accessToken"] == ACCESS


def test_an_unreadable_token_file_is_answered_in_the_clients_dialect(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    route = Route(
        name="k",
        client="anthropic",
        path="*/v1/messages",
        upstream="kiro",
        token_file=str(tmp_path / "missing.json"),
    )
    auth = auth_for(route)
    f = flow("/v1/messages")
    asyncio.run(auth.request(f))  # type: ignore[arg-type]
    assert f.response is not None and f.response.status_code == 500
    body = json.loads(f.response.content or b"")
    assert body["type"] == "error" and "missing.json" in body["error"]["message"]
    assert auth.take(f.id, route) is None
    (tmp_path / "bad.json").write_text(json.dumps({"refreshToken": REFRESH}))
    auth = auth_for(dataclasses.replace(route, token_file=str(tmp_path / "bad.json")))
    f = flow("/v1/messages")
    asyncio.run(auth.request(f))  # type: ignore[arg-type]
    assert f.response is not None and b"no accessToken" in (f.response.content or b"")
    assert REFRESH not in caplog.text
