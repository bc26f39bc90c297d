"""Custom (freeform) tools for function-only upstreams: wrap the request, unwrap the answer."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects.openai_chat.stream import OpenAIChatStreamDecoder
from addon.dialects.openai_chat.stream_encode import OpenAIChatStreamEncoder
from addon.model import (
    Event,
    Finish,
    Message,
    MessageStart,
    Notes,
    Request,
    Response,
    StreamEnd,
    StreamError,
    Text,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    Usage,
    UsageEvent,
)
from addon.stream.custom_calls import CustomToolStage
from addon.stream.processor import StreamProcessor
from addon.transforms.custom_tools import (
    NOTE,
    unwrap_custom_calls,
    unwrap_custom_input,
    wrap_custom_tools,
)
from tests.unit.helpers import feed_pieces, feed_stage, payloads, split

GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = «2»\n*** End Patch\n"

APPLY_PATCH = Tool(
    "ApplyPatch",
    "Edit files with a patch.",
    {},
    format={"type": "grammar", "syntax": "lark", "definition": GRAMMAR},
    extra={"openai_responses": {"_no_format": True}},
)
SHELL = Tool(
    "Shell", "Run a command.", {"type": "object", "properties": {"cmd": {"type": "string"}}}
)


def request(*, tools: tuple[Tool, ...] = (APPLY_PATCH, SHELL), **kw: Any) -> Request:
    messages = (
        Message("user", (Text("fix it"),)),
        Message(
            "assistant",
            (
                Text("patching"),
                ToolCall("call_1", "ApplyPatch", PATCH, custom=True),
                ToolCall("call_2", "Shell", '{"cmd":"ls"}'),
            ),
        ),
        Message("tool", (ToolResult("call_1", "Done!", custom=True),)),
        Message("tool", (ToolResult("call_2", "a.py"),)),
    )
    return Request("openai_responses", "gpt-5", messages, tools=tools, **kw)


# --------------------------------------------------------------------------- request side


def test_custom_tool_becomes_a_function_with_one_required_string() -> None:
    notes: Notes = Counter()
    req, names = wrap_custom_tools(request(), notes)
    assert names == frozenset({"ApplyPatch"})
    assert req.tools is not None
    patch, shell = req.tools
    assert isinstance(patch, Tool)
    assert patch.format is None and patch.name == "ApplyPatch"
    assert patch.extra == {}  # wire fields of the custom definition do not ride on a function
    params = patch.parameters
    assert params["type"] == "object"
    assert params["required"] == ["input"]
    assert list(params["properties"]) == ["input"]
    assert params["properties"]["input"]["type"] == "string"
    assert shell is SHELL
    assert notes == Counter({NOTE: 1})


def test_description_keeps_the_tools_own_and_states_the_grammar() -> None:
    req, _ = wrap_custom_tools(request(), Counter())
    assert req.tools is not None
    desc = req.tools[0].description if isinstance(req.tools[0], Tool) else None
    assert desc is not None
    assert desc.startswith("Edit files with a patch.")
    assert "not JSON" in desc
    assert "lark" in desc
    assert GRAMMAR in desc


def test_text_format_and_missing_description() -> None:
    tool = Tool("Note", None, {}, format={"type": "text"})
    req, names = wrap_custom_tools(request(tools=(tool,)), Counter())
    assert names == {"Note"}
    assert req.tools is not None and isinstance(req.tools[0], Tool)
    desc = req.tools[0].description
    assert desc is not None and "free-form text" in desc and "grammar" not in desc


def test_history_calls_are_json_and_results_plain() -> None:
    req, _ = wrap_custom_tools(request(), Counter())
    call, plain = req.messages[1].parts[1], req.messages[1].parts[2]
    assert isinstance(call, ToolCall) and not call.custom
    assert json.loads(call.arguments) == {"input": PATCH}
    assert "«2»" in call.arguments  # ensure_ascii=False
    assert plain == ToolCall("call_2", "Shell", '{"cmd":"ls"}')
    result = req.messages[2].parts[0]
    assert isinstance(result, ToolResult) and not result.custom and result.content == "Done!"
    original = request()
    assert wrap_custom_tools(original, Counter())[0].messages[0] is original.messages[0]


def test_history_custom_call_of_an_undeclared_tool_is_reencoded_too() -> None:
    req, names = wrap_custom_tools(request(tools=(SHELL,)), Counter())
    assert names == frozenset()
    call = req.messages[1].parts[1]
    assert isinstance(call, ToolCall) and not call.custom
    assert json.loads(call.arguments) == {"input": PATCH}


def test_tool_choice_naming_the_custom_tool_stays_valid() -> None:
    choice = ToolChoice("tool", "ApplyPatch")
    req, names = wrap_custom_tools(request(tool_choice=choice), Counter())
    assert req.tool_choice == choice
    assert req.tools is not None
    assert choice.name in names and any(t.name == choice.name for t in req.tools)


def test_nothing_custom_returns_the_same_request() -> None:
    req = Request("openai_chat", "m", (Message("user", (Text("hi"),)),), tools=(SHELL,))
    notes: Notes = Counter()
    assert wrap_custom_tools(req, notes) == (req, frozenset())
    assert wrap_custom_tools(req, notes)[0] is req
    assert not notes


# --------------------------------------------------------------------------- unwrap


@pytest.mark.parametrize(
    ("arguments", "raw"),
    [
        pytest.param(json.dumps({"input": PATCH}), PATCH, id="normal"),
        pytest.param(json.dumps({"input": PATCH}, ensure_ascii=False), PATCH, id="unicode"),
        pytest.param('{"input": "a\nb"}', "a\nb", id="literal-newline"),
        pytest.param(json.dumps({"input": "x", "why": "y"}), "x", id="input-and-other-keys"),
        pytest.param(json.dumps({"patch": PATCH}), PATCH, id="one-other-key"),
        pytest.param(json.dumps(PATCH), PATCH, id="bare-string"),
        pytest.param('{"input": "*** Begin Patch\\n*** Upd', "*** Begin Patch\n*** Upd", id="cut"),
        pytest.param('{"input": "ab\\', "ab\\", id="cut-in-escape"),
        pytest.param('{"input": "ab\\u00', "ab\\u00", id="cut-in-unicode-escape"),
        pytest.param('{"input": "a\\ud83d\\ude00', "a\U0001f600", id="cut-after-surrogates"),
        pytest.param('{"input": "done"', "done", id="missing-brace"),
        pytest.param('{"input": "done", "x": ', '{"input": "done", "x": ', id="cut-later"),
        pytest.param('{"input": "bad \\q', '{"input": "bad \\q', id="bad-escape"),
        pytest.param("*** Begin Patch", "*** Begin Patch", id="not-json"),
        pytest.param('{"a": "x", "b": "y"}', '{"a": "x", "b": "y"}', id="two-keys"),
        pytest.param('{"input": 5}', '{"input": 5}', id="input-not-string"),
        pytest.param("[1, 2]", "[1, 2]", id="array"),
        pytest.param("", "", id="empty"),
    ],
)
def test_unwrap_input(arguments: str, raw: str) -> None:
    assert unwrap_custom_input(arguments) == raw


_UNFINISHED_ESCAPE = re.compile(r"(?:\\u[dD][89abAB][0-9a-fA-F]{2})?(?:\\(?:u[0-9a-fA-F]{0,3})?)?$")


@settings(max_examples=300, deadline=None)
@given(raw=st.text(), ascii_only=st.booleans(), cut=st.integers(0, 10_000))
def test_unwrap_of_cut_arguments_is_a_prefix_of_the_input(
    raw: str, ascii_only: bool, cut: int
) -> None:
    """A stream cut anywhere inside the string: the text so far, plus at most the unfinished
    escape sequence as it was written."""
    args = json.dumps({"input": raw}, ensure_ascii=ascii_only)
    cut %= len(args) + 1
    out = unwrap_custom_input(args[:cut])
    if cut < len('{"input": "'):
        assert out == args[:cut]
    elif cut >= len(args) - 1:
        assert out == raw
    else:
        m = _UNFINISHED_ESCAPE.search(out)
        assert m is not None
        assert raw.startswith(out[: m.start()])


def test_unwrap_calls_of_a_whole_answer() -> None:
    resp = Response(
        "openai_chat",
        "r1",
        "m",
        (
            Text("here"),
            ToolCall("c1", "ApplyPatch", json.dumps({"input": PATCH})),
            ToolCall("c2", "Shell", '{"cmd": "ls"}'),
            ToolCall("c3", "ApplyPatch", "{broken"),
        ),
        "tool_calls",
    )
    out = unwrap_custom_calls(resp, frozenset({"ApplyPatch"}))
    assert out.parts[0] == Text("here")
    assert out.parts[1] == ToolCall("c1", "ApplyPatch", PATCH, custom=True)
    assert out.parts[2] is resp.parts[2]
    assert out.parts[3] == ToolCall("c3", "ApplyPatch", "{broken", custom=True)
    assert out.finish == "tool_calls"
    assert unwrap_custom_calls(resp, frozenset()) is resp
    assert unwrap_custom_calls(resp, frozenset({"Other"})) is resp


# --------------------------------------------------------------------------- stream stage

NAMES = frozenset({"ApplyPatch"})


def run_stage(events: list[Event], stage: CustomToolStage | None = None) -> list[Event]:
    return feed_stage(stage or CustomToolStage(NAMES), events)


def custom_call_events(index: int, text: str, cuts: list[int]) -> list[Event]:
    first, *rest = split(text, cuts)
    return [
        ToolCallStart(index, f"call_{index}", "ApplyPatch", first, extra={"k": 1}),
        *(ToolCallArgsDelta(index, f) for f in rest),
    ]


def test_stage_interleaved_with_text_and_a_normal_call() -> None:
    stage = CustomToolStage(NAMES)
    args = json.dumps({"input": PATCH})
    start = ToolCallStart(0, "call_0", "ApplyPatch", args[:5], extra={"k": 1})
    assert stage.feed(start) == []
    assert stage.feed(TextDelta("hello")) == [TextDelta("hello")]
    assert stage.feed(ToolCallArgsDelta(0, args[5:20])) == []
    shell = ToolCallStart(1, "call_1", "Shell", '{"cmd"')
    assert stage.feed(shell) == [shell]
    assert stage.feed(ToolCallArgsDelta(1, ':"ls"}')) == [ToolCallArgsDelta(1, ':"ls"}')]
    assert stage.feed(ToolCallArgsDelta(0, args[20:])) == []
    usage = UsageEvent(Usage(1, 2, 3))
    assert stage.feed(usage) == [usage]
    assert stage.feed(ToolCallEnd(1)) == [ToolCallEnd(1)]
    assert stage.feed(ToolCallEnd(0)) == [
        ToolCallStart(0, "call_0", "ApplyPatch", PATCH, extra={"k": 1}, custom=True),
        ToolCallEnd(0),
    ]
    assert stage.feed(Finish("tool_calls")) == [Finish("tool_calls")]
    assert stage.feed(StreamEnd()) == [StreamEnd()]
    assert stage.finish() == []


def test_stage_passes_calls_that_are_already_custom() -> None:
    start = ToolCallStart(0, "c", "ApplyPatch", "raw", custom=True)
    assert run_stage([start, ToolCallArgsDelta(0, " more"), ToolCallEnd(0)]) == [
        start,
        ToolCallArgsDelta(0, " more"),
        ToolCallEnd(0),
    ]


@pytest.mark.parametrize("closer", [Finish("length"), StreamEnd()])
def test_stage_releases_a_call_without_end_before_the_stream_ends(closer: Event) -> None:
    events = [*custom_call_events(0, '{"input": "*** Begin Patch\\n*** Add', [9, 20]), closer]
    out = run_stage([*events, ToolCallEnd(0)])  # a late end must not end the call twice
    assert out == [
        ToolCallStart(0, "call_0", "ApplyPatch", "*** Begin Patch\n*** Add", {"k": 1}, True),
        ToolCallEnd(0),
        closer,
    ]


def test_stage_never_delivers_a_call_without_end_when_the_stream_fails() -> None:
    events = [*custom_call_events(0, '{"input": "*** Begin Patch\n*** Add', [9, 20])]
    error = StreamError("cut", "upstream_cut")
    # Half a patch is never a call a client can run: the call is dropped, the error goes on.
    assert run_stage([*events, error, ToolCallEnd(0)]) == [error]


def test_stage_finish_drops_held_calls_and_is_idempotent() -> None:
    stage = CustomToolStage(NAMES)
    for e in custom_call_events(3, json.dumps({"input": "x"}), [2]):
        assert stage.feed(e) == []
    assert stage.finish() == []  # never ended: never delivered
    assert stage.finish() == []
    assert stage.feed(ToolCallEnd(3)) == []
    assert stage.feed(StreamEnd()) == [StreamEnd()]


def test_stage_two_custom_calls() -> None:
    events: list[Event] = [
        *custom_call_events(0, json.dumps({"input": "one"}), [3]),
        *custom_call_events(1, json.dumps({"input": "two"}), [7]),
        ToolCallEnd(1),
        ToolCallEnd(0),
    ]
    out = run_stage(events)
    assert out == [
        ToolCallStart(1, "call_1", "ApplyPatch", "two", {"k": 1}, True),
        ToolCallEnd(1),
        ToolCallStart(0, "call_0", "ApplyPatch", "one", {"k": 1}, True),
        ToolCallEnd(0),
    ]


@settings(max_examples=300, deadline=None)
@given(
    raw=st.text(),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=20),
    text_between=st.booleans(),
)
def test_any_raw_input_split_anywhere_comes_back_whole(
    raw: str, ascii_only: bool, cuts: list[int], text_between: bool
) -> None:
    args = json.dumps({"input": raw}, ensure_ascii=ascii_only)
    events = custom_call_events(0, args, [c % (len(args) + 1) for c in cuts])
    if text_between:
        events = [e for ev in events for e in (ev, TextDelta("t"))]
    out = run_stage([*events, ToolCallEnd(0), Finish("tool_calls")])
    starts = [e for e in out if isinstance(e, ToolCallStart)]
    assert len(starts) == 1
    assert starts[0].custom and starts[0].arguments == raw
    assert not any(isinstance(e, ToolCallArgsDelta) for e in out)
    assert isinstance(out[-1], Finish)


# --------------------------------------------------------------------------- through the processor


def chat_sse(deltas: list[tuple[dict[str, Any], str | None]]) -> bytes:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = b""
    for delta, finish in deltas:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        out += b"data: " + json.dumps(chunk).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def call_delta(index: int, fragment: str, *, first: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": fragment}}
    if first is not None:
        call.update(id=f"call_{index}", type="function")
        call["function"]["name"] = first
    return {"tool_calls": [call]}


def client_payloads(data: bytes) -> list[Any]:
    return [json.loads(d) for d in payloads(data) if d != "[DONE]"]


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_apply_patch_reaches_a_chat_client_as_raw_text(step: int) -> None:
    args = json.dumps({"input": PATCH})
    sse = chat_sse(
        [
            ({"role": "assistant", "content": "Let me fix it."}, None),
            (call_delta(0, args[:12], first="ApplyPatch"), None),
            (call_delta(0, args[12:40]), None),
            (call_delta(1, '{"cmd":', first="Shell"), None),
            (call_delta(0, args[40:]), None),
            (call_delta(1, '"ls"}'), None),
            ({}, "tool_calls"),
        ]
    )
    p = StreamProcessor(
        OpenAIChatStreamDecoder(), OpenAIChatStreamEncoder(), stages=[CustomToolStage(NAMES)]
    )
    out = feed_pieces(p, [sse[i : i + step] for i in range(0, len(sse), step)])
    assert p.error is None, p.error
    assert out.endswith(b"data: [DONE]\n\n")

    chunks = client_payloads(out)
    calls = [
        call
        for c in chunks
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls", [])
    ]
    patch_calls = [c for c in calls if c["index"] == 0]
    assert patch_calls == [
        {
            "index": 0,
            "id": "call_0",
            "type": "function",
            "function": {"name": "ApplyPatch", "arguments": PATCH},
        }
    ]
    shell_args = "".join(c["function"]["arguments"] for c in calls if c["index"] == 1)
    assert shell_args == '{"cmd":"ls"}'
    text = "".join(choice["delta"].get("content") or "" for c in chunks for choice in c["choices"])
    assert text == "Let me fix it."
    finishes = [choice["finish_reason"] for c in chunks for choice in c["choices"]]
    assert finishes[-1] == "tool_calls"
    # The patch goes out before the finish chunk.
    positions = [i for i, c in enumerate(chunks) for ch in c["choices"] if ch["finish_reason"]]
    patch_pos = next(
        i
        for i, c in enumerate(chunks)
        for ch in c["choices"]
        for call in ch["delta"].get("tool_calls", [])
        if call["index"] == 0
    )
    assert patch_pos < positions[0]


def test_cut_chat_stream_never_delivers_half_a_patch() -> None:
    args = json.dumps({"input": PATCH})
    sse = chat_sse([(call_delta(0, args[:30], first="ApplyPatch"), None)])
    sse = sse[: -len(b"data: [DONE]\n\n")]  # the upstream hung up
    p = StreamProcessor(
        OpenAIChatStreamDecoder(), OpenAIChatStreamEncoder(), stages=[CustomToolStage(NAMES)]
    )
    out = b"".join(p.feed(sse)) + b"".join(p.finish())
    chunks = client_payloads(out)
    calls = [
        call
        for c in chunks[:-1]
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls", [])
    ]
    # The client sees the cut: an error chunk last, no [DONE], and no call at all (half a
    # patch applied is worse than none).
    assert chunks[-1]["error"]["type"] == "server_error"  # OpenAI's type for a cut (502)
    assert not out.endswith(b"data: [DONE]\n\n")
    assert calls == []


def test_message_start_and_other_events_pass_untouched() -> None:
    start = MessageStart("openai_chat", id="x")
    assert run_stage([start, TextDelta("a")]) == [start, TextDelta("a")]
