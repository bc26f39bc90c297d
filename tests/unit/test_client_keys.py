"""The client keys file (``addon.config.client_keys``) and the check of a request's key against it
(``addon.plan.spending``): plain values, and each dialect's 401 read by its official SDK."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from addon.config.client_keys import (
    ClientKeys,
    ClientKeysError,
    digest,
    load_client_keys,
    parse_client_keys,
)
from addon.config.options import Settings
from addon.config.routes import Route
from addon.plan import Reject, match_request
from addon.plan.spending import (
    Admitted,
    check_client_key,
    client_keys_in,
    guarded_route,
    unguarded_warning,
)

ALICE = "sk-alice-0123456789abcdef"
BOB = "sk-bob-fedcba9876543210"
FILE = f'alice = "{ALICE}"\nbob = {{ env = "BOB_CLIENT_KEY" }}\n'
ENV = {"BOB_CLIENT_KEY": BOB}


def keys() -> ClientKeys:
    return parse_client_keys(FILE, ENV)


# --------------------------------------------------------------------------- the file


def test_a_string_is_the_key_and_an_env_table_names_the_variable_holding_it() -> None:
    k = keys()
    assert k.names == ("alice", "bob")
    assert k.match(ALICE) == "alice" and k.match(BOB) == "bob"
    assert k.match("sk-nobody-0123456789abcdef") is None
    assert k.match(ALICE + " ") is None and k.match(ALICE[:-1]) is None


def test_only_digests_are_kept_and_nothing_shows_a_key() -> None:
    k = keys()
    assert [d for d, _ in k.entries] == [digest(ALICE), digest(BOB)]
    shown = repr(k) + str(k.entries)
    assert ALICE not in shown and BOB not in shown


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        pytest.param('bob = { env = "NOPE" }', {}, "'NOPE' is not set", id="missing-env"),
        pytest.param('bob = { env = "E" }', {"E": " "}, "'E' is not set or empty", id="empty-env"),
        pytest.param('alice = "sk-1', {}, "not valid TOML", id="bad-toml"),
        pytest.param(f'a = "{ALICE}"\na = "{BOB}"', {}, "not valid TOML", id="duplicate-name"),
        pytest.param(
            f'a = "{ALICE}"\nb = "{ALICE}"', {}, "'a' and 'b' have the same key", id="same-key"
        ),
        pytest.param(
            f'a = "{ALICE}"\nb = {{ env = "E" }}', {"E": ALICE}, "the same key", id="same-key-env"
        ),
        pytest.param('a = "short"', {}, "shorter than 16", id="short"),
        pytest.param('a = ""', {}, "the key is empty", id="empty"),
        pytest.param("a = 3", {}, "not int", id="number"),
        pytest.param('a = { env = "E", x = 1 }', {"E": BOB}, "unknown key 'x'", id="table"),
        pytest.param("", {}, "no client keys", id="no-clients"),
    ],
)
def test_a_bad_file_is_one_error_naming_the_problem_and_no_key(
    text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ClientKeysError, match=message) as err:
        parse_client_keys(text, env, "bridge_client_keys: keys.toml")
    assert str(err.value).startswith("bridge_client_keys: keys.toml: ")
    assert ALICE not in str(err.value) and BOB not in str(err.value)


def test_a_file_that_cannot_be_read_or_is_not_utf8(tmp_path: Path) -> None:
    with pytest.raises(ClientKeysError, match="cannot read"):
        load_client_keys(str(tmp_path / "none.toml"), {})
    bad = tmp_path / "keys.toml"
    bad.write_bytes(b'a = "\xff\xfe"')
    with pytest.raises(ClientKeysError, match="not UTF-8"):
        load_client_keys(str(bad), {})
    bad.write_text(FILE)
    assert load_client_keys(str(bad), ENV).names == ("alice", "bob")


# --------------------------------------------------------------------------- the check


def route(client: str = "openai_chat", **kw: object) -> Route:
    return Route(name="r", path="*", client=client, upstream=client, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("client", "headers", "query", "source"),
    [
        pytest.param(
            "openai_chat", {"authorization": f"Bearer {ALICE}"}, (), "authorization", id="bearer"
        ),
        pytest.param("anthropic", {"x-api-key": ALICE}, (), "x-api-key", id="x-api-key"),
        pytest.param(
            "anthropic", {"authorization": f"bearer {ALICE}"}, (), "authorization", id="auth-token"
        ),
        pytest.param("gemini", {"x-goog-api-key": ALICE}, (), "x-goog-api-key", id="goog"),
        pytest.param(
            "gemini", {}, (("alt", "sse"), ("key", ALICE)), "query parameter 'key'", id="query"
        ),
        pytest.param(
            "openai_responses",
            {"authorization": f"Bearer {ALICE}"},
            (),
            "authorization",
            id="responses",
        ),
    ],
)
def test_a_client_key_where_the_dialect_sends_its_key_is_admitted(
    client: str, headers: dict[str, str], query: tuple[tuple[str, str], ...], source: str
) -> None:
    found = check_client_key(keys(), route(client), headers, query)
    assert found == Admitted(route(client), "alice", source)


def test_a_wrong_key_beside_a_right_one_still_admits() -> None:
    headers = {"x-api-key": "sk-wrong-0123456789abcdef", "authorization": f"Bearer {BOB}"}
    found = check_client_key(keys(), route("anthropic"), headers, ())
    assert isinstance(found, Admitted) and found.name == "bob"


def _sdk_error(body: bytes, sdk: str) -> Exception:
    """The exception the official SDK raises for this 401 body."""
    headers = {"content-type": "application/json"}
    try:
        if sdk == "openai":
            t = httpx.MockTransport(lambda _: httpx.Response(401, content=body, headers=headers))
            oa = openai.OpenAI(
                api_key="x",
                base_url="http://p",
                http_client=httpx.Client(transport=t),
                max_retries=0,
            )
            oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        else:
            import httpx2  # what anthropic's SDK is built on

            t2 = httpx2.MockTransport(lambda _: httpx2.Response(401, content=body, headers=headers))
            an = anthropic.Anthropic(
                api_key="x",
                base_url="http://p",
                http_client=httpx2.Client(transport=t2),
                max_retries=0,
            )
            an.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
    except Exception as e:
        return e
    raise AssertionError("no error")


def test_no_key_is_an_openai_invalid_api_key_401() -> None:
    found = check_client_key(keys(), route(), {}, ())
    assert isinstance(found, Reject) and found.status == 401
    assert found.message == "no key in authorization (Bearer)"
    err = _sdk_error(found.body, "openai")
    assert isinstance(err, openai.AuthenticationError) and err.code == "invalid_api_key"
    assert "bridge_client_keys" in err.message


def test_a_wrong_key_is_an_anthropic_authentication_error_naming_where_not_what() -> None:
    wrong = "sk-wrong-0123456789abcdef"
    found = check_client_key(keys(), route("anthropic"), {"x-api-key": wrong}, ())
    assert isinstance(found, Reject) and found.status == 401
    assert found.message == "the key in x-api-key is not a client key of this proxy"
    assert wrong.encode() not in found.body
    err = _sdk_error(found.body, "anthropic")
    assert isinstance(err, anthropic.AuthenticationError)
    assert json.loads(found.body)["error"]["type"] == "authentication_error"


def test_a_gemini_client_without_a_key_gets_unauthenticated() -> None:
    found = check_client_key(keys(), route("gemini"), {"x-goog-api-key": ""}, (("key", ""),))
    assert isinstance(found, Reject)
    assert "x-goog-api-key or authorization (Bearer) or the query parameter 'key'" in found.message
    error = json.loads(found.body)["error"]
    assert error["code"] == 401 and error["status"] == "UNAUTHENTICATED"


def test_a_responses_client_without_a_key_gets_openais_shape() -> None:
    found = check_client_key(keys(), route("openai_responses"), {"authorization": "Basic eA=="}, ())
    assert isinstance(found, Reject)
    assert json.loads(found.body)["error"]["code"] == "invalid_api_key"


# --------------------------------------------------------------------------- which requests


def settings(*routes: Route) -> Settings:
    return Settings(routes=routes)


def guarded(s: Settings, method: str, path: str, body: bytes = b"{}") -> str | None:
    r = guarded_route(s, match_request(s, method, "api.example.com", path, body))
    return r.name if r is not None else None


def test_only_routes_that_send_a_key_of_the_proxys_are_guarded() -> None:
    keyed = Route(name="keyed", path="*/chat/completions", api_key_env="K")
    kiro = Route(
        name="kiro", path="*/messages", client="anthropic", upstream="kiro", token_file="t"
    )
    open_ = Route(
        name="open", path="*/responses", client="openai_responses", upstream="openai_responses"
    )
    s = settings(keyed, kiro, open_)
    assert guarded(s, "POST", "/v1/chat/completions") == "keyed"
    assert guarded(s, "POST", "/v1/messages") == "kiro"
    assert guarded(s, "POST", "/v1/responses") is None
    assert guarded(s, "GET", "/v1/models") == "keyed"  # listed with the route's key
    assert guarded(s, "POST", "/v1/messages/count_tokens") == "kiro"
    assert guarded(s, "POST", "/elsewhere") is None


def test_a_route_whose_fallback_sends_a_key_is_guarded() -> None:
    first = Route(name="first", path="*", fallback=("second",))
    second = Route(name="second", path="/never", api_key_env="K")
    assert guarded(settings(first, second), "POST", "/v1/chat/completions") == "first"


# --------------------------------------------------------------------------- never upstream


def test_holds_finds_any_clients_key_and_nothing_else() -> None:
    k = keys()
    assert k.holds(ALICE) and k.holds(BOB)
    assert not k.holds("") and not k.holds(ALICE[:-1]) and not k.holds(ALICE + " ")


def test_every_header_and_parameter_holding_a_client_key_is_found_by_name() -> None:
    headers = [
        ("Authorization", f"Bearer {ALICE}"),
        ("x-api-key", BOB),
        ("X-Custom", f"Token {ALICE}"),
        ("x-goog-api-key", "sk-the-clients-own-upstream-key"),
        ("content-type", "application/json"),
    ]
    query = (("key", ALICE), ("alt", "sse"), ("other", BOB))
    found = client_keys_in(keys(), headers, query)
    assert found.headers == ("authorization", "x-api-key", "x-custom")
    assert found.query == ("key", "other")
    assert ALICE not in repr(found) and BOB not in repr(found)
    assert not client_keys_in(keys(), [("authorization", "Bearer sk-own-key-0000")], ())


def test_gemini_model_lists_are_guarded_by_the_route_the_request_fits() -> None:
    chat = Route(name="chat", api_key_env="K")
    claude = Route(
        name="claude", path="*/v1/messages", client="anthropic", upstream="anthropic",
        api_key_env="K",
    )  # fmt: skip
    gemini = Route(
        name="gemini", path="*/models/*:*enerateContent", client="gemini", upstream="gemini",
        api_key_env="K",
    )  # fmt: skip
    s = settings(chat, claude, gemini)

    def listed(path: str, headers: dict[str, str], query: tuple[tuple[str, str], ...] = ()) -> str:
        r = guarded_route(s, match_request(s, "GET", "h", path, b""), headers, query)
        assert r is not None
        return r.name

    assert listed("/v1/models", {"authorization": "Bearer x"}) == "chat"
    assert listed("/v1/models", {"x-api-key": "x", "anthropic-version": "1"}) == "claude"
    assert listed("/v1beta/models", {}, (("key", "x"),)) == "gemini"
    assert listed("/v1beta/models", {"x-goog-api-key": "x"}) == "gemini"
    assert guarded(settings(gemini), "GET", "/v1beta/models") == "gemini"


def test_the_start_up_warning_only_when_no_route_spends_a_key() -> None:
    warning = unguarded_warning((Route(name="open"),))
    assert warning is not None and "every request is served" in warning
    assert unguarded_warning((Route(name="open"), Route(name="k", api_key_env="K"))) is None
    kiro = Route(name="kiro", client="anthropic", upstream="kiro", token_file="t")
    assert unguarded_warning((kiro,)) is None
