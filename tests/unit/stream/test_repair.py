"""The argument-repair stream stage (issue 11): ``addon.stream.hold_calls.RepairStage``.

Unit behaviour (holding, ordering, cut calls), the property that any split of a call's
arguments gives what the whole-answer function gives, and replays of real OpenAI and
Anthropic recordings whose arguments were corrupted on the way in.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects import DIALECTS
from addon.model import (
    JSON,
    Event,
    Finish,
    MessageStart,
    Notes,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UsageEvent,
)
from addon.stream.hold_calls import RepairStage
from addon.stream.processor import StreamProcessor
from addon.transforms.repair import ToolSchemas, repair_call
from tests.realdata import as_sse, fixture_names
from tests.unit.helpers import accumulate, payloads, recorded, sdk_message, split

EDIT: JSON = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "old_string": {"type": "string"},
        "new_string": {"type": "string"},
    },
    "required": ["path", "old_string", "new_string"],
    "additionalProperties": False,
}
SHELL: JSON = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
SCHEMAS = ToolSchemas({"edit": EDIT, "shell": SHELL})
BROKEN = "{'filePath': 'a.py', 'oldString': 'x', 'newString': 'y',}"
FIXED = '{"path":"a.py","old_string":"x","new_string":"y"}'


class Run:
    """A stage with its notes and log records."""

    def __init__(self, schemas: ToolSchemas = SCHEMAS) -> None:
        self.notes: Notes = Counter()
        self.records: list[JSON] = []
        self.stage = RepairStage(schemas, self.notes, self.records.append)

    def __call__(self, events: Sequence[Event], *, finish: bool = True) -> list[Event]:
        out: list[Event] = []
        for event in events:
            out.extend(self.stage.feed(event))
        if finish:
            out.extend(self.stage.finish())
        return out


def call(index: int, name: str, fragments: Sequence[str], *, end: bool = True) -> list[Event]:
    events: list[Event] = [ToolCallStart(index, f"call_{index}", name)]
    events += [ToolCallArgsDelta(index, f) for f in fragments]
    return [*events, ToolCallEnd(index)] if end else events


def arguments_of(events: Sequence[Event]) -> dict[int, str]:
    """Each call's arguments as a client would assemble them (start + fragments)."""
    out: dict[int, str] = {}
    for e in events:
        if isinstance(e, ToolCallStart):
            out[e.index] = out.get(e.index, "") + e.arguments
        elif isinstance(e, ToolCallArgsDelta):
            out[e.index] += e.delta
    return out


def kinds(events: Sequence[Event]) -> list[str]:
    out = []
    for e in events:
        name = type(e).__name__
        if isinstance(e, ToolCallStart | ToolCallArgsDelta | ToolCallEnd):
            name += f"{e.index}"
        out.append(name)
    return out


# --------------------------------------------------------------------------- unit behaviour


def test_a_broken_call_comes_out_whole_and_normalized_at_its_end() -> None:
    run = Run()
    fragments = [BROKEN[:7], BROKEN[7:20], BROKEN[20:]]
    events = [MessageStart("openai_chat"), *call(0, "edit", fragments), Finish("tool_calls")]
    out = run(events)
    assert kinds(out) == ["MessageStart", "ToolCallStart0", "ToolCallEnd0", "Finish"]
    start = out[1]
    assert isinstance(start, ToolCallStart)
    assert (start.id, start.name, start.arguments) == ("call_0", "edit", FIXED)
    assert run.notes["tool call arguments repaired"] == 1
    assert run.notes["argument aliases applied: filePath → path"] == 1
    assert run.records == [] and run.stage.repaired == 1


def test_nothing_is_emitted_for_a_held_call_before_its_end() -> None:
    run = Run()
    assert run(call(0, "edit", [BROKEN[:5], BROKEN[5:]], end=False), finish=False) == []
    out = run([ToolCallEnd(0)], finish=False)
    assert arguments_of(out) == {0: FIXED}


def test_a_call_that_needs_nothing_goes_out_as_it_came() -> None:
    run = Run()
    start = ToolCallStart(0, "call_0", "shell", '{"comm', extra={"wire": {"chunk": {"x": 1}}})
    deltas = [
        ToolCallArgsDelta(0, 'and": ', extra={"wire": {"choice": {"logprobs": None}}}),
        ToolCallArgsDelta(0, '"ls"}'),
    ]
    out = run([start, *deltas, ToolCallEnd(0)])
    assert out == [start, *deltas, ToolCallEnd(0)]
    assert not run.notes and run.stage.repaired == 0


def test_the_starts_extra_rides_on_the_repaired_start() -> None:
    run = Run()
    start = ToolCallStart(3, "toolu_1", "shell", "{'cmd': 'ls'}", extra={"anthropic": {"k": 1}})
    out = run([start, ToolCallEnd(3)])
    assert out == [
        ToolCallStart(3, "toolu_1", "shell", '{"command":"ls"}', extra={"anthropic": {"k": 1}}),
        ToolCallEnd(3),
    ]


def test_text_and_thinking_are_never_held_back() -> None:
    run = Run()
    out: list[Event] = []
    for event in call(0, "edit", [BROKEN[:9]], end=False):
        out += run.stage.feed(event)
    assert out == []
    assert run.stage.feed(TextDelta("while")) == [TextDelta("while")]
    assert run.stage.feed(ThinkingDelta("hmm")) == [ThinkingDelta("hmm")]
    usage = UsageEvent(Usage(1, 2, 3))
    assert run.stage.feed(usage) == [usage]
    assert run.stage.feed(ToolCallArgsDelta(0, BROKEN[9:])) == []
    assert arguments_of(run.stage.feed(ToolCallEnd(0))) == {0: FIXED}


def test_raw_events_keep_their_place_behind_a_held_call() -> None:
    run = Run()
    raw = RawEvent("openai_chat", {"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]})
    assert run.stage.feed(raw) == [raw]  # nothing held: at once
    out = run([*call(0, "shell", ["{'cmd': 'ls'}"], end=False), raw, TextDelta("t"),
               ToolCallEnd(0)])  # fmt: skip
    assert kinds(out) == ["TextDelta", "ToolCallStart0", "ToolCallEnd0", "RawEvent"]


@pytest.mark.parametrize("custom", [False, True])
def test_unknown_and_custom_calls_pass_at_once_and_untouched(custom: bool) -> None:
    run = Run()
    name = "shell" if custom else "unknown"
    start = ToolCallStart(0, "c", name, "{'cmd'", custom=custom)
    assert run.stage.feed(start) == [start]
    assert run.stage.feed(ToolCallArgsDelta(0, ": 1,}")) == [ToolCallArgsDelta(0, ": 1,}")]
    assert run.stage.feed(ToolCallEnd(0)) == [ToolCallEnd(0)]
    assert not run.notes


def test_calls_keep_their_order_behind_a_held_call() -> None:
    run = Run()
    events = [
        *call(0, "edit", [BROKEN[:10]], end=False),
        ToolCallStart(1, "c1", "unknown", '{"a"'),
        TextDelta("text"),
        ToolCallArgsDelta(1, ": 1}"),
        ToolCallArgsDelta(0, BROKEN[10:]),
        ToolCallEnd(1),
        ToolCallStart(2, "c2", "shell", '{"cmd": "ls"}'),
        ToolCallEnd(0),
        ToolCallEnd(2),
        Finish("tool_calls"),
    ]
    out = run(events)
    assert kinds(out) == [
        "TextDelta",
        "ToolCallStart0",
        "ToolCallEnd0",
        "ToolCallStart1",
        "ToolCallArgsDelta1",
        "ToolCallEnd1",
        "ToolCallStart2",
        "ToolCallEnd2",
        "Finish",
    ]
    assert arguments_of(out) == {0: FIXED, 1: '{"a": 1}', 2: '{"command":"ls"}'}


def test_a_second_held_call_waits_for_the_first() -> None:
    run = Run()
    out = run(
        [
            *call(0, "shell", ["{'cmd'"], end=False),
            *call(1, "shell", ['{"command": "b",}']),
            ToolCallArgsDelta(0, ": 'a'}"),
        ],
        finish=False,
    )
    assert out == []
    out = run([ToolCallEnd(0)], finish=False)
    assert kinds(out) == ["ToolCallStart0", "ToolCallEnd0", "ToolCallStart1", "ToolCallEnd1"]
    assert arguments_of(out) == {0: '{"command":"a"}', 1: '{"command":"b"}'}


@pytest.mark.parametrize("closer", [Finish("length"), StreamEnd()])
def test_a_call_without_end_is_released_as_cut_before_the_stream_goes_on(closer: Event) -> None:
    run = Run()
    out = run([*call(0, "shell", ['{"command": "echo hel'], end=False), closer], finish=False)
    assert out[-1] == closer
    assert kinds(out[:-1]) == ["ToolCallStart0", "ToolCallEnd0"]
    assert arguments_of(out) == {0: '{"command":"echo hel"}'}
    assert [r["cut"] for r in run.records] == [True]
    assert run.records[0]["tool"] == "shell" and "cut" in run.records[0]["hint"]
    assert run.stage.feed(ToolCallEnd(0)) == []  # the late end: it had one
    assert run.stage.finish() == []


@pytest.mark.parametrize("closer", [StreamError("cut", "upstream_cut"), MessageStart("anthropic")])
def test_a_call_without_end_is_never_delivered_when_the_stream_fails(closer: Event) -> None:
    run = Run()
    events = [
        *call(0, "shell", ['{"command": "ls"}'], end=True),
        *call(1, "shell", ['{"command": "rm -rf /tmp/x'], end=False),
        TextDelta("after"),  # text is never held: it goes out at once
        ToolCallStart(2, "c2", "unknown", '{"a": 1}'),  # queued behind the held call 1
        closer,
    ]
    out = run(events, finish=False)
    assert out[-1] == closer
    # Call 0 ended: delivered. Call 1 never ended: nothing of it, not even its start. What
    # queued behind it (an unheld call) still goes out, in order.
    assert kinds(out[:-1]) == [
        "ToolCallStart0",
        "ToolCallArgsDelta0",
        "ToolCallEnd0",
        "TextDelta",
        "ToolCallStart2",
    ]
    assert run.notes["tool calls cut by the stream's end: not delivered"] == 1
    assert run.records == []  # not a call that failed its schema: no repair record
    assert run.stage.feed(ToolCallEnd(1)) == []  # a late end of the dropped call
    assert run.stage.finish() == []


def test_finish_releases_everything_in_order_and_is_idempotent() -> None:
    run = Run()
    events = [
        *call(0, "shell", ["{'cmd': 'a'"], end=False),
        ToolCallStart(1, "c1", "unknown", "{}"),
        ToolCallEnd(1),
    ]
    assert run(events, finish=False) == []
    out = run.stage.finish()
    # The unended call as it came (no end, unrepaired: the processor's raw rest may go on
    # with it); the ended one behind it as usual.
    assert kinds(out) == ["ToolCallStart0", "ToolCallArgsDelta0", "ToolCallStart1", "ToolCallEnd1"]
    assert arguments_of(out)[0] == "{'cmd': 'a'"
    assert run.stage.finish() == []


def test_a_repeated_start_counts_as_a_fragment() -> None:
    run = Run()
    out = run(
        [
            ToolCallStart(0, "c", "shell", '{"cmd"'),
            ToolCallStart(0, "c", "shell", ': "ls"}'),
            ToolCallEnd(0),
        ]
    )
    assert out == [ToolCallStart(0, "c", "shell", '{"command":"ls"}'), ToolCallEnd(0)]


def test_the_same_index_in_a_new_message_is_a_new_call() -> None:
    run = Run()
    out = run(
        [
            *call(1, "shell", ['{"command": "a'], end=False),
            MessageStart("anthropic"),
            *call(1, "shell", ['{"cmd": "b"}']),
        ]
    )
    # The first call never ended (the upstream started over inside it): not delivered.
    assert kinds(out) == ["MessageStart", "ToolCallStart1", "ToolCallEnd1"]
    starts = [e for e in out if isinstance(e, ToolCallStart)]
    assert [s.arguments for s in starts] == ['{"command":"b"}']


def test_invalid_calls_are_logged_once_and_still_sent() -> None:
    run = Run()
    out = run(call(0, "edit", ['{"filePath": "a.py"}']))
    assert arguments_of(out) == {0: '{"path":"a.py"}'}
    assert len(run.records) == 1
    record = run.records[0]
    assert record["event"] == "tool_repair" and record["tool"] == "edit"
    assert record["missing"] == ["old_string", "new_string"]
    assert run.notes["tool call arguments still invalid: edit"] == 1


def test_an_empty_schema_map_passes_everything() -> None:
    run = Run(ToolSchemas())
    events = [*call(0, "edit", [BROKEN]), Finish("tool_calls")]
    assert run(events) == events


# --------------------------------------------------------------------------- any split


CORRUPTIONS: list[Callable[[str], str]] = [
    lambda s: s,
    lambda s: s[:-1] + ",}",
    lambda s: s.replace('"', "'"),
    lambda s: f"```json\n{s}\n```",
    lambda s: s[: len(s) // 2],
    lambda s: s.replace('"path"', '"filePath"').replace('"old_string"', '"oldString"'),
    lambda s: s.replace('"command"', '"cmd"'),
    lambda s: "",
    lambda s: "{}",
]

values = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
edit_args = st.fixed_dictionaries({"path": values, "old_string": values, "new_string": values}).map(
    json.dumps
)
shell_args = st.fixed_dictionaries({"command": values}).map(json.dumps)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["edit", "shell", "unknown"]),
    base=st.one_of(edit_args, shell_args, st.text(max_size=30)),
    corruption=st.sampled_from(range(len(CORRUPTIONS))),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
    on_start=st.booleans(),
    text_between=st.booleans(),
)
def test_any_split_gives_what_the_whole_answer_function_gives(
    name: str,
    base: str,
    corruption: int,
    cuts: list[int],
    on_start: bool,
    text_between: bool,
) -> None:
    arguments = CORRUPTIONS[corruption](base)
    pieces = split(arguments, cuts)
    events: list[Event] = [ToolCallStart(0, "c", name, pieces[0] if on_start else "")]
    events += [ToolCallArgsDelta(0, p) for p in (pieces[1:] if on_start else pieces)]
    if text_between:
        events = [e for ev in events for e in (ev, TextDelta("t"))]
    run = Run()
    out = run([*events, ToolCallEnd(0), Finish("tool_calls")])

    whole_notes: Notes = Counter()
    whole = repair_call(name, arguments, SCHEMAS, whole_notes)
    assert arguments_of(out) == {0: whole.arguments}
    assert run.notes == whole_notes
    assert run.records == ([whole.record] if whole.record else [])
    # Text is all there, in order, and the call comes after every text that came with it.
    texts = [e for e in out if isinstance(e, TextDelta)]
    assert len(texts) == (len(events) // 2 if text_between else 0)
    assert isinstance(out[-1], Finish) and isinstance(out[-2], ToolCallEnd)
    assert sum(isinstance(e, ToolCallEnd) for e in out) == 1


# --------------------------------------------------------------------------- through the processor


def chat_sse(fragments: Sequence[str], name: str = "edit") -> bytes:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: JSON, finish: str | None = None) -> bytes:
        c = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(c).encode() + b"\n\n"

    out = chunk({"role": "assistant", "content": "Editing."})
    for i, f in enumerate(fragments):
        call: JSON = {"index": 0, "function": {"arguments": f}}
        if i == 0:
            call.update(id="call_1", type="function")
            call["function"]["name"] = name
        out += chunk({"tool_calls": [call]})
    out += chunk({}, "tool_calls")
    return out + b"data: [DONE]\n\n"


@pytest.mark.parametrize("step", [1, 7, 64])
def test_broken_edit_reaches_a_chat_client_repaired_through_the_processor(step: int) -> None:
    raw = chat_sse([BROKEN[:4], BROKEN[4:30], BROKEN[30:]])
    notes: Notes = Counter()
    processor = StreamProcessor(
        DIALECTS["openai_chat"].stream_decoder(),
        DIALECTS["openai_chat"].stream_encoder(),
        stages=[RepairStage(SCHEMAS, notes)],
    )
    out = b""
    for i in range(0, len(raw), step):
        out += b"".join(processor.feed(raw[i : i + step]))
    out += b"".join(processor.finish())
    assert processor.error is None
    acc = accumulate(payloads(out))
    assert acc["content"] == "Editing."
    assert acc["finish"] == "tool_calls"
    assert "".join(acc["calls"][0]["fragments"]) == FIXED
    assert acc["calls"][0]["id"] == "call_1" and acc["calls"][0]["name"] == "edit"
    assert notes["tool call arguments repaired"] == 1


# --------------------------------------------------------------------------- real recordings


def decode_openai(name: str) -> list[Event]:
    decoder = DIALECTS["openai_chat"].stream_decoder()
    events: list[Event] = []
    for data in payloads(as_sse(name)):
        events += decoder.feed(data, None)
    return events + decoder.finish()


def decode_anthropic(name: str) -> list[Event]:
    decoder = DIALECTS["anthropic"].stream_decoder()
    events: list[Event] = []
    for event, data in recorded(name):
        events += decoder.feed(data, event)
    return events + decoder.finish()


def encode(dialect: str, events: Sequence[Event]) -> list[tuple[str | None, str]]:
    encoder = DIALECTS[dialect].stream_encoder()
    pairs: list[tuple[str | None, str]] = []
    for e in events:
        pairs += encoder.feed(e)
    return pairs + encoder.finish()


def _type(value: Any) -> str:
    for t, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                    (list, "array"), (dict, "object")):  # fmt: skip
        if isinstance(value, t):
            return name
    return "null"


def schema_for(args: JSON, rename: dict[str, str] | None = None) -> JSON:
    rename = rename or {}
    props = {rename.get(k, k): {"type": _type(v)} for k, v in args.items()}
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def _single_quoted(args: JSON) -> str:
    def q(v: Any) -> str:
        if isinstance(v, str) and not any(c in v for c in "'\"\\\n"):
            return f"'{v}'"
        return json.dumps(v)

    return "{" + ", ".join(f"'{k}': {q(v)}" for k, v in args.items()) + "}"


def _aliased(args: JSON) -> tuple[str, JSON, dict[str, str]]:
    """The first key written as ``filePath`` by the model, declared as ``path`` by the tool."""
    first = next(iter(args))
    written = {("filePath" if k == first else k): v for k, v in args.items()}
    expected = {("path" if k == first else k): v for k, v in args.items()}
    return json.dumps(written), expected, {first: "path"}


def corrupt(kind: str, args: JSON) -> tuple[str, JSON, dict[str, str]]:
    """``(arguments as the model wrote them, what the client must get, schema renames)``."""
    if kind == "trailing_comma":
        return json.dumps(args)[:-1] + ",}", args, {}
    if kind == "single_quotes":
        return _single_quoted(args), args, {}
    if kind == "code_fence":
        return f"```json\n{json.dumps(args, indent=2)}\n```", args, {}
    if kind == "aliased_key":
        return _aliased(args)
    if kind == "everything":
        text, expected, rename = _aliased(args)
        return f"```json\n{_single_quoted(json.loads(text))[:-1]},\n}}\n```", expected, rename
    raise AssertionError(kind)


KINDS = ["trailing_comma", "single_quotes", "code_fence", "aliased_key", "everything"]


def recorded_calls(events: Sequence[Event]) -> dict[int, tuple[str, str]]:
    """Each call's ``(name, arguments)``."""
    calls: dict[int, tuple[str, str]] = {}
    for e in events:
        if isinstance(e, ToolCallStart):
            calls[e.index] = (e.name, e.arguments)
        elif isinstance(e, ToolCallArgsDelta):
            name, text = calls[e.index]
            calls[e.index] = (name, text + e.delta)
    return calls


def with_arguments(events: Sequence[Event], index: int, text: str) -> list[Event]:
    """The recording with one call's argument fragments replaced by ``text``, cut into as many
    fragments as the call had (the start keeps its own, usually empty, first fragment)."""
    slots = [
        i for i, e in enumerate(events) if isinstance(e, ToolCallArgsDelta) and e.index == index
    ]
    out = list(events)
    if not slots:
        i = next(
            i for i, e in enumerate(events) if isinstance(e, ToolCallStart) and e.index == index
        )
        start = events[i]
        assert isinstance(start, ToolCallStart)
        out[i] = ToolCallStart(start.index, start.id, start.name, text, extra=start.extra)
        return out
    start_index = next(
        i for i, e in enumerate(events) if isinstance(e, ToolCallStart) and e.index == index
    )
    start = events[start_index]
    assert isinstance(start, ToolCallStart)
    out[start_index] = ToolCallStart(start.index, start.id, start.name, "", extra=start.extra)
    size = -(-len(text) // len(slots))
    for n, i in enumerate(slots):
        delta = events[i]
        assert isinstance(delta, ToolCallArgsDelta)
        out[i] = ToolCallArgsDelta(index, text[n * size : (n + 1) * size], extra=delta.extra)
    return out


def corrupted_recording(
    events: list[Event], kind: str
) -> tuple[list[Event], ToolSchemas, dict[int, JSON]]:
    schemas: dict[str, JSON] = {}
    expected: dict[int, JSON] = {}
    for index, (name, text) in recorded_calls(events).items():
        args = json.loads(text) if text.strip() else {}
        if not args:
            schemas[name] = {"type": "object", "properties": {}}
            expected[index] = {}
            continue
        written, want, rename = corrupt(kind, args)
        events = with_arguments(events, index, written)
        schemas[name] = schema_for(args, rename)
        expected[index] = want
    return events, ToolSchemas(schemas), expected


OPENAI_CALL_RECORDINGS = [
    n
    for n in fixture_names("openai-chat-")
    if n.endswith((".sse", ".chunks.txt")) and "tool_call" in n
]
ANTHROPIC_CALL_RECORDINGS = [
    n for n in fixture_names("anthropic-") if "tool_use" in n and "truncated" not in n
    and "spliced" not in n
]  # fmt: skip


def test_there_are_recordings_to_replay() -> None:
    if not fixture_names("openai-chat-"):
        pytest.skip("recordings not available")
    assert len(OPENAI_CALL_RECORDINGS) >= 8 and len(ANTHROPIC_CALL_RECORDINGS) >= 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", OPENAI_CALL_RECORDINGS)
def test_openai_recordings_with_corrupted_arguments_reach_the_client_repaired(
    name: str, kind: str
) -> None:
    original = decode_openai(name)
    events, schemas, expected = corrupted_recording(original, kind)
    run = Run(schemas)
    out = run(events)
    assert run.records == []
    for client in ("openai_chat", "anthropic", "openai_responses"):
        pairs = encode(client, out)
        if client == "openai_chat":
            acc = accumulate([d for _, d in pairs])
            got = {i: json.loads("".join(c["fragments"]) or "{}") for i, c in acc["calls"].items()}
            assert got == expected
            before = accumulate([d for _, d in encode(client, original)])
            assert (acc["content"], acc["reasoning"], acc["finish"]) == (
                before["content"], before["reasoning"], before["finish"]
            )  # fmt: skip
        elif client == "anthropic":
            message = sdk_message(pairs)
            inputs = [b.input for b in message.content if b.type == "tool_use"]
            assert inputs == [expected[i] for i in sorted(expected)]
        else:
            done = [json.loads(d) for e, d in pairs if e == "response.completed"]
            items = [i for i in done[0]["response"]["output"] if i["type"] == "function_call"]
            assert [json.loads(i["arguments"] or "{}") for i in items] == [
                expected[i] for i in sorted(expected)
            ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ANTHROPIC_CALL_RECORDINGS)
def test_anthropic_recordings_with_corrupted_arguments_reach_the_client_repaired(
    name: str, kind: str
) -> None:
    original = decode_anthropic(name)
    events, schemas, expected = corrupted_recording(original, kind)
    out = Run(schemas)(events)
    message = sdk_message(encode("anthropic", out))
    inputs = [b.input for b in message.content if b.type == "tool_use"]
    assert inputs == [expected[i] for i in sorted(expected)]
    texts = [b.text for b in message.content if b.type == "text"]
    before = sdk_message(encode("anthropic", original))
    assert texts == [b.text for b in before.content if b.type == "text"]
    assert message.stop_reason == before.stop_reason
    acc = accumulate([d for _, d in encode("openai_chat", out)])
    assert {i: json.loads("".join(c["fragments"]) or "{}") for i, c in acc["calls"].items()} == (
        expected
    )


@pytest.mark.parametrize("name", OPENAI_CALL_RECORDINGS + ANTHROPIC_CALL_RECORDINGS)
def test_recordings_that_need_nothing_come_through_event_for_event(name: str) -> None:
    events = decode_openai(name) if name.startswith("openai") else decode_anthropic(name)
    schemas: dict[str, JSON] = {}
    for cname, text in recorded_calls(events).values():
        args = json.loads(text) if text.strip() else {}
        schemas[cname] = schema_for(args) if args else {"type": "object", "properties": {}}
    run = Run(ToolSchemas(schemas))
    out = run(events)
    assert Counter(map(repr, out)) == Counter(map(repr, events))
    assert arguments_of(out) == arguments_of(events)
    assert not run.notes and not run.records
    dialect = "openai_chat" if name.startswith("openai") else "anthropic"
    assert encode(dialect, out) == encode(dialect, events)


def test_anthropic_call_cut_at_max_tokens_is_closed_and_logged_as_cut() -> None:
    name = "anthropic-messages-sse-tool_use-truncated-max_tokens-padded.anthropic-sdk-python.sse"
    if name not in fixture_names("anthropic-"):
        pytest.skip("recording not available")
    events = decode_anthropic(name)
    schema = {
        "type": "object",
        "properties": {
            "filename": {"type": "string"},
            "lines_of_text": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["filename", "lines_of_text"],
    }
    run = Run(ToolSchemas({"make_file": schema}))
    out = run(events)
    args = json.loads(arguments_of(out)[1])
    assert args["filename"] == "taxes.txt"
    assert args["lines_of_text"][:2] == [
        "# COMPREHENSIVE TAX GUIDE FOR INDIVIDUALS WITH MULTIPLE W-2s",
        "",
    ]
    assert args["lines_of_text"][-1] == "Filing taxes"
    assert [r["cut"] for r in run.records] == [True]
    message = sdk_message(encode("anthropic", out))
    assert message.stop_reason == "max_tokens"
    assert [b.input for b in message.content if b.type == "tool_use"] == [args]


def test_anthropic_spliced_stream_never_delivers_the_abandoned_call() -> None:
    name = "anthropic-messages-stream-thinking-signature-tool_use-spliced-EDGECASE.vercel-ai.chunks.txt"
    if name not in fixture_names("anthropic-"):
        pytest.skip("recording not available")
    events = decode_anthropic(name)
    schema = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}
    run = Run(ToolSchemas({"test-tool": schema}))
    out = run(events)
    starts = [e for e in out if isinstance(e, ToolCallStart | MessageStart)]
    # The first message's call never ended (the upstream started over inside it): not
    # delivered, not even in part (the SDK's MessageStream keeps one message's blocks across
    # a second message_start: a repaired "Spark" call would be there, runnable).
    assert [type(e).__name__ for e in starts] == ["MessageStart", "MessageStart", "ToolCallStart"]
    assert starts[2].id == "toolu_second"  # type: ignore[union-attr]
    assert arguments_of(out[out.index(starts[1]) :]) == {1: '{"value":"Sparkle Day"}'}
    assert run.records == []
    assert run.notes["tool calls cut by the stream's end: not delivered"] == 1
    # From the second message_start on, the client gets what it would get without the stage.
    mine, theirs = encode("anthropic", out), encode("anthropic", events)
    restart = [i for i, (e, _) in enumerate(mine) if e == "message_start"][1]
    restart_theirs = [i for i, (e, _) in enumerate(theirs) if e == "message_start"][1]
    assert mine[restart:] == theirs[restart_theirs:]
    assert not [d for e, d in mine[:restart] if "tool_use" in d or "partial_json" in d]


def test_what_is_held_is_bounded_and_past_the_bound_calls_pass_as_they_came() -> None:
    notes: Notes = Counter()
    stage = RepairStage(SCHEMAS, notes, max_bytes=1000)
    out: list[Event] = []
    # A second held call queued behind the first, then the first grows past the bound.
    out += stage.feed(ToolCallStart(0, "call_0", "edit", "{'filePath': "))
    out += stage.feed(ToolCallStart(1, "call_1", "edit", "{}"))
    out += stage.feed(ToolCallEnd(1))
    assert out == []
    pieces = ["'" + "x" * 98 + "'"] + ["x" * 100] * 20
    for piece in pieces:
        out += stage.feed(ToolCallArgsDelta(0, piece))
        assert stage._held_bytes <= 1000 + 100
    out += stage.feed(ToolCallEnd(0))
    out += stage.feed(ToolCallStart(2, "call_2", "edit", BROKEN))  # not held any more
    out += stage.finish()
    assert notes["tool calls too long to repair: passed on as they came"] == 1
    starts = [e for e in out if isinstance(e, ToolCallStart)]
    assert [(e.index, e.arguments) for e in starts] == [
        (0, "{'filePath': "),
        (1, "{}"),
        (2, BROKEN),
    ]
    args = "".join(e.delta for e in out if isinstance(e, ToolCallArgsDelta))
    assert args == "".join(pieces)  # nothing lost, in order
    ends = [e.index for e in out if isinstance(e, ToolCallEnd)]
    assert sorted(ends) == [0, 1]  # call 2's end never came: finish releases nothing held
