"""``tests.anthropic_cache``: every caching rule of the scripted Anthropic upstream, and its
answers and refusals read back by the official ``anthropic`` SDK (through a loopback
``ScriptedUpstream`` serving ``CachingAnthropic``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.anthropic_cache import (
    TTL_ORDER,
    CacheRefused,
    CacheUsage,
    PromptCache,
    ToolCall,
    breakpoint_count,
    canonical,
    content_blocks,
    error_body,
    estimate_tokens,
    message_body,
    message_events,
    read_prompt,
)
from tests.e2e.anthropic_cache_upstream import CachingAnthropic
from tests.e2e.harness import ScriptedUpstream

MODEL = "claude-opus-4-1"
"""A model the SDK does not warn about, with the default minimum (1024)."""
HAIKU = "claude-3-5-haiku-latest"
EMPTY_TEXT = len(canonical({"type": "text", "text": ""}))


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def text(tokens: int, tag: str = "t") -> dict[str, Any]:
    """A text block of exactly ``tokens`` estimated tokens, told apart by ``tag``."""
    size = tokens * 4 - EMPTY_TEXT
    assert size >= len(tag), (tokens, tag)
    block = {"type": "text", "text": (tag + "." * size)[:size]}
    assert estimate_tokens(block) == tokens
    return block


def cc(block: dict[str, Any], ttl: str | None = None, **extra: Any) -> dict[str, Any]:
    marker: dict[str, Any] = {"type": "ephemeral"} | ({"ttl": ttl} if ttl else {}) | extra
    return block | {"cache_control": marker}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def body(messages: list[dict[str, Any]], model: str = MODEL, **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 64, "messages": messages, **extra}


def refused(b: dict[str, Any]) -> str:
    with pytest.raises(CacheRefused) as e:
        PromptCache().account(b)
    return e.value.message


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> PromptCache:
    return PromptCache(clock)


# --------------------------------------------------------------------------- the prompt


def test_the_prompt_is_tools_then_system_then_each_messages_blocks() -> None:
    tool = {"name": "read", "description": "d", "input_schema": {"type": "object"}}
    b = body(
        [user(text(10, "a"), text(10, "b")), {"role": "assistant", "content": "hi"}],
        system="be brief",
        tools=[tool],
    )
    prompt = read_prompt(b)
    assert [x.loc for x in prompt.blocks] == [
        "tools.0",
        "system",
        "messages.0.content.0",
        "messages.0.content.1",
        "messages.1.content",
    ]
    assert prompt.total_tokens == sum(x.tokens for x in prompt.blocks)
    assert prompt.blocks[-1].tokens == estimate_tokens({"type": "text", "text": "hi"})


def test_cache_control_does_not_change_what_is_cached_but_role_model_and_tool_input_order_do() -> (
    None
):
    plain = read_prompt(body([user(text(10))]))
    marked = read_prompt(body([user(cc(text(10), "1h"))]))
    assert plain.keys == marked.keys and plain.totals == marked.totals
    assert read_prompt(body([assistant(text(10))])).keys != plain.keys
    assert read_prompt(body([user(text(10))], model=HAIKU)).keys != plain.keys

    def call(args: dict[str, Any]) -> dict[str, Any]:
        return body(
            [user(text(10)), assistant({"type": "tool_use", "id": "t", "name": "f", "input": args})]
        )

    assert read_prompt(call({"a": 1, "b": 2})).keys != read_prompt(call({"b": 2, "a": 1})).keys
    # key order of the block object itself does not matter
    swapped = {"text": text(10)["text"], "type": "text"}
    assert read_prompt(body([user(swapped)])).keys == plain.keys


# --------------------------------------------------------------------------- refusals


def test_at_most_four_breakpoints_counted_over_tools_system_messages_and_tool_results() -> None:
    tool = cc({"name": "f", "description": "d", "input_schema": {"type": "object"}})
    result = {"type": "tool_result", "tool_use_id": "t", "content": [cc(text(10))]}
    use = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    four = body(
        [user(text(10)), assistant(use), user(result, cc(text(10, "u")))],
        system=[cc(text(10, "s"))],
        tools=[tool],
    )
    assert breakpoint_count(four) == 4
    PromptCache().account(four)
    five = four | {"system": [cc(text(10, "s")), cc(text(10, "z"))]}
    assert breakpoint_count(five) == 5
    assert refused(five) == "A maximum of 4 blocks with cache_control may be provided. Found 5."


def test_the_refusal_is_anthropics_400_body_and_changes_nothing(cache: PromptCache) -> None:
    five = body([user(*(cc(text(300, str(i))) for i in range(5)))])
    message = "A maximum of 4 blocks with cache_control may be provided. Found 5."
    assert cache.refusal(five) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": message},
    }
    assert error_body(message) == cache.refusal(five)
    with pytest.raises(CacheRefused):
        cache.account(five)
    assert cache.entries() == 0
    assert cache.refusal(body([user(cc(text(10)))])) is None


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ({"type": "persistent"}, "messages.0.content.0.cache_control.type: Input should be 'ephemeral'"),
        ({"type": "ephemeral", "ttl": "2h"}, "messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'"),
        ({"type": "ephemeral", "ttl": 300}, "messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'"),
        ({"type": "ephemeral", "scope": "org"}, "messages.0.content.0.cache_control.scope: Extra inputs are not permitted"),
        (True, "messages.0.content.0.cache_control: Input should be a valid dictionary"),
    ],
)  # fmt: skip
def test_a_marker_must_be_ephemeral_with_a_ttl_of_5m_or_1h(marker: Any, message: str) -> None:
    assert refused(body([user(text(10) | {"cache_control": marker})])).startswith(message)


def test_a_1h_breakpoint_after_a_5m_one_in_tools_system_messages_order_is_refused() -> None:
    tool = {"name": "f", "description": "d", "input_schema": {"type": "object"}}
    late = body([user(cc(text(10), "1h"))], system=[cc(text(10, "s"))])
    assert refused(late) == f"messages.0.content.0.cache_control.ttl: {TTL_ORDER}"
    assert "a ttl='1h' cache_control block must not come after a ttl='5m'" in TTL_ORDER
    after_tool = body([user(text(10))], system=[cc(text(10, "s"), "1h")], tools=[cc(tool, "5m")])
    assert refused(after_tool).startswith("system.0.cache_control.ttl: a ttl='1h'")
    ok = body([user(cc(text(10)))], system=[cc(text(10, "s"), "1h")], tools=[cc(tool, "1h")])
    assert PromptCache().refusal(ok) is None


def test_cache_control_on_an_empty_text_block_is_refused() -> None:
    empty = {"type": "text", "text": ""}
    assert (
        refused(body([user(text(10))], system=[cc(empty)]))
        == "system.0: cache_control cannot be set for empty text blocks"
    )
    assert (
        refused(body([user(text(10), cc(empty))]))
        == "messages.0.content.1.text: cache_control cannot be set for empty text blocks"
    )


@pytest.mark.parametrize("kind", ["thinking", "redacted_thinking"])
def test_cache_control_on_thinking_blocks_is_refused(kind: str) -> None:
    block = (
        {"type": "thinking", "thinking": "hm", "signature": "sig"}
        if kind == "thinking"
        else {"type": "redacted_thinking", "data": "xyz"}
    )
    b = body([user(text(10)), assistant(cc(block), text(10, "a")), user(text(10, "b"))])
    assert (
        refused(b) == f"messages.1.content.0.{kind}.cache_control: Extra inputs are not permitted"
    )


def test_cache_control_where_it_cannot_sit_is_refused() -> None:
    on_message = body([user(text(10)) | {"cache_control": {"type": "ephemeral"}}])
    assert refused(on_message) == "messages.0.cache_control: Extra inputs are not permitted"
    citation = {"type": "char_location", "cited_text": "x", "cache_control": {"type": "ephemeral"}}
    cited = body(
        [user(text(10)), assistant(text(10) | {"citations": [citation]}), user(text(10, "b"))]
    )
    assert refused(cited) == (
        "messages.1.content.0.text.citations.0.cache_control: Extra inputs are not permitted"
    )


def test_the_automatic_breakpoint_takes_a_slot_and_must_agree_with_a_marker_on_its_block() -> None:
    auto: dict[str, Any] = {"cache_control": {"type": "ephemeral"}}
    four = [cc(text(300, str(i))) for i in range(4)]
    assert refused(body([user(*four, text(10, "last"))], **auto)).endswith("Found 5.")
    # on a block that already has a marker of its TTL: a no-op
    assert breakpoint_count(body([user(*four)], **auto)) == 4
    assert PromptCache().refusal(body([user(*four)], **auto)) is None
    # another TTL there: refused
    b = body([user(cc(text(10), "1h"))], **auto)
    assert refused(b).startswith("cache_control: the automatic cache breakpoint")
    # it skips thinking blocks and empty text, walking backwards
    think = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    prompt_body = body([user(text(10)), assistant(text(10, "a"), think)], **auto)
    assert breakpoint_count(prompt_body) == 1


# --------------------------------------------------------------------------- usage


def test_a_breakpoint_writes_its_prefix_and_the_next_request_reads_it(cache: PromptCache) -> None:
    first = body([user(text(20, "q1"))], system=[cc(text(2000, "sys"))])
    u1 = cache.account(first)
    assert (u1.cache_read_input_tokens, u1.cache_creation_input_tokens, u1.input_tokens) == (
        0,
        2000,
        20,
    )
    assert (u1.ephemeral_5m_input_tokens, u1.ephemeral_1h_input_tokens) == (2000, 0)
    second = body([user(text(30, "q2"))], system=[cc(text(2000, "sys"))])
    u2 = cache.account(second)
    assert (u2.cache_read_input_tokens, u2.cache_creation_input_tokens, u2.input_tokens) == (
        2000,
        0,
        30,
    )
    assert u2.total_input_tokens == read_prompt(second).total_tokens
    # no breakpoint at all: everything is input, nothing read
    u3 = cache.account(body([user(text(30, "q2"))], system=[text(2000, "sys")]))
    assert (u3.cache_read_input_tokens, u3.cache_creation_input_tokens, u3.input_tokens) == (
        0,
        0,
        2030,
    )


def test_a_rolling_breakpoint_reads_the_last_turn_and_writes_the_new_one(
    cache: PromptCache,
) -> None:
    system = [cc(text(1500, "sys"))]
    history: list[dict[str, Any]] = [user(text(50, "q"))]
    for turn in range(5):
        marked = [*history[:-1], user(*history[-1]["content"][:-1], cc(history[-1]["content"][-1]))]
        u = cache.account(body(marked, system=system))
        total = read_prompt(body(history, system=system)).total_tokens
        assert u.input_tokens == 0 and u.total_input_tokens == total
        if turn:
            assert u.cache_creation_input_tokens == 100  # the new assistant + user blocks
        history += [assistant(text(40, f"a{turn}")), user(text(60, f"r{turn}"))]


@pytest.mark.parametrize(("model", "floor"), [("claude-sonnet-4-5", 1024), (MODEL, 1024), (HAIKU, 2048), ("claude-haiku-4-5", 4096), ("claude-opus-4-6", 4096), ("claude-sonnet-4-6", 2048)])  # fmt: skip
def test_a_prefix_shorter_than_the_models_minimum_is_not_cached(
    clock: Clock, model: str, floor: int
) -> None:
    cache = PromptCache(clock)
    assert cache.minimum(model) == floor
    short = body([user(cc(text(floor - 1, "x")))], model=model)
    for _ in range(2):
        u = cache.account(short)
        assert (u.cache_read_input_tokens, u.cache_creation_input_tokens) == (0, 0)
        assert u.input_tokens == floor - 1
    exact = body([user(cc(text(floor, "y")))], model=model)
    assert cache.account(exact).cache_creation_input_tokens == floor
    assert cache.account(exact).cache_read_input_tokens == floor


def test_the_minimum_is_configurable(clock: Clock) -> None:
    cache = PromptCache(clock, min_tokens=[("my-*", 100)], default_min_tokens=50)
    assert (cache.minimum("my-model"), cache.minimum("other")) == (100, 50)
    assert (
        cache.account(body([user(cc(text(60)))], model="other")).cache_creation_input_tokens == 60
    )


def test_a_short_breakpoint_before_a_long_one_writes_from_the_start(cache: PromptCache) -> None:
    tool = cc({"name": "f", "description": "d", "input_schema": {"type": "object"}})
    u = cache.account(body([user(cc(text(1500)))], tools=[tool]))
    assert u.cache_creation_input_tokens == u.total_input_tokens
    assert u.input_tokens == 0


def conversation(n: int, changed: int | None = None) -> list[dict[str, Any]]:
    """One user message of ``n`` blocks (block 1 is large, so every prefix is cacheable);
    block ``changed`` (1-based) differs."""
    blocks = [
        text(1100 if i == 1 else 10, f"b{i}" + ("*" if i == changed else ""))
        for i in range(1, n + 1)
    ]
    return [user(*blocks)]


def marked(messages: list[dict[str, Any]], *positions: int) -> dict[str, Any]:
    """``messages`` (one user message) with breakpoints on the 1-based blocks ``positions``."""
    blocks = [cc(b) if i + 1 in positions else b for i, b in enumerate(messages[0]["content"])]
    return body([user(*blocks)])


@pytest.mark.parametrize(("distance", "hit"), [(19, True), (20, False)])
def test_the_lookback_checks_twenty_blocks_counting_the_breakpoints_own(
    cache: PromptCache, distance: int, hit: bool
) -> None:
    """A write 19 blocks before the breakpoint is the 20th block checked (a hit); 20 blocks
    before, the 21st (a miss)."""
    cache.account(marked(conversation(5), 5))
    u = cache.account(marked(conversation(5 + distance), 5 + distance))
    written = read_prompt(marked(conversation(5), 5)).total_tokens
    assert u.cache_read_input_tokens == (written if hit else 0)
    assert u.total_input_tokens == read_prompt(marked(conversation(5 + distance))).total_tokens


def grown() -> PromptCache:
    """A cache after 30 requests growing one block at a time, the breakpoint on the last."""
    cache = PromptCache(Clock())
    for n in range(1, 31):
        cache.account(marked(conversation(n), n))
    return cache


def test_the_docs_lookback_example() -> None:
    """After ``grown``: block 25 changed reads up to 24; block 5 changed misses (30 → 11 is
    check #20) unless block 5 also has a breakpoint (then it reads up to 4)."""
    totals = read_prompt(body(conversation(31))).totals
    u = grown().account(marked(conversation(31, changed=25), 30))
    assert u.cache_read_input_tokens == totals[23]  # block 24
    assert grown().account(marked(conversation(31, changed=5), 30)).cache_read_input_tokens == 0
    u = grown().account(marked(conversation(31, changed=5), 5, 30))
    assert u.cache_read_input_tokens == totals[3]  # block 4


def test_entries_expire_after_their_ttl_and_a_read_refreshes_them(clock: Clock) -> None:
    cache = PromptCache(clock)
    b = body([user(cc(text(1500)))])
    assert cache.account(b).cache_creation_input_tokens == 1500
    clock.now += 299
    assert cache.account(b).cache_read_input_tokens == 1500  # refreshed: 300 s from now
    clock.now += 299
    assert cache.account(b).cache_read_input_tokens == 1500
    clock.now += 300.5
    u = cache.account(b)
    assert (u.cache_read_input_tokens, u.cache_creation_input_tokens) == (0, 1500)


def test_a_1h_entry_lives_an_hour(clock: Clock) -> None:
    cache = PromptCache(clock)
    b = body([user(cc(text(1500), "1h"))])
    u = cache.account(b)
    assert (u.ephemeral_1h_input_tokens, u.ephemeral_5m_input_tokens) == (1500, 0)
    clock.now += 3599
    assert cache.account(b).cache_read_input_tokens == 1500
    clock.now += 3600.5
    assert cache.account(b).cache_read_input_tokens == 0


def test_mixed_ttls_bill_1h_up_to_the_last_1h_breakpoint_and_5m_after(cache: PromptCache) -> None:
    system = [cc(text(1200, "s1"), "1h"), cc(text(800, "s2"), "1h")]
    first = body([user(cc(text(300, "q")))], system=system)
    u = cache.account(first)
    assert (
        u.cache_read_input_tokens,
        u.ephemeral_1h_input_tokens,
        u.ephemeral_5m_input_tokens,
    ) == (0, 2000, 300)
    second = body([user(text(300, "q"), cc(text(100, "more")))], system=system)
    u = cache.account(second)
    assert (
        u.cache_read_input_tokens,
        u.ephemeral_1h_input_tokens,
        u.ephemeral_5m_input_tokens,
    ) == (2300, 0, 100)
    assert u.input_tokens == 0


def test_changing_tool_choice_misses_the_messages_cache_but_not_the_system_one(
    cache: PromptCache,
) -> None:
    tool = {"name": "f", "description": "d", "input_schema": {"type": "object"}}
    system = [cc(text(1500, "sys"))]
    msgs = [user(cc(text(200, "q")))]
    cache.account(body(msgs, system=system, tools=[tool], tool_choice={"type": "auto"}))
    u = cache.account(body(msgs, system=system, tools=[tool], tool_choice={"type": "any"}))
    assert (
        u.cache_read_input_tokens == read_prompt(body([], system=system, tools=[tool])).total_tokens
    )
    assert u.cache_creation_input_tokens == 200


def test_a_cache_is_per_model(cache: PromptCache) -> None:
    cache.account(body([user(cc(text(2500)))]))
    assert cache.account(body([user(cc(text(2500)))], model=HAIKU)).cache_read_input_tokens == 0


def test_automatic_caching_moves_the_breakpoint_forward(cache: PromptCache) -> None:
    auto: dict[str, Any] = {"cache_control": {"type": "ephemeral"}, "system": "x" * 6000}
    msgs = [user(text(10, "q1"))]
    u = cache.account(body(msgs, **auto))
    assert u.breakpoints == 1 and u.input_tokens == 0
    msgs += [assistant(text(10, "a1")), user(text(10, "q2"))]
    u = cache.account(body(msgs, **auto))
    assert (u.cache_creation_input_tokens, u.input_tokens) == (20, 0)


# --------------------------------------------------------------------------- answers


def test_answers_parse_with_the_sdks_types(cache: PromptCache) -> None:
    u = cache.account(body([user(text(20))], system=[cc(text(1500, "sys"), "1h")]))
    content = content_blocks("hello", [ToolCall("read", {"path": "a"}, "toolu_1")])
    message = anthropic.types.Message.model_validate(message_body("msg_1", MODEL, content, u))
    assert message.stop_reason == "tool_use"
    assert message.usage.cache_creation is not None
    assert message.usage.cache_creation.ephemeral_1h_input_tokens == 1500
    assert message.usage.cache_creation_input_tokens == 1500
    assert message.usage.input_tokens == 20
    usage = anthropic.types.Usage.model_validate(u.usage(3))
    assert usage.model_dump(exclude_none=True) == u.usage(3)
    events = list(message_events("msg_1", MODEL, content, u))
    assert [n for n, _ in events][:2] == ["message_start", "ping"]
    assert [n for n, _ in events][-2:] == ["message_delta", "message_stop"]
    for name, data in events:
        assert data["type"] == name
    start = anthropic.types.RawMessageStartEvent.model_validate(events[0][1])
    assert start.message.usage.cache_creation_input_tokens == 1500
    delta = anthropic.types.RawMessageDeltaEvent.model_validate(events[-2][1])
    assert delta.usage.cache_creation_input_tokens == 1500


@pytest.fixture
def served() -> Iterator[tuple[ScriptedUpstream, CachingAnthropic]]:
    call = ToolCall("read", {"path": "/tmp/a.txt"}, "toolu_x")
    caching = CachingAnthropic(answer=lambda b, n: content_blocks("let me read", [call]))
    with ScriptedUpstream() as server:
        server.script = caching
        yield server, caching
        assert not server.errors and not server.violations


def reported(caching: CachingAnthropic, n: int) -> CacheUsage:
    usage = caching.served[n].usage
    assert usage is not None, caching.served[n]
    return usage


def sdk(server: ScriptedUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0, timeout=10)


def test_the_sdk_reads_whole_and_streamed_answers_with_their_cache_usage(
    served: tuple[ScriptedUpstream, CachingAnthropic],
) -> None:
    server, caching = served
    client = sdk(server)
    system: Any = [{"type": "text", "text": "s" * 8000, "cache_control": {"type": "ephemeral"}}]
    whole = client.messages.create(
        model=MODEL, max_tokens=64, system=system, messages=[{"role": "user", "content": "hi"}]
    )
    first = reported(caching, 0)
    assert whole.usage.cache_creation_input_tokens == first.cache_creation_input_tokens > 2000
    assert whole.content[1].type == "tool_use" and whole.content[1].input == {"path": "/tmp/a.txt"}
    with client.messages.stream(
        model=MODEL, max_tokens=64, system=system, messages=[{"role": "user", "content": "ho"}]
    ) as stream:
        final = stream.get_final_message()
    assert caching.served[1].stream and not caching.served[0].stream
    assert final.usage.cache_read_input_tokens == whole.usage.cache_creation_input_tokens
    assert final.usage.cache_creation_input_tokens == 0
    assert final.usage.input_tokens == reported(caching, 1).input_tokens
    assert final.content[0].type == "text" and final.content[0].text == "let me read"
    assert final.content[1].type == "tool_use" and final.content[1].input == {"path": "/tmp/a.txt"}
    assert final.id != whole.id
    assert (
        client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        ).input_tokens
        > 0
    )


def test_the_sdk_raises_bad_request_on_what_anthropic_refuses(
    served: tuple[ScriptedUpstream, CachingAnthropic],
) -> None:
    server, caching = served
    blocks: Any = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk(server).messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": blocks}]
        )
    assert e.value.status_code == 400
    assert e.value.body == error_body(
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )
    assert "A maximum of 4 blocks" in str(e.value)
    assert caching.served[-1].usage is None and caching.served[-1].breakpoints == 5
    assert json.loads(json.dumps(e.value.body))["error"]["type"] == "invalid_request_error"
