"""``GET …/models`` lists the models the routes name (issue 29), merged with the upstream's
own list where it answers one, and with ``bridge_models``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addon.config.routes import Route, listed_models
from addon.shell.addons import Addons, make_addons

ROUTES = """
[[routes]]
name = "openai"
model = ["gpt-5*", "o3", "gpt-4.1"]
upstream_url = "http://127.0.0.1:9"  # nothing listens: its list is not merged
api_key_env = "HOME"

[[routes]]
name = "claude"
model = "claude-*"
upstream = "anthropic"
model_map = {"claude-sonnet-4-6" = "x", "claude-*" = "y", "gpt-9" = "never-taken-here"}

[[routes]]
name = "elsewhere"
host = "other.example"
model = "elsewhere-model"

[[routes]]
name = "deepseek"
model_map = {"cheap" = "deepseek-chat"}

[[routes]]
name = "rest"
"""


@pytest.fixture
def bundle(tmp_path: Path) -> Iterator[tuple[Addons, taddons.context]]:
    bundle = make_addons()
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    with taddons.context(*bundle.all) as tctx:
        tctx.configure(bundle.settings, bridge_routes=str(routes))
        yield bundle, tctx


def models_flow(upstream: http.Response) -> tuple[http.HTTPFlow, http.Response]:
    req = tutils.treq(
        host="api.example.com",
        port=443,
        scheme=b"https",
        method=b"GET",
        path=b"/v1/models",
        content=b"",
    )
    return tflow.tflow(req=req), upstream


def listed(addons: Addons, upstream: http.Response) -> list[str]:
    flow, resp = models_flow(upstream)
    addons.catalogue.request(flow)
    flow.response = resp
    asyncio.run(addons.catalogue.response(flow))
    assert flow.response is not None
    body: dict[str, Any] = json.loads(flow.response.content or b"")
    return [m["id"] for m in body["data"]]


def test_the_routes_literal_models_are_listed_without_globs_or_other_hosts() -> None:
    import tomllib

    from addon.config.routes_file import read_routes

    routes = read_routes(tomllib.loads(ROUTES))
    chats = ("/v1/chat/completions", "/v1/messages", "/v1/responses")
    assert listed_models(routes, "api.example.com", chats) == (
        "o3",
        "gpt-4.1",
        "claude-sonnet-4-6",
        "cheap",
    )
    assert "elsewhere-model" in listed_models(routes, "other.example", chats)
    assert listed_models((Route(name="r"),), "h", chats) == ()


def test_they_are_merged_with_the_upstreams_list(bundle: tuple[Addons, taddons.context]) -> None:
    addons, _ = bundle
    own = {
        "object": "list",
        "data": [{"id": "o3", "object": "model"}, {"id": "theirs", "object": "model"}],
    }
    upstream = http.Response.make(200, json.dumps(own), {"content-type": "application/json"})
    assert listed(addons, upstream) == ["o3", "theirs", "gpt-4.1", "claude-sonnet-4-6", "cheap"]


def test_an_upstream_without_a_list_gets_the_routes_models(
    bundle: tuple[Addons, taddons.context],
) -> None:
    addons, tctx = bundle
    tctx.configure(addons.catalogue, bridge_models="mine")
    upstream = http.Response.make(404, b"not found", {"content-type": "text/plain"})
    assert listed(addons, upstream) == [
        "mine",
        "mine-thinking",
        "o3",
        "gpt-4.1",
        "claude-sonnet-4-6",
        "cheap",
    ]


def test_without_models_to_add_the_upstreams_answer_is_untouched(tmp_path: Path) -> None:
    bundle = make_addons()
    routes = tmp_path / "routes.toml"
    routes.write_text('[[routes]]\nname = "any"\nmodel = "gpt-*"\n')
    with taddons.context(*bundle.all) as tctx:
        tctx.configure(bundle.settings, bridge_routes=str(routes))
        flow, resp = models_flow(http.Response.make(200, b'{"data": []}'))
        bundle.catalogue.request(flow)
        flow.response = resp
        asyncio.run(bundle.catalogue.response(flow))
        assert flow.response.content == b'{"data": []}'
