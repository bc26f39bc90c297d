"""``KeysOutOfFlowLine``: a Gemini ``?key=`` goes upstream in ``x-goog-api-key``, and any
key-named query parameter is shown ``redacted`` in the flow before mitmdump's ``Dumper``
prints it (its ``response`` / ``error`` hooks come after every script's). The real mitmdump's
output: tests/e2e/test_flow_line_keys.py."""

from __future__ import annotations

import pytest
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from addon.plan.wire_request import KEY_PARAMETERS
from addon.shell.addons import make_addons
from addon.shell.flow_line import KeysOutOfFlowLine, is_gemini_request, query_keys

KEY = "AIzaUNITflowLINEkey0123456789"


@pytest.mark.parametrize(
    ("host", "path", "gemini"),
    [
        ("generativelanguage.googleapis.com", "/v1/models", True),
        ("GENERATIVELANGUAGE.GOOGLEAPIS.COM.", "/anything?key=k", True),
        ("127.0.0.1", "/v1beta/models/gemini-3-pro-preview:generateContent?key=k", True),
        ("127.0.0.1", "/proxy/v1alpha/cachedContents", True),
        ("127.0.0.1", "/v1beta", True),
        ("gw.example", "/v1/models/gemini-3-pro:streamGenerateContent", True),
        ("gw.example", "/v1/models/text-embedding-004:embedContent?key=k", True),
        ("api.openai.com", "/v1/models", False),
        ("api.openai.com", "/v1/chat/completions?key=k", False),
        ("gw.example", "/v1betamax/x", False),
        ("notgoogleapis.com", "/v1/models", False),
        ("gw.example", "/other?path=/v1beta/", False),
    ],
)
def test_which_requests_are_gemini_s(host: str, path: str, gemini: bool) -> None:
    assert is_gemini_request(host, path) is gemini


def test_query_keys_drops_or_shows_only_the_named_parameters() -> None:
    names = frozenset({"key"})
    path = "/v1beta/models/m:generateContent?alt=sse&key=AIza%2Bk&x=%20a+b"
    assert query_keys(path, names, None) == (
        "/v1beta/models/m:generateContent?alt=sse&x=%20a+b",
        ["AIza+k"],
    )
    assert query_keys(path, names, "redacted") == (
        "/v1beta/models/m:generateContent?alt=sse&key=redacted&x=%20a+b",
        ["AIza+k"],
    )
    assert query_keys("/p?key=a", names, None) == ("/p", ["a"])
    assert query_keys("/p?KEY=a&key=b", names, None) == ("/p", ["a", "b"])
    for untouched in ("/p", "/p?key=", "/p?key", "/p?keys=a", "/p?x=key%3Da"):
        assert query_keys(untouched, names, None) == (untouched, [])
    assert query_keys("/o?api_key=a&access_token=b&q=1", KEY_PARAMETERS, "redacted") == (
        "/o?api_key=redacted&access_token=redacted&q=1",
        ["a", "b"],
    )


def flow(path: str, host: str = "127.0.0.1", **headers: str) -> http.HTTPFlow:
    req = tutils.treq(
        host=host,
        port=8080,
        scheme=b"http",
        method=b"POST",
        path=path.encode(),
        headers=http.Headers([(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]),
        content=b"{}",
    )  # fmt: skip
    return tflow.tflow(req=req)


GEMINI = "/v1beta/models/m:generateContent"


def test_a_gemini_key_moves_from_the_url_to_its_header() -> None:
    addon = KeysOutOfFlowLine()
    f = flow(f"{GEMINI}?alt=sse&key={KEY}")
    addon.request(f)
    assert f.request.path == f"{GEMINI}?alt=sse"
    assert f.request.headers["x-goog-api-key"] == KEY
    assert KEY not in f.request.url
    # the same key in both places: the URL's goes
    f = flow(f"{GEMINI}?key={KEY}", x_goog_api_key=KEY)
    addon.request(f)
    assert f.request.path == GEMINI and f.request.headers["x-goog-api-key"] == KEY


def test_what_the_addon_leaves_as_it_is_on_the_way_upstream() -> None:
    addon = KeysOutOfFlowLine()
    cases = [
        flow(f"{GEMINI}?key={KEY}", x_goog_api_key="another"),  # two keys: not ours to pick
        flow(f"{GEMINI}?key={KEY}&key=second"),
        flow(f"/v1/chat/completions?key={KEY}", host="api.example.com"),  # not Gemini's
        flow(f"/other?api_key={KEY}"),
    ]
    answered = flow(f"{GEMINI}?key={KEY}")
    answered.response = tutils.tresp()  # answered by the bridge: it never goes upstream
    for f in [*cases, answered]:
        before = (f.request.path, f.request.headers.fields)
        addon.request(f)
        assert (f.request.path, f.request.headers.fields) == before


@pytest.mark.parametrize("hook", ["response", "error"])
def test_a_key_left_in_the_url_is_shown_redacted_before_the_dumper_prints(hook: str) -> None:
    addon = KeysOutOfFlowLine()
    f = flow(f"{GEMINI}?key={KEY}&alt=sse", x_goog_api_key="another")
    getattr(addon, hook)(f)
    assert f.request.path == f"{GEMINI}?key=redacted&alt=sse"
    f = flow(f"/other?x=1&api_key={KEY}&token={KEY}")
    getattr(addon, hook)(f)
    assert f.request.path == "/other?x=1&api_key=redacted&token=redacted"
    f = flow("/other?x=1")
    getattr(addon, hook)(f)
    assert f.request.path == "/other?x=1"


def test_it_is_the_last_of_the_bridge_s_addons() -> None:
    """mitmproxy calls addons in list order: the rewrite, the report and the ledger see the
    flow as it was sent; the key leaves it last, and the Dumper (after every script) prints."""
    assert isinstance(make_addons().all[-1], KeysOutOfFlowLine)
