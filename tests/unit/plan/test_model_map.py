"""A route's ``model_map`` (every upstream dialect) and ``when`` conditions (issue 29).

``model_map``: the upstream gets the mapped name (Gemini: in its path), the client's answer
names the model it asked for, streamed (fast path on and off) and whole, same dialect and
across. ``when``: thinking, images, input tokens and background calls, read per client
dialect, with Claude Code 2.1.197's own background call (tests/fixtures/claude_code)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route, When
from addon.plan import FlowPlan, Incoming, RequestView, Rewrite, decide, route_for
from addon.plan.answer import AnswerState, decode_answer, encode_answer, stream_processor
from tests.e2e.harness import JSONReply, SSEReply
from tests.real.clients.loop import MODEL, answer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude_code"
CLIENTS: dict[str, tuple[str, str]] = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*:*enerateContent", "/v1beta/models/{model}:generateContent"),
}
UPSTREAMS = ("openai_chat", "anthropic", "openai_responses", "gemini")
ASKED = "claude-sonnet-4-6"
SENT = "deepseek-chat"


def body_for(client: str, model: str, **extra: Any) -> dict[str, Any]:
    if client == "gemini":
        return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **extra}
    if client == "openai_responses":
        return {"model": model, "input": "hi", **extra}
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    if client == "anthropic":
        body["max_tokens"] = 100
    return {**body, **extra}


def incoming(client: str, model: str, **extra: Any) -> Incoming:
    path = CLIENTS[client][1].format(model=model)
    return Incoming("POST", "h", path, {}, json.dumps(body_for(client, model, **extra)).encode())


def mapped_plan(client: str, upstream: str, stream: bool) -> tuple[Rewrite, FlowPlan]:
    route = Route(
        name="r",
        path=CLIENTS[client][0],
        client=client,  # type: ignore[arg-type]
        upstream=upstream,  # type: ignore[arg-type]
        model_map=(("gpt-*", "never"), ("claude-*", SENT)),
    )
    inc = incoming(client, ASKED, **({"stream": True} if stream and client != "gemini" else {}))
    if stream and client == "gemini":
        path = inc.path.replace(":generate", ":streamGenerate") + "?alt=sse"
        inc = dataclasses.replace(inc, path=path)
    d = decide(Settings(routes=(route,)), route, inc, {})
    assert isinstance(d, Rewrite), d
    return d, d.plan


def sent_model(d: Rewrite) -> str:
    if d.plan.upstream.name == "gemini":
        return d.wire.path.split("/models/", 1)[1].split(":", 1)[0]
    body = json.loads(d.body)
    return str(body["model"])


def models_in(raw: bytes) -> set[str]:
    """Every model name the client's bytes hold (``model``, ``modelVersion``, any depth)."""
    found: set[str] = set()
    texts = [ln[6:] for ln in raw.decode().splitlines() if ln.startswith("data: ")] or [
        raw.decode()
    ]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("model", "modelVersion") and isinstance(v, str):
                    found.add(v)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for text in texts:
        if text.strip() and text.strip() != "[DONE]":
            walk(json.loads(text))
    return found


@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_the_upstream_gets_the_mapped_model_and_the_client_its_own(
    client: str, upstream: str
) -> None:
    d, plan = mapped_plan(client, upstream, stream=False)
    assert sent_model(d) == SENT
    assert f"model {ASKED} → {SENT} (the route's model_map)" in d.summary
    reply = answer(upstream, False, "hello")
    assert isinstance(reply, JSONReply)
    raw = json.dumps(reply.body).encode()
    out = encode_answer(plan, decode_answer(plan, AnswerState.of(plan), raw))
    assert models_in(out) <= {ASKED} and models_in(out)
    assert MODEL.encode() not in out


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_streamed_answer_names_the_clients_model(client: str, upstream: str, fast: bool) -> None:
    d, plan = mapped_plan(client, upstream, stream=True)
    assert sent_model(d) == SENT
    plan = dataclasses.replace(plan, fast_path=fast)
    reply = answer(upstream, True, "hello there, a longer text in pieces")
    assert isinstance(reply, SSEReply)
    processor = stream_processor(plan, AnswerState.of(plan), None)
    out = b"".join(processor.feed(reply.body)) + b"".join(processor.finish())
    assert MODEL.encode() not in out
    assert models_in(out) == {ASKED}


def test_an_unmapped_model_is_left_alone_and_the_upstreams_name_kept() -> None:
    route = Route(name="r", model_map=(("gpt-*", "x"),))
    d = decide(Settings(routes=(route,)), route, incoming("openai_chat", ASKED), {})
    assert isinstance(d, Rewrite)
    assert sent_model(d) == ASKED and not d.plan.rename_answer


def test_the_first_matching_pair_wins() -> None:
    route = Route(name="r", model_map={"claude-sonnet-*": "a", "claude-*": "b"})  # type: ignore[arg-type]
    assert route.mapped_model("claude-sonnet-4-6") == "a"
    assert route.mapped_model("claude-opus-4-8") == "b"
    assert route.mapped_model("gpt-5") is None


def test_kiro_keeps_a_mapped_name_as_it_is_and_its_table_otherwise() -> None:
    mapped = Route(name="k", upstream="kiro", model_map={"claude-*": "claude-sonnet-4-5"})  # type: ignore[arg-type]
    d = decide(Settings(routes=(mapped,)), mapped, incoming("openai_chat", ASKED), {})
    assert isinstance(d, Rewrite)
    sent = json.loads(d.body)["conversationState"]["currentMessage"]["userInputMessage"]
    assert sent["modelId"] == "claude-sonnet-4-5"  # not the table's claude-sonnet-4.5
    plain = Route(name="k", upstream="kiro")
    d = decide(Settings(routes=(plain,)), plain, incoming("openai_chat", "claude-sonnet-4-5"), {})
    assert isinstance(d, Rewrite)
    sent = json.loads(d.body)["conversationState"]["currentMessage"]["userInputMessage"]
    assert sent["modelId"] == "claude-sonnet-4.5"


# ----------------------------------------------------------------------------- when


def facts(client: str, body: dict[str, Any], model: str = "m") -> Any:
    path = CLIENTS[client][1].format(model=model)
    return RequestView(json.dumps(body).encode(), path).facts(client)


IMAGE = "data:image/png;base64,iVBORw0KGgo="


@pytest.mark.parametrize(
    ("client", "body", "thinking"),
    [
        ("anthropic", {"thinking": {"type": "enabled", "budget_tokens": 2048}}, True),
        ("anthropic", {"thinking": {"type": "adaptive"}}, True),
        ("anthropic", {"output_config": {"effort": "high"}}, True),
        (
            "anthropic",
            {"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}},
            False,
        ),
        ("anthropic", {}, False),
        ("openai_chat", {"reasoning_effort": "high"}, True),
        ("openai_chat", {}, False),
        ("openai_responses", {"reasoning": {"effort": "medium"}}, True),
        ("openai_responses", {}, False),
        ("gemini", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}}, True),
        ("gemini", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}, False),
        ("gemini", {}, False),
    ],
)
def test_thinking_is_what_the_client_dialect_asks_for(
    client: str, body: dict[str, Any], thinking: bool
) -> None:
    full = {**body_for(client, "m"), **body}
    assert facts(client, full).thinking is thinking


@pytest.mark.parametrize(
    ("client", "content"),
    [
        ("openai_chat", [{"type": "image_url", "image_url": {"url": IMAGE}}]),
        (
            "anthropic",
            [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                }
            ],
        ),
        ("openai_responses", [{"type": "input_image", "image_url": IMAGE}]),
        ("gemini", [{"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]),
    ],
)
def test_images_are_seen_in_every_client_dialect(client: str, content: list[Any]) -> None:
    if client == "gemini":
        body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "x"}, *content]}]}
    elif client == "openai_responses":
        body = {"model": "m", "input": [{"role": "user", "content": content}]}
    else:
        body = body_for(client, "m")
        body["messages"] = [{"role": "user", "content": [{"type": "text", "text": "x"}, *content]}]
    assert facts(client, body).images
    assert not facts(client, body_for(client, "m")).images


def test_input_tokens_are_the_bridges_estimate() -> None:
    small = facts("openai_chat", body_for("openai_chat", "m"))
    big = body_for("openai_chat", "m")
    big["messages"][0]["content"] = "word " * 40_000
    assert small.input_tokens < 100 < 40_000 <= facts("openai_chat", big).input_tokens


def recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"claude-code-2.1.197-{name}.request.json").read_text())


@pytest.mark.parametrize(
    ("name", "background"),
    [
        pytest.param("default-title", True, id="title-main-model"),
        pytest.param("haiku-model-title", True, id="title-haiku"),
        pytest.param("default-main", False, id="main-opus"),
        pytest.param("haiku-model-main", False, id="main-sonnet"),
    ],
)
def test_claude_codes_background_calls_are_recognized(name: str, background: bool) -> None:
    rec = recorded(name)
    view = RequestView(json.dumps(rec["body"]).encode(), rec["path"])
    got = view.facts("anthropic")
    assert got is not None and got.background is background


def test_a_haiku_model_is_a_background_call_even_with_tools() -> None:
    body = body_for("anthropic", "claude-haiku-4-5", tools=[{"name": "t", "input_schema": {}}])
    assert facts("anthropic", body).background
    body["model"] = "claude-sonnet-4-6"
    assert not facts("anthropic", body).background


def test_routes_by_when_first_match_and_decide_reuses_the_decode() -> None:
    routes = (
        Route(name="bg", path="*/v1/messages", client="anthropic", when=When(background=True)),
        Route(name="think", path="*/v1/messages", client="anthropic", when=When(thinking=True)),
        Route(
            name="long", path="*/v1/messages", client="anthropic", when=When(min_input_tokens=1000)
        ),
        Route(name="main", path="*/v1/messages", client="anthropic"),
    )
    s = Settings(routes=routes)

    def route(body: dict[str, Any]) -> str:
        view = RequestView(json.dumps(body).encode(), "/v1/messages")
        r = route_for(s, "POST", "h", "/v1/messages", view)
        assert r is not None
        inc = Incoming("POST", "h", "/v1/messages", {}, view.body)
        assert isinstance(decide(s, r, inc, {}, view=view), Rewrite)
        return r.name

    title = recorded("haiku-model-title")["body"]
    main = recorded("haiku-model-main")["body"]
    assert route(title) == "bg" and route(main) == "think"
    tools = [{"name": "t", "input_schema": {"type": "object"}}]
    long = body_for("anthropic", "claude-sonnet-4-6", tools=tools)
    long["messages"][0]["content"] = "word " * 2000
    assert route(long) == "long"
    assert route(body_for("anthropic", "claude-sonnet-4-6", tools=tools)) == "main"


def test_a_body_that_cannot_be_read_never_takes_a_route_with_when() -> None:
    routes = (
        Route(name="any-when", when=When(thinking=False)),
        Route(name="empty-when", when=When()),
        Route(name="plain"),
    )
    s = Settings(routes=routes)
    assert route_for(s, "POST", "h", "/v1/chat/completions", b"not json").name == "empty-when"  # type: ignore[union-attr]
    s = Settings(routes=(routes[0], routes[2]))
    assert route_for(s, "POST", "h", "/v1/chat/completions", b"[]").name == "plain"  # type: ignore[union-attr]
    assert route_for(s, "POST", "h", "/v1/chat/completions", b'{"model": 1}').name == "plain"  # type: ignore[union-attr]
