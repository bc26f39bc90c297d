"""The upstream request on the wire: placement, query, headers and credentials (sans-IO)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.dialects.base import WireRequest
from addon.model import Message, Request, Text
from addon.plan.wire_request import RouteKey, build_wire, read_key

KEY = "sk-ant-SECRET-never-shown"
REQ = Request("anthropic", "claude-x", (Message("user", (Text("hi"),)),))


def wire(client: str, upstream: str, path: str, headers: dict[str, str], **kw: Any) -> WireRequest:
    query = kw.pop("query", ())
    return build_wire(
        REQ,
        DIALECTS[client],
        DIALECTS[upstream],
        path=path,
        query=query,
        headers=headers,
        notes=kw.pop("notes", Counter()),
        **kw,
    )


def test_claude_code_key_moves_to_bearer_and_anthropic_only_parts_stay_behind() -> None:
    notes: Counter[str] = Counter()
    w = wire(
        "anthropic",
        "openai_chat",
        "/v1/messages",
        {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "x,y"},
        query=(("beta", "true"),),
        notes=notes,
    )
    assert w.path == "/v1/chat/completions" and w.query == ()
    assert dict(w.set_headers) == {"authorization": f"Bearer {KEY}"}
    assert set(w.drop_headers) == {"x-api-key", "anthropic-version", "anthropic-beta"}
    assert notes["API key moved from x-api-key to authorization"] == 1
    assert notes["query parameters of the anthropic client dropped"] == 1
    assert KEY not in repr(w) and KEY not in str(dict(notes))


def test_an_auth_token_client_keeps_its_bearer_header() -> None:
    w = wire("anthropic", "openai_chat", "/v1/messages", {"authorization": f"Bearer {KEY}"})
    assert dict(w.set_headers) == {"authorization": f"Bearer {KEY}"}
    assert w.drop_headers == ()


def test_openai_client_to_anthropic_upstream_gets_x_api_key_and_a_version() -> None:
    w = wire("openai_chat", "anthropic", "/v1/chat/completions", {"authorization": f"Bearer {KEY}"})
    assert w.path == "/v1/messages"
    assert dict(w.set_headers) == {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    assert w.drop_headers == ("authorization",)


def test_same_dialect_leaves_path_query_and_headers_alone() -> None:
    w = wire(
        "openai_chat",
        "openai_chat",
        "/openai/v1/chat/completions",
        {"authorization": f"Bearer {KEY}"},
        query=(("api-version", "2024-10-21"),),
    )
    assert w.path == "/openai/v1/chat/completions"
    assert w.query == (("api-version", "2024-10-21"),)
    assert w.set_headers == () and w.drop_headers == ()


def test_a_route_key_from_the_environment_replaces_the_clients_key() -> None:
    notes: Counter[str] = Counter()
    w = wire(
        "openai_chat",
        "openai_chat",
        "/v1/chat/completions",
        {"authorization": "Bearer client-key", "x-api-key": "other"},
        route_key=RouteKey(KEY),
        notes=notes,
    )
    assert dict(w.set_headers) == {"authorization": f"Bearer {KEY}"}
    assert w.drop_headers == ("x-api-key",)
    assert notes["API key from the route's environment variable"] == 1


@pytest.mark.parametrize(
    ("upstream_path", "same", "expected"),
    [
        ("/gw/chat", True, ("/gw/chat", (("keep", "1"),))),
        ("/gw/chat", False, ("/gw/chat", ())),
        ("/gw/chat?api-version=1", False, ("/gw/chat", (("api-version", "1"),))),
    ],
)
def test_a_routes_upstream_path_wins(
    upstream_path: str, same: bool, expected: tuple[str, Any]
) -> None:
    client = "openai_chat" if same else "anthropic"
    w = wire(
        client,
        "openai_chat",
        "/v1/whatever",
        {},
        query=(("keep", "1"),),
        upstream_path=upstream_path,
    )
    assert (w.path, w.query) == expected


def test_a_path_without_the_clients_endpoint_gets_the_upstreams_appended() -> None:
    w = wire("anthropic", "openai_chat", "/proxy/anthropic", {})
    assert w.path == "/proxy/anthropic/chat/completions"


@pytest.mark.parametrize(
    ("headers", "found"),
    [
        ({"x-api-key": "a"}, ("x-api-key", "a")),
        ({"authorization": "Bearer b"}, ("authorization", "b")),
        ({"x-api-key": "a", "authorization": "Bearer b"}, ("x-api-key", "a")),
        ({"authorization": "Basic xyz"}, None),
        ({"x-api-key": "  "}, None),
        ({}, None),
    ],
)
def test_read_key_follows_the_dialects_order(
    headers: dict[str, str], found: tuple[str, str] | None
) -> None:
    assert read_key(DIALECTS["anthropic"], headers) == found
