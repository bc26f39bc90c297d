"""A large same-dialect body the rewrite leaves as it was goes upstream as the client sent it
(``plan.unchanged``, ``jsonio.same``): the bytes are the client's, and nothing is written anew.

What makes that sound: the codecs never change the body they read (checked on every
recorded client request, through every route that takes it), and the shortcut is taken only
where writing the body would have given the same JSON, types included."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.config.options import Settings
from addon.config.routes import Route
from addon.jsonio import dumpb, loads, same
from addon.plan import Incoming, Rewrite, decide
from addon.plan import request as plan_module
from tests.realdata import FIXTURES

CLIENTS = FIXTURES / "clients"
DIALECT_OF_PATH = (
    ("/v1/messages", "anthropic", "*/v1/messages"),
    ("/chat/completions", "openai_chat", "*/chat/completions"),
    ("/responses", "openai_responses", "*/responses"),
    ("enerateContent", "gemini", "*/models/*:*enerateContent"),
)


def recorded_requests() -> list[str]:
    if not CLIENTS.is_dir():
        return []
    return sorted(p.name for p in CLIENTS.glob("*.request.json"))


def _dialect(path: str) -> tuple[str, str] | None:
    bare = path.split("?", 1)[0]
    for part, dialect, pattern in DIALECT_OF_PATH:
        if part in bare:
            return dialect, pattern
    return None


# --------------------------------------------------------------------------- jsonio.same

_finite = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: f != 0 or math.copysign(1.0, f) > 0  # -0.0 is 0.0 to ``==``, not to json.dumps
)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), _finite, st.text(max_size=8))
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@settings(max_examples=400, deadline=None)
@given(_json, _json)
def test_same_is_json_equality_with_types(a: Any, b: Any) -> None:
    assert same(a, b, 10_000) == (_canonical(a) == _canonical(b))
    assert same(a, copy.deepcopy(a), 10_000)


def test_one_is_not_one_point_zero_nor_true() -> None:
    assert not same({"n": 1}, {"n": 1.0}, 10)
    assert not same({"n": 1}, {"n": True}, 10)
    assert not same([0], [False], 10)
    assert same({"a": 1, "b": [1.5, "x"]}, {"b": [1.5, "x"], "a": 1}, 10)


def test_past_its_budget_same_says_no_and_shared_values_cost_nothing() -> None:
    big = [{"i": i} for i in range(100)]
    assert not same(big, copy.deepcopy(big), 50)
    assert same(big, copy.deepcopy(big), 1000)
    assert same(big, list(big), 1)  # a new list of the same objects: one container compared


# --------------------------------------------------------------------------- decide


def _decide(route: Route, path: str, raw: bytes) -> Any:
    incoming = Incoming("POST", "api.example.com", path, {"authorization": "Bearer k"}, raw)
    return decide(Settings(routes=(route,)), route, incoming, {"K": "v"})


def _pasted_body(dialect: str, size: int) -> tuple[str, bytes]:
    """A chat request whose one message holds a long text (a pasted file)."""
    text = "    x = compute(value)  # line\n" * (size // 30)
    if dialect == "anthropic":
        body: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": text}],
        }
        return "/v1/messages", json.dumps(body).encode()
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": text}], "stream": True}
    return "/v1/chat/completions", json.dumps(body).encode()


@pytest.mark.parametrize("dialect", ["openai_chat", "anthropic"])
def test_a_large_unchanged_body_goes_upstream_as_the_client_sent_it(dialect: str) -> None:
    path, raw = _pasted_body(dialect, 200_000)
    # keep: an Anthropic upstream's default (auto) would add the bridge's breakpoints
    route = Route("same", path="*" + path, client=dialect, upstream=dialect, cache_control="keep")  # type: ignore[arg-type]
    d = _decide(route, path, raw)
    assert isinstance(d, Rewrite)
    assert d.body is raw  # not written anew: the client's own bytes
    assert same(loads(dumpb(d.wire.body)), loads(raw), 10**6)


def test_small_changed_and_marked_bodies_are_written_anew() -> None:
    route = Route("same", path="*/chat/completions")
    path, raw = _pasted_body("openai_chat", 200_000)
    small_path, small = _pasted_body("openai_chat", 1000)
    assert _decide(route, small_path, small).body is not small  # small: not compared
    bom = b"\xef\xbb\xbf" + raw
    d = _decide(route, path, bom)
    assert d.body is not bom and not d.body.startswith(b"\xef\xbb\xbf")
    # A change (a flat Anthropic-style tool, which the OpenAI upstream gets nested): written.
    doc = json.loads(raw)
    doc["tools"] = [{"name": "read", "input_schema": {"type": "object"}}]
    changed = json.dumps(doc).encode()
    d = _decide(route, path, changed)
    assert d.body is not changed
    assert loads(d.body)["tools"][0]["type"] == "function"
    # Another dialect upstream: always written anew.
    other = Route("x", path="*/v1/messages", client="anthropic")
    path, raw = _pasted_body("anthropic", 200_000)
    assert _decide(other, path, raw).body is not raw


@pytest.mark.parametrize("name", recorded_requests())
def test_no_route_changes_the_body_it_read_and_the_shortcut_only_keeps_the_same_json(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = json.loads((CLIENTS / name).read_text(encoding="utf-8"))
    found = _dialect(rec.get("path", ""))
    if rec.get("method") != "POST" or not isinstance(rec.get("body"), dict) or found is None:
        pytest.skip("not a chat request")
    dialect, pattern = found
    raw = json.dumps(rec["body"]).encode()
    read: list[Any] = []
    real_load: Callable[[bytes | str], Any] = plan_module.load_json

    def load_and_keep(data: bytes | str) -> Any:
        value = real_load(data)
        read.append(value)
        return value

    monkeypatch.setattr(plan_module, "load_json", load_and_keep)
    monkeypatch.setattr(plan_module, "SAME_MIN_BYTES", 0)  # every body is looked at
    for upstream in sorted({dialect, "openai_chat", "anthropic"}):
        for mode in ("native", "invoke"):
            route = Route("r", path=pattern, client=dialect, upstream=upstream, tool_mode=mode)  # type: ignore[arg-type]
            read.clear()
            d = _decide(route, rec["path"], raw)
            if not isinstance(d, Rewrite):
                continue
            assert read and same(read[0], real_load(raw), 10**7), (upstream, mode)
            if d.body is raw:
                assert upstream == dialect
                assert same(real_load(dumpb(d.wire.body)), real_load(raw), 10**7)


def test_the_recordings_are_there() -> None:
    if not CLIENTS.is_dir():
        pytest.skip(f"no recordings at {CLIENTS}")
    assert len(recorded_requests()) >= 20
