"""The loop guard (issues 11, 26): the history's verdict (``addon.transforms.loop_guard``), the
answer judged whole (``guard_response``) and streamed (``addon.stream.guard_stage``), the
plan's fallback request."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pytest

from addon.config.options import Settings
from addon.dialects import DIALECTS
from addon.model import (
    Event,
    Finish,
    Image,
    Message,
    MessageStart,
    Part,
    RawEvent,
    Request,
    Response,
    StreamEnd,
    StreamError,
    Text,
    TextDelta,
    Thinking,
    ToolCall,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    Usage,
    UsageEvent,
)
from addon.plan import Incoming, Rewrite, decide, route_for
from addon.plan.answer import (
    AnswerState,
    ask_again,
    client_answer,
    decode_answer,
    encode_answer,
    loop_ask_again,
)
from addon.report.outcome import FlowReport, Outcome
from addon.stream.guard_stage import LoopGuardStage
from addon.stream.processor import StreamProcessor
from addon.stream.sse import encode_pairs
from addon.stream.whole import response_from_events
from addon.transforms.loop_guard import (
    LoopVerdict,
    argument_shape,
    call_key,
    check_loop,
    classify,
    failure_runs,
    fingerprint,
    guard_response,
    is_read_only,
    stop_finish,
    terminal_message,
)
from tests import eventstream_frames as ef
from tests.realdata import as_sse
from tests.unit.helpers import accumulate, feed_stage, pairs_of, payloads, sdk_message

NOT_FOUND = "Error: String to replace not found in file a.py"
EDIT_ARGS = '{"path": "a.py", "old_string": "x", "new_string": "y"}'

# --------------------------------------------------------------------------- history builders

_ids = iter(range(1_000_000))


def step(*calls: tuple[str, str, str | ToolResult], text: str = "") -> list[Message]:
    """One assistant turn with its calls and the tool messages answering them. Each call is
    ``(name, arguments, result text)`` or ``(name, arguments, ToolResult)`` (its id is set)."""
    parts: list[Part] = [Text(text)] if text else []
    results: list[Message] = []
    for name, arguments, result in calls:
        cid = f"call_{next(_ids)}"
        parts.append(ToolCall(cid, name, arguments))
        if isinstance(result, ToolResult):
            result = ToolResult(cid, result.content, is_error=result.is_error)
        else:
            result = ToolResult(cid, result)
        results.append(Message("tool", (result,)))
    return [Message("assistant", tuple(parts)), *results]


def edit_fails(error: str = NOT_FOUND, args: str = EDIT_ARGS) -> list[Message]:
    return step(("edit", args, error))


def request(*turns: list[Message], origin: str = "openai_chat") -> Request:
    messages = [Message("user", (Text("fix a.py"),))]
    for t in turns:
        messages.extend(t)
    return Request(origin, "m", tuple(messages))


def user(text: str) -> list[Message]:
    return [Message("user", (Text(text),))]


def assistant(text: str) -> list[Message]:
    return [Message("assistant", (Text(text),))]


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Error: File not found: a.py", "not_found"),
        ("Error: ENOENT: no such file or directory, open 'a.py'", "not_found"),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'a.py'", "not_found"),
        ("<tool_use_error>String to replace not found in file.</tool_use_error>", "not_found"),
        ("error: path does not exist", "not_found"),
        ("Error: Permission denied: /etc/shadow", "permission"),
        ("PermissionError: [Errno 13] Permission denied", "permission"),
        ("EACCES: permission denied, open '/root/x'", "permission"),
        ("The user doesn't want to proceed with this tool use.", "permission"),
        ("Tool call was rejected by the user", "permission"),
        ("Error: Invalid arguments: missing required parameter 'path'", "invalid_arguments"),
        ("InputValidationError: Edit failed due to the following issue", "invalid_arguments"),
        ("Error: invalid input: 'x' must be a string", "invalid_arguments"),
        ("TypeError: run() got an unexpected keyword argument 'cmd'", "invalid_arguments"),
        ("Error: Command timed out after 120s", "timeout"),
        ("Command failed: deadline exceeded", "timeout"),
        ("Exit code: 1\nnpm ERR! missing script: test", "nonzero_exit"),
        ("output...\nProcess exited with code 2", "nonzero_exit"),
        ("make: *** [all] Error 2\nexit status 2", "nonzero_exit"),
        ("Error: something odd happened", "unknown"),
        ('{"error": "file not found"}', "not_found"),
        ('{"isError": true, "content": "boom"}', "unknown"),
        ("ETIMEDOUT: connect 10.0.0.1:443", "timeout"),
        ("Failed to apply the patch", "unknown"),
        ("Traceback (most recent call last):\n  File x\nRuntimeError: boom", "unknown"),
    ],
)
def test_error_classes(text: str, expected: str) -> None:
    assert classify(ToolResult("c", text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Done.",
        "The file a.py has been updated.",
        "1\timport os\n2\tdef error_handler():\n3\t    raise ValueError('x')",
        "Errors are handled in module x (see docs)",  # a file that starts with the word
        "Exit code: 0\nall tests passed",
        "Found 3 matches: error.py, errors.md, not found.txt",
        "exit status 0",
        "Edited: a.py",
        "Example: use it like this",
        '{"error": null, "result": "ok"}',
        '{"isError": false}',
    ],
)
def test_successes(text: str) -> None:
    assert classify(ToolResult("c", text)) is None


def test_a_flagged_error_is_a_failure_whatever_its_text() -> None:
    assert classify(ToolResult("c", "it went badly", is_error=True)) == "unknown"
    assert classify(ToolResult("c", "no such file", is_error=True)) == "not_found"
    assert classify(ToolResult("c", "", is_error=True)) == "unknown"


def test_result_parts_are_read_as_text() -> None:
    result = ToolResult("c", (Image("data:image/png;base64,AA=="), Text("Error: not found")))
    assert classify(result) == "not_found"


def test_exit_code_at_the_end_of_a_long_output() -> None:
    text = "line\n" * 5000 + "Exit code: 127"
    assert classify(ToolResult("c", text)) == "nonzero_exit"
    assert classify(ToolResult("c", "line\n" * 5000 + "Exit code: 0")) is None


# --------------------------------------------------------------------------- fingerprints


def test_argument_shape_sorts_keys_and_collapses_whitespace() -> None:
    a = argument_shape('{"b": "x  y\\n z", "a": {"d": 1, "c": [" p "]}}')
    b = argument_shape('{"a":{"c":["p"],"d":1},"b":"x y z"}')
    assert a == b
    assert argument_shape("{'a': 1,}") == argument_shape('{"a": 1}')  # leniently parsed
    assert argument_shape("") == argument_shape("{}") == "{}"
    assert argument_shape("not  json") == argument_shape("not json")
    assert argument_shape('{"a": 1}') != argument_shape('{"a": 2}')


def test_fingerprint_is_tool_class_and_digest_without_argument_values() -> None:
    secret = "sk-supersecret-0123456789"
    call = ToolCall("c", "edit", json.dumps({"path": secret}))
    fp = fingerprint(call, ToolResult("c", NOT_FOUND))
    assert fp is not None
    tool, cls, digest = fp.split("/")
    assert (tool, cls) == ("edit", "not_found") and len(digest) == 16
    assert secret not in fp
    assert fingerprint(call, ToolResult("c", "ok")) is None


def test_fingerprint_same_for_the_same_call_whatever_the_error_details() -> None:
    a = ToolCall("a", "edit", '{"path": "a.py",  "x": 1}')
    b = ToolCall("b", "edit", '{"x": 1, "path": "a.py"}')
    ra = ToolResult("a", "Error: not found (at 12:00:01)")
    rb = ToolResult("b", "Error: not found (at 12:00:05)")
    assert fingerprint(a, ra) == fingerprint(b, rb)
    assert fingerprint(a, ra) != fingerprint(a, ToolResult("a", "Error: permission denied"))
    other = ToolCall("c", "edit", '{"path": "b.py", "x": 1}')
    assert fingerprint(a, ra) != fingerprint(other, ra)
    assert fingerprint(a, ra) != fingerprint(ToolCall("a", "write", a.arguments), ra)


@pytest.mark.parametrize(
    ("name", "read_only"),
    [
        ("read_file", True),
        ("Read", True),
        ("readFile", True),
        ("list_dir", True),
        ("LS", True),
        ("Grep", True),
        ("Glob", True),
        ("codebase_search", True),
        ("file_search", True),
        ("grep_search", True),
        ("WebFetch", True),
        ("find_and_replace", False),
        ("edit_file", False),
        ("Edit", False),
        ("Bash", False),
        ("run_terminal_cmd", False),
        ("TodoWrite", False),
        ("write", False),
        ("search_replace", False),
    ],
)
def test_read_only_names(name: str, read_only: bool) -> None:
    assert is_read_only(name) is read_only


def test_read_only_fingerprint_includes_the_result() -> None:
    call = ToolCall("c", "read_file", '{"path": "a.py"}')
    a = fingerprint(call, ToolResult("c", "Error: not found: a.py (1 file in dir)"))
    b = fingerprint(call, ToolResult("c", "Error: not found: a.py (2 files in dir)"))
    c = fingerprint(call, ToolResult("c", "Error:  not found: a.py (1 file in dir)"))
    assert a != b and a == c


# --------------------------------------------------------------------------- the run


def test_three_identical_failures_in_a_row_give_a_verdict() -> None:
    req = request(edit_fails(), edit_fails(), edit_fails())
    verdict = check_loop(req, 3)
    assert verdict is not None
    assert verdict.tool == "edit" and verdict.count == 3
    assert verdict.error_class == "not_found"
    assert verdict.last_error == NOT_FOUND
    assert verdict.fingerprint.startswith("edit/not_found/")
    last_call = req.messages[-2].parts[0]
    assert isinstance(last_call, ToolCall) and verdict.call_id == last_call.id


def test_fewer_than_max_repeat_is_no_verdict() -> None:
    assert check_loop(request(edit_fails(), edit_fails()), 3) is None
    assert check_loop(request(edit_fails()), 1) is not None
    assert check_loop(request(), 3) is None


def test_more_than_max_repeat_counts_them_all() -> None:
    verdict = check_loop(request(*[edit_fails() for _ in range(5)]), 3)
    assert verdict is not None and verdict.count == 5


def test_a_zero_or_negative_max_repeat_disables_the_guard() -> None:
    req = request(edit_fails(), edit_fails(), edit_fails())
    assert check_loop(req, 0) is None and check_loop(req, -1) is None


def test_a_success_of_the_same_call_resets_the_count() -> None:
    ok = step(("edit", EDIT_ARGS, "The file a.py has been updated."))
    req = request(edit_fails(), edit_fails(), ok, edit_fails(), edit_fails())
    assert check_loop(req, 3) is None
    verdict = check_loop(req, 2)
    assert verdict is not None and verdict.count == 2
    assert failure_runs(req) == {verdict.fingerprint: 2}


def test_a_different_call_in_between_resets_the_count() -> None:
    other = step(("read_file", '{"path": "a.py"}', "1\tx = 1"))
    req = request(edit_fails(), edit_fails(), other, edit_fails())
    assert check_loop(req, 2) is None
    different_failure = edit_fails(args='{"path": "b.py", "old_string": "x", "new_string": "y"}')
    req = request(edit_fails(), edit_fails(), different_failure, edit_fails())
    assert check_loop(req, 2) is None


def test_a_different_error_class_is_a_different_call() -> None:
    req = request(edit_fails(), edit_fails("Error: Permission denied"), edit_fails())
    assert check_loop(req, 2) is None


def test_the_same_error_with_other_details_still_counts() -> None:
    req = request(
        edit_fails("Error: not found (try 1)"),
        edit_fails("Error: not found (try 2)"),
        edit_fails("Error: not found (try 3)"),
    )
    verdict = check_loop(req, 3)
    assert verdict is not None and verdict.last_error == "Error: not found (try 3)"


def test_history_ending_with_a_success_is_no_verdict() -> None:
    ok = step(("edit", EDIT_ARGS, "Done."))
    assert check_loop(request(edit_fails(), edit_fails(), edit_fails(), ok), 3) is None


@pytest.mark.parametrize("breaker", [user("try again"), assistant("I could not edit it.")])
def test_a_user_turn_or_a_plain_answer_breaks_the_run(breaker: list[Message]) -> None:
    assert check_loop(request(edit_fails(), edit_fails(), breaker, edit_fails()), 2) is None
    assert check_loop(request(edit_fails(), edit_fails(), breaker, edit_fails()), 1) is not None
    # and a history that ends with one is no loop at all
    assert check_loop(request(edit_fails(), edit_fails(), edit_fails(), breaker), 3) is None


def test_an_assistant_message_with_only_reasoning_is_neutral() -> None:
    thinking = [Message("assistant", (Thinking("hmm", signature="sig"),))]
    verdict = check_loop(request(edit_fails(), thinking, edit_fails(), edit_fails()), 3)
    assert verdict is not None and verdict.count == 3


def test_user_messages_carrying_tool_results_do_not_break() -> None:
    """Anthropic-shaped history: results come in user messages, with Claude Code's reminders."""
    messages: list[Message] = [Message("user", (Text("fix a.py"),))]
    for i in range(3):
        cid = f"toolu_{i}"
        messages.append(Message("assistant", (ToolCall(cid, "Edit", EDIT_ARGS),)))
        messages.append(
            Message(
                "user",
                (
                    ToolResult(cid, (Text("String to replace not found in file."),), is_error=True),
                    Text("<system-reminder>keep going</system-reminder>"),
                ),
            )
        )
    verdict = check_loop(Request("anthropic", "claude", tuple(messages)), 3)
    assert verdict is not None and verdict.tool == "Edit" and verdict.count == 3
    assert verdict.error_class == "not_found"


def test_parallel_calls_the_other_calls_of_a_step_neither_count_nor_reset() -> None:
    def turn(n: int) -> list[Message]:
        return step(
            ("edit", EDIT_ARGS, NOT_FOUND),
            ("read_file", json.dumps({"path": f"f{n}.py"}), f"contents {n}"),
        )

    verdict = check_loop(request(turn(1), turn(2), turn(3)), 3)
    assert verdict is not None and verdict.tool == "edit" and verdict.count == 3


def test_two_calls_looping_together_the_longest_run_wins_then_the_later() -> None:
    b_args = '{"command": "make"}'

    def both() -> list[Message]:
        return step(("edit", EDIT_ARGS, NOT_FOUND), ("bash", b_args, "Exit code: 2"))

    req = request(step(("bash", b_args, "Exit code: 2")), both(), both())
    verdict = check_loop(req, 2)
    assert verdict is not None and verdict.tool == "bash" and verdict.count == 3
    req = request(both(), both())
    verdict = check_loop(req, 2)
    assert verdict is not None and verdict.tool == "bash"  # a tie: the later call
    assert set(failure_runs(req).values()) == {2}


def test_identical_parallel_calls_count_each() -> None:
    req = request(step(("edit", EDIT_ARGS, NOT_FOUND), ("edit", EDIT_ARGS, NOT_FOUND)))
    verdict = check_loop(req, 2)
    assert verdict is not None and verdict.count == 2


def test_calls_without_results_are_ignored() -> None:
    pending = [Message("assistant", (ToolCall("pending", "edit", EDIT_ARGS),))]
    verdict = check_loop(request(edit_fails(), edit_fails(), edit_fails(), pending), 3)
    assert verdict is not None and verdict.count == 3


def test_read_only_exploration_with_differing_results_is_not_counted() -> None:
    def read(result: str) -> list[Message]:
        return step(("read_file", '{"path": "a.py"}', result))

    req = request(
        read("Error: not found (dir has 1 file)"),
        read("Error: not found (dir has 2 files)"),
        read("Error: not found (dir has 3 files)"),
    )
    assert check_loop(req, 2) is None
    same = request(*[read("Error: not found: a.py") for _ in range(3)])
    verdict = check_loop(same, 3)
    assert verdict is not None and verdict.tool == "read_file"


def test_non_read_only_tools_count_whatever_the_details() -> None:
    def bash(out: str) -> list[Message]:
        return step(("Bash", '{"command": "npm test"}', out))

    req = request(
        bash("FAIL 3 tests (120ms)\nExit code: 1"),
        bash("FAIL 3 tests (98ms)\nExit code: 1"),
        bash("FAIL 3 tests (130ms)\nExit code: 1"),
    )
    verdict = check_loop(req, 3)
    assert verdict is not None and verdict.error_class == "nonzero_exit"


def test_flagged_errors_count() -> None:
    failing = ToolResult("", "it broke", is_error=True)
    req = request(*[step(("deploy", "{}", failing)) for _ in range(3)])
    verdict = check_loop(req, 3)
    assert verdict is not None and verdict.error_class == "unknown"


def test_last_error_is_whitespace_collapsed_and_cut() -> None:
    long = "Error: not found " + "x " * 1000
    verdict = check_loop(request(*[edit_fails(long) for _ in range(3)]), 3)
    assert verdict is not None
    assert len(verdict.last_error) == 500 and verdict.last_error.endswith("…")
    assert "  " not in verdict.last_error


def test_matches_says_whether_a_new_call_is_the_repeated_one() -> None:
    verdict = check_loop(request(edit_fails(), edit_fails(), edit_fails()), 3)
    assert verdict is not None
    assert verdict.matches(
        ToolCall("new", "edit", '{"new_string":"y","old_string":"x","path":"a.py"}')
    )
    assert not verdict.matches(ToolCall("new", "edit", '{"path": "b.py"}'))
    assert not verdict.matches(ToolCall("new", "write", EDIT_ARGS))
    assert verdict.key == call_key(ToolCall("x", "edit", EDIT_ARGS))


# --------------------------------------------------------------------------- the answer, whole


def verdict_() -> LoopVerdict:
    verdict = check_loop(request(edit_fails(), edit_fails(), edit_fails()), 3)
    assert verdict is not None
    return verdict


SAME = '{"path": "a.py",  "new_string": "y", "old_string": "x"}'
"""The history's call again: the same shape, keys in another order, other whitespace."""
OTHER = '{"path": "b.py", "old_string": "x", "new_string": "y"}'


def answer(*parts: Part, finish: Any = "tool_calls") -> Response:
    return Response("openai_chat", "id", "m", parts, finish, finish_raw=finish)


def test_the_terminal_message_names_tool_count_and_error() -> None:
    text = terminal_message(verdict_())
    assert "`edit`" in text and "4th time" in text and "failed 3 times" in text
    assert NOT_FOUND in text and "not found" in text


def test_a_repeated_call_in_a_whole_answer_becomes_the_terminal_text_and_a_stop() -> None:
    got, replaced = guard_response(
        answer(Text("Let me try again."), ToolCall("c4", "edit", SAME)), verdict_()
    )
    assert replaced == 1
    assert got.parts[0] == Text("Let me try again.")
    (second,) = got.parts[1:]
    assert isinstance(second, Text)
    assert second.text == "\n\n" + terminal_message(verdict_())
    assert got.finish == "stop" and got.finish_raw is None


@pytest.mark.parametrize(
    "parts",
    [
        pytest.param((ToolCall("c4", "edit", OTHER),), id="other-arguments"),
        pytest.param((ToolCall("c4", "write", SAME),), id="other-tool"),
        pytest.param((Text("I will read the file first."),), id="text-alone"),
    ],
)
def test_another_call_or_text_alone_is_untouched(parts: tuple[Part, ...]) -> None:
    original = answer(*parts)
    got, replaced = guard_response(original, verdict_())
    assert replaced == 0 and got is original


def test_parallel_calls_only_the_repeating_one_is_replaced() -> None:
    read = ToolCall("c5", "read_file", '{"path": "a.py"}')
    got, replaced = guard_response(
        answer(ToolCall("c4", "edit", SAME), read, ToolCall("c6", "edit", SAME)), verdict_()
    )
    assert replaced == 2
    assert [type(p).__name__ for p in got.parts] == ["Text", "ToolCall"]
    assert got.parts[1] == read
    assert got.finish == "tool_calls"  # a call is left: it still runs


def test_stop_finish_is_a_text_finish() -> None:
    assert stop_finish("tool_calls") == "stop" and stop_finish(None) == "stop"
    assert stop_finish("length") == "length"


# --------------------------------------------------------------------------- the answer, streamed


def call_events(index: int, name: str, arguments: str, cid: str = "") -> list[Event]:
    """A call as a stream carries it: start, fragments of 7 characters, end."""
    out: list[Event] = [ToolCallStart(index, cid or f"call_{index}", name)]
    out += [ToolCallArgsDelta(index, arguments[i : i + 7]) for i in range(0, len(arguments), 7)]
    return [*out, ToolCallEnd(index)]


def run_stage(events: list[Event], verdict: LoopVerdict | None = None) -> tuple[list[Event], int]:
    stage = LoopGuardStage(verdict or verdict_())
    return feed_stage(stage, events), stage.replaced


def test_a_streamed_repeat_never_leaves_and_is_told_as_text() -> None:
    stage = LoopGuardStage(verdict_())
    assert stage.feed(MessageStart("openai_chat", "id", "m")) == [
        MessageStart("openai_chat", "id", "m")
    ]
    assert stage.feed(TextDelta("Trying again.")) == [TextDelta("Trying again.")]
    held = [e for e in call_events(0, "edit", SAME)]
    for e in held[:-1]:
        assert stage.feed(e) == []  # nothing of the call leaves before it is judged
    assert stage.feed(held[-1]) == [TextDelta("\n\n" + terminal_message(verdict_()))]
    assert stage.feed(Finish("tool_calls", raw="tool_calls")) == [Finish("stop", None)]
    assert stage.feed(StreamEnd()) == [StreamEnd()] and stage.replaced == 1


def test_a_streamed_different_call_goes_out_as_it_came() -> None:
    events = [
        MessageStart("openai_chat"),
        *call_events(0, "edit", OTHER),
        *call_events(1, "read_file", '{"path": "a.py"}'),
        UsageEvent(Usage(1, 2)),
        Finish("tool_calls", raw="tool_calls"),
        StreamEnd(),
    ]
    out, replaced = run_stage(events)
    assert replaced == 0 and out == events


def test_streamed_text_alone_is_untouched() -> None:
    events = [MessageStart("openai_chat"), TextDelta("Done."), Finish("stop", "stop"), StreamEnd()]
    assert run_stage(events) == (events, 0)


def test_streamed_parallel_calls_keep_dense_indexes_and_the_tool_calls_finish() -> None:
    events = [
        MessageStart("openai_chat"),
        *call_events(0, "edit", SAME),
        *call_events(1, "read_file", '{"path": "a.py"}', cid="call_r"),
        Finish("tool_calls", raw="tool_calls"),
    ]
    out, replaced = run_stage(events)
    assert replaced == 1
    assert isinstance(out[1], TextDelta) and out[1].text == terminal_message(verdict_())
    starts = [e for e in out if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id) for s in starts] == [(0, "call_r")]
    assert all(e.index == 0 for e in out if isinstance(e, ToolCallArgsDelta | ToolCallEnd))
    assert out[-1] == Finish("tool_calls", raw="tool_calls")


def test_a_call_interleaved_with_the_held_one_waits_behind_it() -> None:
    events: list[Event] = [
        ToolCallStart(0, "c0", "edit"),
        ToolCallStart(1, "c1", "read_file", '{"path"'),
        ToolCallArgsDelta(0, SAME),
        ToolCallArgsDelta(1, ': "a.py"}'),
        TextDelta("x"),
        ToolCallEnd(1),
        ToolCallEnd(0),
        Finish("tool_calls"),
    ]
    out, _ = run_stage(events)
    assert out[0] == TextDelta("x")  # text is never held back
    assert out[1] == TextDelta("\n\n" + terminal_message(verdict_()))
    assert out[2:] == [
        ToolCallStart(0, "c1", "read_file", '{"path"'),
        ToolCallArgsDelta(0, ': "a.py"}'),
        ToolCallEnd(0),
        Finish("tool_calls"),
    ]


def test_raw_events_that_came_during_a_replaced_call_go_with_it() -> None:
    """A gateway's chunk with an empty fragment (a ``RawEvent``) during the call would reach a
    same-dialect client as a delta of a call it never saw start."""
    empty = RawEvent("openai_chat", {"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]})
    call = call_events(0, "edit", SAME)
    events = [call[0], empty, *call[1:], RawEvent("openai_chat", {"note": "after"})]
    out, _ = run_stage(events)
    assert out == [
        TextDelta(terminal_message(verdict_())),
        RawEvent("openai_chat", {"note": "after"}),
    ]
    # Another call: the raw event goes on, behind the call it came in (queued, in order).
    other = dataclasses.replace(verdict_(), key="other")
    assert run_stage([call[0], empty, *call[1:]], verdict=other)[0] == [*call, empty]


def test_a_held_call_cut_by_an_error_is_dropped() -> None:
    events = [*call_events(0, "edit", OTHER)[:-1], StreamError("cut", "upstream_cut")]
    out, replaced = run_stage(events)
    assert out == [StreamError("cut", "upstream_cut")] and replaced == 0


def test_a_held_call_without_its_end_is_judged_at_the_finish() -> None:
    events = [*call_events(0, "edit", OTHER)[:-1], Finish("tool_calls"), ToolCallEnd(0)]
    out, _ = run_stage(events)
    assert out == [*call_events(0, "edit", OTHER), Finish("tool_calls")]  # one end only


def encoded(dialect: str, events: list[Event]) -> bytes:
    encoder = DIALECTS[dialect].stream_encoder()
    pairs = []
    for e in events:
        pairs += encoder.feed(e)
    pairs += encoder.finish()
    return b"".join(encode_pairs(pairs))


def repeating_stream() -> list[Event]:
    out, _ = run_stage(
        [
            MessageStart("openai_chat", "chatcmpl-1", "m", 1),
            TextDelta("Again."),
            *call_events(0, "edit", SAME),
            Finish("tool_calls", raw="tool_calls"),
            StreamEnd(),
        ]
    )
    return out


def test_the_replaced_stream_is_well_formed_in_every_client_dialect() -> None:
    message = terminal_message(verdict_())
    chat = accumulate(payloads(encoded("openai_chat", repeating_stream())))
    assert chat["finish"] == "stop" and not chat["calls"]
    assert chat["content"] == "Again.\n\n" + message
    pairs = pairs_of(encoded("anthropic", repeating_stream()))
    sdk = sdk_message(pairs)
    assert sdk.stop_reason == "end_turn" and [b.type for b in sdk.content] == ["text"]
    assert sdk.content[0].text == "Again.\n\n" + message
    events = pairs_of(encoded("openai_responses", repeating_stream()))
    (done,) = [json.loads(d) for e, d in events if e == "response.completed"]
    response = openai.types.responses.Response.model_validate(done["response"])
    assert response.status == "completed" and response.output_text == "Again.\n\n" + message
    assert not [i for i in response.output if i.type == "function_call"]
    gemini = [json.loads(d) for _, d in pairs_of(encoded("gemini", repeating_stream()))]
    cands = [cand for c in gemini for cand in c.get("candidates", [])]
    parts = [p for cand in cands for p in cand.get("content", {}).get("parts", [])]
    assert not any("functionCall" in p for p in parts)
    assert "".join(p.get("text", "") for p in parts) == "Again.\n\n" + message
    assert gemini[-1]["candidates"][0]["finishReason"] == "STOP"


def test_the_replaced_whole_answer_is_well_formed_in_every_client_dialect() -> None:
    got, _ = guard_response(answer(ToolCall("c4", "edit", SAME)), verdict_())
    chat = openai.types.chat.ChatCompletion.model_validate(
        DIALECTS["openai_chat"].encode_response(got)
    )
    assert chat.choices[0].finish_reason == "stop" and not chat.choices[0].message.tool_calls
    assert NOT_FOUND in (chat.choices[0].message.content or "")
    message = anthropic.types.Message.model_validate(DIALECTS["anthropic"].encode_response(got))
    assert message.stop_reason == "end_turn" and [b.type for b in message.content] == ["text"]
    responses = openai.types.responses.Response.model_validate(
        DIALECTS["openai_responses"].encode_response(got)
    )
    assert responses.status == "completed" and NOT_FOUND in responses.output_text
    gemini = DIALECTS["gemini"].encode_response(got)
    assert gemini["candidates"][0]["finishReason"] == "STOP"
    assert "functionCall" not in json.dumps(gemini)


# --------------------------------------------------------------------------- the plan


def cursor_body(stream: bool) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "fix a.py"}]
    for i in range(3):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "edit", "arguments": SAME}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": NOT_FOUND},
        ]
    tool = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}
    return {"model": "m", "stream": stream, "messages": messages, "tools": [tool]}


def plan_for(stream: bool, **settings: Any) -> Rewrite:
    s = Settings(**settings)
    raw = json.dumps(cursor_body(stream)).encode()
    inc = Incoming("POST", "api.example.com", "/v1/chat/completions", {}, raw)
    route = route_for(s, inc.method, inc.host, inc.path)
    assert route is not None
    d = decide(s, route, inc, {})
    assert isinstance(d, Rewrite)
    return d


def test_the_upstream_is_asked_and_the_plan_carries_the_verdict() -> None:
    d = plan_for(stream=False)
    assert d.plan.loop is not None and d.plan.loop.count == 3 and not d.plan.loop_fallback
    assert "tools" in d.wire.body  # asked as usual, with its native tools
    assert not d.plan.loop_held


def test_a_whole_repeat_is_replaced_by_the_plan() -> None:
    d = plan_for(stream=False)
    call = {"id": "c9", "type": "function", "function": {"name": "edit", "arguments": SAME}}
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
    }
    state = AnswerState.of(d.plan)
    got = decode_answer(d.plan, state, json.dumps(body).encode())
    out = json.loads(encode_answer(d.plan, got))
    assert out["choices"][0]["finish_reason"] == "stop"
    assert "tool_calls" not in out["choices"][0]["message"]
    assert "loop guard" in out["choices"][0]["message"]["content"]
    assert state.loop_replaced == 1 and not loop_ask_again(d.plan, state)
    assert "loop guard: edit called a 4th time: replaced" in state.answer_notes(d.plan)


def test_with_fallback_the_plan_writes_the_invoke_request_and_reads_its_answer() -> None:
    d = plan_for(stream=True, loop_fallback=True)
    plan = d.plan
    assert plan.loop_fallback and plan.loop_held and plan.protocol is None
    sse = b"".join(
        b"data: " + json.dumps(c).encode() + b"\n\n"
        for c in [
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "role": "assistant",
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c9",
                                    "type": "function",
                                    "function": {"name": "edit", "arguments": SAME},
                                }
                            ],
                        },
                        "finish_reason": "tool_calls",
                    }
                ],
            }
        ]
    )
    state = AnswerState.of(plan)
    body, ctype = client_answer(plan, state, sse + b"data: [DONE]\n\n", "text/event-stream")
    assert ctype.startswith("text/event-stream") and b"loop guard" in body
    assert loop_ask_again(plan, state)
    asked = ask_again(plan, state)
    assert asked is not None
    second, again = asked
    sent = json.loads(again)
    assert "tools" not in sent and "<invoke" in json.dumps(sent["messages"])
    assert second.protocol == "invoke" and second.parse_text and state.loop_asked
    assert not second.loop_fallback and not loop_ask_again(second, state)  # never a third
    assert second.loop is not None  # the second answer is judged too
    assert second.sink is None and second.encode_invoke is None
    assert plan.protocol is None and plan.loop_fallback  # the first plan is as decided


def test_fallback_is_only_for_native_routes() -> None:
    d = plan_for(stream=True, loop_fallback=True, tool_mode="invoke")
    assert d.plan.loop is not None and not d.plan.loop_fallback and not d.plan.loop_held


def test_the_flow_line_carries_the_tool_and_the_count() -> None:
    report = FlowReport("default", Outcome.REWRITTEN, client="openai_chat", upstream="openai_chat")
    report.add_outcome(Outcome.LOOP_GUARD)
    report.fields.update(tool="edit", failures=3)
    line = report.line()
    assert line.startswith("cursor-bridge flow route=default outcome=loop_guard ")
    assert " tool=edit failures=3 " in line and report.mark == ":stop_sign:"


def anthropic_sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def test_a_same_dialect_anthropic_stream_is_well_formed_without_the_call() -> None:
    """Anthropic → Anthropic: text block 0, the repeated tool_use as block 1; the client's
    stream (the SDK's accumulation, strict) holds only text and ends with end_turn."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Again."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "edit", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": SAME},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    dialect = DIALECTS["anthropic"]
    replaced: list[int] = []
    processor = StreamProcessor(
        dialect.stream_decoder(),
        dialect.stream_encoder(),
        stages=[LoopGuardStage(verdict_(), lambda: replaced.append(1))],
        same_dialect=True,
    )
    raw = anthropic_sse(events)
    out = b"".join(
        [b for i in range(0, len(raw), 7) for b in processor.feed(raw[i : i + 7])]
        + processor.finish()
    )
    got = sdk_message(pairs_of(out))
    assert replaced == [1]
    # The upstream closed its text block before the call: the message is a block of its own.
    assert got.stop_reason == "end_turn" and [b.type for b in got.content] == ["text", "text"]
    text = "".join(b.text for b in got.content)
    assert text == "Again.\n\n" + terminal_message(verdict_())


# --------------------------------------------------------------------------- real recordings

RECORDED = [
    pytest.param(
        "anthropic-messages-sse-text-then-tool_use-input_json_delta.anthropic-sdk-python.sse",
        "anthropic",
        id="anthropic-text-then-tool_use",
    ),
    pytest.param(
        "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse",
        "openai_chat",
        id="openai-parallel-2",
    ),
    pytest.param(
        "openai-chat-stream-claude-text-then-tool_call-index1.vercel-ai.sse",
        "openai_chat",
        id="openai-text-then-index1",
    ),
    pytest.param(
        "openai-chat-stream-deepseek-reasoning_content-then-tool_calls.vercel-ai.chunks.txt",
        "openai_chat",
        id="deepseek-reasoning-then-calls",
    ),
    pytest.param(
        "gemini-vertex-stream-functionCall-partialArgs-2calls.vercel-ai.chunks.txt",
        "gemini",
        id="gemini-2calls",
    ),
]
CLIENTS = ["openai_chat", "anthropic", "openai_responses", "gemini"]


class Tap:
    """A stage that records what passes it."""

    text_lane = None

    def __init__(self) -> None:
        self.seen: list[Event] = []

    def feed(self, event: Event) -> list[Event]:
        self.seen.append(event)
        return [event]

    def finish(self) -> list[Event]:
        return []


def through(raw: bytes, upstream: str, client: str, *stages: Any) -> bytes:
    processor = StreamProcessor(
        DIALECTS[upstream].stream_decoder(),
        DIALECTS[client].stream_encoder(),
        stages=list(stages),
        same_dialect=upstream == client,
        framing_in="aws_eventstream" if upstream == "kiro" else "sse",
    )
    out = [b for i in range(0, len(raw), 11) for b in processor.feed(raw[i : i + 11])]
    return b"".join([*out, *processor.finish()])


def read_back(raw: bytes, dialect: str) -> Response:
    """What a client of ``dialect`` got, read back by that dialect's own decoder."""
    tap = Tap()
    through(raw, dialect, dialect, tap)
    return response_from_events(tap.seen, dialect)


def kiro_frames() -> bytes:
    """Kiro's AWS event-stream answer: text, then two native calls."""
    return ef.stream(
        [
            *ef.text_events("Reading both files.", 3),
            *ef.tool_events("tooluse_a", "Read", json.dumps({"path": "a.txt"}), 4),
            *ef.tool_events("tooluse_b", "Read", json.dumps({"path": "b.txt"}), 2),
            *ef.usage_events(),
        ]
    )


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("name", "upstream"), [*RECORDED, pytest.param("", "kiro", id="kiro-frames-2calls")]
)
def test_recorded_streams_lose_only_the_repeated_call(
    name: str, upstream: str, client: str
) -> None:
    """Real answers (and Kiro's frames) whose first call is taken as the history's failing
    call: each client dialect gets every other call as it came, the message instead of that
    call, and a text finish when no call is left."""
    raw = as_sse(name) if name else kiro_frames()
    tap = Tap()
    through(raw, upstream, "openai_chat", tap)
    calls = [p for p in response_from_events(tap.seen, upstream).parts if isinstance(p, ToolCall)]
    assert calls, name
    first = calls[0]
    verdict = LoopVerdict(first.name, 3, "Error: boom", "f", "not_found", "c0", call_key(first))
    replaced: list[int] = []
    got = read_back(
        through(raw, upstream, client, LoopGuardStage(verdict, lambda: replaced.append(1))),
        client,
    )
    left = [p for p in got.parts if isinstance(p, ToolCall)]
    kept = [c for c in calls if not verdict.matches(c)]
    assert [(c.name, json.loads(c.arguments or "{}")) for c in left] == [
        (c.name, json.loads(c.arguments or "{}")) for c in kept
    ]
    assert len(replaced) == len(calls) - len(kept) >= 1
    text = "".join(p.text for p in got.parts if isinstance(p, Text))
    assert terminal_message(verdict) in text
    assert got.finish == ("tool_calls" if kept else "stop")
