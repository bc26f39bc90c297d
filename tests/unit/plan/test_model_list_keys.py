"""Which key of the proxy's a model list goes to its own upstream with (``list_key``), and a
request the bridge passes through unread on a route with a key (``decide``'s ``Pass.wire``):
the route's key, never the client's (issue 40, point 3)."""

from __future__ import annotations

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import Incoming, Pass, decide
from addon.plan.model_lists import list_key, lists_models_of

ENV = {"K": "sk-route-key-0001", "P1": "sk-pool-one-0002", "P2": "sk-pool-two-0003"}
HERE = ("https", "api.example.com", 443)

CHAT = Route(name="chat", api_key_env="K")
POOL = Route(name="pool", model="p-*", api_key_env=("P1", "P2"))
CLAUDE = Route(
    name="claude", path="*/v1/messages", client="anthropic", upstream="anthropic", api_key_env="K"
)
GEMINI = Route(
    name="gemini", path="*/models/*:*enerateContent", client="gemini", upstream="gemini",
    api_key_env="K",
)  # fmt: skip
ELSEWHERE = Route(name="far", upstream_url="https://other.example.com", api_key_env="K")
OPEN = Route(name="open")


def key_for(
    routes: tuple[Route, ...],
    base: str = "/v1",
    headers: dict[str, str] | None = None,
    query: tuple[tuple[str, str], ...] = (),
    checked: Route | None = None,
) -> tuple[str, tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, ...]] | None:
    got = list_key(routes, "api.example.com", base, HERE, headers or {}, query, ENV, checked)
    if got is None:
        return None
    return got.route.name, got.set_headers, got.drop_headers, got.drop_query


def test_a_list_goes_with_the_first_routes_key_a_pools_first() -> None:
    assert key_for((POOL, CHAT)) == ("pool", (("authorization", f"Bearer {ENV['P1']}"),), (), ())
    got = key_for((CHAT,), headers={"authorization": "Bearer x", "x-api-key": "y"})
    assert got == ("chat", (("authorization", f"Bearer {ENV['K']}"),), ("x-api-key",), ())


def test_a_routes_key_never_goes_to_another_upstream_than_its_own() -> None:
    assert key_for((ELSEWHERE,)) is None
    assert key_for((ELSEWHERE, CHAT))[0] == "chat"  # type: ignore[index]
    assert key_for((OPEN,)) is None  # no key of the proxy's: none is sent


def test_the_clients_dialect_picks_the_route_and_its_header() -> None:
    anthropic_list = key_for((CHAT, CLAUDE), headers={"anthropic-version": "2023-06-01"})
    assert anthropic_list == ("claude", (("x-api-key", ENV["K"]),), (), ())
    # Its key was removed already: the route it was checked for says the dialect.
    assert key_for((CHAT, CLAUDE), checked=CLAUDE)[0] == "claude"  # type: ignore[index]
    gemini = key_for((CHAT, GEMINI), base="/v1beta", query=(("key", "x"), ("pageSize", "5")))
    assert gemini == ("gemini", (("x-goog-api-key", ENV["K"]),), (), ("key",))


def test_gemini_lists_belong_to_gemini_routes() -> None:
    assert lists_models_of(GEMINI, "api.example.com", "/v1beta")
    exact = Route(
        name="g", path="/v1beta/models/*:generateContent", client="gemini", upstream="gemini"
    )
    assert lists_models_of(exact, "api.example.com", "/v1beta")
    assert not lists_models_of(exact, "api.example.com", "/v1")
    assert not lists_models_of(CLAUDE, "api.example.com", "/v1beta")


def test_a_variable_not_set_sends_nothing() -> None:
    assert list_key((CHAT,), "api.example.com", "/v1", HERE, {}, (), {}) is None


def test_a_body_passed_through_unread_goes_with_the_routes_key() -> None:
    incoming = Incoming(
        "POST",
        "api.example.com",
        "/v1/chat/completions",
        {"authorization": "Bearer sk-client-0000", "content-type": "application/json"},
        b"not json",
        443,
    )
    d = decide(Settings(routes=(CHAT,)), CHAT, incoming, ENV)
    assert isinstance(d, Pass) and d.wire is not None
    assert d.wire.set_headers == (("authorization", f"Bearer {ENV['K']}"),)
    assert d.wire.origin is None and d.wire.path == "/v1/chat/completions"
    untouched = decide(Settings(routes=(OPEN,)), OPEN, incoming, ENV)
    assert isinstance(untouched, Pass) and untouched.wire is None
