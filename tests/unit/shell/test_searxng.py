"""The bridge's SearXNG client (``addon.shell.outbound.searxng``) against the scripted SearXNG
Search API (``tests.searxng_server``: it refuses what SearXNG refuses), and the route key."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest

from addon.config.routes import Route
from addon.config.routes_file import read_routes
from addon.config.search_backend import SearchBackend
from addon.dialects.searches import Found, SearchAsk, Searched
from addon.plan.limits import Ask
from addon.plan.web_search import WebSearch, allowed, read_searxng
from addon.shell.outbound.searxng import Searches
from tests.searxng_server import ScriptedSearxng

RESULTS = {
    "mitmproxy addons": [
        {"url": "https://docs.mitmproxy.org/stable/addons/overview/", "title": "Addons",
         "content": "Addons are scripts.", "publishedDate": "2026-01-02T00:00:00"},
        {"url": "https://www.example.com/a", "title": "Example", "content": "x"},
        {"url": "https://blog.example.com/b", "title": "Blog", "content": "y"},
        {"url": "https://other.org/c", "title": "Other", "content": "z"},
        {"url": "javascript:alert(1)", "title": "bad", "content": ""},
    ]
}  # fmt: skip


def _search(server: ScriptedSearxng, **kw: object) -> WebSearch:
    ask = SearchAsk(
        "web_search",
        "web_search_20250305",
        **{k: v for k, v in kw.items() if k != "max_results"},  # type: ignore[arg-type]
    )
    backend = SearchBackend(server.base_url, max_results=int(kw.get("max_results", 5)))  # type: ignore[call-overload]
    return WebSearch(ask, backend)


def _run(searches: Searches, search: WebSearch, query: str):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        try:
            return await searches.run("cursor-bridge [r]", search, "call_1", query)
        finally:
            await searches.done()

    return asyncio.run(go())


def test_a_search_gets_searxngs_results_capped_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with ScriptedSearxng(RESULTS) as server, caplog.at_level(logging.INFO, "cursor_bridge"):
        got = _run(Searches({}), _search(server, max_results=2), "mitmproxy addons")
        base = server.base_url
    assert got.error is None and got.call_id == "call_1"
    assert got.results == (
        Found("https://docs.mitmproxy.org/stable/addons/overview/", "Addons",
              "Addons are scripts.", "2026-01-02T00:00:00"),
        Found("https://www.example.com/a", "Example", "x"),
    )  # fmt: skip
    (sent,) = server.requests
    assert (sent.method, sent.path) == ("GET", "/search")
    assert sent.params == {"q": "mitmproxy addons", "format": "json"}
    lines = [r.getMessage() for r in caplog.records if "web search" in r.getMessage()]
    assert lines == [f"cursor-bridge [r]: web search on {base}: mitmproxy addons"]


def test_domain_rules_keep_and_drop_subdomains() -> None:
    with ScriptedSearxng(RESULTS) as server:
        kept = _run(
            Searches({}), _search(server, allowed_domains=("example.com",)), "mitmproxy addons"
        )
        dropped = _run(
            Searches({}),
            _search(server, blocked_domains=("https://www.example.com/", "mitmproxy.org")),
            "mitmproxy addons",
        )
    assert [f.url for f in kept.results] == [
        "https://www.example.com/a",
        "https://blog.example.com/b",
    ]
    assert [f.url for f in dropped.results] == ["https://other.org/c"]
    ask = SearchAsk("web_search", "t", allowed_domains=("example.com",))
    assert not allowed("https://notexample.com/", ask)


def test_an_instance_without_json_is_unavailable_to_the_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with ScriptedSearxng(RESULTS, formats=("html",)) as server, caplog.at_level(logging.INFO):
        got = _run(Searches({}), _search(server), "mitmproxy addons")
    assert got.error == "unavailable" and got.results == ()
    assert server.requests[0].params["format"] == "json"
    assert "HTTP 403" in caplog.text and "format=json" in caplog.text


def test_the_scripted_server_refuses_what_searxng_refuses() -> None:
    with ScriptedSearxng(RESULTS) as server:
        assert server.answer({"format": "json"})[0] == 400
        assert server.answer({"q": "x", "format": "csv"})[0] == 403
        assert server.answer({"q": "x"})[0] == 200  # html
    ask = SearchAsk("web_search", "t")
    assert read_searxng(400, b'{"error": "No query"}', ask, 5) == 'HTTP 400: {"error": "No query"}'
    assert read_searxng(200, b"<html>", ask, 5) != ()
    assert read_searxng(200, b'{"results": "no"}', ask, 5) == "no results list in the answer"


def test_the_scripted_server_answers_as_searxngs_webapp() -> None:
    """searx/webapp.py ``search`` and ``index``, searx/webadapter.py: an unknown format is
    html; a disabled one Werkzeug's 403 page; a parameter the webadapter refuses a 400 in the
    format's error body; ``/`` with a query a 308 to ``/search``."""
    with ScriptedSearxng(RESULTS) as server:
        assert server.answer({"q": "x", "format": "bogus"})[:2] == (200, "text/html; charset=utf-8")
        for params, message in [
            ({"pageno": "0"}, 'Invalid value "0" for parameter pageno'),
            ({"pageno": ""}, "Empty pageno parameter"),
            ({"safesearch": "3"}, 'Invalid value "3" for parameter safesearch'),
            ({"time_range": "decade"}, 'Invalid value "decade" for parameter time_range'),
            ({"timeout_limit": "soon"}, 'Invalid value "soon" for parameter timeout_limit'),
        ]:
            status, ctype, body = server.answer({"q": "x", "format": "json", **params})
            assert (status, ctype) == (400, "application/json")
            assert json.loads(body) == {"error": message}
        ok = {"q": "x", "format": "json", "pageno": "2", "safesearch": "1", "time_range": "week"}
        assert server.answer(ok)[0] == 200
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            moved = http.get("/", params={"q": "x", "format": "json"})
            assert moved.status_code == 308
            assert moved.headers["location"] == "/search?q=x&format=json"
            assert http.get("/").status_code == 200
    with ScriptedSearxng(RESULTS, formats=("html",)) as server:
        status, ctype, body = server.answer({"q": "x", "format": "json"})
        assert (status, ctype) == (403, "text/html; charset=utf-8")
        assert b"<title>403 Forbidden</title>" in body


def test_the_backends_key_is_sent_and_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    key = "sk-searx-0123456789abcdef0123456789"
    with ScriptedSearxng(RESULTS, formats=("html",)) as server, caplog.at_level(logging.INFO):
        search = WebSearch(
            SearchAsk("web_search", "t"), SearchBackend(server.base_url, key_env="SEARX_KEY")
        )
        _run(Searches({"SEARX_KEY": key}), search, "mitmproxy addons")
        missing = _run(Searches({}), search, "mitmproxy addons")
    assert server.requests[0].headers["authorization"] == f"Bearer {key}"
    assert missing.error == "unavailable" and len(server.requests) == 1
    assert key not in caplog.text and "SEARX_KEY" in caplog.text


def test_an_unreachable_backend_is_unavailable() -> None:
    search = WebSearch(SearchAsk("web_search", "t"), SearchBackend("http://127.0.0.1:9", timeout=2))
    assert _run(Searches({}), search, "q").error == "unavailable"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"url": "ftp://x"}, "routes[0].search.url: must be an http:// or https:// base URL"),
        ({"url": "http://x", "kind": "bing"}, "routes[0].search.kind: Input should be 'searxng'"),
        ({"url": "http://x", "max_results": 0}, "routes[0].search.max_results"),
        ({"url": "http://x", "colour": 1}, "unknown key (allowed: url, kind, max_results, timeout, key_env, price)"),
        ({"url": "http://x", "price": -1}, "routes[0].search.price"),
        ({"url": "http://x", "price": "0.01"}, "routes[0].search.price"),
        ({"url": "http://x", "key_env": "1BAD"}, "search.key_env: the name of an environment variable"),
        ("http://x", 'routes[0].search: Input should be a valid dictionary (e.g. {url = "http://…"})'),
    ],
)  # fmt: skip
def test_the_search_key_is_checked_at_start(table: object, message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        read_routes({"routes": [{"name": "r", "search": table}]})
    assert message in str(info.value)


def test_a_search_table_reads_into_the_route() -> None:
    (route,) = read_routes(
        {"routes": [{"name": "r", "search": {"url": "http://127.0.0.1:8888/", "max_results": 3}}]}
    )
    assert route.search == SearchBackend("http://127.0.0.1:8888", max_results=3)
    assert route.search.price == 0.0  # a search costs nothing unless the route says
    (priced,) = read_routes(
        {"routes": [{"name": "r", "search": {"url": "http://127.0.0.1:8888", "price": 0.01}}]}
    )
    assert priced.search is not None and priced.search.price == 0.01
    assert route.search.endpoint == "http://127.0.0.1:8888/search"


class Gate:
    """A client key's limits as the runner asks them (``SearchGate``): refuses with ``code``,
    else admits and records each settle."""

    def __init__(self, code: str | None = None) -> None:
        self.code = code
        self.asked: list[tuple[str, str | None, float]] = []
        self.settled: list[tuple[Ask, bool]] = []

    async def search(self, label: str, client: str | None, price: float) -> Ask | str | None:
        self.asked.append((label, client, price))
        if self.code is not None:
            return self.code
        return Ask("alice", "s1", 1.0, 1, None, None, None, "", None, 0, 0, slot=False)

    async def searched(self, ask: Ask, ran: bool) -> None:
        self.settled.append((ask, ran))


def test_each_search_is_counted_against_the_flows_client_key_first() -> None:
    """The runner asks the gate before the backend (with the flow's client key's name and the
    backend's price): refused, the backend is never asked and the model gets the error code;
    admitted, the search is settled as run, or as failed when the backend failed."""
    with ScriptedSearxng(RESULTS) as server:
        backend = SearchBackend(server.base_url, price=0.01)
        search = WebSearch(SearchAsk("web_search", "web_search_20250305"), backend, "alice")
        refused = Gate("too_many_requests")
        got = _run(Searches({}, gate=refused), search, "mitmproxy addons")
        assert got == Searched("call_1", "mitmproxy addons", error="too_many_requests")
        assert server.requests == []
        assert refused.asked == [("cursor-bridge [r]", "alice", 0.01)]
        admitted = Gate()
        got = _run(Searches({}, gate=admitted), search, "mitmproxy addons")
        assert got.error is None and len(server.requests) == 1
        assert [ran for _, ran in admitted.settled] == [True]
    down = WebSearch(search.ask, SearchBackend("http://127.0.0.1:9"), "alice")
    failed = Gate()
    assert _run(Searches({}, gate=failed), down, "q").error == "unavailable"
    assert [ran for _, ran in failed.settled] == [False]  # counted in rpm, its price not spent


def test_the_plan_carries_the_client_keys_name_to_the_search() -> None:
    """The client key's name reaches the plan after ``decide``: whatever sets it, the plan's
    search names the same client (the runner's gate reads it there)."""
    import dataclasses

    from addon.dialects import DIALECTS
    from addon.plan.flow_plan import FlowPlan

    search = WebSearch(SearchAsk("web_search", "web_search_20250305"), SearchBackend("http://x"))
    plan = FlowPlan(Route("r"), DIALECTS["anthropic"], DIALECTS["openai_chat"], search=search)
    assert plan.search is not None and plan.search.client == ""
    named = dataclasses.replace(plan, client_name="alice")
    assert named.search is not None and named.search.client == "alice"


def test_an_answer_past_the_bound_is_not_buffered_and_fields_are_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A backend's answer over ``MAX_ANSWER`` bytes is refused (the model told
    ``unavailable``, one log line), not read whole; within it, a result's title and snippet
    are cut and a URL too long to be one is left out: a 1 MB snippet never reaches the model."""
    from addon.plan.web_search import MAX_SNIPPET, MAX_TITLE
    from addon.shell.outbound.searxng import MAX_ANSWER

    huge = json.dumps(
        {"results": [{"url": "https://a.example/", "content": "x" * (MAX_ANSWER + 1)}]}
    )
    with ScriptedSearxng(RESULTS) as server, caplog.at_level(logging.INFO, "cursor_bridge"):
        server.reply = lambda _params: (200, "application/json", huge.encode())
        got = _run(Searches({}), _search(server), "anything")
    assert got.error == "unavailable" and got.results == ()
    assert any(f"over {MAX_ANSWER} bytes" in r.getMessage() for r in caplog.records)
    long = {
        "results": [
            {"url": "https://b.example/" + "p" * 5000, "title": "too long a URL", "content": "u"},
            {"url": "https://c.example/", "title": "t" * 1000, "content": "s" * 1_000_000},
        ]
    }
    with ScriptedSearxng(RESULTS) as server:
        server.reply = lambda _params: (200, "application/json", json.dumps(long).encode())
        got = _run(Searches({}), _search(server), "anything")
    (found,) = got.results
    assert found.url == "https://c.example/"
    assert len(found.title) == MAX_TITLE and found.title.endswith("…")
    assert len(found.content) == MAX_SNIPPET and found.content.endswith("…")
