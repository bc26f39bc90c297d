"""End to end: the bridge's own calls count against the client key of the flow that needed them
(issue 44 points 1 and 4, against issue 43's limits; docs/deploy.md#limits-per-client-key).

A real mitmdump (or two on one real ``redis-server``: every worker sees one count) before a
scripted OpenAI chat upstream whose model searches, a scripted SearXNG, and a scripted vision
upstream; driven by the anthropic SDK as Claude Code's WebSearch and image turns are.

- Each search the bridge runs is one request in the key's ``rpm`` window: the search past it
  is refused in the answer (``web_search_tool_result_error``, ``too_many_requests``; Codex's
  Responses: a ``web_search_call`` with ``status: "failed"``), the backend never asked, and the
  key's next request is a 429.
- Each search's ``price`` (``search = {…, price}``) is spent from the key's budget: the search
  once it is spent is refused (``unavailable``), and the key's next request is a 402.
- A caption call's tokens and cost settle with the flow that needed it: a key's ``tpm`` window
  and budget hold them (the next request refused by each), under the vision route's price; a
  vision model nothing prices is refused on a key with a budget, before any call."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest
import redis as redis_py

from addon.plan.limits import NANO
from addon.stores.limits import keys_of
from addon.stores.redis_backend import PREFIX
from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream
from tests.e2e.route_tables import chat_route, vision_route
from tests.e2e.searching import DOCS, GITHUB, claude_search, results, searching
from tests.e2e.test_text_tools import openai_json
from tests.e2e.test_vision import captioning, image_question, png_source, recorded_png, red
from tests.redis_server import RedisServer, redis_server_or_skip
from tests.searxng_server import ScriptedSearxng

ROUTE_KEY = "sk-e2e-route-SEARCHLIM-0001"
TEAM = {
    "alice": "sk-e2e-alice-SEARCHLIM-0002",
    "bob": "sk-e2e-bob-SEARCHLIM-0003",
    "carol": "sk-e2e-carol-SEARCHLIM-0004",
    "dave": "sk-e2e-dave-SEARCHLIM-0005",
    "eve": "sk-e2e-eve-SEARCHLIM-0006",
    "frank": "sk-e2e-frank-SEARCHLIM-0007",
}
LIMITS = {
    "alice": "rpm = 2",
    "bob": 'budget_usd = 1.0, budget_period = "total"',
    "carol": "tpm = 100",
    "dave": 'budget_usd = 1.0, budget_period = "total"',
    "eve": 'budget_usd = 1.0, budget_period = "total"',
    "frank": "rpm = 2",
}
PRICE = 10_000.0
"""US dollars per million tokens on the text and vision routes: a caption call (85 input, 9
output tokens) costs $0.94, the text answer (9 input, 3 output) $0.12."""

KEY_ENV = "CB_E2E_SEARCHLIM_KEY"


def routes_toml(searxng: str, vision: int) -> str:
    """A searching route (a search costs $1) and Codex's; a text-only route captioned by a
    priced vision route; one captioned by a vision route nothing prices."""
    price = f"price = {{ input = {PRICE}, output = {PRICE} }}"
    return "".join(
        [
            chat_route(
                "search",
                KEY_ENV,
                "price = { input = 0.001, output = 0.001 }",
                "reserve_max_output = 16",
                f'search = {{ url = "{searxng}", price = 1.0 }}',
            ),
            chat_route(
                "codex",
                KEY_ENV,
                f'search = {{ url = "{searxng}" }}',
                client="openai_responses",
                path="/codex/v1/responses",
            ),
            chat_route(
                "text",
                KEY_ENV,
                price,
                "reserve_max_output = 16",
                "images = false",
                'vision = "eyes"',
            ),
            vision_route(
                "eyes", "/vision-only/*", vision, KEY_ENV, 'model_map = { "*" = "looker-1" }', price
            ),
            chat_route("blind", KEY_ENV, price, "images = false", 'vision = "dark"'),
            vision_route(
                "dark", "/vision-dark/*", vision, KEY_ENV, 'model_map = { "*" = "unpriced-looker" }'
            ),
        ]
    )


def model(rec: Recorded) -> JSONReply:
    """The chat upstream: with the search tool, it searches twice (a call per answer), then
    answers with what the second search said; without, a short answer (9 input, 3 output)."""
    body = rec.json()
    if not body.get("tools"):
        return JSONReply(red())
    fed = [m for m in body["messages"] if m["role"] == "tool"]
    if len(fed) < 2:
        return searching(f"call_s{len(fed) + 1}")
    return JSONReply(openai_json(f"Second search: {fed[-1]['content']}"))


@pytest.fixture
def searxng() -> Iterator[ScriptedSearxng]:
    with ScriptedSearxng(results(DOCS, GITHUB)) as server:
        yield server


@pytest.fixture
def vision() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        server.script = captioning
        yield server


@contextmanager
def workers(
    start_proxy: Callable[..., Proxy], store: str, options: dict[str, str]
) -> Iterator[tuple[Proxy, Proxy, RedisServer | None]]:
    """One worker in memory (both turns on it), or two on one real Redis (the second turn on
    the other worker: the counts are shared)."""
    if store == "memory":
        p = start_proxy(**options)
        yield p, p, None
        return
    with RedisServer(redis_server_or_skip()) as server:
        url = f"{server.url}?socket_timeout=5"  # a loaded machine is not Redis lost
        yield (
            start_proxy(bridge_store=url, **options),
            start_proxy(bridge_store=url, **options),
            server,
        )


@pytest.fixture
def setup(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    vision: ScriptedUpstream,
) -> dict[str, str]:
    monkeypatch.setenv(KEY_ENV, ROUTE_KEY)
    routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
    routes.write_text(routes_toml(searxng.base_url, vision.port))
    keys.write_text("".join(f'{n} = {{ key = "{k}", {LIMITS[n]} }}\n' for n, k in TEAM.items()))
    upstream.script = model
    return {"bridge_routes": str(routes), "bridge_client_keys": str(keys)}


def claude(p: Proxy, name: str, route: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=f"{p.base_url}/{route}", api_key=TEAM[name], max_retries=0, timeout=30
    )


def search(p: Proxy, name: str, stream: bool) -> anthropic.types.Message:
    """Claude Code's WebSearch request: the server tool only."""
    tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    return claude_search(claude(p, name, "search"), stream, tool, "plain-model", 64)


def hello(p: Proxy, name: str, route: str = "search") -> str:
    got = claude(p, name, route).messages.create(
        model="plain-model", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    return "".join(b.text for b in got.content if b.type == "text")


def searches_of(got: anthropic.types.Message) -> list[Any]:
    """Each search the answer shows: its results' URLs, or its error code."""
    out: list[Any] = []
    for block in got.content:
        if block.type == "web_search_tool_result":
            c = block.content
            out.append([r.url for r in c] if isinstance(c, list) else c.error_code)
    return out


def no_secret(*proxies: Proxy) -> str:
    log = "\n".join(p.log_text() for p in {id(p): p for p in proxies}.values())
    assert "Traceback" not in log
    assert not [s for s in (ROUTE_KEY, *TEAM.values()) if s in log]
    return log


URLS = [DOCS["url"], GITHUB["url"]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_search_is_a_request_of_the_keys_rpm_and_the_one_past_it_is_refused(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    searxng: ScriptedSearxng,
    setup: dict[str, str],
    store: str,
    stream: bool,
) -> None:
    """alice (``rpm = 2``): her request takes one, its first search the second; the model's
    second search is refused in the answer as Anthropic refuses one (``too_many_requests``,
    which the SDK reads and Claude Code shows), never run; her next request is a 429."""
    with workers(start_proxy, store, setup) as (first, second, _):
        got = search(first, "alice", stream)
        assert searches_of(got) == [URLS, "too_many_requests"]
        assert got.usage.server_tool_use is not None
        assert got.usage.server_tool_use.web_search_requests == 1  # the one that ran
        assert len(searxng.requests) == 1
        fed = upstream.requests[-1].json()["messages"][-1]
        assert fed["role"] == "tool" and "too_many_requests" in fed["content"]
        with pytest.raises(anthropic.RateLimitError) as err:
            hello(second, "alice")
        assert "over its rpm limit" in str(err.value)
        log = no_secret(first, second)
    assert len([x for x in log.splitlines() if "web search refused" in x]) == 1
    assert "client key 'alice' is over its rpm limit (too_many_requests)" in log


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_searchs_price_is_spent_from_the_budget_and_a_spent_one_refuses_the_next(
    start_proxy: Callable[..., Proxy],
    searxng: ScriptedSearxng,
    setup: dict[str, str],
    store: str,
    stream: bool,
) -> None:
    """bob (``budget_usd = 1.0``, a search costs $1): the first search runs and spends the
    budget; the second is refused (``unavailable``); his next request is a 402. On Redis the
    spend is the shared one."""
    with workers(start_proxy, store, setup) as (first, second, server):
        got = search(first, "bob", stream)
        assert searches_of(got) == [URLS, "unavailable"]
        assert len(searxng.requests) == 1
        if server is not None:
            raw = redis_py.Redis.from_url(server.url)
            spent = int(raw.get(keys_of(PREFIX, "bob", "total")[3]) or 0)
            assert NANO <= spent < NANO + NANO // 1000  # the search, and tokens at $0.001/M
        with pytest.raises(anthropic.APIStatusError) as err:
            hello(second, "bob")
        assert err.value.status_code == 402
        assert "has spent its budget" in str(err.value)
        log = no_secret(first, second)
    assert "client key 'bob' is over its budget limit (unavailable)" in log


def image_turn(p: Proxy, name: str, salt: bytes = b"", route: str = "text") -> str:
    """An image turn; ``salt`` after the PNG's end makes other bytes: another image to caption
    (a caption is kept by the image's hash, and a kept one costs no call)."""
    data = base64.b64encode(base64.b64decode(recorded_png()) + salt).decode()
    content = image_question(png_source(data))
    got = claude(p, name, route).messages.create(
        model="plain-model", max_tokens=16, messages=[{"role": "user", "content": content}]
    )
    return "".join(b.text for b in got.content if b.type == "text")


def wait_spent(server: RedisServer | None, client: str, at_least: int) -> None:
    """On Redis, a settle far from every limit goes with the store thread's next write (within
    a second): waited for, bounded."""
    if server is None:
        return
    raw = redis_py.Redis.from_url(server.url)
    deadline = time.monotonic() + 15
    while int(raw.get(keys_of(PREFIX, client, "total")[3]) or 0) < at_least:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_caption_calls_tokens_and_cost_settle_with_the_flow_that_needed_it(
    start_proxy: Callable[..., Proxy],
    vision: ScriptedUpstream,
    setup: dict[str, str],
    store: str,
) -> None:
    """carol (``tpm = 100``): her image turn's answer is 12 tokens, its caption call 94: the
    window holds 106, and her next request is refused. dave (``budget_usd = 1.0``): the same
    turn costs $0.12 and its caption $0.94 at the vision route's price: $1.06 spent, and his
    next request is a 402. Without the caption calls counted, both would be admitted."""
    with workers(start_proxy, store, setup) as (first, second, server):
        assert image_turn(first, "carol") == "It is red."
        with pytest.raises(anthropic.RateLimitError) as err:
            hello(second, "carol", "text")
        assert "over its tpm limit" in str(err.value)
        assert image_turn(first, "dave", b"dave") == "It is red."
        wait_spent(server, "dave", NANO)
        if server is not None:
            raw = redis_py.Redis.from_url(server.url)
            spent = int(raw.get(keys_of(PREFIX, "dave", "total")[3]) or 0)
            assert spent == round((85 + 9 + 9 + 3) * PRICE / 1e6 * NANO)
        with pytest.raises(anthropic.APIStatusError) as budget:
            hello(second, "dave", "text")
        assert budget.value.status_code == 402
        assert len(vision.requests) == 2  # one caption call each
        no_secret(first, second)


def test_an_image_turn_whose_captions_nothing_prices_is_refused_on_a_budget(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    vision: ScriptedUpstream,
    setup: dict[str, str],
) -> None:
    """eve (a budget) sends an image turn to a text-only route whose vision route's model no
    price table and no ``price`` prices: a 402 naming that route and model before any call —
    a caption is never free."""
    p = start_proxy(**setup)
    with pytest.raises(anthropic.APIStatusError) as err:
        image_turn(p, "eve", route="blind")
    assert err.value.status_code == 402
    assert "the model 'unpriced-looker' has no price" in str(err.value)
    assert "route 'dark' sets no price" in str(err.value)
    assert vision.requests == [] and upstream.requests == []
    no_secret(p)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_codexs_search_past_the_rpm_is_a_failed_web_search_call(
    start_proxy: Callable[..., Proxy],
    searxng: ScriptedSearxng,
    setup: dict[str, str],
    stream: bool,
) -> None:
    """frank (``rpm = 2``) on Codex's recorded turn (the hosted ``web_search`` beside its
    function tools): the second search is refused in the Responses shape — a
    ``web_search_call`` with ``status: "failed"`` — never run."""
    import openai
    from openai.types.responses import ResponseFunctionWebSearch

    from tests.e2e.test_web_search_codex import _params

    p = start_proxy(**setup)
    client = openai.OpenAI(
        base_url=f"{p.base_url}/codex/v1", api_key=TEAM["frank"], max_retries=0, timeout=30
    )
    if stream:
        events = list(client.responses.create(**_params(), stream=True))
        output = [e.item for e in events if e.type == "response.output_item.done"]
        assert events[-1].type == "response.completed"
    else:
        output = list(client.responses.create(**_params(), stream=False).output)
    calls = [o for o in output if isinstance(o, ResponseFunctionWebSearch)]
    assert [c.status for c in calls] == ["completed", "failed"]
    assert output[-1].type == "message"
    assert len(searxng.requests) == 1
    log = no_secret(p)
    assert "client key 'frank' is over its rpm limit (too_many_requests)" in log
