"""Issue 35: an answer's prompt-cache reads and writes in the flow's log line and its content
view (``cache_read``, ``cache_write``, ``cache_share``), streamed and whole, as the upstream
reported them — and nothing where it reported none."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import contentviews, http
from mitmproxy.test import taddons, tutils

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import Incoming, Rewrite, decide
from addon.plan.answer import AnswerState, decode_answer, stream_processor
from addon.shell.addons import make_addons
from addon.shell.contentview import BridgeContentview
from tests.unit.shell.started import started
from tests.unit.shell.test_proxy_hooks import (
    CURSOR_BODY,
    SECRET,
    Bridge,
    chat_answer,
    chat_flow,
    respond,
    sse_response,
    stream_all,
)
from tests.unit.test_view_render import anthropic_stream

CACHE = "cache_read=1800 cache_write=188 cache_share=90%"
CHAT_USAGE = {
    "prompt_tokens": 2000,
    "completion_tokens": 7,
    "total_tokens": 2007,
    "prompt_tokens_details": {"cached_tokens": 1800, "cache_write_tokens": 188},
}
ANTHROPIC_USAGE = {
    "input_tokens": 12,
    "cache_creation_input_tokens": 188,
    "cache_read_input_tokens": 1800,
}
ROUTES = """
[[routes]]
name = "claude"
path = "/claude/v1/chat/completions"
client = "openai_chat"
upstream = "anthropic"

[[routes]]
name = "default"
"""


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[Bridge]:
    bundle = make_addons()
    with taddons.context(*bundle.all) as tctx:
        started(bundle.all)
        routes = tmp_path / "routes.toml"
        routes.write_text(ROUTES)
        tctx.options.update(bridge_routes=str(routes))
        yield Bridge(bundle)


def chat_sse(usage: dict[str, Any] | None) -> bytes:
    """A chat text stream, its usage (if any) in a last chunk of its own."""
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks: list[dict[str, Any]] = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi."}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    if usage is not None:
        chunks.append({**head, "choices": [], "usage": usage})
    data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return data + b"data: [DONE]\n\n"


def flow_line(caplog: pytest.LogCaptureFixture) -> str:
    (line,) = [r.getMessage() for r in caplog.records if "cursor-bridge flow" in r.getMessage()]
    return line


def response_view(addon: Bridge, flow: http.HTTPFlow) -> str:
    assert flow.response is not None
    view = BridgeContentview(addon.state.originals)
    meta = contentviews.Metadata(flow=flow, http_message=flow.response)
    return view.prettify(flow.response.content or b"", meta)


def usage_fact(addon: Bridge, flow: http.HTTPFlow) -> str | None:
    """The ``usage`` line of the response view's head (its facts), if it has one."""
    head = response_view(addon, flow).split("\n\n")[0].splitlines()
    found = [line.split(":", 1)[1].strip() for line in head if line.startswith("usage:")]
    assert len(found) <= 1, head
    return found[0] if found else None


def streamed(addon: Bridge, body: bytes, path: str = "/v1/chat/completions") -> http.HTTPFlow:
    flow = chat_flow(CURSOR_BODY, path=path)
    addon.request(flow)
    flow.response = sse_response()
    addon.responseheaders(flow)
    stream_all(flow, body)
    respond(addon, flow)
    return flow


def whole(
    addon: Bridge, answer: dict[str, Any], path: str = "/v1/chat/completions"
) -> http.HTTPFlow:
    flow = chat_flow({**CURSOR_BODY, "stream": False}, path=path)
    addon.request(flow)
    flow.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"),)),
        content=json.dumps(answer).encode(),
    )
    addon.responseheaders(flow)
    respond(addon, flow)
    return flow


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    return caplog


# --------------------------------------------------------------------------- streamed


def test_a_streamed_chat_answer_logs_and_shows_its_cache(
    bridge: Bridge, caplog_info: pytest.LogCaptureFixture
) -> None:
    flow = streamed(bridge, chat_sse(CHAT_USAGE))  # same dialect: the fast path's route
    line = flow_line(caplog_info)
    assert f" {CACHE} " in line and "mode=stream" in line
    assert SECRET not in line
    assert usage_fact(bridge, flow) == f"in=2000 out=7 {CACHE}"


def test_a_streamed_anthropic_answers_reports_are_merged(
    bridge: Bridge, caplog_info: pytest.LogCaptureFixture
) -> None:
    """Anthropic's input and cache counts come at ``message_start``, the output at its
    ``message_delta``: the line and the view have both."""
    flow = streamed(bridge, anthropic_stream(ANTHROPIC_USAGE), "/claude/v1/chat/completions")
    line = flow_line(caplog_info)
    assert "route=claude" in line and "upstream=anthropic" in line
    assert f" {CACHE} " in line
    assert usage_fact(bridge, flow) == f"in=2000 out=7 {CACHE}"


def test_a_stream_without_cache_counts_or_usage_has_no_cache_fields(
    bridge: Bridge, caplog_info: pytest.LogCaptureFixture
) -> None:
    plain = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
    counted = streamed(bridge, chat_sse(plain))
    none = streamed(bridge, chat_sse(None))
    lines = [r.getMessage() for r in caplog_info.records if "cursor-bridge flow" in r.getMessage()]
    assert len(lines) == 2 and not [line for line in lines if "cache_" in line]
    assert usage_fact(bridge, counted) == "in=20 out=7"
    assert usage_fact(bridge, none) is None


def test_a_client_that_hangs_up_after_the_usage_still_gets_it_logged(
    bridge: Bridge, caplog_info: pytest.LogCaptureFixture
) -> None:
    body = anthropic_stream(ANTHROPIC_USAGE)
    flow = chat_flow(CURSOR_BODY, path="/claude/v1/chat/completions")
    bridge.request(flow)
    flow.response = sse_response()
    bridge.responseheaders(flow)
    stream = flow.response.stream
    assert callable(stream)
    stream(body[: body.index(b"event: content_block_stop")])  # message_start read, no end
    bridge.error(flow)
    assert "cache_read=1800 cache_write=188 cache_share=90%" in flow_line(caplog_info)


# --------------------------------------------------------------------------- whole


def test_a_whole_chat_answer_logs_and_shows_its_cache(
    bridge: Bridge, caplog_info: pytest.LogCaptureFixture
) -> None:
    answer = {**chat_answer({"role": "assistant", "content": "Hi."}, "stop"), "usage": CHAT_USAGE}
    flow = whole(bridge, answer)
    line = flow_line(caplog_info)
    assert f" {CACHE} " in line and "mode=whole" in line
    assert usage_fact(bridge, flow) == f"in=2000 out=7 {CACHE}"


def test_a_whole_anthropic_answer_logs_its_cache(
    bridge: Bridge, caplog_info: pytest.LogCaptureFixture
) -> None:
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "Hi."}],
        "stop_reason": "end_turn",
        "usage": {**ANTHROPIC_USAGE, "output_tokens": 7},
    }
    flow = whole(bridge, answer, "/claude/v1/chat/completions")
    assert f" {CACHE} " in flow_line(caplog_info)
    assert flow.response is not None  # the client's usage: every prompt token
    assert json.loads(flow.response.content or b"")["usage"]["prompt_tokens"] == 2000


def test_a_whole_answer_without_cache_counts_has_no_cache_fields(
    bridge: Bridge, caplog_info: pytest.LogCaptureFixture
) -> None:
    answer = chat_answer({"role": "assistant", "content": "Hi."}, "stop")
    whole(bridge, {**answer, "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
    whole(bridge, answer)
    lines = [r.getMessage() for r in caplog_info.records if "cursor-bridge flow" in r.getMessage()]
    assert len(lines) == 2 and not [line for line in lines if "cache_" in line]


# --------------------------------------------------------------------------- retried


def test_the_answer_asked_again_is_the_one_whose_usage_counts() -> None:
    """A retried whole answer (a required tool call, a staged retry) and the loop guard's
    second stream: the usage is the last answer's, never the first's merged into it."""
    route = Route(name="r", client="openai_chat", path="*", upstream="openai_chat")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    d = decide(
        Settings(routes=(route,)),
        route,
        Incoming("POST", "h", "/v1/chat/completions", {}, body),
        {},
    )
    assert isinstance(d, Rewrite)
    plan, state = d.plan, AnswerState.of(d.plan)
    answer = chat_answer({"role": "assistant", "content": "Hi."}, "stop")
    decode_answer(plan, state, json.dumps({**answer, "usage": CHAT_USAGE}).encode())
    assert state.usage is not None and state.usage.cache_read_tokens == 1800
    decode_answer(plan, state, json.dumps({**answer, "usage": {"prompt_tokens": 9}}).encode())
    assert state.usage is not None and state.usage.prompt_tokens == 9
    assert state.usage.cache_read_tokens is None and state.usage.cache_write_tokens is None
    stream_processor(plan, state, None)  # another answer: nothing of the last one
    assert state.usage is None
