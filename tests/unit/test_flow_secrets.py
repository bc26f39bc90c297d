"""A flow's exact credential values, redacted from what the bridge writes (``Secrets``).

A key with no key's shape ("SECRETKEY456") that an upstream echoes escapes the shape-based
``redact``; the bridge knows the flow's own credentials and redacts those values wherever
they appear: as they are, JSON-escaped, URL-encoded, and cut at the end of a quote.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.model import StreamError, TextDelta
from addon.plan import Incoming, Reject, Rewrite, UpstreamError, decide
from addon.plan.answer import AnswerState, stream_processor
from addon.plan.errors import error_body, unreadable_answer, upstream_error
from addon.plan.wire_request import secret_values
from addon.redact import REDACTED, Secrets, clean
from addon.shell.flows import Flows
from addon.stream.stages import PASSES_TEXT, RedactErrorStage

KEY = "SECRETKEY456"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(KEY, f"Incorrect API key provided: {KEY}.", id="plain"),
        pytest.param('SECRET"KEY\\456', json.dumps({"m": 'key SECRET"KEY\\456'}), id="json"),
        pytest.param("SECRET/KEY/456", '{"m": "key SECRET\\/KEY\\/456"}', id="json-slash"),
        pytest.param("SECRETKEY€456", json.dumps({"m": "key SECRETKEY€456"}), id="json-ascii"),
        pytest.param("SECRET KEY+456", "GET /x?key=SECRET%20KEY%2B456", id="url"),
        pytest.param(KEY, f"upstream answered HTTP 401: key {KEY[:7]}", id="cut-at-end"),
        pytest.param(KEY, f"upstream answered HTTP 401: key {KEY[:6]}...", id="cut-with-dots"),
    ],
)
def test_every_form_of_the_value_is_redacted(value: str, text: str) -> None:
    out = Secrets([value])(text)
    assert REDACTED in out
    for fragment in (value, value[:5], json.dumps(value)[1:-1]):
        assert fragment not in out, out


def test_short_placeholders_are_left_alone_and_bytes_and_data_are_redacted() -> None:
    assert not Secrets(["x", "none", "ollama", None, ""])
    s = Secrets([f"  {KEY} "])
    assert s(f"Bearer x and {KEY}") == f"Bearer x and {REDACTED}"
    assert s.bytes(f'{{"error": "bad {KEY}"}}'.encode()) == b'{"error": "bad [REDACTED]"}'
    data: Any = {"reason": f"echo {KEY}", KEY: [f"a {KEY}", 1, None]}
    assert s.data(data) == {"reason": f"echo {REDACTED}", REDACTED: [f"a {REDACTED}", 1, None]}
    assert KEY not in repr(s) and "SECRET" not in repr(s)
    # What ``clean`` leaves (no key shape) the exact value still catches.
    assert KEY in clean(f"Incorrect API key provided: {KEY}")


def test_the_registry_redacts_with_every_running_flows_secrets_and_forgets() -> None:
    reg = Flows(limit=2)
    reg.add_secrets("a", Secrets(["AAAAAAAAAA1"]))
    reg.add_secrets("b", Secrets(["BBBBBBBBBB2"]))
    assert reg.redact("AAAAAAAAAA1 BBBBBBBBBB2") == f"{REDACTED} {REDACTED}"
    reg.add_secrets("c", Secrets(["CCCCCCCCCC3"]))  # past the bound: the oldest is forgotten
    assert len(reg) == 2 and not reg.secrets("a") and reg.secrets("c")
    assert reg.redact("AAAAAAAAAA1") == "AAAAAAAAAA1"  # its secrets forgotten with it
    reg.end("b")
    reg.end("c")
    assert reg.redact("BBBBBBBBBB2") == "BBBBBBBBBB2" and len(reg) == 0


def test_the_flows_credentials_are_every_key_it_carries() -> None:
    headers = {
        "authorization": "Bearer AUTHKEY-123456",
        "x-api-key": "XAPIKEY-123456",
        "x-goog-api-key": "GOOGKEY-123456",
        "content-type": "application/json",
    }
    s = secret_values(headers, (("key", "QUERYKEY-123456"), ("alt", "sse")), "ROUTEKEY-123456")
    text = "AUTHKEY-123456 XAPIKEY-123456 GOOGKEY-123456 QUERYKEY-123456 ROUTEKEY-123456 sse"
    assert s(text) == " ".join([REDACTED] * 5) + " sse"
    assert "application/json" in s("application/json")


# --------------------------------------------------------------------------- error bodies


def rewrite(client: str, upstream: str) -> Rewrite:
    route = Route(name="r", path="*", client=client, upstream=upstream)  # type: ignore[arg-type]
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": KEY, "authorization": f"Bearer {KEY}"}
    incoming = Incoming("POST", "h", "/v1/messages", headers, json.dumps(body).encode())
    secrets = secret_values(incoming.headers, incoming.query)
    d = decide(Settings(routes=(route,)), route, incoming, {}, secrets=secrets)
    assert isinstance(d, Rewrite)
    return d


def test_error_bodies_the_bridge_builds_never_hold_the_key() -> None:
    plan = rewrite("anthropic", "openai_chat").plan
    echoed = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    body, _ = error_body(plan, 401, echoed)
    assert KEY not in body.decode() and REDACTED in json.loads(body)["error"]["message"]
    assert KEY not in error_body(plan, 401, f"<html>bad key {KEY}</html>".encode())[0].decode()
    assert KEY not in upstream_error(plan, UpstreamError(f"echo {KEY}", 403)).decode()
    assert KEY not in unreadable_answer(plan, f"not JSON: {KEY}").decode()
    assert KEY not in repr(plan) and KEY not in json.dumps(plan.meta())


def test_the_error_event_that_ends_a_stream_never_holds_the_key() -> None:
    plan = rewrite("anthropic", "openai_chat").plan
    chunk = {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error",
                       "code": "invalid_api_key"}}  # fmt: skip
    text = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"text {KEY}"}}]}  # fmt: skip
    raw = f"data: {json.dumps(text)}\n\ndata: {json.dumps(chunk)}\n\n".encode()
    p = stream_processor(plan, AnswerState.of(plan), None)
    out = b"".join([*p.feed(raw), *p.finish()]).decode()
    assert f"text {KEY}" in out  # the model's own text is the client's answer: untouched
    error = json.loads(out.strip().split("\n")[-1].removeprefix("data: "))
    assert error["error"] == {"type": "authentication_error",
                              "message": f"Incorrect API key provided: {REDACTED}"}  # fmt: skip


def test_the_stage_passes_text_and_only_rewrites_errors() -> None:
    stage = RedactErrorStage(Secrets([KEY]))
    assert stage.text_lane is PASSES_TEXT
    assert stage.feed(TextDelta(KEY)) == [TextDelta(KEY)]
    (error,) = stage.feed(StreamError(f"no {KEY}", "x", "openai_chat", {"raw": KEY}, 401))
    assert isinstance(error, StreamError)
    assert (error.message, error.status, error.raw) == (f"no {REDACTED}", 401, {"raw": KEY})
    assert stage.finish() == []


def test_the_processors_own_error_quoting_the_upstream_never_holds_the_key() -> None:
    # A stream that turns into plain text midway: the error event quotes it.
    plan = rewrite("anthropic", "openai_chat").plan
    text = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": "Hel"}}]}  # fmt: skip
    p = stream_processor(plan, AnswerState.of(plan), None)
    raw = f"data: {json.dumps(text)}\n\n".encode() + f"Bad key {KEY}\n".encode()
    out = b"".join([*p.feed(raw), *p.finish()]).decode()
    assert "cursor-bridge could not read the upstream's stream" in out
    assert KEY not in out and "Bad key [REDACTED]" in out


def test_flows_sharing_a_key_keep_it_redacted_until_the_last_is_over() -> None:
    reg = Flows()
    reg.add_secrets("a", Secrets([KEY]))
    reg.add_secrets("b", Secrets([KEY]))
    reg.add_secrets("b", Secrets([KEY]))  # added again: still one flow
    reg.end("a")
    assert reg.redact(KEY) == REDACTED
    reg.end("b")
    assert reg.redact(KEY) == KEY


def test_a_few_first_characters_at_the_end_of_a_text_are_left_alone() -> None:
    assert Secrets(["testkey-0123"])("the last word is test") == "the last word is test"


def test_a_400_the_bridge_answers_itself_never_quotes_the_key() -> None:
    route = Route(name="r", path="*", client="anthropic", upstream="openai_chat")
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": KEY, "input_schema": {}}, {"name": KEY, "input_schema": {}}]}  # fmt: skip
    incoming = Incoming("POST", "h", "/v1/messages", {"x-api-key": KEY}, json.dumps(body).encode())
    secrets = secret_values(incoming.headers, incoming.query)
    d = decide(Settings(routes=(route,)), route, incoming, {}, secrets=secrets)
    assert isinstance(d, Reject) and d.status == 400
    assert KEY not in d.body.decode() and KEY not in d.message and REDACTED in d.message
