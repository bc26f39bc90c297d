"""Routes by model and upstream URL (issue 29): which route a request takes, where it goes,
and which key goes with it (sans-IO, through ``route_for`` and ``decide``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route, withholds_key
from addon.config.routes_file import RoutesError, load_routes
from addon.config.upstream_url import parse_upstream_url
from addon.dialects import DIALECTS
from addon.plan import Incoming, Rewrite, decide, route_for
from addon.plan.wire_request import WITHHELD

CLIENT_KEY = "sk-client-SECRET"
ROUTE_KEY = "sk-route-SECRET"

ROUTES = (
    Route(name="far", model=("gpt-far*",), upstream_url="https://far.example:8443/api/"),
    Route(name="keyed", model=("gpt-keyed",), upstream_url="http://10.0.0.2", api_key_env="K"),
    Route(name="told", model=("gpt-told",), upstream_url="https://far.example", client_key=True),
    Route(name="same", model=("gpt-same",), upstream_url="https://api.example.com/prefix"),
    Route(
        name="gemini-far",
        path="*/models/*:*enerateContent",
        client="gemini",
        model=("gemini-2.5-*",),
        upstream_url="https://g.example",
    ),
    *(
        Route(name=n, path=p, client=c)  # type: ignore[arg-type]
        for n, p, c in (
            ("default", "*/chat/completions", "openai_chat"),
            ("gemini", "*/models/*:*enerateContent", "gemini"),
        )
    ),
)
SETTINGS = Settings(routes=ROUTES)


def chat(model: Any, **headers: str) -> Incoming:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    h = {"authorization": f"Bearer {CLIENT_KEY}", **headers}
    return Incoming("POST", "api.example.com", "/v1/chat/completions", h, body.encode(), 443)


def routed(inc: Incoming) -> str | None:
    route = route_for(SETTINGS, inc.method, inc.host, inc.path, inc.body)
    return None if route is None else route.name


@pytest.mark.parametrize(
    ("model", "name"),
    [
        pytest.param("gpt-far", "far", id="glob-exact"),
        pytest.param("gpt-far-2", "far", id="glob-star"),
        pytest.param("gpt-keyed", "keyed", id="literal"),
        pytest.param("gpt-keyed-2", "default", id="literal-is-not-a-prefix"),
        pytest.param("GPT-FAR", "default", id="case-sensitive"),
        pytest.param("other", "default", id="no-model-route-takes-the-rest"),
        pytest.param(7, "default", id="model-not-a-string"),
        pytest.param(None, "default", id="model-null"),
    ],
)
def test_a_route_takes_the_models_its_globs_name(model: Any, name: str) -> None:
    assert routed(chat(model)) == name


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b"", b'{"model": "gpt-far"', b"\xff\xfe"],
    ids=["text", "array", "empty", "cut", "not-utf8"],
)
def test_a_body_without_a_readable_model_takes_only_a_route_without_model(body: bytes) -> None:
    inc = Incoming("POST", "h", "/v1/chat/completions", {}, body)
    assert routed(inc) == "default"


def test_without_a_route_lacking_model_an_unreadable_model_is_not_routed() -> None:
    s = Settings(routes=(Route(name="only", model=("m",)),))
    assert route_for(s, "POST", "h", "/v1/chat/completions", b"{}") is None
    assert route_for(s, "POST", "h", "/v1/chat/completions", b'{"model":"m"}') is not None


def test_host_path_and_method_come_first_then_the_model_in_file_order() -> None:
    routes = (
        Route(name="a", host="a.example", model=("m*",)),
        Route(name="b", model=("m1",)),
        Route(name="c", model=("m*",)),
    )
    s = Settings(routes=routes)
    body = b'{"model": "m1"}'
    assert route_for(s, "POST", "a.example", "/v1/chat/completions", body).name == "a"  # type: ignore[union-attr]
    assert route_for(s, "POST", "b.example", "/v1/chat/completions", body).name == "b"  # type: ignore[union-attr]
    assert route_for(s, "POST", "b.example", "/v1/chat/completions", b'{"model":"m2"}').name == "c"  # type: ignore[union-attr]
    assert route_for(s, "GET", "a.example", "/v1/chat/completions", body) is None


def test_a_gemini_clients_model_is_read_from_its_path() -> None:
    path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    inc = Incoming("POST", "h", path, {}, b'{"contents": []}')
    assert routed(inc) == "gemini-far"
    other = Incoming("POST", "h", path.replace("2.5", "3"), {}, b"not json")
    assert routed(other) == "gemini"


def test_the_model_is_read_without_decoding_the_rest_of_the_body() -> None:
    read = DIALECTS["anthropic"].requested_model
    body = b'{"messages": [{"content": [1, {"x": [[]]}]}], "model": "claude-x", "z": null}'
    assert read(body, "/v1/messages") == "claude-x"
    assert read(b'\xef\xbb\xbf{"model": "m"}', "/v1/messages") == "m"  # BOM
    assert read(b'{"model": {"id": "m"}}', "/v1/messages") is None
    code_assist = DIALECTS["gemini_code_assist"]
    assert code_assist.requested_model(b'{"model": "g", "request": {}}', "/v1internal:x") == "g"


# ----------------------------------------------------------------------------- upstream_url


def rewrite(inc: Incoming, env: dict[str, str] | None = None) -> Rewrite:
    route = route_for(SETTINGS, inc.method, inc.host, inc.path, inc.body)
    assert route is not None
    d = decide(SETTINGS, route, inc, env or {})
    assert isinstance(d, Rewrite), d
    return d


def test_an_upstream_url_sets_where_the_request_goes_and_joins_its_prefix() -> None:
    d = rewrite(chat("gpt-far"))
    assert d.wire.origin == ("https", "far.example", 8443)
    assert d.wire.path == "/api/v1/chat/completions"
    assert d.plan.host == "far.example"  # the reasoning store's scope: the upstream's host


def test_a_route_without_upstream_url_goes_where_the_client_sent_it() -> None:
    d = rewrite(chat("other"))
    assert d.wire.origin is None and d.wire.path == "/v1/chat/completions"


def test_another_host_never_gets_the_clients_key_unless_the_route_says_so() -> None:
    d = rewrite(chat("gpt-far", **{"x-api-key": CLIENT_KEY}))
    assert "authorization" in d.wire.drop_headers and "x-api-key" in d.wire.drop_headers
    assert not any(k in ("authorization", "x-api-key") for k, _ in d.wire.set_headers)
    assert d.summary.count(WITHHELD) == 1
    assert CLIENT_KEY not in d.summary

    told = rewrite(chat("gpt-told"))
    assert "authorization" not in told.wire.drop_headers and WITHHELD not in told.summary

    keyed = rewrite(chat("gpt-keyed"), {"K": ROUTE_KEY})
    assert dict(keyed.wire.set_headers)["authorization"] == f"Bearer {ROUTE_KEY}"
    assert WITHHELD not in keyed.summary


def test_the_same_host_and_port_keeps_the_clients_key() -> None:
    d = rewrite(chat("gpt-same"))
    assert d.wire.origin == ("https", "api.example.com", 443)
    assert d.wire.path == "/prefix/v1/chat/completions"
    assert "authorization" not in d.wire.drop_headers and WITHHELD not in d.summary


@pytest.mark.parametrize(
    ("url", "host", "port", "withheld"),
    [
        pytest.param("https://api.example.com", "API.example.com", 443, False, id="same-host"),
        pytest.param("https://api.example.com:444", "api.example.com", 443, True, id="other-port"),
        pytest.param("http://api.example.com", "api.example.com", 443, True, id="http-is-80"),
        pytest.param("https://api.example.com", "api.example.com", None, False, id="port-unknown"),
        pytest.param("https://[::1]:8080", "[::1]", 8080, False, id="ipv6"),
        pytest.param("https://evil.example", "api.example.com", 443, True, id="other-host"),
    ],
)
def test_keys_stay_with_the_host_and_port_the_client_addressed(
    url: str, host: str, port: int | None, withheld: bool
) -> None:
    assert withholds_key(Route(name="r", upstream_url=url), host, port) == withheld


def test_a_gemini_clients_query_key_does_not_cross_hosts() -> None:
    path = "/v1beta/models/gemini-2.5-pro:generateContent?key=" + CLIENT_KEY
    body = b'{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}'
    d = rewrite(Incoming("POST", "h", path, {"x-goog-api-key": CLIENT_KEY}, body, 443))
    assert d.wire.origin == ("https", "g.example", 443)
    assert all(v != CLIENT_KEY for _, v in d.wire.query)
    assert "x-goog-api-key" in d.wire.drop_headers
    assert not any(CLIENT_KEY in v for _, v in d.wire.set_headers)


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("https://h.example", ("https", "h.example", 443, "")),
        ("http://h.example", ("http", "h.example", 80, "")),
        ("https://H.Example:8443/api/v1/", ("https", "h.example", 8443, "/api/v1")),
        ("http://127.0.0.1:9/p", ("http", "127.0.0.1", 9, "/p")),
        ("https://[::1]:8443", ("https", "::1", 8443, "")),
    ],
)
def test_upstream_urls_are_parsed(url: str, parsed: tuple[str, str, int, str]) -> None:
    u = parse_upstream_url(url)
    assert (u.scheme, u.host, u.port, u.prefix) == parsed


def write(tmp_path: Path, route: str) -> Path:
    path = tmp_path / "routes.toml"
    path.write_text(f'[[routes]]\nname = "far"\n{route}\n')
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param('upstream_url = "ftp://h"', "http:// or https://", id="scheme"),
        pytest.param('upstream_url = "h.example"', "http:// or https://", id="no-scheme"),
        pytest.param('upstream_url = "https:///v1"', "names no host", id="no-host"),
        pytest.param('upstream_url = "https://h/v1?a=1"', "query or fragment", id="query"),
        pytest.param('upstream_url = "https://h/v1#x"', "query or fragment", id="fragment"),
        pytest.param('upstream_url = "https://h:99999"', "valid port", id="port-range"),
        pytest.param('upstream_url = "https://h:x"', "valid port", id="port-text"),
        pytest.param('upstream_url = "https://h:0"', "port 0", id="port-zero"),
        pytest.param('upstream_url = "https://u:p@h"', "credentials", id="userinfo"),
        pytest.param('upstream_url = "https://h x"', "not a host", id="space"),
        pytest.param("upstream_url = 3", "string", id="not-a-string"),
        pytest.param("model = []", "model name glob", id="model-empty-list"),
        pytest.param('model = [""]', "non-empty", id="model-empty-glob"),
        pytest.param("model = 3", "model name glob", id="model-number"),
        pytest.param('client_key = "yes"', "boolean", id="client-key-text"),
        pytest.param('model_map = {"a" = ""}', "non-empty string", id="map-empty-target"),
        pytest.param('model_map = {"" = "x"}', "non-empty strings", id="map-empty-glob"),
        pytest.param('model_map = {"a" = 3}', "non-empty string", id="map-target-number"),
        pytest.param('model_map = ["a"]', "table of model names", id="map-list"),
        pytest.param('when = {thinking = "yes"}', "boolean", id="when-thinking-text"),
        pytest.param("when = {images = 1}", "boolean", id="when-images-number"),
        pytest.param("when = {background = 0}", "boolean", id="when-background-number"),
        pytest.param("when = {min_input_tokens = -1}", "greater than or equal to 0", id="when-neg"),
        pytest.param("when = {min_input_tokens = 1.5}", "integer", id="when-float"),
        pytest.param('when = {min_input_tokens = "9"}', "integer", id="when-text"),
        pytest.param("when = {colour = true}", "unknown key (allowed: thinking", id="when-unknown"),
        pytest.param("when = 3", "e.g. {thinking = true}", id="when-not-a-table"),
    ],
)
def test_bad_new_keys_are_refused_with_one_line_naming_route_and_key(
    tmp_path: Path, line: str, message: str
) -> None:
    path = write(tmp_path, line)
    with pytest.raises(RoutesError) as info:
        load_routes(path)
    text = str(info.value)
    key = line.split(" ", 1)[0]
    if line.startswith("when = {"):
        key += "." + line.removeprefix("when = {").split(" ", 1)[0]
    assert f"routes[0].{key}: " in text and text.endswith(" (in route 'far')")
    assert message in text and str(path) in text
    assert "\n" not in text


def test_a_route_from_a_file_takes_a_glob_or_a_list(tmp_path: Path) -> None:
    one = load_routes(write(tmp_path, 'model = "gpt-*"\nupstream_url = "https://h"'))[0]
    assert one == Route(name="far", model=("gpt-*",), upstream_url="https://h")
    many = load_routes(write(tmp_path, 'model = ["a", "b*"]\nclient_key = true'))[0]
    assert many.model == ("a", "b*") and many.client_key


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"upstream_url": "gopher://h"}, "http:// or https://"),
        ({"model": ()}, "model name glob"),
    ],
)
def test_a_route_built_in_code_checks_the_new_keys(keys: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Route(name="r", **keys)


# ----------------------------------------------------------------------------- passed on


PASSING = (
    Route(
        name="keyed",
        path="*/k/chat/completions",
        upstream_url="https://far.example",
        api_key_env="K",
    ),
    Route(
        name="told",
        path="*/t/chat/completions",
        upstream_url="https://far.example",
        client_key=True,
    ),
    Route(name="far", upstream_url="https://far.example/p"),
)


def passed(path: str, env: dict[str, str] | None = None) -> Any:
    s = Settings(routes=PASSING)
    inc = Incoming(
        "POST", "api.example.com", path, {"authorization": f"Bearer {CLIENT_KEY}"}, b"not json", 443
    )
    route = route_for(s, "POST", inc.host, inc.path, inc.body)
    assert route is not None
    return decide(s, route, inc, env or {})


def test_a_body_passed_on_untouched_still_goes_to_the_upstream_url_by_the_key_rules() -> None:
    from addon.plan import Pass

    d = passed("/v1/chat/completions?key=" + CLIENT_KEY + "&x=1")
    assert isinstance(d, Pass) and d.reason and d.wire is not None
    assert d.wire.origin == ("https", "far.example", 443)
    assert d.wire.path == "/p/v1/chat/completions" and d.wire.query == (("x", "1"),)
    assert "authorization" in d.wire.drop_headers and not d.wire.set_headers

    keyed = passed("/k/chat/completions", {"K": ROUTE_KEY})
    assert isinstance(keyed, Pass) and keyed.wire is not None
    assert dict(keyed.wire.set_headers) == {"authorization": f"Bearer {ROUTE_KEY}"}

    told = passed("/t/chat/completions")
    assert isinstance(told, Pass) and told.wire is not None
    assert not told.wire.drop_headers and not told.wire.set_headers


def test_a_route_without_upstream_url_passes_on_where_the_client_sent_it() -> None:
    from addon.plan import Pass

    s = Settings(routes=(Route(name="plain"),))
    inc = Incoming("POST", "h", "/v1/chat/completions", {}, b"not json")
    d = decide(s, s.routes[0], inc, {})
    assert isinstance(d, Pass) and d.reason and d.wire is None
