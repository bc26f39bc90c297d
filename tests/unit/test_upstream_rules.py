"""The strict upstream rules (``tests.upstream_rules``) against recordings: every request a real
service accepted (or a real client program sent) passes, and one mutation of a recording breaks
each rule, answered in the service's own error shape."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.realdata import FIXTURES, cursor_byok_body
from tests.upstream_rules import (
    DIALECTS,
    check_request,
    dialect_of,
    gemini_model,
    refusal,
    refusal_for,
)

CLIENTS = FIXTURES / "clients"
KEYS = [
    *("max_tokens", "messages", "role", "content", "type", "text", "id", "tool_use_id"),
    *("tool_calls", "tool_call_id", "input", "call_id", "previous_response_id", "contents"),
    *("parts", "functionCall", "functionResponse", "thoughtSignature", "name", "signature"),
    *("conversationState", "currentMessage", "userInputMessage", "history"),
]
"""The keys the rules read, for bodies drawn at random."""
LOCAL = Path(__file__).resolve().parents[1] / "fixtures"


def _client_recordings() -> list[str]:
    if not CLIENTS.is_dir():
        return []
    return sorted(p.name for p in CLIENTS.glob("*.request.json"))


def client(name: str) -> dict[str, Any]:
    """A recorded client request ``{"method", "path", "headers", "body"}``."""
    path = CLIENTS / name
    if not path.is_file():
        pytest.skip(f"recording {name} not available (../shared/fixtures/real/clients)")
    recorded: dict[str, Any] = json.loads(path.read_text())
    return recorded


def _server_exchanges() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for server in ("llama_cpp", "litellm"):
        index = json.loads((LOCAL / server / "index.json").read_text())
        out += [(f"{server}/{e['file']}", e) for e in index["exchanges"]]
    return out


SERVER_EXCHANGES = _server_exchanges()


def judged(recorded: dict[str, Any], body: Any = None) -> Any:
    """``refusal_for`` on a recorded request, with ``body`` in place of its own if given."""
    body = recorded["body"] if body is None else body
    return refusal_for(recorded["method"], recorded["path"], json.dumps(body).encode())


# --------------------------------------------------------------------------- accepted


@pytest.mark.skipif(not _client_recordings(), reason=f"recordings not available ({CLIENTS})")
@pytest.mark.parametrize("name", _client_recordings() or ["none"])
def test_every_recorded_client_request_passes(name: str) -> None:
    recorded = client(name)
    assert judged(recorded) is None


@pytest.mark.parametrize(
    ("name", "exchange"),
    [(n, e) for n, e in SERVER_EXCHANGES if e["status"] == 200],
    ids=[n for n, e in SERVER_EXCHANGES if e["status"] == 200],
)
def test_every_request_a_real_server_accepted_passes(name: str, exchange: dict[str, Any]) -> None:
    refused = refusal_for("POST", exchange["path"], json.dumps(exchange["request"]).encode())
    if name.endswith("messages_error_no_max_tokens.json"):
        # llama-server serves a body without max_tokens; Anthropic (and LiteLLM) refuse it
        assert refused is not None and refused.message == "max_tokens: Field required"
    else:
        assert refused is None


def test_cursors_recorded_request_passes() -> None:
    assert refusal("openai_chat", cursor_byok_body()) is None


@pytest.mark.parametrize(
    "name",
    [
        "kiro-generateAssistantResponse-request-intent-classification.opencode-proxy-api.json",
        "kiro-generateAssistantResponse-request-vibe-23tools-history.opencode-proxy-api.json",
    ],
)
def test_the_recorded_kiro_requests_pass(name: str) -> None:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"recording {name} not available (../shared/fixtures/real)")
    body = json.loads(path.read_text())
    assert refusal_for("POST", "/generateAssistantResponse", json.dumps(body).encode()) is None
    body["conversationState"]["currentMessage"]["userInputMessage"]["content"] = " "
    refused = refusal("kiro", body)
    assert refused is not None and refused.status == 400
    assert refused.body == {"message": "Improperly formed request.", "reason": None}


# --------------------------------------------------------------------------- refused: anthropic

CLAUDE = "claude-code-2.1.197-sonnet-4-6-turn3.request.json"
"""user, assistant (thinking, text, tool_use), user (tool_result), assistant (two tool_use),
user (two tool_result)."""
AI_SDK_ANTHROPIC = "ai-sdk-6.0.326-anthropic-turn3.request.json"


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = body["messages"]
    return messages


def _drop_max_tokens(b: dict[str, Any]) -> None:
    del b["max_tokens"]


def _zero_max_tokens(b: dict[str, Any]) -> None:
    b["max_tokens"] = 0


def _drop_one_result(b: dict[str, Any]) -> None:
    _messages(b)[-1]["content"].pop()


def _result_for_unknown_use(b: dict[str, Any]) -> None:
    _messages(b)[-1]["content"].append(
        {"type": "tool_result", "tool_use_id": "toolu_never_called", "content": "x"}
    )


def _drop_the_uses(b: dict[str, Any]) -> None:
    last_assistant = _messages(b)[-2]
    last_assistant["content"] = [c for c in last_assistant["content"] if c["type"] != "tool_use"]


def _assistant_first(b: dict[str, Any]) -> None:
    b["messages"] = [m for m in _messages(b) if m["role"] != "user"][:1] + _messages(b)


def _empty_text(b: dict[str, Any]) -> None:
    first_text = next(c for c in _messages(b)[0]["content"] if c["type"] == "text")
    first_text["text"] = ""


def _blank_text(b: dict[str, Any]) -> None:
    first_text = next(c for c in _messages(b)[0]["content"] if c["type"] == "text")
    first_text["text"] = " \n"


def _unsigned_thinking(b: dict[str, Any]) -> None:
    thinking = next(c for c in _messages(b)[1]["content"] if c["type"] == "thinking")
    del thinking["signature"]


def _empty_message(b: dict[str, Any]) -> None:
    _messages(b)[0]["content"] = []


ANTHROPIC_MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "no max_tokens": (_drop_max_tokens, "max_tokens: Field required"),
    "max_tokens 0": (_zero_max_tokens, "greater than or equal to 1"),
    "a tool_use unanswered": (_drop_one_result, "ids were found without `tool_result` blocks"),
    "a tool_result of no tool_use": (_result_for_unknown_use, "unexpected `tool_use_id`"),
    "results of removed uses": (_drop_the_uses, "unexpected `tool_use_id`"),
    "assistant first": (_assistant_first, 'first message must use the "user" role'),
    "empty text block": (_empty_text, "text content blocks must be non-empty"),
    "blank text block": (_blank_text, "must contain non-whitespace text"),
    "thinking without signature": (_unsigned_thinking, "thinking.signature: Field required"),
    "empty content": (_empty_message, "must have non-empty content"),
}


@pytest.mark.parametrize("name", [CLAUDE, AI_SDK_ANTHROPIC])
@pytest.mark.parametrize("mutation", sorted(ANTHROPIC_MUTATIONS))
def test_anthropic_refuses_one_mutation_of_a_recording(name: str, mutation: str) -> None:
    recorded = client(name)
    body = copy.deepcopy(recorded["body"])
    mutate, message = ANTHROPIC_MUTATIONS[mutation]
    mutate(body)
    refused = judged(recorded, body)
    assert refused is not None and message in refused.message
    assert refused.status == 400
    # Anthropic's error shape, as LiteLLM's /v1/messages answers (tests/fixtures/litellm)
    litellm = json.loads((LOCAL / "litellm" / "messages_error_no_max_tokens.json").read_text())
    assert refused.body["type"] == litellm["type"] == "error"
    assert refused.body["error"]["type"] == litellm["error"]["type"] == "invalid_request_error"
    assert refused.body["error"]["message"] == refused.message


def test_anthropic_merges_same_role_neighbours_before_pairing() -> None:
    """Two results split over two user messages in a row are still the next turn."""
    recorded = client(CLAUDE)
    body = copy.deepcopy(recorded["body"])
    first, second = _messages(body)[-1]["content"]
    _messages(body)[-1]["content"] = [first]
    _messages(body).append({"role": "user", "content": [second]})
    assert judged(recorded, body) is None
    _messages(body).insert(-2, {"role": "user", "content": "between the call and its results"})
    assert judged(recorded, body) is None  # merged into the results' turn
    _messages(body).insert(-2, {"role": "assistant", "content": "a turn between"})
    refused = judged(recorded, body)
    assert refused is not None and "ids were found without" in refused.message


def test_anthropic_takes_a_final_assistant_turn_and_system_messages() -> None:
    recorded = client("claude-code-2.1.197-default-turn2.request.json")
    assert [m["role"] for m in recorded["body"]["messages"]][:2] == ["user", "system"]
    body = copy.deepcopy(recorded["body"])
    _messages(body).pop()  # ends on the assistant's tool_use (a prefill): accepted
    assert judged(recorded, body) is None


# --------------------------------------------------------------------------- refused: chat

OPENCODE = "opencode-1.18.33-openai-compatible-turn3.request.json"
"""system, user, assistant (1 call), tool, assistant (2 calls), tool, tool."""
AI_SDK_CHAT = "ai-sdk-6.0.326-openai-compatible-turn3.request.json"


def _drop_last_tool_message(b: dict[str, Any]) -> None:
    _messages(b).pop()
    _messages(b).append({"role": "user", "content": "go on"})


def _drop_calling_assistant(b: dict[str, Any]) -> None:
    i = min(i for i, m in enumerate(_messages(b)) if m.get("tool_calls"))
    del _messages(b)[i]


def _wrong_tool_call_id(b: dict[str, Any]) -> None:
    _messages(b)[-1]["tool_call_id"] = "call_never_made"


def _drop_messages(b: dict[str, Any]) -> None:
    del b["messages"]


CHAT_MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "a call unanswered": (
        _drop_last_tool_message,
        "must be followed by tool messages responding to each 'tool_call_id'",
        "role",
    ),
    "a tool message of no call": (
        _drop_calling_assistant,
        "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
        "role",
    ),
    "a tool message of another id": (_wrong_tool_call_id, "not found in 'tool_calls'", "call_id"),
    "no messages": (_drop_messages, "Missing required parameter: 'messages'", "messages"),
}


@pytest.mark.parametrize("name", [OPENCODE, AI_SDK_CHAT])
@pytest.mark.parametrize("mutation", sorted(CHAT_MUTATIONS))
def test_chat_refuses_one_mutation_of_a_recording(name: str, mutation: str) -> None:
    recorded = client(name)
    body = copy.deepcopy(recorded["body"])
    mutate, message, param = CHAT_MUTATIONS[mutation]
    mutate(body)
    refused = judged(recorded, body)
    assert refused is not None and message in refused.message
    _assert_openai_shape(refused, param)


def _assert_openai_shape(refused: Any, param: str) -> None:
    """OpenAI's error object, as LiteLLM and llama-server answer it (tests/fixtures)."""
    assert refused.status == 400
    recorded = json.loads((LOCAL / "litellm" / "chat_error_bad_json.json").read_text())
    assert set(refused.body) == set(recorded) == {"error"}
    assert {"message", "type", "param", "code"} == set(refused.body["error"])
    assert refused.body["error"]["type"] == "invalid_request_error"
    assert refused.body["error"]["message"] == refused.message
    assert refused.body["error"]["param"].endswith(param)


def test_chat_lets_system_messages_stand_between_calls_and_results() -> None:
    recorded = client(OPENCODE)
    body = copy.deepcopy(recorded["body"])
    _messages(body).insert(-2, {"role": "system", "content": "a reminder"})
    assert judged(recorded, body) is None


# --------------------------------------------------------------------------- refused: responses

CODEX = "codex-0.169.0-responses-gpt-5.5-turn3.request.json"
"""… reasoning, function_call, function_call_output, reasoning, function_call, custom_tool_call,
function_call_output, custom_tool_call_output."""


def _drop_items(kind: str, keep_previous: bool = False) -> Callable[[dict[str, Any]], None]:
    def mutate(b: dict[str, Any]) -> None:
        last = max(i for i, item in enumerate(b["input"]) if item.get("type") == kind)
        del b["input"][last]
        if keep_previous:
            b["previous_response_id"] = "resp_rec_t2"

    return mutate


RESPONSES_MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str | None]] = {
    "a function_call without output": (
        _drop_items("function_call_output"),
        "No tool output found for function call call_",
    ),
    "a custom_tool_call without output": (
        _drop_items("custom_tool_call_output"),
        "No tool output found for custom tool call call_",
    ),
    "an output without its function_call": (
        _drop_items("function_call"),
        "No tool call found for function call output with call_id call_",
    ),
    "an output without its custom_tool_call": (
        _drop_items("custom_tool_call"),
        "No tool call found for custom tool call output with call_id call_",
    ),
    "an output whose call is in the previous response": (
        _drop_items("function_call", keep_previous=True),
        None,
    ),
}


@pytest.mark.parametrize("mutation", sorted(RESPONSES_MUTATIONS))
def test_responses_refuses_one_mutation_of_a_recording(mutation: str) -> None:
    recorded = client(CODEX)
    body = copy.deepcopy(recorded["body"])
    mutate, message = RESPONSES_MUTATIONS[mutation]
    mutate(body)
    refused = judged(recorded, body)
    if message is None:
        assert refused is None
        return
    assert refused is not None and message in refused.message
    _assert_openai_shape(refused, "input")


# --------------------------------------------------------------------------- refused: gemini

GEMINI_CLI = "gemini-cli-0.61.0-default-turn3.request.json"
"""user, model (signed call), user (response), model (signed call, call), user (2 responses);
the path names gemini-3.8-flash."""


def _contents(b: dict[str, Any]) -> list[dict[str, Any]]:
    contents: list[dict[str, Any]] = b["contents"]
    return contents


def _drop_one_response(b: dict[str, Any]) -> None:
    _contents(b)[-1]["parts"].pop()


def _unsigned_last_call(b: dict[str, Any]) -> None:
    del _contents(b)[-2]["parts"][0]["thoughtSignature"]


def _unsigned_first_call(b: dict[str, Any]) -> None:
    del _contents(b)[1]["parts"][0]["thoughtSignature"]


def _drop_call_turn(b: dict[str, Any]) -> None:
    del _contents(b)[-2]


def _assistant_role(b: dict[str, Any]) -> None:
    _contents(b)[1]["role"] = "assistant"


def _two_model_turns(b: dict[str, Any]) -> None:
    _contents(b).insert(-2, {"role": "model", "parts": [{"text": "Reading both."}]})


GEMINI_MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a response part missing": (_drop_one_response, "number of function response parts"),
    "the current turn's call unsigned": (_unsigned_last_call, "missing a thought_signature"),
    "an earlier call of the current turn unsigned": (
        _unsigned_first_call,
        "function call `default_api:read_file` , position 2",
    ),
    "responses without their call turn": (
        _drop_call_turn,
        "comes immediately after a function call",
    ),
    "role assistant": (_assistant_role, "Please use a valid role: user, model."),
    "a call turn after a model turn": (_two_model_turns, "immediately after a user turn"),
}


@pytest.mark.parametrize("mutation", sorted(GEMINI_MUTATIONS))
def test_gemini_refuses_one_mutation_of_a_recording(mutation: str) -> None:
    recorded = client(GEMINI_CLI)
    body = copy.deepcopy(recorded["body"])
    mutate, message = GEMINI_MUTATIONS[mutation]
    mutate(body)
    refused = judged(recorded, body)
    assert refused is not None and message in refused.message
    assert refused.status == 400
    assert refused.body == {
        "error": {"code": 400, "message": refused.message, "status": "INVALID_ARGUMENT"}
    }


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "gemini-2.5-pro"])
def test_gemini_before_3_takes_unsigned_calls(model: str) -> None:
    recorded = client(GEMINI_CLI)
    body = copy.deepcopy(recorded["body"])
    _unsigned_last_call(body)
    _unsigned_first_call(body)
    path = recorded["path"].replace(gemini_model(recorded["path"]), model)
    assert refusal_for("POST", path, json.dumps(body).encode()) is None


def test_gemini_takes_the_skip_sentinel_and_checks_the_current_turn_only() -> None:
    recorded = client(GEMINI_CLI)
    body = copy.deepcopy(recorded["body"])
    _contents(body)[-2]["parts"][0]["thoughtSignature"] = "skip_thought_signature_validator"
    assert judged(recorded, body) is None
    _unsigned_first_call(body)
    assert judged(recorded, body) is not None
    # a new user message starts a new turn: the calls before it are not validated
    _contents(body).append({"role": "user", "parts": [{"text": "and now?"}]})
    assert judged(recorded, body) is None


def test_code_assist_bodies_are_judged_inside_their_wrapper() -> None:
    recorded = client(GEMINI_CLI)
    body = copy.deepcopy(recorded["body"])
    _unsigned_last_call(body)
    wrapped = {"model": "gemini-3-pro-preview", "project": "p", "request": body}
    path = "/v1internal:streamGenerateContent?alt=sse"
    refused = refusal_for("POST", path, json.dumps(wrapped).encode())
    assert refused is not None and "thought_signature" in refused.message
    wrapped["model"] = "gemini-2.5-pro"
    assert refusal_for("POST", path, json.dumps(wrapped).encode()) is None


# --------------------------------------------------------------------------- paths and helpers


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        ("/v1/chat/completions", "openai_chat"),
        ("/api/v1/chat/completions?x=1", "openai_chat"),
        ("/v1/messages?beta=true", "anthropic"),
        ("/v1/messages/count_tokens", None),
        ("/v1/responses", "openai_responses"),
        ("/v1beta/models/gemini-3-pro:streamGenerateContent?alt=sse", "gemini"),
        ("/v1beta/models/gemini-3-pro:countTokens", None),
        ("/v1internal:generateContent", "gemini_code_assist"),
        ("/generateAssistantResponse", "kiro"),
        ("/v1/models", None),
    ],
)
def test_the_dialect_comes_from_the_path(path: str, dialect: str | None) -> None:
    assert dialect_of(path) == dialect


def test_only_json_object_posts_are_judged() -> None:
    assert refusal_for("GET", "/v1/messages", b"{}") is None
    assert refusal_for("POST", "/v1/messages", b"not json") is None
    assert refusal_for("POST", "/v1/messages", b"[1]") is None
    assert refusal_for("POST", "/v1/messages", b"{}") is not None
    deep = b"[" * 100_000 + b"]" * 100_000
    assert refusal_for("POST", "/v1/chat/completions", b'{"messages": ' + deep + b"}") is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    body=st.dictionaries(st.sampled_from(KEYS), JSON, max_size=5),
    dialect=st.sampled_from(sorted(DIALECTS)),
)
def test_any_json_object_is_judged_without_an_exception(body: dict[str, Any], dialect: str) -> None:
    result = refusal(dialect, body, "gemini-3-pro")
    assert result is None or result.status == 400


def test_a_body_shaped_unlike_its_dialect_is_not_judged() -> None:
    assert refusal("kiro", {"conversationState": {}}) is None
    assert refusal("openai_chat", {"messages": [{"role": "tool", "tool_call_id": {}}]}) is not None
    assert refusal("anthropic", {"max_tokens": 1, "messages": [{"role": "user"}]}) is not None


BROKEN_EVERYWHERE = {
    "contents": [{"role": "system", "parts": []}],
    "input": [{"type": "function_call_output", "call_id": "call_1", "output": "x"}],
}
"""No ``max_tokens`` (Anthropic), no ``messages`` (chat), an output of no call (Responses), a
role Gemini does not know."""


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_check_request_asserts_with_the_services_words(dialect: str) -> None:
    with pytest.raises(AssertionError, match="refuses the request"):
        check_request(dialect, BROKEN_EVERYWHERE)
    with pytest.raises(AssertionError, match="not a JSON object"):
        check_request(dialect, [])
