"""An explicit ``"stream": false`` reaches the upstream as one, across every dialect change.

Some gateways stream when the field is absent: a client that said it wants a whole answer
must be heard. Upstream dialects with a ``stream`` field (``openai_chat``, ``anthropic``,
``openai_responses``) get it written out; Gemini and Kiro carry it in the path and the
framing (``:generateContent`` / ``:streamGenerateContent``, Kiro always streams), so their
bodies never hold one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import Incoming, Rewrite, decide

BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai_chat": ("/v1/chat/completions",
                    {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "anthropic": ("/v1/messages",
                  {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
    "openai_responses": ("/v1/responses", {"model": "m", "input": "hi"}),
}  # fmt: skip
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
WITH_FIELD = ("openai_chat", "anthropic", "openai_responses")
CLIENTS = (*WITH_FIELD, "gemini")
UPSTREAMS = (*WITH_FIELD, "gemini", "kiro")


def upstream_body(client: str, upstream: str, stream: bool | None) -> dict[str, Any]:
    """The body the upstream gets; ``stream`` None: the client did not say (Gemini clients
    always do: the path names the method)."""
    if client == "gemini":
        method = "streamGenerateContent" if stream else "generateContent"
        path, body = f"/v1beta/models/m:{method}", dict(GEMINI_BODY)
    else:
        path, body = BODIES[client][0], dict(BODIES[client][1])
        if stream is not None:
            body["stream"] = stream
    route = Route(name="r", path="*", client=client, upstream=upstream)  # type: ignore[arg-type]
    incoming = Incoming("POST", "h", path, {"authorization": "Bearer k"}, json.dumps(body).encode())
    d = decide(Settings(routes=(route,)), route, incoming, {})
    assert isinstance(d, Rewrite), d
    sent: dict[str, Any] = json.loads(d.body)
    return sent


@pytest.mark.parametrize("upstream", WITH_FIELD)
@pytest.mark.parametrize("client", CLIENTS)
def test_an_explicit_false_reaches_an_upstream_with_a_stream_field(
    client: str, upstream: str
) -> None:
    body = upstream_body(client, upstream, False)
    assert "stream" in body and body["stream"] is False
    assert upstream_body(client, upstream, True)["stream"] is True


@pytest.mark.parametrize("upstream", WITH_FIELD)
@pytest.mark.parametrize("client", WITH_FIELD)
def test_a_client_that_did_not_say_sends_no_field(client: str, upstream: str) -> None:
    assert "stream" not in upstream_body(client, upstream, None)


@pytest.mark.parametrize("upstream", ["gemini", "kiro"])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [False, True])
def test_gemini_and_kiro_bodies_never_carry_the_field(
    client: str, upstream: str, stream: bool
) -> None:
    body = upstream_body(client, upstream, stream)
    inner = body.get("request", body)  # Code Assist wraps it
    assert "stream" not in body and "stream" not in inner
