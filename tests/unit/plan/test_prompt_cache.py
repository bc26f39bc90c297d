"""The upstream's prompt cache (issue 35): the same bytes before the new turn on every turn,
the ``invoke`` trigger per conversation, ``prompt_cache_key``, and the breakpoints a route's
``cache_control`` sends (docs/caching.md)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import (
    CacheMark,
    Message,
    Notes,
    Params,
    Request,
    Text,
    Tool,
    ToolCall,
    ToolMode,
    ToolResult,
)
from addon.plan import Incoming, Rewrite, decide
from addon.stores.reasoning import ReasoningStore
from addon.textproto.invoke import make_trigger
from addon.transforms.cache import MAX_BREAKPOINTS, place_breakpoints, strip_cache_control
from addon.transforms.conversation import conversation_of, derive
from tests.prompt_prefix import (
    CLIENT_PATHS,
    UPSTREAMS,
    client_body,
    prompt,
    reuse,
    upstream_bodies,
)
from tests.realdata import FIXTURES

MODES: tuple[ToolMode, ...] = ("native", "invoke", "bracket")
ANTHROPIC_MARKS = DIALECTS["anthropic"].cache_marks
CHAT_MARKS = DIALECTS["openai_chat"].cache_marks
assert ANTHROPIC_MARKS is not None and CHAT_MARKS is not None


# --------------------------------------------------------------------------- the same bytes


@pytest.mark.parametrize("thinking", [False, True], ids=["plain", "thinking"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", list(CLIENT_PATHS))
def test_each_turn_repeats_the_previous_turns_prompt(
    client: str, upstream: str, mode: ToolMode, thinking: bool
) -> None:
    """Goal of issue 35: turn k+1 starts with >= 95% of turn k's prompt, every client dialect,
    upstream dialect and tool mode (measured: >= 99.9% everywhere)."""
    bodies = upstream_bodies(client, upstream, mode, 5, thinking=thinking)
    prompts = [prompt(upstream, b) for b in bodies]
    shares = [reuse(a, b) for a, b in itertools.pairwise(prompts)]
    assert min(shares) >= 0.95, shares


def _recorded_conversations() -> list[tuple[str, list[dict[str, Any]]]]:
    """Each recorded client's turns (``../shared/fixtures/real/clients``), in order."""
    folder = FIXTURES / "clients"
    stems = sorted({f.name.split("-turn")[0] for f in folder.glob("*-turn1.request.json")})
    return [
        (
            stem,
            [json.loads(f.read_text()) for f in sorted(folder.glob(f"{stem}-turn*.request.json"))],
        )
        for stem in stems
    ]


def _client_of(path: str) -> str:
    for client, (_, wire) in CLIENT_PATHS.items():
        if path.split("?")[0].endswith(wire.split("?")[0].rsplit("/", 1)[-1]):
            return client
    return "gemini"


@pytest.mark.parametrize("mode", ["native", "invoke"])
@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_recorded_clients_turns_repeat_their_prompt(upstream: str, mode: ToolMode) -> None:
    """Claude Code, Codex CLI, OpenCode, the AI SDK and Gemini CLI, replayed turn by turn."""
    conversations = _recorded_conversations()
    if not conversations:
        pytest.skip("no client recordings in ../shared/fixtures/real/clients")
    for stem, turns in conversations:
        client = _client_of(turns[0]["path"])
        route = Route(name="r", path="*", client=client, upstream=upstream, tool_mode=mode)  # type: ignore[arg-type]
        store = ReasoningStore()
        prompts = []
        for rec in turns:
            raw = json.dumps(rec["body"]).encode()
            inc = Incoming("POST", "api.example.com", rec["path"], {}, raw)
            d = decide(Settings(routes=(route,)), route, inc, {}, store=store)
            assert isinstance(d, Rewrite), (stem, d)
            prompts.append(prompt(upstream, json.loads(d.body)))
        shares = [reuse(a, b) for a, b in itertools.pairwise(prompts)]
        assert min(shares) >= 0.95, (stem, shares)


def test_the_invoke_trigger_is_the_same_on_every_turn_and_new_per_conversation() -> None:
    one = upstream_bodies("openai_chat", "openai_chat", "invoke", 3)
    triggers = {_trigger(b) for b in one}
    assert len(triggers) == 1
    other = upstream_bodies("openai_chat", "openai_chat", "invoke", 1)  # another store's secret
    assert _trigger(other[0]) not in triggers


def _trigger(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    text = system if isinstance(system, str) else json.dumps(system)
    start = text.index("<<CALL_")
    return text[start : start + 17]


def test_a_trigger_cannot_be_made_without_the_secret() -> None:
    conversation = "opening:abc"
    a = make_trigger(derive(b"a" * 32, conversation, "invoke"))
    b = make_trigger(derive(b"b" * 32, conversation, "invoke"))
    assert a != b and a == make_trigger(derive(b"a" * 32, conversation, "invoke"))
    assert len(a) == len("<<CALL_12345678>>")


def test_the_sqlite_store_keeps_its_secret_for_every_process_on_it(tmp_path: Any) -> None:
    path = str(tmp_path / "store.db")
    first = ReasoningStore(path)
    secret = first.secret
    first.close()
    again = ReasoningStore(path)
    assert again.secret == secret and len(secret) == 32
    assert ReasoningStore().secret != secret


@pytest.mark.parametrize(
    ("params", "first", "expected"),
    [
        pytest.param(Params(cache_key="conv-1"), "a", "key:conv-1", id="prompt_cache_key"),
        pytest.param(
            Params(user='{"device_id":"d","account_uuid":"","session_id":"s-1"}'),
            "a",
            "session:s-1",
            id="claude-code-json",
        ),
        pytest.param(
            Params(user="user_abc_account_1_session_s-2"), "a", "session:s-2", id="claude-old"
        ),
    ],
)
def test_a_conversation_is_named_by_what_its_client_sends(
    params: Params, first: str, expected: str
) -> None:
    req = Request("x", "m", (Message("user", (Text(first),)),), params=params)
    assert conversation_of(req) == expected


def test_without_an_id_the_opening_names_the_conversation() -> None:
    opening = (Message("system", (Text("S"),)), Message("user", (Text("task"),)))
    later = (*opening, Message("assistant", (Text("ok"),)), Message("user", (Text("more"),)))
    a = conversation_of(Request("x", "m", opening))
    assert a.startswith("opening:")
    assert a == conversation_of(Request("x", "m", later))
    other = (Message("system", (Text("S"),)), Message("user", (Text("another task"),)))
    assert a != conversation_of(Request("x", "m", other))


# --------------------------------------------------------------------------- prompt_cache_key


def _decide(client: str, upstream: str, body: bytes, host: str = "api.example.com", **keys: Any):  # type: ignore[no-untyped-def]
    route = Route(
        name="r",
        path=CLIENT_PATHS[client][0],
        client=client,  # type: ignore[arg-type]
        upstream=upstream,  # type: ignore[arg-type]
        **keys,
    )
    inc = Incoming("POST", host, CLIENT_PATHS[client][1], {}, body)
    d = decide(Settings(routes=(route,)), route, inc, {})
    assert isinstance(d, Rewrite), d
    return d


CODEX = json.dumps(
    {"model": "gpt-5", "input": "hi", "prompt_cache_key": "01a2-conv", "stream": True}
).encode()


def test_codex_prompt_cache_key_reaches_openai_chat() -> None:
    d = _decide("openai_responses", "openai_chat", CODEX, host="api.openai.com")
    assert json.loads(d.body)["prompt_cache_key"] == "01a2-conv"


def test_a_key_is_derived_per_conversation_for_openai() -> None:
    bodies = [
        json.loads(
            _decide("anthropic", "openai_chat", client_body("anthropic", t), "api.openai.com").body
        )
        for t in (1, 2)
    ]
    keys = {b.get("prompt_cache_key") for b in bodies}
    assert len(keys) == 1 and next(iter(keys)).startswith("cb-")


def test_prompt_cache_key_is_off_by_default_for_other_hosts_and_never_a_credential() -> None:
    d = _decide("openai_responses", "openai_chat", CODEX)  # another host: off
    assert "prompt_cache_key" not in json.loads(d.body)
    d = _decide("anthropic", "openai_chat", client_body("anthropic", 1), prompt_cache_key=True)
    key = json.loads(d.body)["prompt_cache_key"]
    assert "sk-" not in key and len(key) == 35


# --------------------------------------------------------------------------- breakpoints


def _marks(body: dict[str, Any]) -> list[str]:
    """Where the body's breakpoints sit, in prompt order (tools, system, messages)."""
    found: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            if "cache_control" in value:
                found.append(where)
            for k, v in value.items():
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")

    for key in ("tools", "system", "messages"):
        walk(body.get(key), key)
    return found


@pytest.mark.parametrize("client", list(CLIENT_PATHS))
def test_an_anthropic_upstream_gets_breakpoints_from_every_client(client: str) -> None:
    bodies = upstream_bodies(client, "anthropic", "native", 3)
    first, third = (_marks(b) for b in (bodies[0], bodies[2]))
    assert first == ["system[0]", "messages[0].content[0]"]
    # the prefix, the previous turn's end (read again), this turn's end (written)
    assert third[0] == "system[0]" and len(third) == 3
    assert third[1] == "messages[2].content[0]" and third[2] == "messages[4].content[0]"


def test_claude_codes_own_breakpoints_are_kept_and_never_pushed_past_four() -> None:
    body = json.loads(client_body("anthropic", 3))
    body["system"] = [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]
    for m in body["messages"][-2:]:
        blocks = m["content"] if isinstance(m["content"], list) else None
        if blocks:
            blocks[-1]["cache_control"] = {"type": "ephemeral"}
    body["tools"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    d = _decide("anthropic", "anthropic", json.dumps(body).encode())
    out = json.loads(d.body)
    assert len(_marks(out)) == 4 == len(_marks(body))  # theirs, nothing added
    assert out["tools"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_a_clients_breakpoint_on_tool_use_and_image_reaches_anthropic() -> None:
    mark = {"type": "ephemeral"}
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"},
                 "cache_control": mark}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "f", "input": {}, "cache_control": mark}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}]},
        ],
    }  # fmt: skip
    out = json.loads(_decide("anthropic", "anthropic", json.dumps(body).encode()).body)
    assert out["messages"][0]["content"][0]["cache_control"] == mark
    assert out["messages"][1]["content"][0]["cache_control"] == mark
    assert len(_marks(out)) == 2  # the client placed some in the messages: no rolling ones


@pytest.mark.parametrize("client", ["anthropic", "openai_chat"])
def test_drop_sends_no_breakpoint_even_on_the_same_dialect(client: str) -> None:
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]}  # fmt: skip
    d = _decide(client, client, json.dumps(body).encode(), cache_control="drop")
    assert "cache_control" not in d.body.decode()


def test_an_openai_chat_route_that_says_auto_gets_marks_on_content_parts() -> None:
    bodies = upstream_bodies("openai_responses", "openai_chat", "native", 3, cache_control="auto")
    third = bodies[2]
    assert third["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    tool_messages = [m for m in third["messages"] if m["role"] == "tool"]
    assert tool_messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # the default: a chat upstream of another dialect gets none
    plain = upstream_bodies("openai_responses", "openai_chat", "native", 3)
    assert "cache_control" not in json.dumps(plain)


def test_a_1h_route_ttl_fits_the_clients_own_5m_marks() -> None:
    req = Request(
        "anthropic",
        "m",
        (
            Message("system", (Text("S", cache=CacheMark()),)),
            Message("user", (Text("a"),)),
        ),
    )
    notes: Notes = Counter()
    out = place_breakpoints(req, ANTHROPIC_MARKS, "1h", notes)
    end = out.messages[1].parts[0]
    assert isinstance(end, Text) and end.cache == CacheMark(None, by_bridge=True)
    alone = Request("anthropic", "m", (Message("user", (Text("a"),)),))
    end = place_breakpoints(alone, ANTHROPIC_MARKS, "1h", notes).messages[0].parts[0]
    assert isinstance(end, Text) and end.cache == CacheMark("1h", by_bridge=True)


def test_no_more_than_four_marks_whatever_the_client_sent() -> None:
    tools = tuple(Tool(f"t{i}", None, {}, cache=CacheMark()) for i in range(3))
    req = Request("anthropic", "m", (Message("user", (Text("a"),)),), tools=tools)
    out = place_breakpoints(req, ANTHROPIC_MARKS, "5m", Counter())
    count = sum(isinstance(t, Tool) and t.cache is not None for t in out.tools or ())
    count += sum(getattr(p, "cache", None) is not None for m in out.messages for p in m.parts)
    assert count == MAX_BREAKPOINTS
    full = Request("anthropic", "m", (Message("user", (Text("a"),)),), tools=(*tools, tools[0]))
    assert place_breakpoints(full, ANTHROPIC_MARKS, "5m", Counter()) is full


def test_marks_never_sit_on_blank_text_or_thinking() -> None:
    call = ToolCall("c", "f", "{}")
    req = Request(
        "x",
        "m",
        (
            Message("user", (Text("task"),)),
            Message("assistant", (call,)),
            Message("tool", (ToolResult("c", "r"),)),
            Message("user", (Text("  "),)),
        ),
    )
    out = place_breakpoints(req, CHAT_MARKS, "5m", Counter())
    last, result = out.messages[3].parts[0], out.messages[2].parts[0]
    assert isinstance(last, Text) and last.cache is None
    assert isinstance(result, ToolResult) and result.cache is not None


def test_strip_removes_marks_everywhere() -> None:
    req = Request(
        "anthropic",
        "m",
        (Message("user", (Text("a", cache=CacheMark()), ToolResult("c", "r", cache=CacheMark()))),),
        tools=(Tool("t", None, {}, cache=CacheMark("1h")),),
    )
    notes: Notes = Counter()
    out = strip_cache_control(req, notes)
    assert notes["cache_control removed"] == 3
    assert "CacheMark(" not in repr(out)


def test_anthropics_automatic_caching_counts_as_the_clients_end_breakpoint() -> None:
    body = json.loads(client_body("anthropic", 3))
    body["cache_control"] = {"type": "ephemeral"}  # automatic: the end of the request
    out = json.loads(_decide("anthropic", "anthropic", json.dumps(body).encode()).body)
    assert out["cache_control"] == {"type": "ephemeral"}
    assert _marks(out) == ["system[0]"]  # the prefix only: 2 in all
    dropped = _decide("anthropic", "anthropic", json.dumps(body).encode(), cache_control="drop")
    assert "cache_control" not in json.loads(dropped.body)
