"""What the bridge does with a flow, decided with plain values (``addon.plan``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.model import UnsupportedShape
from addon.plan import (
    Incoming,
    Pass,
    Reject,
    Rewrite,
    decide,
    dump,
    internal_error,
    load_json,
    route_for,
)
from addon.plan.answer import AnswerState, decode_answer
from addon.plan.errors import error_body, unreadable_answer

KEY = "sk-SECRET-route-key"
ANTHROPIC_BODY: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "hi"}],
    "context_management": {"edits": []},
}


def incoming(
    path: str, body: bytes | dict[str, Any], method: str = "POST", **headers: str
) -> Incoming:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Incoming(
        method, "api.example.com", path, {k.replace("_", "-"): v for k, v in headers.items()}, raw
    )


def run(inc: Incoming, settings: Settings | None = None, env: dict[str, str] | None = None) -> Any:
    s = settings or Settings()
    route = route_for(s, inc.method, inc.host, inc.path)
    if route is None:
        return Pass()
    return decide(s, route, inc, env or {})


@pytest.mark.parametrize(
    ("method", "path"),
    [("HEAD", "/"), ("GET", "/v1/models"), ("POST", "/v1/embeddings"), ("GET", "/v1/messages")],
)
def test_probes_and_other_paths_are_not_the_bridges(method: str, path: str) -> None:
    assert run(incoming(path, b"", method=method)) == Pass()


def test_unreadable_body_passes_on_the_same_dialect() -> None:
    d = run(incoming("/v1/chat/completions", b"not json"))
    assert isinstance(d, Pass) and d.reason and "not a JSON object" in d.reason


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1]", json.dumps({"model": "m", "messages": "nope"}).encode()],
)
def test_unreadable_body_on_a_dialect_change_gets_a_400_in_the_clients_dialect(body: bytes) -> None:
    d = run(incoming("/v1/messages", body))
    assert isinstance(d, Reject) and d.status == 400
    error = json.loads(d.body)
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "could not translate this anthropic request" in error["error"]["message"]


def test_deep_nesting_is_a_decision_not_a_traceback() -> None:
    deep = b'{"model":"m","messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert isinstance(run(incoming("/v1/chat/completions", deep)), Pass)
    assert isinstance(run(incoming("/v1/messages", deep)), Reject)


def test_anthropic_request_is_rewritten_for_an_openai_upstream() -> None:
    d = run(
        incoming("/v1/messages?beta=true", ANTHROPIC_BODY, x_api_key=KEY, anthropic_version="1")
    )
    assert isinstance(d, Rewrite)
    assert d.wire.path == "/v1/chat/completions" and d.wire.query == ()
    assert d.wire.body["messages"] == [{"role": "user", "content": "hi"}]
    assert dict(d.wire.set_headers)["authorization"] == f"Bearer {KEY}"
    assert "anthropic-only fields not sent: context_management" in d.summary
    meta = json.dumps(d.plan.meta())
    assert KEY not in meta + d.summary + repr(d)


def test_a_route_key_from_a_missing_variable_is_a_500_naming_the_variable() -> None:
    s = Settings(routes=(Route(name="gw", api_key_env="GW_KEY"),))
    d = run(incoming("/v1/chat/completions", {"model": "m", "messages": []}), s)
    assert isinstance(d, Reject) and d.status == 500
    assert "GW_KEY" in json.loads(d.body)["error"]["message"]
    ok = run(incoming("/v1/chat/completions", {"model": "m", "messages": []}), s, {"GW_KEY": KEY})
    assert isinstance(ok, Rewrite)
    assert dict(ok.wire.set_headers) == {"authorization": f"Bearer {KEY}"}


def test_reasoning_off_keeps_thinking_requests_away_from_the_upstream() -> None:
    body = {**ANTHROPIC_BODY, "thinking": {"type": "enabled", "budget_tokens": 2000}}
    on = run(incoming("/v1/messages", body))
    s = Settings(
        routes=(Route(name="m", path="*/v1/messages", client="anthropic", reasoning="off"),)
    )
    off = run(incoming("/v1/messages", body), s)
    assert isinstance(on, Rewrite) and isinstance(off, Rewrite)
    assert "reasoning_effort" not in off.wire.body
    assert "reasoning request not sent" in off.summary


def test_reasoning_on_lets_a_model_off_the_list_think_on_an_anthropic_upstream() -> None:
    body = {
        **ANTHROPIC_BODY,
        "model": "house-model",
        "thinking": {"type": "enabled", "budget_tokens": 2000},
    }
    routes = {
        policy: Settings(
            routes=(
                Route(
                    name="m",
                    path="*/v1/messages",
                    client="anthropic",
                    upstream="anthropic",
                    reasoning=policy,
                ),
            )
        )
        for policy in ("auto", "on")
    }
    auto = run(incoming("/v1/messages", body), routes["auto"])
    on = run(incoming("/v1/messages", body), routes["on"])
    assert isinstance(auto, Rewrite) and isinstance(on, Rewrite)
    assert "thinking" not in json.loads(auto.body)
    assert "house-model is not known to think" in auto.summary
    assert json.loads(on.body)["thinking"] == {"type": "enabled", "budget_tokens": 2000}


def test_a_lone_surrogate_still_gives_an_answer() -> None:
    tool = {"name": "\ud83d", "input_schema": {"type": "object"}}
    body = {"model": "m", "max_tokens": 5, "messages": [], "tools": [tool, tool]}
    raw = json.dumps(body).encode()  # ASCII escapes: valid JSON holding a lone surrogate
    d = run(incoming("/v1/messages", raw))
    assert isinstance(d, Reject) and d.status == 400
    assert "declared twice" in json.loads(d.body)["error"]["message"]


def test_dump_writes_strict_utf8_json() -> None:
    assert dump({"a": "é"}) == '{"a":"é"}'.encode()
    assert dump({"a": "\ud83d"}) == b'{"a":"\\ud83d"}'


# --------------------------------------------------------------------------- strict JSON (issue 8)

NON_STRICT = [
    pytest.param(b'{"model":"m","temperature":NaN,"messages":[]}', id="NaN"),
    pytest.param(b'{"model":"m","temperature":Infinity,"messages":[]}', id="Infinity"),
    pytest.param(b'{"model":"m","temperature":-Infinity,"messages":[]}', id="-Infinity"),
    pytest.param(b'{"model":"m","temperature":1e400,"messages":[]}', id="1e400"),
    pytest.param(b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],'
                 b'"metadata":{"a":[-1e999]}}', id="deep-1e999"),
]  # fmt: skip


@pytest.mark.parametrize("raw", NON_STRICT)
def test_a_body_that_is_not_strict_json_passes_on_the_same_dialect(raw: bytes) -> None:
    d = run(incoming("/v1/chat/completions", raw))
    assert isinstance(d, Pass) and d.reason and "not a JSON object" in d.reason


@pytest.mark.parametrize("raw", NON_STRICT)
def test_a_body_that_is_not_strict_json_is_a_400_on_a_dialect_change(raw: bytes) -> None:
    d = run(incoming("/v1/messages", raw))
    assert isinstance(d, Reject) and d.status == 400
    assert json.loads(d.body)["error"]["type"] == "invalid_request_error"


def test_load_json_is_strict_and_dump_never_writes_non_strict_json() -> None:
    for raw in (b"NaN", b"[Infinity]", b'{"a": -Infinity}', b"1e400", b"", b"\xff"):
        with pytest.raises(ValueError):
            load_json(raw)
    assert load_json(b'{"a": 1e300, "b": 12345678901234567890}') == {
        "a": 1e300,
        "b": 12345678901234567890,
    }
    # What it writes is strict JSON whatever it is given (no value read by load_json is
    # ever NaN; were one there, it would be written as null, never as NaN).
    for value in (float("nan"), float("inf"), {"a": [float("-inf")]}):
        assert b"NaN" not in dump(value) and b"Infinity" not in dump(value)
        load_json(dump(value))


def test_an_internal_error_is_a_decision_never_an_exception() -> None:
    same = Settings().routes[0]
    change = Settings().routes[1]
    p = internal_error(same, TypeError("boom key=abc \ud83d"))
    assert (
        isinstance(p, Pass)
        and p.reason == "internal error (TypeError: boom key=[REDACTED] \\ud83d)"
    )
    r = internal_error(change, RecursionError("deep"))
    assert isinstance(r, Reject) and r.status == 500
    error = json.loads(r.body)
    assert (
        error["type"] == "error"
        and "cursor-bridge failed on this anthropic request" in (error["error"]["message"])
    )


def test_an_upstream_error_of_any_shape_is_re_shaped() -> None:
    d = run(incoming("/v1/messages", ANTHROPIC_BODY))
    assert isinstance(d, Rewrite)
    for raw in (b"[" * 100_000, b'{"error": NaN}', b"\xff\xfe", b"", b"<html>" + b"x" * 10_000):
        body, message = error_body(d.plan, 502, raw)
        error = json.loads(body)
        assert error["type"] == "error" and error["error"]["message"] == message
        assert len(message) < 600
    body, message = error_body(d.plan, 401, b'{"error": {"message": "bad key \\ud83d"}}')
    assert message == "bad key \ud83d" and json.loads(body)["error"]["message"] == message


def test_an_unreadable_answer_becomes_a_502_in_the_clients_dialect() -> None:
    d = run(incoming("/v1/messages", ANTHROPIC_BODY))
    assert isinstance(d, Rewrite)
    for raw in (b'{"choices": NaN}', b"[" * 100_000 + b"]" * 100_000, b"<html>", b"[]"):
        with pytest.raises((ValueError, UnsupportedShape, RecursionError)):
            decode_answer(d.plan, AnswerState.of(d.plan), raw)
    error = json.loads(unreadable_answer(d.plan, "why"))
    assert error["error"]["type"] == "api_error" and error["error"]["message"].endswith(": why")


# --------------------------------------------------------------------------- fields kept (issue 8)


@pytest.mark.parametrize(
    ("path", "base", "extra"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]},
         {"stream": False, "tool_choice": None, "tools": None, "temperature": None,
          "n": 1, "logprobs": False, "metadata": {}, "stop": []}),
        ("/v1/messages", {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]},
         {"stream": False, "system": "", "temperature": None, "stop_sequences": [], "tools": [],
          "metadata": {}, "top_k": None}),
        ("/v1/responses", {"model": "m", "input": "x"},
         {"stream": False, "store": False, "instructions": None, "reasoning": None,
          "max_output_tokens": None, "include": [], "tools": [], "parallel_tool_calls": False}),
    ],
)  # fmt: skip
def test_every_field_the_client_set_reaches_a_same_dialect_upstream(
    path: str, base: dict[str, Any], extra: dict[str, Any]
) -> None:
    dialect = {"/v1/chat/completions": "openai_chat", "/v1/messages": "anthropic"}.get(
        path, "openai_responses"
    )
    # keep: the client's breakpoints only (an Anthropic upstream's default adds the bridge's)
    route = Route(name="same", path="*", client=dialect, upstream=dialect, cache_control="keep")  # type: ignore[arg-type]
    body = {**base, **extra}
    d = run(incoming(path, body), Settings(routes=(route,)))
    assert isinstance(d, Rewrite)
    assert json.loads(d.body) == body == d.wire.body


def test_explicit_empties_are_not_sent_to_another_dialect() -> None:
    body = {**ANTHROPIC_BODY, "stream": False, "system": "", "stop_sequences": []}
    d = run(incoming("/v1/messages", body))
    assert isinstance(d, Rewrite)
    assert "system" not in d.wire.body and "stop_sequences" not in d.wire.body


def _route(client: str, upstream: str) -> Settings:
    return Settings(
        routes=(Route(name="x", path="*", client=client, upstream=upstream),)  # type: ignore[arg-type]
    )


def test_fields_both_dialects_have_cross_a_dialect_change() -> None:
    """seed and the penalties between OpenAI chat and Gemini, service_tier between the two
    OpenAI dialects; where the upstream has no such field it is named in the notes."""
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.25,
        "service_tier": "flex",
    }
    to_gemini = run(incoming("/v1/chat/completions", chat), _route("openai_chat", "gemini"))
    assert isinstance(to_gemini, Rewrite)
    gc = json.loads(to_gemini.body)["generationConfig"]
    assert (gc["seed"], gc["presencePenalty"], gc["frequencyPenalty"]) == (7, 0.5, -0.25)
    gemini = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"seed": 3, "presencePenalty": 1, "frequencyPenalty": 0.5},
    }
    to_chat = run(
        incoming("/v1beta/models/g:generateContent", gemini), _route("gemini", "openai_chat")
    )
    assert isinstance(to_chat, Rewrite)
    sent = json.loads(to_chat.body)
    assert (sent["seed"], sent["presence_penalty"], sent["frequency_penalty"]) == (3, 1, 0.5)
    responses = {"model": "m", "input": "hi", "service_tier": "priority"}
    tiered = run(incoming("/v1/responses", responses), _route("openai_responses", "openai_chat"))
    assert isinstance(tiered, Rewrite)
    assert json.loads(tiered.body)["service_tier"] == "priority"
    back = run(incoming("/v1/chat/completions", chat), _route("openai_chat", "openai_responses"))
    assert isinstance(back, Rewrite)
    assert json.loads(back.body)["service_tier"] == "flex"
    assert "seed not sent (the Responses API has no such field)" in back.summary
    to_claude = run(incoming("/v1/chat/completions", chat), _route("openai_chat", "anthropic"))
    assert isinstance(to_claude, Rewrite)
    body = json.loads(to_claude.body)
    assert not {"seed", "presence_penalty", "service_tier"} & set(body)
    assert "service_tier not sent (the Messages API has no such field)" in to_claude.summary


def test_a_query_that_is_not_utf8_survives_the_trip_back() -> None:
    from urllib.parse import urlencode

    inc = incoming("/v1/x?alt=sse&a=%FF&b=\udcfe", b"{}")
    assert inc.query == (("alt", "sse"), ("a", "\udcff"), ("b", "\udcfe"))
    assert urlencode(inc.query, errors="surrogateescape") == "alt=sse&a=%FF&b=%FE"


def test_the_plan_is_frozen_and_the_answer_side_keeps_its_own_state() -> None:
    import dataclasses

    d = run(incoming("/v1/messages", ANTHROPIC_BODY, x_api_key=KEY, anthropic_version="1"))
    assert isinstance(d, Rewrite)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.plan.stream = True  # type: ignore[misc]
    state = AnswerState.of(d.plan)
    assert state.notes == d.plan.request_notes and state.notes is not d.plan.request_notes
    state.notes["an answer's change"] += 1
    assert state.answer_notes(d.plan) == {"an answer's change": 1}
    assert "an answer's change" not in d.plan.request_notes
