"""``GET …/models`` for routes with their own upstream (``addon.plan.model_lists``): which
lists are asked for, with which key, and what is kept of them."""

from __future__ import annotations

import json

import pytest

from addon.config.routes import Route, When
from addon.plan.model_lists import MAX_NAMES, list_requests, listed_names

CHATS = ("/v1/chat/completions", "/v1/messages", "/v1/responses")
HOME = ("https", "api.example.com", 443)
CLIENT = {"authorization": "Bearer sk-client"}
ENV = {"ANT": "sk-ant-route", "GEM": "AIza-route"}


def asked(*routes: Route) -> list[tuple[str, str, dict[str, str]]]:
    out = list_requests(routes, "api.example.com", CHATS, HOME, CLIENT, ENV)
    return [(r.route.name, r.url, dict(r.headers)) for r in out]


def test_each_route_upstream_is_asked_with_its_own_key_at_its_dialects_path() -> None:
    got = asked(
        Route("claude", model=("claude-*",), upstream="anthropic",
              upstream_url="https://api.anthropic.com", api_key_env="ANT"),
        Route("gemini", model=("gemini-*",), upstream="gemini",
              upstream_url="https://generativelanguage.googleapis.com/", api_key_env="GEM"),
        Route("router", upstream_url="https://openrouter.ai/api", client_key=True),
    )  # fmt: skip
    assert got == [
        ("claude", "https://api.anthropic.com:443/v1/models",
         {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-route"}),
        ("gemini", "https://generativelanguage.googleapis.com:443/v1beta/models",
         {"x-goog-api-key": "AIza-route"}),
        ("router", "https://openrouter.ai:443/api/v1/models",
         {"authorization": "Bearer sk-client"}),
    ]  # fmt: skip


def test_no_key_crosses_hosts_and_some_routes_are_not_asked() -> None:
    got = asked(
        Route("keyless", upstream_url="http://127.0.0.1:9000"),
        Route("home", upstream_url="https://api.example.com"),  # the GET goes there itself
        Route("plain"),  # no upstream_url: the GET's own upstream
        Route("background", upstream_url="http://127.0.0.1:9001", when=When(background=True)),
        Route("kiro", upstream="kiro", upstream_url="https://q.us-east-1.amazonaws.com"),
        Route("other-host", host="elsewhere.example", upstream_url="http://127.0.0.1:9002"),
        Route("twin", upstream_url="http://127.0.0.1:9000"),  # same list, same (no) key
    )
    assert got == [("keyless", "http://127.0.0.1:9000/v1/models", {})]


def test_a_list_keeps_the_names_the_route_takes() -> None:
    gemini = Route("g", model=("gemini-*",), upstream="gemini")
    body = {"models": [{"name": "models/gemini-2.5-pro"}, {"name": "models/embedding-001"}]}
    assert listed_names(gemini, json.dumps(body).encode()) == ("gemini-2.5-pro",)
    chat = Route("c")
    body = {"data": [{"id": "a"}, {"id": "b"}, {"id": "a"}, {"id": 3}, "x", {}]}
    assert listed_names(chat, json.dumps(body).encode()) == ("a", "b")
    many = {"data": [{"id": f"m{i}"} for i in range(MAX_NAMES + 10)]}
    assert len(listed_names(chat, json.dumps(many).encode())) == MAX_NAMES


@pytest.mark.parametrize(
    "body", [b"", b"<html>", b"[]", b'{"data": {}}', b'{"models": []}', b"NaN", b"[" * 5000]
)
def test_what_is_not_a_list_is_an_error_the_shell_logs(body: bytes) -> None:
    with pytest.raises((ValueError, RecursionError)):
        listed_names(Route("c"), body)
