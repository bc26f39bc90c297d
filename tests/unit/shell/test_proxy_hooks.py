"""The mitmproxy shell, hook by hook, with mitmproxy's own test helpers."""

from __future__ import annotations

import asyncio
import gzip
import inspect
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import taddons, tflow, tutils

from addon.plan import whole_steps
from addon.shell.addons import Addons, make_addons
from addon.shell.notes import META_KEY
from addon.stores.reasoning import Scope
from tests.realdata import as_sse
from tests.unit.shell.started import started

SECRET = "sk-live-SECRET-never-log-me"
CURSOR_BODY: dict[str, Any] = {
    "model": "claude-sonnet-4.6",
    "stream": True,
    "messages": [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"}],
        },
    ],
    "tools": [{"name": "Read", "description": "read", "input_schema": {"type": "object"}}],
}


class Bridge:
    """The shell's rewrite addons, hook by hook, as mitmproxy calls them for one flow."""

    def __init__(self, bundle: Addons) -> None:
        self.bundle = bundle
        self.state = bundle.state
        self.flows = bundle.report.flows
        self.stats = bundle.report.stats

    @property
    def store(self) -> Any:
        return self.bundle.store.store

    @property
    def settings(self) -> Any:
        return self.bundle.settings.settings

    @property
    def keep_originals(self) -> bool:
        return self.bundle.settings.keep_originals

    def request(self, flow: http.HTTPFlow) -> None:
        self.bundle.request.request(flow)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        self.bundle.stream.responseheaders(flow)

    async def response(self, flow: http.HTTPFlow) -> None:
        await self.bundle.answers.response(flow)
        self.bundle.report.response(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self.bundle.report.error(flow)


@pytest.fixture
def bridge() -> Iterator[tuple[Bridge, taddons.context]]:
    bundle = make_addons()
    with taddons.context(*bundle.all) as tctx:
        started(bundle.all)  # mitmproxy is up: a bad option is refused, not logged
        yield Bridge(bundle), tctx


def respond(addon: Bridge, flow: http.HTTPFlow) -> None:
    asyncio.run(addon.response(flow))


def chat_flow(body: bytes | dict[str, Any], path: str = "/v1/chat/completions") -> http.HTTPFlow:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = tutils.treq(
        host="api.example.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=path.encode(),
        headers=http.Headers(
            (
                (b"content-type", b"application/json"),
                (b"authorization", f"Bearer {SECRET}".encode()),
            )
        ),
        content=content,
    )
    return tflow.tflow(req=req)


def chat_answer(message: dict[str, Any], finish: str) -> dict[str, Any]:
    """A whole chat.completion answer with one choice."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def sse_response(body: bytes = b"", **headers: str) -> http.Response:
    fields = [(b"content-type", b"text/event-stream"), (b"content-length", str(len(body)).encode())]
    fields += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return tutils.tresp(headers=http.Headers(fields), content=None)


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        pytest.param(
            "bridge_tool_mode", "magic", "must be one of native, invoke, bracket", id="tool-mode"
        ),
        pytest.param(
            "bridge_thinking_output", "shown", "must be one of reasoning, hidden", id="thinking"
        ),
        pytest.param("bridge_models", "a,b,a", "lists a more than once", id="models-dupe"),
        pytest.param("bridge_tool_desc_max_chars", 0, "at least 1", id="limit"),
        pytest.param("bridge_schema", "loose", "must be one of none, strict", id="schema"),
        pytest.param(
            "bridge_routes", "/nonexistent/routes.toml", "cannot read it", id="routes-missing"
        ),
        pytest.param("bridge_store_size", -1, "bridge_store_size takes", id="store-size"),
        pytest.param("bridge_store_ttl", -5, "bridge_store_ttl takes", id="store-ttl"),
        pytest.param("bridge_store", "/nonexistent/dir/store.db", "cannot open", id="store-path"),
        pytest.param(
            "bridge_store", "127.0.0.1:6379", "neither a path nor a store URL", id="store-no-scheme"
        ),
        pytest.param(
            "bridge_store", "redis://h/notanumber", "must be a whole number", id="store-db"
        ),
        pytest.param(
            "bridge_thinking_budget", -1, "bridge_thinking_budget takes", id="thinking-budget"
        ),
    ],
)
def test_bad_option_values_are_refused_with_a_clear_message(
    bridge: tuple[Bridge, taddons.context], option: str, value: object, message: str
) -> None:
    _, tctx = bridge
    with pytest.raises(exceptions.OptionsError, match=message):
        tctx.options.update(**{option: value})


def test_store_options_open_the_store_and_new_bounds_keep_what_it_remembers(
    bridge: tuple[Bridge, taddons.context], tmp_path: Path
) -> None:
    addon, tctx = bridge
    tctx.configure(addon, bridge_store_ttl=3600)
    store = addon.store
    assert store is not None and store.path == "" and store.max_entries == 20_000
    scope = Scope("r@h", "m")
    store.put(scope, "call", "call_1", {"signature": "s" * 60})
    tctx.configure(addon, bridge_store_size=100, bridge_store_ttl=60)
    assert addon.store is store and store.max_entries == 100 and store.ttl == 60
    assert store.get(scope, "call", "call_1") == {"signature": "s" * 60}
    path = tmp_path / "store.db"
    tctx.configure(addon, bridge_store=str(path))
    assert addon.store is not None and addon.store.path == str(path) and path.exists()
    tctx.configure(addon, bridge_store_size=0)
    assert addon.store is None  # size 0: nothing remembered


def test_routes_file_option_loads_routes(
    bridge: tuple[Bridge, taddons.context], tmp_path: Path
) -> None:
    addon, tctx = bridge
    routes = tmp_path / "routes.toml"
    routes.write_text('[[routes]]\nname = "gw"\npath = "/gw/*"\nschema = "strict"\n')
    tctx.configure(addon, bridge_routes=str(routes))
    assert [r.name for r in addon.settings.routes] == ["gw"]
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    assert META_KEY not in flow.metadata  # /v1/chat/completions is no longer routed


# --------------------------------------------------------------------------- request


def test_cursor_request_is_rewritten_and_recorded_without_secrets(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    sent = json.loads(flow.request.content or b"")
    assert sent["tools"][0]["type"] == "function"
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    assert flow.request.headers["accept-encoding"] == "identity"
    assert flow.request.headers["content-length"] == str(len(flow.request.content or b""))
    assert "1 flat tools → OpenAI" in flow.comment
    assert "1 tool_result blocks → tool messages" in flow.comment
    meta = flow.metadata[META_KEY]
    assert meta["action"] == "rewritten" and meta["stream"] is True
    json.dumps(meta)  # plain data only
    assert SECRET not in json.dumps(meta) + flow.comment + caplog.text


def test_duplicate_tool_names_are_answered_with_an_openai_400(
    bridge: tuple[Bridge, taddons.context],
) -> None:
    addon, _ = bridge
    body = {**CURSOR_BODY, "tools": CURSOR_BODY["tools"] * 2}
    flow = chat_flow(body)
    addon.request(flow)
    assert flow.response is not None and flow.response.status_code == 400
    error = json.loads(flow.response.content or b"")["error"]
    assert "'Read' is declared twice" in error["message"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "tools[1]"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"this is not json", id="not-json"),
        pytest.param(b"[1,2,3]", id="not-an-object"),
        pytest.param(b'{"prompt": "legacy"}', id="unknown-shape"),
        pytest.param(b"", id="empty"),
    ],
)
def test_bodies_we_cannot_read_pass_through_untouched(
    bridge: tuple[Bridge, taddons.context], body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    addon, _ = bridge
    flow = chat_flow(body)
    before = flow.request.copy()
    addon.request(flow)
    assert flow.request.content == before.content
    assert flow.request.headers == before.headers
    assert flow.response is None
    assert "passed through" in flow.comment
    assert flow.metadata[META_KEY]["action"] == "passthrough"
    assert len([r for r in caplog.records if r.name == "cursor_bridge"]) == 1


def test_other_paths_are_not_touched(bridge: tuple[Bridge, taddons.context]) -> None:
    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY, path="/v1/embeddings")
    before = flow.request.copy()
    addon.request(flow)
    assert flow.request.content == before.content and flow.request.headers == before.headers
    assert flow.comment == "" and META_KEY not in flow.metadata


# --------------------------------------------------------------------------- response


PARALLEL = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"


def streamed(addon: Bridge, body: bytes, size: int = 7) -> http.HTTPFlow:
    """A Cursor request whose answer ``body`` is streamed through the bridge, whole."""
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    flow.response = sse_response()
    addon.responseheaders(flow)
    stream_all(flow, body, size=size)
    respond(addon, flow)
    return flow


def stream_all(flow: http.HTTPFlow, body: bytes, size: int = 7) -> bytes:
    stream = flow.response.stream if flow.response else None
    assert callable(stream)
    out = b""
    for i in range(0, len(body), size):
        chunks = stream(body[i : i + size])
        assert isinstance(chunks, list) and all(chunks), "never an empty chunk mid-stream"
        out += b"".join(chunks)
    out += b"".join(stream(b""))
    assert stream(b"") == []  # HTTP/2 may end twice
    return out


def test_sse_answer_is_streamed_through_the_processor(
    bridge: tuple[Bridge, taddons.context],
) -> None:
    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    flow.response = sse_response()
    addon.responseheaders(flow)
    assert "content-length" not in flow.response.headers
    assert flow.response.headers["transfer-encoding"] == "chunked"
    body = as_sse("openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse")
    out = stream_all(flow, body)
    assert out.endswith(b"data: [DONE]\n\n")
    assert b"get_stock_price" in out and b"GetWeatherArgs" in out
    respond(addon, flow)
    assert flow.metadata[META_KEY]["stream_error"] is None
    assert addon.flows.plan(flow.id) is None


def test_gzipped_sse_is_decompressed_and_rewritten(bridge: tuple[Bridge, taddons.context]) -> None:
    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    flow.response = sse_response(content_encoding="gzip")
    addon.responseheaders(flow)
    assert "content-encoding" not in flow.response.headers
    body = as_sse("openai-chat-stream-groq-tool_call.vercel-ai.chunks.txt")
    out = stream_all(flow, gzip.compress(body), size=5)
    assert out.startswith(b"data: {") and out.endswith(b"data: [DONE]\n\n")


def test_broken_stream_falls_back_to_the_raw_bytes(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    flow.response = sse_response()
    addon.responseheaders(flow)
    good = b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    bad = b"data: {this is not json}\n\ndata: more\n\n"
    out = stream_all(flow, good + bad, size=10)
    assert out.endswith(bad)
    assert b'"content":"hi"' in out
    assert "stream passed through from here on" in caplog.text
    respond(addon, flow)
    assert "not JSON" in (flow.metadata[META_KEY]["stream_error"] or "")


def test_error_answers_stream_untouched_on_the_same_dialect_and_buffer_for_another(
    bridge: tuple[Bridge, taddons.context],
) -> None:
    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    flow.response = tutils.tresp(
        status_code=429, headers=http.Headers(((b"content-type", b"text/event-stream"),))
    )
    addon.responseheaders(flow)
    read = flow.response.stream  # the client reads its own dialect's error, as it comes
    assert callable(read)
    assert read(b'data: {"error"') == [b'data: {"error"'] and read(b"") == []  # not cut
    other = chat_flow(
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        path="/v1/messages",
    )
    addon.request(other)
    other.response = tutils.tresp(
        status_code=429, headers=http.Headers(((b"content-type", b"text/event-stream"),))
    )
    addon.responseheaders(other)
    assert other.response.stream is False  # kept whole, to be re-shaped for Anthropic


def test_json_answer_is_rewritten_whole(bridge: tuple[Bridge, taddons.context]) -> None:
    addon, _ = bridge
    flow = chat_flow({**CURSOR_BODY, "stream": False})
    addon.request(flow)
    answer = chat_answer({"role": "assistant", "content": "hi"}, "stop")
    flow.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"),)),
        content=json.dumps(answer).encode(),
    )
    addon.responseheaders(flow)
    respond(addon, flow)
    assert json.loads(flow.response.content or b"") == answer


def test_error_frees_the_flow_state(bridge: tuple[Bridge, taddons.context]) -> None:
    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    assert addon.flows.plan(flow.id) is not None
    addon.error(flow)
    assert addon.flows.plan(flow.id) is None


def test_content_view_shows_original_and_rewritten(bridge: tuple[Bridge, taddons.context]) -> None:
    from mitmproxy import contentviews

    from addon.shell.contentview import BridgeContentview

    addon, _ = bridge
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    view = BridgeContentview(addon.state.originals)
    meta = contentviews.Metadata(flow=flow, http_message=flow.request)
    data = flow.request.content or b""
    assert view.render_priority(data, meta) > 1
    text = view.prettify(data, meta)
    assert "1 flat tools → OpenAI" in text
    assert '"input_schema"' in text  # the client's original
    assert '"function"' in text  # what the upstream got
    assert SECRET not in text
    other = chat_flow(CURSOR_BODY, path="/v1/embeddings")
    other_meta = contentviews.Metadata(flow=other, http_message=other.request)
    assert view.render_priority(b"{}", other_meta) < 0
    # Chosen by hand on a flow the bridge did not rewrite: one line, no traceback.
    assert view.prettify(b"{}", other_meta) == (
        "# cursor-bridge: not a flow the bridge rewrote (no route matched it)\n"
    )


def test_original_store_is_bounded() -> None:
    from addon.report.counters import Original, OriginalStore

    store = OriginalStore(max_items=3, max_bytes=100)
    for i in range(5):
        store.put(str(i), "request", Original(b"x" * 30, "s"))
    assert len(store) == 3 and store.get("0", "request") is None and store.get("4", "request")
    store.put("big", "request", Original(b"x" * 101, "s"))
    assert store.get("big", "request") is None
    store.put("a", "request", Original(b"x" * 90, "s"))
    assert len(store) == 1


# --------------------------------------------------------------------------- under attack (issue 8)

ANTHROPIC_BODY: dict[str, Any] = {
    "model": "m",
    "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}],
}
KEYED_PATH = "/v1/messages?key=AIzaSyA1234567890abcdefghijklmnopqrst"


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_bug_in_decide_still_answers_the_client(
    bridge: tuple[Bridge, taddons.context],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    import addon.shell.rewrite as rewrite

    def broken(*_: object, **__: object) -> object:
        raise KeyError("a bug \ud83d key=s3cr3t")

    monkeypatch.setattr(rewrite, "decide", broken)
    addon, _ = bridge
    flow = chat_flow(ANTHROPIC_BODY if path == "/v1/messages" else CURSOR_BODY, path=path)
    before = flow.request.content
    addon.request(flow)
    (err,) = _errors(caplog)
    assert err.exc_info is None and "internal error (KeyError" in err.getMessage()
    assert "s3cr3t" not in caplog.text
    if path == "/v1/messages":  # another dialect: a 500 in Anthropic's shape
        assert flow.response is not None and flow.response.status_code == 500
        assert json.loads(flow.response.content or b"")["type"] == "error"
    else:  # the same dialect: untouched, and its answer still streams
        assert flow.response is None and flow.request.content == before
        assert flow.metadata[META_KEY]["action"] == "passthrough"
        flow.response = sse_response()
        addon.responseheaders(flow)
        assert flow.response.stream is True


def test_a_bug_in_the_answer_path_gives_a_502_in_the_clients_dialect(
    bridge: tuple[Bridge, taddons.context],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    addon, _ = bridge
    flow = chat_flow(ANTHROPIC_BODY, path="/v1/messages")
    addon.request(flow)
    assert addon.flows.plan(flow.id) is not None
    monkeypatch.setattr(whole_steps, "decode_answer", lambda *_, **__: 1 / 0)
    flow.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"),)), content=b"{}"
    )
    addon.responseheaders(flow)
    respond(addon, flow)
    assert flow.response.status_code == 502
    assert json.loads(flow.response.content or b"")["error"]["type"] == "api_error"
    (err,) = _errors(caplog)
    assert err.exc_info is None and "ZeroDivisionError" in err.getMessage()


@pytest.mark.parametrize(
    ("content_type", "raw"),
    [
        ("application/json", b'{"choices": [], "usage": {"prompt_tokens": NaN}}'),
        ("application/json", b"[" * 100_000 + b"]" * 100_000),
        ("text/html", b"<html>gateway</html>"),
        ("application/json", b'"just a string"'),
    ],
)
def test_an_answer_another_dialect_cannot_read_is_a_502_never_the_raw_bytes(
    bridge: tuple[Bridge, taddons.context], content_type: str, raw: bytes
) -> None:
    addon, _ = bridge
    flow = chat_flow(ANTHROPIC_BODY, path="/v1/messages")
    addon.request(flow)
    flow.response = tutils.tresp(
        headers=http.Headers(((b"content-type", content_type.encode()),)), content=raw
    )
    respond(addon, flow)
    assert flow.response.status_code == 502
    body = json.loads(flow.response.content or b"")
    assert body["type"] == "error" and "could not translate" in body["error"]["message"]


def test_a_non_strict_answer_on_the_same_dialect_is_passed_on_not_rewritten(
    bridge: tuple[Bridge, taddons.context],
) -> None:
    addon, _ = bridge
    flow = chat_flow({**CURSOR_BODY, "stream": False})
    addon.request(flow)
    raw = b'{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[],"x":NaN}'
    flow.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"),)), content=raw
    )
    respond(addon, flow)
    assert flow.response.content == raw and "not strict JSON" in flow.comment


def test_an_upstream_error_nested_too_deeply_is_re_shaped_without_a_traceback(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    addon, _ = bridge
    flow = chat_flow(ANTHROPIC_BODY, path="/v1/messages")
    addon.request(flow)
    flow.response = tutils.tresp(
        status_code=500,
        headers=http.Headers(((b"content-type", b"application/json"),)),
        content=b'{"error":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    )
    respond(addon, flow)
    assert flow.response.status_code == 500
    assert json.loads(flow.response.content or b"")["error"]["type"] == "api_error"
    assert not _errors(caplog)


def test_secrets_in_the_path_and_in_upstream_errors_are_never_written(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    addon, _ = bridge
    rejected = chat_flow(b"not json", path=KEYED_PATH)  # a dialect change: 400, logged
    addon.request(rejected)
    passed = chat_flow(b"not json", path="/v1/chat/completions?api_key=hunter2&alt=sse")
    addon.request(passed)
    echoed = chat_flow(ANTHROPIC_BODY, path=KEYED_PATH)
    addon.request(echoed)
    echoed.response = tutils.tresp(
        status_code=401,
        headers=http.Headers(((b"content-type", b"application/json"),)),
        content=json.dumps(
            {"error": {"message": f"Incorrect API key provided: {SECRET}. key=hunter2"}}
        ).encode(),
    )
    respond(addon, echoed)
    written = caplog.text + "".join(
        f.comment + json.dumps(f.metadata.get(META_KEY)) for f in (rejected, passed, echoed)
    )
    assert "[REDACTED]" in written
    for secret in ("AIzaSyA1234567890", "hunter2", SECRET):
        assert secret not in written


def test_surrogates_and_control_characters_are_written_escaped(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    addon, _ = bridge
    tool = {"name": "\ud83d\x1b[2J", "input_schema": {"type": "object"}}
    body = {**ANTHROPIC_BODY, "tools": [tool, tool], "\ud800odd\nkey": 1}
    flow = chat_flow(json.dumps(body).encode(), path="/v1/messages")
    flow.request.path = "/v1/messages?q=\udcff\x07"  # undecodable byte 0xff, a bell
    addon.request(flow)
    assert flow.response is not None and flow.response.status_code == 400
    written = caplog.text + flow.comment + json.dumps(flow.metadata[META_KEY], ensure_ascii=False)
    written.encode("utf-8")  # no lone surrogate anywhere
    assert "\x1b" not in written and "\\ud83d\\x1b[2J" in written
    # the path, escaped, in the flow's logfmt line (its quoting doubles each backslash)
    assert "\x07" not in written and 'request="POST /v1/messages?q=\\\\udcff\\\\x07"' in written
    ok = chat_flow({**ANTHROPIC_BODY, "\ud800odd\nkey": 1}, path="/v1/messages")
    addon.request(ok)
    json.dumps(ok.metadata[META_KEY], ensure_ascii=False).encode("utf-8")
    assert "\n" not in ok.comment.split("\n")[0] and "\\ud800odd\\nkey" in ok.comment


@pytest.mark.parametrize(
    ("options", "rewritten"),
    [
        ({}, True),
        ({"allow_hosts": [r"api\.example\.com"]}, True),
        ({"allow_hosts": [r"other\.example"]}, False),
        ({"ignore_hosts": [r"example\.com:443"]}, False),
        ({"ignore_hosts": [r"other\.example"]}, True),
    ],
)
def test_allow_and_ignore_hosts_bind_the_bridge(
    bridge: tuple[Bridge, taddons.context], options: dict[str, Any], rewritten: bool
) -> None:
    _, tctx = bridge
    tctx.options.update(**options)
    flows = [
        chat_flow(CURSOR_BODY),
        chat_flow(ANTHROPIC_BODY, path="/v1/messages/count_tokens"),
        chat_flow(b"", path="/v1/models"),
    ]
    flows[2].request.method = "GET"
    bundle_addons = tctx.master.addons
    tctx.options.update(bridge_models="m1")
    for f in flows:
        for a in bundle_addons.chain:
            if hasattr(a, "request") and getattr(a, "name", "").startswith("cursor_bridge"):
                done = a.request(f)
                if inspect.iscoroutine(done):  # an async hook (count_tokens asks a server)
                    asyncio.run(done)
    assert (META_KEY in flows[0].metadata) is rewritten
    records = [bundle_addons.get("cursor_bridge_report").flows.get(f.id) for f in flows]
    assert (records[1] is not None and records[1].count is not None) is rewritten
    assert (records[2] is not None and records[2].models is not None) is rewritten


# --------------------------------------------------------------------------- outcomes (issue 13)


def test_a_rewritten_stream_is_marked_counted_and_logged_once(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    addon, _ = bridge
    flow = streamed(addon, as_sse(PARALLEL))
    assert flow.marked == ":twisted_rightwards_arrows:"
    (line,) = [r.getMessage() for r in caplog.records if "cursor-bridge flow" in r.getMessage()]
    assert "outcome=rewritten" in line and "mode=stream" in line and "status=200" in line
    assert "client=openai_chat upstream=openai_chat" in line
    assert "events_in=" in line and "bridge_ms=" in line
    assert SECRET not in caplog.text
    assert addon.state.counters["flows rewritten"] == 1
    assert flow.id not in addon.flows
    assert addon.stats().startswith("flows: 1 rewritten; ")


def test_a_rewritten_whole_answer_is_logged_with_its_counts(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    addon, _ = bridge
    flow = chat_flow({**CURSOR_BODY, "stream": False})
    addon.request(flow)
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
        for i in range(2)
    ]
    answer = chat_answer({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")
    raw = json.dumps(answer).encode()
    flow.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"),)), content=raw
    )
    respond(addon, flow)
    (line,) = [r.getMessage() for r in caplog.records if "cursor-bridge flow" in r.getMessage()]
    assert "mode=whole" in line and f"bytes_in={len(raw)} " in line and "tool_calls=2" in line
    assert "bytes_out=" in line


def test_a_stream_passed_through_is_marked_and_says_why(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    addon, _ = bridge
    flow = streamed(addon, b"data: {not json}\n\n", size=4)
    assert flow.marked == ":warning:"
    (line,) = [r.getMessage() for r in caplog.records if "cursor-bridge flow" in r.getMessage()]
    assert "outcome=not_rewritten" in line and 'reason="stream passed through after' in line
    assert addon.state.counters["not rewritten"] == 1


def test_rejected_passed_and_errored_flows_are_marked_and_freed(
    bridge: tuple[Bridge, taddons.context],
) -> None:
    addon, _ = bridge
    rejected = chat_flow({**CURSOR_BODY, "tools": CURSOR_BODY["tools"] * 2})
    addon.request(rejected)
    assert rejected.marked == ":no_entry:"
    passed = chat_flow(b"this is not json")
    addon.request(passed)
    assert passed.marked == ":warning:"
    errored = chat_flow(CURSOR_BODY)
    addon.request(errored)
    errored.error = flow_error = tflow.terr("connection closed by peer")
    addon.error(errored)
    assert flow_error.msg and errored.marked == ":twisted_rightwards_arrows:"
    assert not len(addon.flows)
    assert addon.state.counters["flows rejected"] == 1
    assert addon.state.counters["flows not_rewritten"] == 1


def test_bridge_debug_logs_the_details_at_debug_level(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="cursor_bridge")
    addon, tctx = bridge
    tctx.configure(addon, bridge_debug=True)
    flow = chat_flow({**CURSOR_BODY, "stream": False})
    addon.request(flow)
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("upstream path /v1/chat/completions" in m for m in debug)
    assert any("request: " in m and "flat tools" in m for m in debug)
    assert SECRET not in caplog.text


def test_originals_are_kept_only_where_a_view_renders_them(
    bridge: tuple[Bridge, taddons.context], monkeypatch: pytest.MonkeyPatch
) -> None:
    import addon.shell.settings as rewrite

    addon, tctx = bridge
    # As if this were mitmdump: bodies are rendered only from flow_detail 3 on.
    monkeypatch.setattr(rewrite, "DumpMaster", type(tctx.master))
    tctx.options.add_option("flow_detail", int, 1, "mitmdump's (declared by its dumper)")
    tctx.configure(addon, flow_detail=1)
    assert addon.keep_originals is False
    flow = streamed(addon, as_sse(PARALLEL))
    assert len(addon.state.originals) == 0 and flow.marked  # rewritten all the same
    tctx.configure(addon, flow_detail=3)
    assert addon.keep_originals is True
    again = chat_flow(CURSOR_BODY)
    addon.request(again)
    assert addon.state.originals.get(again.id, "request") is not None


def test_a_hang_up_after_the_answers_end_is_reported_once_without_a_reason(
    bridge: tuple[Bridge, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cursor_bridge")
    addon, _ = bridge
    body = as_sse(PARALLEL)
    for cut in (len(body), len(body) // 2):  # all of it read, then half of it
        caplog.clear()
        flow = chat_flow(CURSOR_BODY)
        addon.request(flow)
        flow.response = sse_response()
        addon.responseheaders(flow)
        stream = flow.response.stream
        assert callable(stream)
        stream(body[:cut])  # no b"": the client hung up before the upstream's end
        flow.error = tflow.terr("Client disconnected.")
        addon.error(flow)
        addon.error(flow)  # never twice
        lines = [r.getMessage() for r in caplog.records if "cursor-bridge flow" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "events_in=" in lines[0]
        if cut == len(body):
            assert "reason=" not in lines[0] and "outcome=rewritten" in lines[0]
            assert flow.response.raw_content  # the body the client got, for the view
        else:
            assert "Client disconnected" in lines[0]
            assert flow.response.raw_content is None  # part of a body is no body
    assert not len(addon.flows)  # plans, reports, kept bytes: all freed


def test_kept_bytes_and_retry_bodies_are_bounded() -> None:
    from addon.report.counters import KeptBytes, Original, OriginalStore

    kept = KeptBytes(10)
    kept.extend([b"12345", b"6789"])
    assert kept.whole and kept.data == b"123456789"
    kept.extend([b"abc"])
    assert not kept.whole and kept.data == b"123456789a"

    store = OriginalStore(max_items=10, max_bytes=100)
    store.put("f", "request", Original(b"x" * 40, "s"))
    store.add_attempt("f", "staged retry 1", b"y" * 40)
    found = store.get("f", "request")
    assert found is not None and found.attempts == (("staged retry 1", b"y" * 40),)
    store.add_attempt("f", "staged retry 2", b"z" * 40)  # 120 bytes: past the bound
    assert store.get("f", "request") is None and len(store) == 0
    store.add_attempt("gone", "staged retry 1", b"y")  # nothing kept: nothing to add to
    assert store.get("gone", "request") is None


def test_what_the_routes_need_is_loaded_before_the_first_flow(tmp_path: Path) -> None:
    import sys

    from addon.transforms import repair

    repair._validator_for.cache_clear()
    routes = tmp_path / "routes.toml"
    routes.write_text(
        '[[routes]]\nname = "kiro"\npath = "*/v1/messages"\nclient = "anthropic"\nupstream = "kiro"\n'
    )
    bundle = make_addons()
    with taddons.context(*bundle.all) as tctx:
        tctx.configure(bundle.settings, bridge_routes=str(routes))
        started(bundle.all)
        assert repair._validator_for.cache_info().currsize == 1  # argument validation
        assert "botocore.eventstream" in sys.modules  # a Kiro route's frames


# --------------------------------------------------------------------------- the fast path option


@pytest.mark.parametrize("fast", [True, False], ids=["default", "off"])
def test_bridge_fast_path_reaches_the_stream_processor(
    bridge: tuple[Bridge, taddons.context], fast: bool
) -> None:
    addon, tctx = bridge
    if not fast:
        tctx.configure(addon.bundle.settings, bridge_fast_path=False)
    assert addon.settings.fast_path is fast
    flow = chat_flow(CURSOR_BODY)
    addon.request(flow)
    flow.response = sse_response()
    addon.responseheaders(flow)
    run = addon.flows.run(flow.id)
    assert run is not None and run.plan is not None and run.plan.fast_path is fast
    processor = run.answer.processor
    assert processor is not None and processor.fast is fast


def test_bridge_fast_path_takes_true_or_false() -> None:
    from addon.config.options import ConfigError, parse_settings

    def read(name: str) -> Any:
        if name == "bridge_fast_path":
            return "maybe"
        raise KeyError(name)

    with pytest.raises(ConfigError, match="bridge_fast_path takes true or false"):
        parse_settings(read, {})


def test_an_error_in_another_dialects_shape_is_reshaped_on_the_same_dialect(
    bridge: tuple[Bridge, taddons.context], tmp_path: Path
) -> None:
    """llama-server answers OpenAI-shaped errors on ``/v1/messages``, and a plain JSON error
    to a streamed request: an Anthropic client gets Anthropic's shape, status kept, the
    upstream's message (``tests/fixtures/llama_cpp/messages_error_context_stream.sse``)."""
    addon, tctx = bridge
    routes = tmp_path / "routes.toml"
    routes.write_text(
        '[[routes]]\nname = "llama"\npath = "*/v1/messages"\nclient = "anthropic"\n'
        'upstream = "anthropic"\n'
    )
    tctx.configure(addon.bundle.settings, bridge_routes=str(routes))
    recorded = Path(__file__).parents[2] / "fixtures/llama_cpp/messages_error_context_stream.sse"
    body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    for raw, reshaped in [
        (recorded.read_bytes(), True),
        (b'{"type":"error","error":{"type":"invalid_request_error","message":"no"}}', False),
    ]:
        flow = chat_flow(body, path="/v1/messages")
        addon.request(flow)
        flow.response = tutils.tresp(
            status_code=400,
            headers=http.Headers(((b"content-type", b"application/json"),)),
            content=raw,
        )
        addon.responseheaders(flow)
        assert flow.response.stream is False
        respond(addon, flow)
        assert flow.response.status_code == 400
        if not reshaped:
            assert flow.response.content == raw
            continue
        got = json.loads(flow.response.content or b"")
        assert got == {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": json.loads(raw)["error"]["message"],
            },
        }
