"""The loop guard (issue 11): ``addon.transforms.loop_guard``."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pytest

from addon.dialects import DIALECTS
from addon.model import (
    Image,
    Message,
    Part,
    Request,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
)
from addon.stream.whole import sse_from_response
from addon.transforms.loop_guard import (
    EVENT,
    ORIGIN,
    LoopVerdict,
    argument_shape,
    call_key,
    check_loop,
    classify,
    failure_runs,
    fingerprint,
    is_read_only,
    loop_record,
    terminal_response,
)
from tests.unit.test_anthropic_stream import sdk_message, sse_events
from tests.unit.test_openai_stream import accumulate, payloads

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


# --------------------------------------------------------------------------- the answer


def verdict_() -> LoopVerdict:
    verdict = check_loop(request(edit_fails(), edit_fails(), edit_fails()), 3)
    assert verdict is not None
    return verdict


def test_terminal_response_names_tool_count_and_error() -> None:
    resp = terminal_response(verdict_(), "gpt-x")
    assert resp.origin == ORIGIN and resp.model == "gpt-x" and resp.finish == "stop"
    assert len(resp.parts) == 1 and isinstance(resp.parts[0], Text)
    text = resp.parts[0].text
    assert "`edit`" in text and "3 times" in text and NOT_FOUND in text


def test_loop_record() -> None:
    v = verdict_()
    assert loop_record(v, fallback=False) == {
        "event": EVENT,
        "fingerprint": v.fingerprint,
        "tool": "edit",
        "error_class": "not_found",
        "repeat": 3,
        "fallback": False,
    }
    assert "loop guard: edit failed 3 times" in v.note


def _text_of(body: Any) -> str:
    return json.dumps(body)


def test_terminal_response_whole_in_every_client_dialect() -> None:
    resp = terminal_response(verdict_(), "m")
    chat = openai.types.chat.ChatCompletion.model_validate(
        DIALECTS["openai_chat"].encode_response(resp)
    )
    assert chat.choices[0].finish_reason == "stop"
    assert chat.choices[0].message.content is not None
    assert NOT_FOUND in chat.choices[0].message.content
    message = anthropic.types.Message.model_validate(DIALECTS["anthropic"].encode_response(resp))
    assert message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    responses = openai.types.responses.Response.model_validate(
        DIALECTS["openai_responses"].encode_response(resp)
    )
    assert responses.status == "completed"
    assert NOT_FOUND in responses.output_text
    gemini = DIALECTS["gemini"].encode_response(resp)
    assert NOT_FOUND in _text_of(gemini) and "STOP" in _text_of(gemini)


def test_terminal_response_streamed_in_every_client_dialect() -> None:
    resp = terminal_response(verdict_(), "m")
    chat = sse_from_response(resp, DIALECTS["openai_chat"].stream_encoder()).decode()
    acc = accumulate(payloads(chat.encode()))
    assert acc["finish"] == "stop" and NOT_FOUND in acc["content"]
    assert chat.rstrip().endswith("data: [DONE]")
    pairs = _pairs(sse_from_response(resp, DIALECTS["anthropic"].stream_encoder()))
    message = sdk_message(pairs)
    assert message.stop_reason == "end_turn" and NOT_FOUND in message.content[0].text
    events = _pairs(sse_from_response(resp, DIALECTS["openai_responses"].stream_encoder()))
    completed = [json.loads(d) for e, d in events if e == "response.completed"]
    assert len(completed) == 1 and completed[0]["response"]["status"] == "completed"
    assert NOT_FOUND in json.dumps(completed[0]["response"]["output"])


def _pairs(raw: bytes) -> list[tuple[str | None, str]]:
    return [(e.event, e.data) for e in sse_events(raw)]
