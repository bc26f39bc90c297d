"""End to end, issue 40 point 6: no key in mitmdump's own flow line.

mitmdump prints every flow itself (its ``Dumper``, with ``print``: the bridge's log redaction
never sees it): at the default ``flow_detail`` 1 the request line with its URL — a Gemini
``?key=`` in full, or its first characters where the line is cut to the terminal. A real
mitmdump at ``flow_detail`` 1 (``COLUMNS`` wide enough for the whole URL) in front of an
upstream that checks the key as Gemini's API does (``x-goog-api-key`` or ``?key=``; none: 403
``PERMISSION_DENIED``, another: 400 ``API_KEY_INVALID``) is sent Gemini requests with
``?key=``: the client's key on a same-dialect route, on a route with its own key, a request the
bridge answers itself, one it passes on without rewriting (a body it cannot read, a model
lookup no route takes), an OpenAI client to a Gemini route with the route's key, and another
API's ``?api_key=``. Neither key, nor its first 8 characters, is in mitmdump's output; every
request still reached the upstream authenticated.

At ``flow_detail`` 2 mitmproxy prints the request headers the upstream got: the pinning test
says what shows then (docs/observability.md#what-mitmdump-prints).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream, raw_request

CLIENT_KEY = "AIzaFLOWclientKEY0123456789abcdefghijk"
"""A Gemini client's key, as Google's look (39 characters, ``AIza…``)."""
ROUTE_KEY = "AIzaROUTEownKEY9876543210zyxwvutsrqpon"
"""The route's ``api_key_env`` value."""
OTHER_KEY = "otherAPIkeyQWERTYUIOPasdfghjkl"
"""Another API's ``?api_key=`` (no Gemini request): shown ``redacted``."""
OPENAI_CLIENT_KEY = "sk-flowline-openai-client-0123456789"
MODEL = "gemini-3-pro-preview"
ENV = "CB_E2E_FLOWLINE_ROUTE_KEY"

ROUTES = f"""
[[routes]]
name = "gem-route-key"
path = "/rk/v1beta/models/*"
client = "gemini"
upstream = "gemini"
api_key_env = "{ENV}"

[[routes]]
name = "gem-to-openai"
path = "/go/v1beta/models/*"
client = "gemini"
upstream = "openai_chat"

[[routes]]
name = "openai-to-gemini"
path = "/og/v1/chat/completions"
client = "openai_chat"
upstream = "gemini"
api_key_env = "{ENV}"

[[routes]]
name = "gemini"
path = "/v1beta/models/*"
client = "gemini"
upstream = "gemini"
"""

ANSWER = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"text": "hello"}]},
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4},
    "modelVersion": MODEL,
}


def google_error(status: int, reason: str, message: str) -> JSONReply:
    code = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED"}[status]
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                "domain": "googleapis.com"}]  # fmt: skip
    return JSONReply(
        {"error": {"code": status, "message": message, "status": code, "details": details}},
        status=status,
    )


class Gemini:
    """Gemini's API as it treats keys: ``x-goog-api-key`` or ``?key=`` (the header first),
    none → 403, one it does not know → 400 ``API_KEY_INVALID``. Records the key of each
    request it served, and whether the key came in the URL."""

    def __init__(self) -> None:
        self.served: list[tuple[str, str, bool]] = []
        """(path without query, key, whether the key was in the URL)"""

    def __call__(self, rec: Recorded) -> JSONReply:
        parts = urlsplit(rec.path)
        query = parse_qs(parts.query)
        if parts.path.startswith("/other/"):
            if query.get("api_key") != [OTHER_KEY]:
                return JSONReply({"error": "bad api_key"}, status=401)
            self.served.append((parts.path, OTHER_KEY, True))
            return JSONReply({"ok": True})
        in_url = query.get("key", [None])[0]
        key = rec.headers.get("x-goog-api-key") or in_url
        if key is None:
            return google_error(
                403, "API_KEY_SERVICE_BLOCKED", "Method doesn't allow unregistered callers"
            )
        if key not in (CLIENT_KEY, ROUTE_KEY):
            return google_error(
                400, "API_KEY_INVALID", "API key not valid. Please pass a valid API key."
            )
        self.served.append((parts.path, key, in_url is not None))
        if rec.method == "GET":
            return JSONReply({"name": f"models/{MODEL}", "displayName": "Gemini 3 Pro"})
        try:
            json.loads(rec.body)
        except ValueError:
            return google_error(400, "INVALID_JSON", "Invalid JSON payload received.")
        return JSONReply(ANSWER)


@pytest.fixture
def gemini(upstream: ScriptedUpstream) -> Gemini:
    script = Gemini()
    upstream.script = script
    upstream.strict = False  # one request sends a body Gemini refuses, on purpose
    return script


@pytest.fixture
def start(
    upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[int], Proxy]]:
    """``start(flow_detail)``: mitmdump with the routes above, wide enough (``COLUMNS``) to
    print whole URLs, as a wide terminal would."""
    routes = tmp_path / "routes.toml"
    routes.write_text(ROUTES)
    monkeypatch.setenv(ENV, ROUTE_KEY)
    monkeypatch.setenv("COLUMNS", "1000")
    started: list[Proxy] = []

    def run(flow_detail: int) -> Proxy:
        p = Proxy(upstream.port, {"bridge_routes": str(routes), "flow_detail": flow_detail})
        started.append(p)
        return p.start()

    yield run
    for p in started:
        p.close()


BODY = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
JSON_HEADERS = {"content-type": "application/json"}


def gemini_post(p: Proxy, path: str, body: bytes = BODY) -> tuple[int, Any]:
    status, _, raw = raw_request(p.port, "POST", path, body, JSON_HEADERS)
    return status, json.loads(raw)


def send_every_kind(p: Proxy) -> None:
    """One request of each kind; each answered as it should be."""
    method = f"/v1beta/models/{MODEL}:generateContent"
    # 1. Rewritten, same dialect: the client's own key.
    status, body = gemini_post(p, f"{method}?key={CLIENT_KEY}")
    assert status == 200 and body["candidates"][0]["content"]["parts"][0]["text"] == "hello"
    # 2. Rewritten, the route's own key (the client's ?key= replaced).
    status, _ = gemini_post(p, f"/rk{method}?key={CLIENT_KEY}")
    assert status == 200
    # 3. Rewritten: an OpenAI client to a Gemini upstream with the route's key.
    status, _, raw = raw_request(
        p.port,
        "POST",
        "/og/v1/chat/completions",
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode(),
        {**JSON_HEADERS, "authorization": f"Bearer {OPENAI_CLIENT_KEY}"},
    )
    assert status == 200, raw
    # 4. Answered by the bridge itself (a body it refuses for another dialect).
    status, body = gemini_post(p, f"/go{method}?key={CLIENT_KEY}", b'{"contents": 5}')
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    # 5. Passed on without rewriting: a same-dialect body the bridge cannot read.
    status, body = gemini_post(p, f"{method}?key={CLIENT_KEY}", b"{not json")
    assert status == 400 and body["error"]["details"][0]["reason"] == "INVALID_JSON"
    # 6. Passed on: a model lookup no route rewrites.
    status, _, raw = raw_request(p.port, "GET", f"/v1beta/models/{MODEL}?key={CLIENT_KEY}")
    assert status == 200 and json.loads(raw)["name"] == f"models/{MODEL}"
    # 7. Another API's key-named parameter, passed on.
    status, _, raw = raw_request(p.port, "GET", f"/other/v2/thing?api_key={OTHER_KEY}&x=1")
    assert status == 200 and json.loads(raw) == {"ok": True}


def test_mitmdump_at_its_default_verbosity_never_prints_a_key(
    start: Callable[[int], Proxy], gemini: Gemini
) -> None:
    p = start(1)
    send_every_kind(p)
    p.stop()  # everything printed
    out = p.log_text()
    for key in (CLIENT_KEY, ROUTE_KEY, OTHER_KEY, OPENAI_CLIENT_KEY):
        assert key[:8] not in out, f"{key[:8]}… in mitmdump's output:\n{out}"
    # The flow lines were printed, the URLs without their keys.
    lines = [line for line in out.splitlines() if re.search(r": (POST|GET) http://", line)]
    assert len(lines) == 7, out
    assert any(line.endswith(f"/v1beta/models/{MODEL}:generateContent") for line in lines)
    assert any(line.endswith(f"/v1beta/models/{MODEL}") for line in lines)  # passed on
    # Answered by the bridge itself: the flow shows the client's key redacted.
    assert any(line.endswith(f"/go/v1beta/models/{MODEL}:generateContent?key=redacted")
               for line in lines)  # fmt: skip
    assert any(line.endswith("/other/v2/thing?api_key=redacted&x=1") for line in lines)
    # Every request the upstream served was authenticated, a Gemini key never in the URL.
    served = {(path, key, in_url) for path, key, in_url in gemini.served}
    gemini_path = f"/v1beta/models/{MODEL}:generateContent"
    assert served == {
        (gemini_path, CLIENT_KEY, False),  # 1 and 5: the client's key, in x-goog-api-key
        (f"/rk{gemini_path}", ROUTE_KEY, False),
        (f"/og{gemini_path}", ROUTE_KEY, False),  # the OpenAI client's route
        (f"/v1beta/models/{MODEL}", CLIENT_KEY, False),
        ("/other/v2/thing", OTHER_KEY, True),  # another API's: as it was sent
    }
    assert len(gemini.served) == 6


def test_at_flow_detail_2_mitmdump_prints_the_headers_the_upstream_got(
    start: Callable[[int], Proxy], gemini: Gemini
) -> None:
    """Pinned: at ``flow_detail`` 2 and up mitmproxy prints each request's headers as they
    went upstream (and at 3 the bodies) — the key the upstream got among them, in
    ``x-goog-api-key`` or ``authorization``. The URL never holds a Gemini key. Should
    mitmproxy or the bridge change what shows, this test says so (and
    docs/observability.md#what-mitmdump-prints must be told)."""
    p = start(2)
    send_every_kind(p)
    p.stop()
    out = p.log_text()
    headers = re.findall(r"^ {4}x-goog-api-key: (\S+)$", out, re.MULTILINE)
    # 1, 5 and 6 carry the client's key, 2 and 3 the route's; 4 never went upstream.
    assert sorted(headers) == sorted([CLIENT_KEY] * 3 + [ROUTE_KEY] * 2), out
    # The OpenAI client's own key was replaced by the route's: not in the upstream request.
    assert OPENAI_CLIENT_KEY not in out
    # Request lines: no Gemini key in any URL; another API's redacted.
    for line in out.splitlines():
        if re.search(r": (POST|GET) http://", line):
            assert CLIENT_KEY not in line and ROUTE_KEY not in line and OTHER_KEY not in line
    assert "?api_key=redacted&x=1" in out
    # What the client sent on the request the bridge answered itself stays in the URL,
    # redacted.
    assert "?key=redacted" in out
