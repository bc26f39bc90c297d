"""End to end: images on a text-only route (issue 44 point 4, docs/routes.md#images).

A real mitmdump before two scripted upstreams: the text route's (OpenAI chat, ``images =
false``, ``vision = "eyes"``) and the vision route's (OpenAI chat at its own ``upstream_url``,
with its own key). Claude Code 2.1.197's recorded image turns (a ``Read`` of a PNG whose
``tool_result`` carries an ``image`` block, then the next turn with the same image), streamed
and whole: the vision upstream gets one caption request with the image and its own key; the
text upstream gets no image, the caption in its place, and the same caption bytes on the next
turn without a second caption call (a second worker on the same store too); the caption call is
in the usage ledger under the vision route. A failing vision upstream is the client's 502 in
its dialect naming the vision route; no vision route is a 400; ``images = "drop"`` sends none.
The OpenAI SDK's own image request (a ``data:`` URL) is captioned the same way."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from addon.stores.ledger import open_ledger
from tests.e2e.harness import (
    JSONReply,
    Proxy,
    Recorded,
    ScriptedUpstream,
    SSEReply,
    raw_request,
    sse_from_payloads,
    stream_request,
)
from tests.e2e.route_tables import vision_route
from tests.realdata import read

VISION_KEY = "sk-e2e-vision-key-0123456789abcdef"
CAPTION = "A small red square, 8 by 8 pixels."
HEADERS = {"content-type": "application/json", "x-api-key": "sk-ant-e2e-client", "anthropic-version": "2023-06-01"}  # fmt: skip


def recorded_turn(n: int, stream: bool = True) -> bytes:
    body = json.loads(read(f"clients/claude-code-2.1.197-image-read-turn{n}.request.json"))["body"]
    body["stream"] = stream
    return json.dumps(body).encode()


PATHS = {
    "anthropic": "*/v1/messages",
    "openai_chat": "*/chat/completions",
    "openai_responses": "*/responses",
    "gemini": "*/models/*:*enerateContent",
}
"""Where each client dialect's requests go (the text route's ``path``)."""
CAPTIONED = 'images = false\nvision = "eyes"'


def start(
    start_proxy: Callable[..., Proxy],
    tmp_path: Path,
    vision_port: int,
    keys: str = CAPTIONED,
    client: str = "anthropic",
    **options: object,
) -> Proxy:
    """A mitmdump whose ``client`` requests take the text route (OpenAI chat upstream;
    ``keys``: its ``images`` and ``vision``), the vision route "eyes" at ``vision_port``."""
    path = tmp_path / f"routes-{client}.toml"
    path.write_text(
        f"""
[[routes]]
name = "text"
path = "{PATHS[client]}"
client = "{client}"
upstream = "openai_chat"
model_map = {{ "*" = "text-only-1" }}
{keys}
"""
        + vision_route(
            "eyes",
            "/vision-only/*",
            vision_port,
            "CB_E2E_VISION_KEY",
            'model_map = { "*" = "looker-1" }',
        )
    )
    return start_proxy(bridge_routes=str(path), **options)


def chat_answer(text: str, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-v",
        "object": "chat.completion",
        "created": 1,
        "model": "looker-1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }


def captioning(rec: Recorded) -> JSONReply:
    """The vision model's answer: the caption, 85 tokens in and 9 out."""
    return JSONReply(
        chat_answer(CAPTION, {"prompt_tokens": 85, "completion_tokens": 9, "total_tokens": 94})
    )


def red() -> dict[str, Any]:
    """The text model's whole answer: "It is red.", 9 tokens in and 3 out."""
    return chat_answer(
        "It is red.", {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    )


def recorded_png() -> str:
    """The base64 PNG of Claude Code's recorded image turn (its ``Read`` tool's result)."""
    turn = json.loads(read("clients/claude-code-2.1.197-image-read-turn2.request.json"))["body"]
    return str(turn["messages"][2]["content"][0]["content"][0]["source"]["data"])


def image_question(image: dict[str, Any]) -> list[Any]:
    """A user turn's content asking the colour of ``image`` (an Anthropic or OpenAI image part)."""
    return [{"type": "text", "text": "What colour?"}, image]


def png_source(data: str) -> dict[str, Any]:
    """An Anthropic ``image`` block of the base64 PNG ``data``."""
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def openai_client(p: Proxy, key: str) -> openai.OpenAI:
    """The openai SDK on ``p``'s ``/v1``, no retries."""
    return openai.OpenAI(base_url=f"{p.base_url}/v1", api_key=key, max_retries=0, timeout=20)


def image_url(url: str) -> dict[str, Any]:
    """An OpenAI chat ``image_url`` part of ``url``."""
    return {"type": "image_url", "image_url": {"url": url}}


def chat_stream(text: str) -> bytes:
    base = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "t"}
    return sse_from_payloads(
        [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            "[DONE]",
        ]
    )


@pytest.fixture
def vision(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedUpstream]:
    """The vision route's upstream (its key in the route's variable)."""
    monkeypatch.setenv("CB_E2E_VISION_KEY", VISION_KEY)
    with ScriptedUpstream() as server:
        server.script = captioning
        yield server
        assert not server.errors and not server.violations, (server.errors, server.violations)


def text_answers(upstream: ScriptedUpstream) -> None:
    def answer(rec: Recorded) -> Any:
        if rec.json().get("stream"):
            return SSEReply(chat_stream("It is red."), chunk_min=1, chunk_max=9, seed=5)
        return JSONReply(red())

    upstream.script = answer


@pytest.fixture
def bridge(
    start_proxy: Callable[..., Proxy],
    tmp_path: Path,
    upstream: ScriptedUpstream,
    vision: ScriptedUpstream,
) -> Callable[..., Proxy]:
    """``start`` (``keys``, ``client``, options) before this test's upstreams: the text route's
    answers "It is red." (``text_answers``), the vision route's is ``vision``."""
    text_answers(upstream)

    def started(keys: str = CAPTIONED, client: str = "anthropic", **options: object) -> Proxy:
        return start(start_proxy, tmp_path, vision.port, keys, client, **options)

    return started


def captioned_part(rec: Recorded) -> str:
    """The text upstream's tool message that holds the caption (as it arrived, JSON text)."""
    body = rec.json()
    (msg,) = [m for m in body["messages"] if "[image:" in json.dumps(m)]
    assert msg["role"] == "tool"
    return json.dumps(msg, ensure_ascii=False)


def no_image(rec: Recorded) -> None:
    text = rec.body.decode()
    assert "image_url" not in text and "base64" not in text and '"image"' not in text


def wait_for_ledger(store: Path, route: str) -> Any:
    ledger = open_ledger(str(store))
    deadline = time.monotonic() + 10
    try:
        while not [k for k in ledger.rows() if k.route == route]:
            assert time.monotonic() < deadline, ledger.rows()
            time.sleep(0.05)
        return ledger.rows()
    finally:
        ledger.close()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_claude_codes_image_turn_reaches_the_text_route_as_a_caption(
    stream: bool,
    bridge: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    vision: ScriptedUpstream,
    tmp_path: Path,
) -> None:
    store = tmp_path / "store.db"
    p = bridge(bridge_store=str(store))

    def send(n: int, proxy: Proxy) -> bytes:
        body = recorded_turn(n, stream)
        if stream:
            got = stream_request(
                proxy.port, "POST", "/v1/messages?beta=true", body, HEADERS, timeout=20
            )
            assert got.status == 200, got.body[:300]
            assert b"event: message_stop" in got.body and b"It is red." in got.body
            return got.body
        status, _, answer = raw_request(
            proxy.port, "POST", "/v1/messages?beta=true", body, HEADERS, timeout=20
        )
        assert status == 200, answer[:300]
        assert json.loads(answer)["content"][-1]["text"] == "It is red."
        return answer

    send(2, p)
    (asked,) = vision.requests  # one caption call, to the vision route's own upstream
    assert asked.path == "/vis/v1/chat/completions"
    assert asked.headers["authorization"] == f"Bearer {VISION_KEY}"
    assert "sk-ant-e2e-client" not in json.dumps(dict(asked.headers))
    sent = asked.json()
    assert sent["model"] == "looker-1" and not sent.get("stream")
    image = sent["messages"][0]["content"][1]
    assert image == image_url(f"data:image/png;base64,{recorded_png()}")

    (first,) = upstream.requests
    no_image(first)
    assert f"[image: {CAPTION}]" in captioned_part(first)
    assert first.json()["model"] == "text-only-1"

    send(3, p)  # the next turn: the same image, no second call, the same bytes
    assert len(vision.requests) == 1
    second = upstream.requests[1]
    no_image(second)
    assert captioned_part(second) == captioned_part(first)

    rows = wait_for_ledger(store, "eyes")
    (key,) = [k for k in rows if k.route == "eyes"]
    assert (key.model, key.key) == ("looker-1", "CB_E2E_VISION_KEY")
    assert (rows[key].requests, rows[key].input, rows[key].output) == (1, 85, 9)
    assert VISION_KEY not in p.log_text() and VISION_KEY.encode() not in store.read_bytes()

    if stream:  # a second worker on the same store: the caption from the store, no call
        p.stop()
        other = bridge(bridge_store=str(store))
        send(3, other)
        assert len(vision.requests) == 1
        assert captioned_part(upstream.requests[-1]) == captioned_part(first)
    assert "Traceback" not in p.log_text()


def test_a_failing_vision_route_is_a_502_naming_it(
    bridge: Callable[..., Proxy], upstream: ScriptedUpstream, vision: ScriptedUpstream
) -> None:
    p = bridge()
    vision.script = lambda rec: JSONReply(
        {"error": {"message": "vision model overloaded", "type": "server_error"}}, status=503
    )
    status, _, answer = raw_request(
        p.port, "POST", "/v1/messages", recorded_turn(2, True), HEADERS, timeout=20
    )
    assert status == 502
    error = json.loads(answer)
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    assert "vision route 'eyes'" in error["error"]["message"]
    assert "vision model overloaded" in error["error"]["message"]
    assert upstream.requests == []
    p.wait_for_log("[eyes]: the bridge's vision route 'eyes' could not caption an image: HTTP 503")
    assert p.log_text().count("could not caption an image") == 1
    assert "Traceback" not in p.log_text()


def test_no_vision_route_is_a_400_and_drop_sends_none(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    vision: ScriptedUpstream,
    tmp_path: Path,
) -> None:
    p = start(start_proxy, tmp_path, vision.port, "images = false")
    status, _, answer = raw_request(
        p.port, "POST", "/v1/messages", recorded_turn(2, False), HEADERS, timeout=20
    )
    assert status == 400, answer[:300]
    error = json.loads(answer)["error"]
    assert error["type"] == "invalid_request_error"
    assert "no vision route" in error["message"] and "'text'" in error["message"]
    assert upstream.requests == [] and vision.requests == []

    dropped = tmp_path / "drop"
    dropped.mkdir()
    q = start(start_proxy, dropped, vision.port, 'images = "drop"')
    text_answers(upstream)
    status, _, answer = raw_request(
        q.port, "POST", "/v1/messages", recorded_turn(2, False), HEADERS, timeout=20
    )
    assert status == 200, answer[:300]
    (rec,) = upstream.requests
    no_image(rec)
    assert "[image left out]" in rec.body.decode()  # the tool result held only the image
    assert vision.requests == []


def test_the_openai_sdks_image_is_captioned(
    bridge: Callable[..., Proxy], upstream: ScriptedUpstream, vision: ScriptedUpstream
) -> None:
    p = bridge(client="openai_chat")
    client = openai_client(p, "sk-client")
    content = image_question(image_url(f"data:image/png;base64,{recorded_png()}"))
    with client.chat.completions.create(
        model="claude-x", messages=[{"role": "user", "content": content}], stream=True
    ) as s:
        text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
    assert text == "It is red."
    (rec,) = upstream.requests
    no_image(rec)
    user = rec.json()["messages"][-1]
    assert f"[image: {CAPTION}]" in json.dumps(user)
    assert len(vision.requests) == 1
