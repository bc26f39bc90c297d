"""A hypothesis campaign over mutated real bodies (issue 8, "Done means").

The bodies are what real clients sent (``../shared/fixtures/real/clients/``:
Claude Code, Codex CLI, OpenCode, the Vercel AI SDK; and Cursor's BYOK
request). Each example mutates one of them the way an attacker or a broken
client would — keys dropped, types swapped, lone surrogates, control
characters, ``NaN`` / ``Infinity`` / ``1e400``, deep nesting, invalid UTF-8,
truncation, a path with credentials and undecodable bytes — and sends it
through ``addon.plan.decide`` on a same-dialect route and on dialect-changing
routes. Whatever the input:

- no exception escapes;
- the decision is a faithful rewrite (its body strict JSON, UTF-8), a
  passthrough (same dialect only), or a 400 in the client's dialect;
- what the shell would write about it (reason, message, summary, metadata) is
  one line, valid UTF-8, without the key from the path.

The answer side gets the same treatment: mutated whole answers of each
upstream dialect through ``addon.plan.answer.decode_answer`` / ``encode_answer`` (either
readable and re-encoded as strict JSON / SSE, or refused with the errors the
shell turns into a passthrough or a 502), and mutated upstream error bodies
through ``FlowPlan.error_body``. ``CB_CAMPAIGN_EXAMPLES=5000`` runs a longer campaign.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.config.options import Settings
from addon.config.routes import Route
from addon.model import UnsupportedShape
from addon.plan import Decision, Incoming, Pass, Reject, Rewrite, decide, load_json, short
from addon.plan.answer import AnswerState, decode_answer, encode_answer
from addon.plan.errors import error_body, unreadable_answer
from addon.redact import clean_data
from tests.realdata import FIXTURES, cursor_byok_body

CLIENTS = FIXTURES / "clients"
CLIENT_DIALECTS = {
    "claude-code-": "anthropic",
    "ai-sdk-6.0.326-anthropic-": "anthropic",
    "codex-": "openai_responses",
    "opencode-": "openai_chat",
    "ai-sdk-6.0.326-openai-compatible-": "openai_chat",
}
UPSTREAMS = ("openai_chat", "anthropic", "openai_responses")
PATH_KEY = "AIzaSyCampaign0123456789abcdefghijk"


@dataclass(frozen=True)
class Seed:
    name: str
    dialect: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _seeds() -> list[Seed]:
    out: list[Seed] = []
    if CLIENTS.is_dir():
        for p in sorted(CLIENTS.glob("*.request.json")):
            dialect = next((d for k, d in CLIENT_DIALECTS.items() if p.name.startswith(k)), None)
            rec = json.loads(p.read_text())
            if dialect is None or not isinstance(rec.get("body"), dict):
                continue
            headers = {k.lower(): v for k, v in rec["headers"].items()}
            out.append(Seed(p.name, dialect, rec["path"], headers, rec["body"]))
    try:
        byok = cursor_byok_body()
    except pytest.skip.Exception:
        return out
    path = "/v1/chat/completions"
    out.append(Seed("cursor-byok", "openai_chat", path, {"authorization": "Bearer sk-x"}, byok))
    return out


SEEDS = _seeds()
needs_seeds = pytest.mark.skipif(not SEEDS, reason=f"recordings not available ({FIXTURES})")

# --------------------------------------------------------------------------- mutations

type Path = tuple[str | int, ...]
HUGE = "\x00cb-huge\x00"
DEEP = "\x00cb-deep\x00"
SWAPS: list[Any] = [None, True, 0, -1, 2**70, 1.5, "", "x", [], {}, [None], {"": None}]


def _paths(value: Any, limit: int = 4000) -> list[Path]:
    out: list[Path] = []
    stack: list[tuple[Path, Any]] = [((), value)]
    while stack and len(out) < limit:
        path, node = stack.pop()
        children = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for k, v in children:
            out.append((*path, k))
            stack.append(((*path, k), v))
    return out


def _parent(root: Any, path: Path) -> Any:
    node = root
    for k in path[:-1]:
        node = node[k]
    return node


def _mutate_value(root: Any, path: Path, how: str, pick: Callable[[list[Any]], Any]) -> None:
    parent, key = _parent(root, path), path[-1]
    old = parent[key]
    match how:
        case "drop":
            del parent[key]
        case "swap":
            parent[key] = copy.deepcopy(pick(SWAPS))
        case "surrogate":
            parent[key] = (old if isinstance(old, str) else "") + pick(
                ["\ud83d", "\udcff", "\ud800x"]
            )
        case "control":
            parent[key] = (old if isinstance(old, str) else "") + pick(
                ["\x00", "\x1b[2J", "\r\n", "\u2028"]
            )
        case "nan":
            parent[key] = pick([math.nan, math.inf, -math.inf])
        case "huge":
            parent[key] = HUGE
        case "deep":
            parent[key] = DEEP
        case "secret":
            parent[key] = f"Incorrect API key provided: {PATH_KEY}"
        case _:
            raise AssertionError(how)


VALUE_MUTATIONS = ["drop", "swap", "surrogate", "control", "nan", "huge", "deep", "secret"]
BYTE_MUTATIONS = ["truncate", "bad_utf8", "raw_control", "cesu"]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[Seed]) -> tuple[Seed, bytes, str]:
    """(the seed, the mutated body bytes, the request path)."""
    seed = draw(st.sampled_from(seeds))
    body: Any = json.loads(json.dumps(seed.body))
    if draw(st.integers(0, 9)) == 0:
        body = copy.deepcopy(draw(st.sampled_from(SWAPS)))  # a whole body of another type
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(body)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(VALUE_MUTATIONS))
        _mutate_value(body, path, how, lambda xs: draw(st.sampled_from(xs)))
    ascii_only = draw(st.booleans())
    text = json.dumps(body, ensure_ascii=ascii_only)
    depth = draw(st.sampled_from([200, 5_000, 100_000]))
    text = text.replace(json.dumps(HUGE), draw(st.sampled_from(["1e400", "-1e999", "1" * 5000])))
    text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    raw = text.encode("utf-8", "surrogatepass")  # a lone surrogate as CESU bytes: invalid UTF-8
    how = draw(st.sampled_from([None, None, *BYTE_MUTATIONS]))
    if how is not None and raw:
        at = draw(st.integers(0, len(raw)))
        match how:
            case "truncate":
                raw = raw[:at]
            case "bad_utf8":
                raw = raw[:at] + b"\xff\xfe" + raw[at:]
            case "raw_control":
                raw = raw[:at] + b"\x00\x1b" + raw[at:]
            case "cesu":
                raw = raw[:at] + "\ud83d".encode("utf-8", "surrogatepass") + raw[at:]
    path = seed.path
    if draw(st.booleans()):
        sep = "&" if "?" in path else "?"
        path += sep + draw(st.sampled_from([f"key={PATH_KEY}", f"api_key={PATH_KEY}&x=\udcff\x07"]))
    return seed, raw, path


# --------------------------------------------------------------------------- checks


def _route(client: str, upstream: str) -> Route:
    return Route(name=f"{client}-{upstream}", path="*", client=client, upstream=upstream)  # type: ignore[arg-type]


def _error_shape(dialect: str, body: Any) -> str:
    if dialect == "anthropic":
        assert body["type"] == "error" and isinstance(body["error"]["type"], str)
    else:
        assert isinstance(body["error"]["type"], str)
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    return message


def _one_safe_line(text: str) -> None:
    text.encode("utf-8")
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert PATH_KEY not in text


def check_decision(seed: Seed, route: Route, raw: bytes, path: str) -> Decision:
    incoming = Incoming("POST", "api.example.com", path, seed.headers, raw)
    d = decide(Settings(routes=(route,)), route, incoming, {})
    same = route.client == route.upstream
    match d:
        case Pass():
            assert same, f"a passthrough on a dialect change ({route.name}): {d.reason}"
            assert d.reason
            _one_safe_line(d.reason)
        case Reject():
            assert d.status == 400, (d.status, d.message)
            message = _error_shape(route.client, load_json(d.body))
            assert message == d.message
            _one_safe_line(short(d.message))
        case Rewrite():
            # Strict JSON, as the upstream reads it (a high and a low surrogate that meet
            # are one character to any JSON reader).
            assert load_json(d.body) == json.loads(json.dumps(d.wire.body, allow_nan=False))
            d.body.decode("utf-8")
            _one_safe_line(short(d.summary))
            meta = clean_data(d.plan.meta())
            json.dumps(meta, ensure_ascii=False, allow_nan=False).encode("utf-8")
            assert PATH_KEY not in json.dumps(meta)
        case _:
            raise AssertionError(f"not a decision: {d!r}")
    return d


CAMPAIGN = settings(
    max_examples=int(os.environ.get("CB_CAMPAIGN_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@needs_seeds
@CAMPAIGN
@given(st.data())
def test_mutated_real_requests_on_the_same_dialect(data: st.DataObject) -> None:
    seed, raw, path = data.draw(mutated(SEEDS))
    check_decision(seed, _route(seed.dialect, seed.dialect), raw, path)


@needs_seeds
@CAMPAIGN
@given(st.data())
def test_mutated_real_requests_on_a_dialect_change(data: st.DataObject) -> None:
    seed, raw, path = data.draw(mutated(SEEDS))
    upstream = data.draw(st.sampled_from([u for u in UPSTREAMS if u != seed.dialect]))
    check_decision(seed, _route(seed.dialect, upstream), raw, path)


@needs_seeds
@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_every_unmutated_recording_is_rewritten(upstream: str) -> None:
    """The campaign's seeds themselves: each is a faithful rewrite on every route."""
    for seed in SEEDS:
        d = check_decision(
            seed, _route(seed.dialect, upstream), json.dumps(seed.body).encode(), seed.path
        )
        # Tool kinds an upstream cannot run (Codex's tool_search and web_search) are left out,
        # never a reason to refuse a real client's request.
        assert isinstance(d, Rewrite), (seed.name, upstream, d)


# --------------------------------------------------------------------------- answers

ANSWERS: dict[str, dict[str, Any]] = {
    "openai_chat": {
        "id": "chatcmpl-rec",
        "object": "chat.completion",
        "created": 1760000000,
        "model": "gpt-5",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Reading both files.",
                    "reasoning_content": "The user wants a.txt and b.txt.",
                    "tool_calls": [
                        {"id": "call_rec_1", "type": "function",
                         "function": {"name": "Read", "arguments": "{\"path\": \"a.txt\"}"}},
                        {"id": "call_rec_2", "type": "function",
                         "function": {"name": "Read", "arguments": "{\"path\": \"b.txt\"}"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160},
    },
    "anthropic": {
        "id": "msg_rec",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [
            {"type": "thinking", "thinking": "Read both.", "signature": "c2lnbmF0dXJl"},
            {"type": "text", "text": "Reading both files."},
            {"type": "tool_use", "id": "toolu_rec_1", "name": "Read", "input": {"path": "a.txt"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 40, "cache_read_input_tokens": 0},
    },
    "openai_responses": {
        "id": "resp_rec",
        "object": "response",
        "created_at": 1760000000,
        "status": "completed",
        "model": "gpt-5.5",
        "output": [
            {"type": "reasoning", "id": "rs_rec", "summary": [{"type": "summary_text", "text": "Read."}],
             "encrypted_content": "ZW5jcnlwdGVk"},
            {"type": "message", "id": "msg_rec", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Reading.", "annotations": []}]},
            {"type": "function_call", "id": "fc_rec", "call_id": "call_rec_1", "name": "Read",
             "arguments": "{\"path\": \"a.txt\"}", "status": "completed"},
            {"type": "custom_tool_call", "id": "ctc_rec", "call_id": "call_rec_2",
             "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"},
        ],
        "usage": {"input_tokens": 120, "output_tokens": 40, "total_tokens": 160},
    },
}  # fmt: skip


@st.composite
def mutated_answer(draw: st.DrawFn, upstream: str) -> bytes:
    seed = Seed("answer", upstream, "/", {}, ANSWERS[upstream])
    _, raw, _ = draw(mutated([seed]))
    return raw


def _plan_for(client: str, upstream: str, stream: bool) -> Any:
    body = {
        "openai_chat": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        "anthropic": {
            "model": "m",
            "max_tokens": 9,
            "messages": [{"role": "user", "content": "x"}],
        },
        "openai_responses": {"model": "m", "input": "x"},
    }[client]
    route = _route(client, upstream)
    raw = json.dumps({**body, "stream": stream}).encode()
    d = decide(Settings(routes=(route,)), route, Incoming("POST", "h", "/v1/x", {}, raw), {})
    assert isinstance(d, Rewrite)
    return d.plan


@pytest.mark.parametrize("upstream", UPSTREAMS)
@CAMPAIGN
@given(st.data())
def test_mutated_whole_answers_are_re_encoded_strictly_or_refused(
    upstream: str, data: st.DataObject
) -> None:
    client = data.draw(st.sampled_from(UPSTREAMS))
    stream = data.draw(st.booleans())
    plan = _plan_for(client, upstream, stream)
    raw = data.draw(mutated_answer(upstream))
    try:
        body = encode_answer(plan, decode_answer(plan, AnswerState.of(plan), raw))
    except (ValueError, UnsupportedShape, RecursionError):
        # The shell: passed on untouched (same dialect) or a 502 in the client's dialect.
        _error_shape(client, load_json(unreadable_answer(plan, "x")))
        return
    if stream:
        for line in body.decode("utf-8").split("\n"):  # SSE lines end at \n (not U+2028)
            if line.startswith("data: ") and line != "data: [DONE]":
                load_json(line[len("data: ") :])
    else:
        assert isinstance(load_json(body), dict)


@pytest.mark.parametrize("upstream", UPSTREAMS)
@CAMPAIGN
@given(st.data())
def test_mutated_upstream_errors_are_re_shaped_for_the_client(
    upstream: str, data: st.DataObject
) -> None:
    client = data.draw(st.sampled_from([u for u in UPSTREAMS if u != upstream]))
    plan = _plan_for(client, upstream, False)
    error = {"error": {"message": f"Incorrect API key provided: {PATH_KEY}", "type": "x"}}
    raw = data.draw(mutated([Seed("error", upstream, "/", {}, error)]))[1]
    status = data.draw(st.sampled_from([400, 401, 429, 500, 503]))
    body, message = error_body(plan, status, raw)
    assert _error_shape(client, load_json(body)) == message
    _one_safe_line(short(message))
