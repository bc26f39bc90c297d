"""Error types by HTTP status, per dialect: whole bodies, the error that ends a stream, and an
upstream's own type read back (each dialect's ``errors`` table).

Sources: Anthropic's errors page and SDK types (400 invalid_request_error … 529
overloaded_error); OpenAI's error codes guide and the bodies its API returns (4xx
``invalid_request_error``, 429 ``requests`` + code ``rate_limit_exceeded``, 5xx
``server_error``; a failed response's code from the SDK's ``ResponseError.code`` list);
Google's API error codes (``google.rpc.Code`` and its HTTP mapping).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import ClientError, MessageStart, StreamError, TextDelta
from addon.plan import FlowPlan
from addon.plan.errors import error_body
from addon.stream.whole import StreamFailed

STATUSES = (400, 401, 402, 403, 404, 413, 429, 500, 502, 503, 504, 529)

OPENAI = {s: "requests" if s == 429 else "server_error" if s >= 500 else "invalid_request_error"
          for s in STATUSES}  # fmt: skip
EXPECTED: dict[str, dict[int, str]] = {
    "anthropic": {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        502: "api_error",
        503: "overloaded_error",
        504: "timeout_error",
        529: "overloaded_error",
    },
    "openai_chat": OPENAI,
    "openai_responses": OPENAI,
    "gemini": {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        402: "INVALID_ARGUMENT",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        413: "INVALID_ARGUMENT",
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        502: "UNAVAILABLE",
        503: "UNAVAILABLE",
        504: "DEADLINE_EXCEEDED",
        529: "UNAVAILABLE",
    },
}
EXPECTED["gemini_code_assist"] = EXPECTED["gemini"]
FAILED_CODE = {s: "rate_limit_exceeded" if s == 429 else "server_error" if s >= 500
               else "invalid_prompt" for s in STATUSES}  # fmt: skip
"""A failed Responses stream's ``response.error.code`` (the SDK's closed list)."""

CASES = [
    pytest.param(client, status, kind, id=f"{client}-{status}")
    for client, table in EXPECTED.items()
    for status, kind in table.items()
]


def body_type(client: str, body: dict[str, Any]) -> str:
    error = body["error"]
    if client == "anthropic":
        assert body["type"] == "error" and set(error) == {"type", "message"}
        return str(error["type"])
    if client.startswith("gemini"):
        assert set(error) == {"code", "message", "status"}
        return str(error["status"])
    assert set(error) == {"message", "type", "param", "code"}
    return str(error["type"])


@pytest.mark.parametrize(("client", "status", "kind"), CASES)
def test_a_whole_error_body_has_the_type_the_official_api_uses(
    client: str, status: int, kind: str
) -> None:
    dialect = DIALECTS[client]
    assert dialect.error_type(status) == kind
    body = dialect.encode_error(ClientError("no", status=status))
    assert body_type(client, body) == kind
    if client.startswith("gemini"):
        assert body["error"]["code"] == status
    if client.startswith("openai"):
        assert body["error"]["code"] == ("rate_limit_exceeded" if status == 429 else None)


def stream_error_type(client: str, status: int) -> str:
    """The type the error that ends a client's stream carries, for an upstream error of
    another dialect with this status."""
    enc = DIALECTS[client].stream_encoder()
    pairs = [p for e in (MessageStart("kiro"), TextDelta("hi")) for p in enc.feed(e)]
    pairs += enc.feed(StreamError("upstream says no", "SomeException", "kiro", status=status))
    event, data = pairs[-1]
    last = json.loads(data)
    if client == "anthropic":
        assert event == "error" and last["error"]["message"] == "upstream says no"
        return str(last["error"]["type"])
    if client == "openai_responses":
        assert event == "response.failed"
        error = last["response"]["error"]
        assert error == {"code": FAILED_CODE[status], "message": "upstream says no"}
        return OPENAI[status]  # the type of the same error as a whole body
    if client.startswith("gemini"):
        assert last["error"]["code"] == status
        return str(last["error"]["status"])
    assert last["error"]["message"] == "upstream says no"
    assert last["error"]["code"] == ("rate_limit_exceeded" if status == 429 else None)
    return str(last["error"]["type"])


@pytest.mark.parametrize(("client", "status", "kind"), CASES)
def test_the_error_that_ends_a_stream_has_the_same_type(
    client: str, status: int, kind: str
) -> None:
    assert stream_error_type(client, status) == kind


def test_the_bridges_own_stream_errors_have_a_status() -> None:
    # A stream the upstream broke off: 503, retryable by every client (issue 42).
    for cause in ("upstream_cut", "upstream_reset", "upstream_idle"):
        assert StreamError("cut", cause).http_status == 503
    assert stream_error_type("anthropic", 503) == "overloaded_error"
    assert StreamError("not a stream", "upstream_error").http_status == 502
    assert StreamError("ours", "bridge_stream_error").http_status == 500
    assert StreamError("theirs", "BrandNewException", "kiro").http_status == 502
    assert stream_error_type("anthropic", 502) == "api_error"


# --------------------------------------------------------------------------- reading upstreams


def feed(upstream: str, data: dict[str, Any], event: str | None = None) -> StreamError:
    dec = DIALECTS[upstream].stream_decoder()
    (error,) = [e for e in dec.feed(json.dumps(data), event) if isinstance(e, StreamError)]
    return error


@pytest.mark.parametrize(
    ("upstream", "data", "event", "status"),
    [
        pytest.param("anthropic", {"type": "error", "error": {"type": "rate_limit_error",
                     "message": "m"}}, "error", 429, id="anthropic-429"),
        pytest.param("anthropic", {"type": "error", "error": {"type": "overloaded_error",
                     "message": "m"}}, "error", 529, id="anthropic-529"),
        pytest.param("anthropic", {"type": "error", "error": {"type": "api_error",
                     "message": "m"}}, "error", 500, id="anthropic-500"),
        pytest.param("openai_chat", {"error": {"message": "m", "type": "requests",
                     "code": "rate_limit_exceeded"}}, None, 429, id="openai-429"),
        pytest.param("openai_chat", {"error": {"message": "m", "type": "invalid_request_error",
                     "code": "invalid_api_key"}}, None, 401, id="openai-401"),
        pytest.param("openai_chat", {"error": {"message": "m", "type": "server_error"}}, None,
                     500, id="openai-500"),
        pytest.param("openai_chat", {"error": {"message": "m", "type": "rate_limit_error"},
                     "status_code": 429}, None, 429, id="litellm-429"),
        pytest.param("openai_chat", {"error": {"message": "m", "code": "503"}}, None, 503,
                     id="gateway-code-number"),
        pytest.param("openai_responses", {"type": "error", "code": "rate_limit_exceeded",
                     "message": "m"}, "error", 429, id="responses-error-event"),
        pytest.param("openai_responses", {"type": "response.failed", "response": {"id": "r",
                     "status": "failed", "error": {"code": "invalid_prompt", "message": "m"}}},
                     "response.failed", 400, id="responses-failed"),
        pytest.param("gemini", {"error": {"code": 429, "message": "m",
                     "status": "RESOURCE_EXHAUSTED"}}, None, 429, id="gemini-code"),
        pytest.param("gemini", {"error": {"message": "m", "status": "UNAVAILABLE"}}, None, 503,
                     id="gemini-status-name"),
    ],
)  # fmt: skip
def test_an_upstreams_stream_error_is_read_with_its_status(
    upstream: str, data: dict[str, Any], event: str | None, status: int
) -> None:
    assert feed(upstream, data, event).status == status


@pytest.mark.parametrize(
    ("kind", "status"),
    [("ThrottlingException", 429), ("ValidationException", 400),
     ("AccessDeniedException", 403), ("ServiceUnavailableException", 503),
     ("InternalServerException", 500), ("BrandNewException", 502)],
)  # fmt: skip
def test_a_kiro_exception_frame_keeps_its_status_for_a_whole_answer(kind: str, status: int) -> None:
    from addon.dialects.kiro.stream import KiroStreamDecoder

    frame = json.dumps({"exceptionType": kind, "message": "m"})
    (error,) = [
        e for e in KiroStreamDecoder().feed(frame, ":exception") if isinstance(e, StreamError)
    ]
    assert StreamFailed(error).status == status


@pytest.mark.parametrize(
    ("upstream", "body", "status"),
    [
        ("openai_chat", {"error": {"type": "requests", "code": "rate_limit_exceeded"}}, 429),
        ("openai_chat", {"error": {"type": "invalid_request_error"}}, 400),
        ("openai_chat", {"error": "plain"}, None),
        ("openai_responses", {"error": {"type": "server_error"}}, 500),
        ("anthropic", {"type": "error", "error": {"type": "overloaded_error"}}, 529),
        ("gemini", {"error": {"code": 403, "status": "PERMISSION_DENIED"}}, 403),
        ("gemini", [{"error": {"status": "RESOURCE_EXHAUSTED"}}], 429),
        ("kiro", {"__type": "com.amazon.aws.codewhisperer#ThrottlingException"}, 429),
        ("kiro", {"message": "Improperly formed request.", "reason": None}, None),
    ],
)
def test_an_upstreams_error_body_names_its_status(upstream: str, body: Any, status: int) -> None:
    assert DIALECTS[upstream].error_status(body) == status


# --------------------------------------------------------------------------- re-shaped


def plan(client: str, upstream: str) -> FlowPlan:
    route = Route(name="r", client=client, upstream=upstream)
    return FlowPlan(route, DIALECTS[client], DIALECTS[upstream])


PAIRS = [
    (c, u)
    for c in ("openai_chat", "anthropic", "openai_responses", "gemini")
    for u in ("openai_chat", "anthropic", "openai_responses", "gemini", "kiro")
    if c != u
]


@pytest.mark.parametrize(("client", "upstream"), PAIRS)
@pytest.mark.parametrize("status", [400, 401, 429, 500, 502, 503])
def test_a_re_shaped_upstream_error_keeps_its_status_and_takes_its_type(
    client: str, upstream: str, status: int
) -> None:
    body, message = error_body(plan(client, upstream), status, b'{"message": "no way"}')
    assert body_type(client, json.loads(body)) == EXPECTED[client][status]
    assert "no way" in message


@pytest.mark.parametrize("client", ["openai_chat", "anthropic", "openai_responses", "gemini"])
def test_the_upstreams_own_type_wins_where_it_names_another_status(client: str) -> None:
    # A Kiro throttle sent as a 400: still a rate limit for the client, its status kept.
    throttle = b'{"__type": "x#ThrottlingException", "message": "slow down"}'
    body, _ = error_body(plan(client, "kiro"), 400, throttle)
    assert body_type(client, json.loads(body)) == EXPECTED[client][429]
    if client.startswith("gemini"):
        assert json.loads(body)["error"]["code"] == 400
