"""Input tokens counted with a model family's tables (``addon.transforms.tokenizers``,
``addon.plan.token_counter``) and ``count_tokens`` answered with them (issue 44 point 2)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.plan.count_tokens import CountLocally, CountUpstream, count_request
from addon.plan.token_counter import count_input, tables_for
from addon.transforms import tokenizers
from addon.transforms.tokenizers import count_chat, count_text, tokenizer_for
from addon.transforms.tokens import estimate_input_tokens

pytest.importorskip("bpe_openai")

CLAUDE_CODE = (
    Path(__file__).parents[2] / "fixtures/claude_code/claude-code-2.1.197-default-main.request.json"
)


@pytest.mark.parametrize(
    ("model", "tables"),
    [
        ("gpt-4o", "o200k"),
        ("gpt-4o-mini-2024-07-18", "o200k"),
        ("openai/gpt-5", "o200k"),
        ("o3-mini", "o200k"),
        ("gpt-4.1", "o200k"),
        ("GPT-4-turbo", "cl100k"),
        ("gpt-3.5-turbo", "cl100k"),
        ("claude-sonnet-4-6", None),
        ("deepseek-chat", None),
        ("gemini-2.5-pro", None),
    ],
)
def test_the_tables_of_a_models_family(model: str, tables: str | None) -> None:
    assert tokenizer_for(model) == tables


def test_the_tables_count_as_openai_s_do() -> None:
    # Known counts of the published tables.
    assert count_text("o200k", "hello world") == 2
    assert count_text("cl100k", "hello world") == 2
    assert count_text("o200k", "<|endoftext|>") is not None  # special text is plain text


def test_a_chat_body_counts_its_messages_frames_and_tools() -> None:
    one = {"messages": [{"role": "user", "content": "hello world"}]}
    # 3 (message frame) + 1 ("user") + 2 ("hello world") + 3 (reply priming)
    assert count_chat("o200k", one) == 9
    two = {"messages": [*one["messages"], {"role": "assistant", "content": "hello world"}]}
    assert count_chat("o200k", two) == 9 + 3 + 1 + 2
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with_tools = count_chat("o200k", {**one, "tools": [tool]})
    assert with_tools is not None and with_tools > 9 + 12
    assert count_chat("o200k", {"model": "x"}) is None
    assert count_chat("o200k", "not a body") is None


def test_without_the_package_the_estimate_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizers._encoding.cache_clear()
    monkeypatch.setitem(sys.modules, "bpe_openai", None)  # import fails
    try:
        assert count_text("o200k", "hello") is None
        req = DIALECTS["openai_chat"].decode_request(
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi " * 100}]}, Counter()
        )
        got = count_input(None, req, {"messages": [{"content": "hi " * 100}]})
        assert got.estimated and got.tokens == estimate_input_tokens(
            {"messages": [{"content": "hi " * 100}]}
        )
    finally:
        tokenizers._encoding.cache_clear()


def test_which_tables_a_route_counts_with() -> None:
    mapped = Route(name="r", model_map=(("claude-*", "gpt-4o"),))
    assert tables_for(mapped, "claude-sonnet-4-6") == "o200k"
    assert tables_for(Route(name="r"), "claude-sonnet-4-6") is None
    assert tables_for(Route(name="r", count_tokens="cl100k"), "claude-x") == "cl100k"
    assert tables_for(Route(name="r", count_tokens="estimate"), "gpt-4o") is None
    assert tables_for(None, "gpt-4o") == "o200k"


def _count(route: Route, body: dict[str, Any]) -> CountLocally | CountUpstream | None:
    return count_request(route, "/v1/messages/count_tokens", json.dumps(body).encode(), {}, (), {})


ANTHROPIC_BODY = {
    "model": "claude-sonnet-4-6",
    "system": "You are terse.",
    "messages": [{"role": "user", "content": "def f(x):\n    return {'a': [1, 2, 3]}\n" * 20}],
}


def test_an_openai_model_route_answers_with_the_tables_at_once() -> None:
    route = Route(
        name="r", client="anthropic", upstream="openai_chat", model_map=(("claude-*", "gpt-4o"),)
    )
    got = _count(route, ANTHROPIC_BODY)
    assert isinstance(got, CountLocally)
    n = json.loads(got.body)["input_tokens"]
    chat = DIALECTS["openai_chat"].encode_request(
        DIALECTS["anthropic"].decode_request(ANTHROPIC_BODY, Counter()), Counter()
    )
    assert n == count_chat("o200k", chat)
    assert "o200k tables" in got.comment
    # Code is far from four characters a token.
    assert n != estimate_input_tokens(ANTHROPIC_BODY)


@pytest.mark.parametrize(
    ("route", "kind"),
    [
        (Route(name="r", client="anthropic", upstream="openai_chat"), CountUpstream),
        (Route(name="r", client="anthropic", upstream="anthropic"), CountUpstream),
        (
            Route(
                name="r",
                client="anthropic",
                upstream="openai_chat",
                model_map=(("claude-*", "gpt-4o"),),
                count_tokens="upstream",
            ),
            CountUpstream,
        ),
        (
            Route(name="r", client="anthropic", upstream="anthropic", count_tokens="o200k"),
            CountLocally,
        ),
        (
            Route(name="r", client="anthropic", upstream="openai_chat", count_tokens="estimate"),
            CountLocally,
        ),
    ],
)
def test_who_counts(route: Route, kind: type) -> None:
    assert isinstance(_count(route, ANTHROPIC_BODY), kind)


@pytest.mark.skipif(not CLAUDE_CODE.exists(), reason="the recording is not there")
def test_claude_codes_request_is_counted_within_5_percent_of_what_the_upstream_gets() -> None:
    """The recorded Claude Code request's count (from its count_tokens form) against the
    tables' count of the Chat Completions body the bridge sends for it (``decide``)."""
    from addon.config.options import Settings
    from addon.plan import Incoming, Rewrite, decide

    body = json.loads(CLAUDE_CODE.read_text())["body"]
    route = Route(
        name="r", client="anthropic", upstream="openai_chat", model_map=(("claude-*", "gpt-4o"),)
    )
    counting = {k: body[k] for k in ("model", "messages", "system", "tools") if k in body}
    got = _count(route, counting)
    assert isinstance(got, CountLocally)
    n = json.loads(got.body)["input_tokens"]
    raw = json.dumps(body).encode()
    d = decide(Settings(), route, Incoming("POST", "h", "/v1/messages", {}, raw, 443), {})
    assert isinstance(d, Rewrite)
    sent = count_chat("o200k", json.loads(d.body))
    assert sent is not None
    assert abs(n - sent) <= 0.05 * sent, (n, sent)


@pytest.mark.parametrize(
    ("route", "path"),
    [
        (
            Route(
                name="r",
                client="anthropic",
                upstream="openai_responses",
                model_map=(("claude-*", "gpt-5"),),
            ),
            "/v1/responses/input_tokens",
        ),
        (
            Route(
                name="r",
                client="anthropic",
                upstream="openai_responses",
                upstream_path="/openai/v1/responses?api-version=preview",
            ),
            "/openai/v1/responses/input_tokens?api-version=preview",
        ),
        (
            Route(
                name="r",
                client="anthropic",
                upstream="gemini",
                model_map=(("claude-*", "gemini-2.5-pro"),),
            ),
            "/v1beta/models/gemini-2.5-pro:countTokens",
        ),
    ],
)
def test_the_upstreams_own_counter_for_the_model_it_would_answer_with(
    route: Route, path: str
) -> None:
    got = _count(route, ANTHROPIC_BODY)
    assert isinstance(got, CountUpstream)
    assert got.path == path
    assert got.body is not None
    body = json.loads(got.body)
    if route.upstream == "openai_responses":
        assert set(body) <= {"model", "input", "instructions", "tools", "reasoning", "text"}
        assert body["instructions"] == "You are terse."
    assert got.counter is not None and got.counter.name == route.upstream


def test_the_responses_counters_answer() -> None:
    from addon.dialects.openai_responses.tokens import count_answer

    assert count_answer({"object": "response.input_tokens", "input_tokens": 11}) == 11
    assert count_answer({"input_tokens": True}) is None
    assert count_answer({"input_tokens": -1}) is None
    assert count_answer([]) is None
