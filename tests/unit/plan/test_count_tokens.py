"""Anthropic's count_tokens, decided with plain values (``addon.plan.count_tokens``)."""

from __future__ import annotations

import json

from addon.config.routes import Route
from addon.plan.count_tokens import (
    CountLocally,
    CountUpstream,
    count_answer,
    count_request,
    count_route,
)

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello there"}]})
PATH = "/v1/messages/count_tokens"


def route(upstream: str, client: str = "anthropic") -> Route:
    return Route(name="r", path="*/v1/messages", client=client, upstream=upstream)  # type: ignore[arg-type]


def test_only_a_client_dialect_with_the_endpoint_is_counted() -> None:
    assert count_route((route("openai_chat"),), "POST", "h", PATH) is not None
    assert count_route((route("openai_chat"),), "GET", "h", PATH) is None
    assert count_route((route("openai_chat"),), "POST", "h", "/v1/messages") is None
    chat = Route(name="c", path="*/v1/messages", client="openai_chat", upstream="openai_chat")
    assert count_route((chat,), "POST", "h", PATH) is None


def test_kiro_is_answered_at_once_with_the_estimate() -> None:
    got = count_request(route("kiro"), PATH, BODY.encode(), {}, (), {})
    assert isinstance(got, CountLocally)
    assert json.loads(got.body)["input_tokens"] > 0 and "Kiro" in got.comment


def test_a_body_that_is_not_json_goes_on_as_it_came() -> None:
    assert count_request(route("openai_chat"), PATH, b"{nope", {}, (), {}) is None


def test_a_missing_endpoint_is_answered_with_the_estimate_other_errors_go_on() -> None:
    sent = count_request(route("openai_chat"), PATH, BODY.encode(), {"x-api-key": "k"}, (), {})
    assert isinstance(sent, CountUpstream) and sent.path is None and sent.counter is None
    answer = count_answer(sent, 404, b"")
    assert answer is not None and answer.estimated and answer.status == 200
    assert json.loads(answer.body) == {"input_tokens": sent.estimate.tokens}
    assert count_answer(sent, 401, b'{"error": "no"}') is None
    assert count_answer(sent, 200, b'{"input_tokens": 3}') is None


def test_gemini_counts_itself_and_its_errors_are_re_shaped() -> None:
    sent = count_request(route("gemini"), PATH, BODY.encode(), {}, (), {})
    assert isinstance(sent, CountUpstream) and sent.counter is not None
    assert sent.path is not None and sent.path.endswith(":countTokens") and sent.body
    answer = count_answer(sent, 200, b'{"totalTokens": 7}')
    assert answer is not None and json.loads(answer.body) == {"input_tokens": 7}
    error = count_answer(sent, 400, b'{"error": {"message": "bad", "code": 400}}')
    assert error is not None and error.status == 400
    assert json.loads(error.body)["type"] == "error"
