"""End to end: an upstream that echoes a credential with no key's shape ("SECRETKEY456") never
gets it into what the bridge writes, through the real mitmdump.

The client's key (``x-api-key``, ``Authorization``, Gemini's ``?key=``) and a route's
``api_key_env`` value, echoed in a 401 body and in an error event inside a 200 stream: not
in mitmdump's log (with ``bridge_debug`` at debug verbosity), not in the saved flows'
comments and metadata (``save_stream_file``, read back with ``mitmproxy.io``), not in the
error bodies and events the bridge builds for a client of another dialect. A same-dialect
client gets the upstream's body as it was sent, its own key echoed included (the client's, not
the proxy's); a key of the proxy's is taken out of every answer (``test_keys_in_answers``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from mitmproxy import io as mitmio

from tests.e2e.harness import (
    JSONReply,
    Proxy,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    sse_from_payloads,
)

KEY = "SECRETKEY456"
ROUTE_KEY = "ROUTEKEY789x"
ROUTES = """
[[routes]]
name = "keyed"
path = "/keyed/v1/messages"
client = "anthropic"
api_key_env = "CB_E2E_ECHO_ROUTE_KEY"

[[routes]]
name = "claude-gemini"
path = "/gem/v1/messages"
client = "anthropic"
upstream = "gemini"

[[routes]]
name = "messages"
path = "*/v1/messages"
client = "anthropic"

[[routes]]
name = "gemini"
path = "/v1beta/models/*"
client = "gemini"

[[routes]]
name = "chat"
path = "*/chat/completions"
"""


def echo(key: str) -> dict[str, Any]:
    """OpenAI's answer to a key it refuses, quoting it."""
    return {
        "error": {
            "message": f"Incorrect API key provided: {key}. You can find your API key at …",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


@pytest.fixture
def proxy(
    upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Proxy]:
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    monkeypatch.setenv("CB_E2E_ECHO_ROUTE_KEY", ROUTE_KEY)
    options = {
        "bridge_routes": str(routes),
        "save_stream_file": str(tmp_path / "flows"),
        "bridge_debug": True,
        "termlog_verbosity": "debug",
    }
    with Proxy(upstream.port, options) as p:
        yield p


def claude(p: Proxy, base: str = "") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=p.base_url + base, api_key=KEY, max_retries=0, timeout=15)


def test_an_echoed_key_is_in_nothing_the_bridge_writes(
    proxy: Proxy, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    message = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    # 1. A whole 401 for an Anthropic client: the bridge re-shapes it.
    upstream.enqueue(JSONReply(echo(KEY), status=401))
    with pytest.raises(anthropic.AuthenticationError) as info:
        claude(proxy).messages.create(**message)
    body: Any = info.value.body
    assert body["error"]["type"] == "authentication_error"
    assert "Incorrect API key provided: [REDACTED]" in body["error"]["message"]
    # 2. The same inside a 200 stream: the error event the bridge writes.
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}  # fmt: skip
    upstream.enqueue(SSEReply(sse_from_payloads([chunk, echo(KEY)]), seed=5))
    with pytest.raises(anthropic.APIStatusError) as streamed:
        for _ in claude(proxy).messages.create(**message, stream=True):
            pass
    body = streamed.value.body
    assert body["error"]["message"].startswith("Incorrect API key provided: [REDACTED]")
    # 3. A Gemini client's ?key=, echoed in a 401: the Google error the bridge builds.
    upstream.enqueue(JSONReply(echo(KEY), status=401))
    status, _, raw = raw_request(
        proxy.port,
        "POST",
        f"/v1beta/models/m:generateContent?key={KEY}",
        json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode(),
        {"content-type": "application/json"},
    )
    assert status == 401 and KEY not in raw.decode()
    assert json.loads(raw)["error"]["status"] == "UNAUTHENTICATED"
    # 4. A route's api_key_env value, echoed.
    upstream.enqueue(JSONReply(echo(ROUTE_KEY), status=401))
    with pytest.raises(anthropic.AuthenticationError) as keyed:
        claude(proxy, "/keyed").messages.create(**message)
    assert ROUTE_KEY not in json.dumps(keyed.value.body)
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {ROUTE_KEY}"
    # 5. Same dialect: the upstream's own body reaches its client as it was sent.
    upstream.enqueue(JSONReply(echo(KEY), status=401))
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    status, _, raw = raw_request(
        proxy.port,
        "POST",
        "/v1/chat/completions",
        json.dumps(chat).encode(),
        {"authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    assert status == 401 and json.loads(raw) == echo(KEY)

    running = proxy.log_text()  # (asyncio's own debug lines at shutdown may hold a traceback)
    assert "Traceback" not in running and "internal error" not in running, running
    proxy.stop()
    log = proxy.log_text()
    assert "upstream answered HTTP 401" in log
    assert KEY not in log and ROUTE_KEY not in log, log
    with (tmp_path / "flows").open("rb") as f:
        flows = list(mitmio.FlowReader(f).stream())
    assert len(flows) == 5
    for flow in flows:
        written = flow.comment + json.dumps(flow.metadata)
        assert KEY not in written and ROUTE_KEY not in written, written


def test_an_echoed_key_is_not_in_a_count_tokens_error_the_bridge_builds(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    """Claude Code's count_tokens on a Gemini route: Gemini's countTokens refuses the key,
    quoting it; the Anthropic error the bridge writes does not."""
    google = {"error": {"code": 400, "message": f"API key not valid: {KEY}",
                        "status": "INVALID_ARGUMENT"}}  # fmt: skip
    upstream.enqueue(JSONReply(google, status=400))
    with pytest.raises(anthropic.BadRequestError) as info:
        claude(proxy, "/gem").messages.count_tokens(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert upstream.requests[-1].headers["x-goog-api-key"] == KEY
    body: Any = info.value.body
    assert body["error"] == {"type": "invalid_request_error",
                             "message": "API key not valid: [REDACTED]"}  # fmt: skip


def test_an_echoed_key_never_reaches_the_content_view(upstream: ScriptedUpstream) -> None:
    """Through a real mitmweb: the timeline of a stream whose error event echoes the key
    (the upstream's kept bytes and the client's) shows it redacted."""
    from tests.e2e.test_mitmweb import MITMWEB, TOKEN, Web, free_port

    port = free_port()
    options = {
        "web_host": "127.0.0.1",
        "web_port": port,
        "web_open_browser": False,
        "web_password": TOKEN,
        "store_streamed_bodies": True,
    }
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}  # fmt: skip
    upstream.enqueue(SSEReply(sse_from_payloads([chunk, echo(KEY)]), seed=6))
    with Proxy(upstream.port, options, program=MITMWEB) as p:
        web = Web(p, port, upstream)
        try:
            before = web.ids()
            with pytest.raises(anthropic.APIStatusError):
                for _ in claude(p).messages.create(
                    model="m",
                    max_tokens=5,
                    messages=[{"role": "user", "content": "hi"}],
                    stream=True,
                ):
                    pass
            flow = web.flow(before)
            # The client hangs up on the error event; the rest of the body may still be on
            # its way through the relay: the view is read until the error event shows.
            deadline = time.monotonic() + 10
            while True:
                shown = web.view(flow["id"], "response")["text"]
                if "Incorrect API key provided" in shown or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert "Incorrect API key provided: [REDACTED]" in shown, shown
            for text in (shown, web.view(flow["id"], "request")["text"], flow["comment"]):
                assert KEY not in text, text
        finally:
            web.http.close()
    assert KEY not in p.log_text()
