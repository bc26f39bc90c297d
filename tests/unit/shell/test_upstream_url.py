"""A route's ``upstream_url`` applied to a flow by the shell: scheme, host, port, Host header,
the path's prefix, the key rules; and a retry goes to the same place (``flow.request.url``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addon.plan.wire_request import WITHHELD
from addon.shell.addons import Addons, make_addons
from addon.shell.notes import META_KEY
from addon.shell.outbound.retry import RetryAnswer
from tests.e2e.harness import JSONReply, ScriptedUpstream

SECRET = "sk-client-SECRET-never-elsewhere"


@pytest.fixture
def bundle() -> Iterator[tuple[Addons, taddons.context]]:
    bundle = make_addons()
    with taddons.context(*bundle.all) as tctx:
        yield bundle, tctx


def routes(tmp_path: Path, text: str) -> str:
    path = tmp_path / "routes.toml"
    path.write_text(text)
    return str(path)


def flow(model: str, http2: bool = False) -> http.HTTPFlow:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    req = tutils.treq(
        host="api.example.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=b"/v1/chat/completions",
        http_version=b"HTTP/2.0" if http2 else b"HTTP/1.1",
        headers=http.Headers(
            (
                (b"host", b"api.example.com"),
                (b"content-type", b"application/json"),
                (b"authorization", f"Bearer {SECRET}".encode()),
            )
        ),
        content=json.dumps(body).encode(),
    )
    if http2:
        req.authority = "api.example.com"
    return tflow.tflow(req=req)


ROUTES = """
[[routes]]
name = "far"
model = "far-*"
upstream_url = "http://far.example:8080/api"

[[routes]]
name = "default"
"""


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_the_request_goes_to_the_routes_upstream_url_without_the_clients_key(
    bundle: tuple[Addons, taddons.context], tmp_path: Path, http2: bool
) -> None:
    addons, tctx = bundle
    tctx.configure(addons.settings, bridge_routes=routes(tmp_path, ROUTES))
    f = flow("far-1", http2)
    addons.request.request(f)
    assert f.request.url == "http://far.example:8080/api/v1/chat/completions"
    assert f.request.host_header == "far.example:8080"
    assert "authorization" not in f.request.headers
    assert f.comment.count(WITHHELD) == 1
    assert SECRET not in f.comment
    assert f.metadata[META_KEY]["upstream_url"] == "http://far.example:8080/api"


def test_a_route_without_upstream_url_leaves_the_address_alone(
    bundle: tuple[Addons, taddons.context], tmp_path: Path
) -> None:
    addons, tctx = bundle
    tctx.configure(addons.settings, bridge_routes=routes(tmp_path, ROUTES))
    f = flow("near")
    addons.request.request(f)
    assert f.request.url == "https://api.example.com/v1/chat/completions"
    assert f.request.headers["authorization"] == f"Bearer {SECRET}"


def test_a_retry_goes_where_the_route_sent_the_request(
    bundle: tuple[Addons, taddons.context], tmp_path: Path
) -> None:
    addons, tctx = bundle
    with ScriptedUpstream() as far:
        far.script = lambda rec: JSONReply({"ok": True})
        text = ROUTES.replace("http://far.example:8080", far.base_url)
        tctx.configure(addons.settings, bridge_routes=routes(tmp_path, text))
        f = flow("far-2")
        addons.request.request(f)

        async def send() -> RetryAnswer | None:
            try:
                return await addons.retry.send(f, "test")
            finally:
                await addons.retry.done()

        answer = asyncio.run(send())
        (rec,) = far.wait_for_requests(1)
    assert answer is not None and answer.status == 200
    assert rec.path == "/api/v1/chat/completions"
    assert "authorization" not in rec.headers
    assert rec.json()["model"] == "far-2"


def test_a_body_the_bridge_cannot_read_goes_to_the_upstream_url_untouched(
    bundle: tuple[Addons, taddons.context], tmp_path: Path
) -> None:
    addons, tctx = bundle
    tctx.configure(
        addons.settings, bridge_routes=routes(tmp_path, ROUTES.replace('model = "far-*"\n', ""))
    )
    f = flow("x")
    f.request.content = b"not json"
    addons.request.request(f)
    assert f.request.url == "http://far.example:8080/api/v1/chat/completions"
    assert f.request.content == b"not json"
    assert "authorization" not in f.request.headers
    assert "passed through" in f.comment
