"""Kiro requests: Cursor- and Claude Code-shaped conversations → the Kiro IDE's body.

The recordings of real Kiro IDE 0.11 requests (``../shared/fixtures/real/
kiro-generateAssistantResponse-*``) are the reference: the same conversation sent by Cursor
must give a body of the same structure (keys, nesting, alternation, tool specifications).
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.config.routes_file import RoutesError, load_routes
from addon.dialects import DIALECTS
from addon.dialects.kiro.placement import model_id
from addon.dialects.kiro.request import decode_request
from addon.dialects.kiro.request_encode import (
    ACK,
    EMPTY_RESULT,
    HISTORY_TOOL,
    NO_RESULT,
    encode_request,
    session_id,
)
from addon.plan import Incoming, Reject, Rewrite, RouteCredentials, decide
from tests.kiro_rules import kiro_refusal
from tests.realdata import FIXTURES, read

INTENT = "kiro-generateAssistantResponse-request-intent-classification.opencode-proxy-api.json"
VIBE = "kiro-generateAssistantResponse-request-vibe-23tools-history.opencode-proxy-api.json"
ARN = "arn:aws:codewhisperer:us-east-1:699475941385:profile/EHGA3GRVQMUK"


def recording(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(read(name))
    return body


def kiro_route(**keys: Any) -> Route:
    return Route(name="kiro", upstream="kiro", **keys)


def rewrite(
    body: dict[str, Any],
    route: Route | None = None,
    path: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
    creds: RouteCredentials | None = None,
) -> Rewrite:
    route = route or kiro_route()
    inc = Incoming(
        "POST",
        "q.us-east-1.amazonaws.com",
        path,
        headers if headers is not None else {"authorization": "Bearer client-token"},
        json.dumps(body).encode(),
    )
    d = decide(Settings(), route, inc, {}, creds)
    assert isinstance(d, Rewrite), d
    return d


def structure(value: Any) -> Any:
    """The shape of a JSON value: keys and nesting, list lengths, value types."""
    if isinstance(value, dict):
        return {k: structure(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [structure(v) for v in value]
    return type(value).__name__


def roles(history: list[dict[str, Any]]) -> list[str]:
    return [next(iter(h)) for h in history]


def check_kiro_shape(body: dict[str, Any]) -> None:
    """What Kiro refuses: roles that do not alternate, results that do not answer the calls of
    the turn before, a current message that is not a user message."""
    state = body["conversationState"]
    history = state["history"]
    sequence = [*roles(history), "userInputMessage"]
    assert sequence[0] == "userInputMessage"
    for a, b in itertools.pairwise(sequence):
        assert a != b, sequence
    entries = [*history, state["currentMessage"]]
    for before, after in itertools.pairwise(entries):
        if "assistantResponseMessage" not in before:
            continue
        calls = [u["toolUseId"] for u in before["assistantResponseMessage"].get("toolUses") or ()]
        context = after["userInputMessage"].get("userInputMessageContext") or {}
        answered = [r["toolUseId"] for r in context.get("toolResults") or ()]
        assert answered == calls
    assert kiro_refusal(body) is None


# --------------------------------------------------------------------------- recordings


def cursor_body_for_vibe(rec: dict[str, Any]) -> dict[str, Any]:
    """The conversation of the vibe recording as Cursor would send it (flat Anthropic-style
    tools, OpenAI messages)."""
    state = rec["conversationState"]
    h = state["history"]
    current = state["currentMessage"]["userInputMessage"]
    use = h[1]["assistantResponseMessage"]["toolUses"][0]
    result = h[2]["userInputMessage"]["userInputMessageContext"]["toolResults"][0]
    tools = [
        {
            "name": t["toolSpecification"]["name"],
            "description": t["toolSpecification"]["description"],
            "input_schema": t["toolSpecification"]["inputSchema"]["json"],
        }
        for t in current["userInputMessageContext"]["tools"]
    ]
    return {
        "model": "claude-sonnet-4-5",
        "stream": True,
        "messages": [
            {"role": "user", "content": h[0]["userInputMessage"]["content"]},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": use["toolUseId"],
                        "type": "function",
                        "function": {"name": use["name"], "arguments": json.dumps(use["input"])},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": result["toolUseId"],
                "content": result["content"][0]["text"],
            },
            {"role": "user", "content": h[2]["userInputMessage"]["content"]},
            {"role": "assistant", "content": h[3]["assistantResponseMessage"]["content"]},
            {"role": "user", "content": current["content"]},
        ],
        "tools": tools,
    }


def test_a_cursor_request_encodes_to_the_structure_of_the_kiro_recording() -> None:
    rec = recording(VIBE)
    d = rewrite(
        cursor_body_for_vibe(rec),
        kiro_route(profile_arn=ARN, schema_profile="none", description_limit=100_000),
    )
    body = d.wire.body
    assert d.wire.path == "/generateAssistantResponse"
    state, want = body["conversationState"], rec["conversationState"]
    assert sorted(body) == sorted(rec)
    assert sorted(state) == sorted(want)
    assert roles(state["history"]) == roles(want["history"])
    for got, expected in zip(state["history"], want["history"], strict=True):
        # the recording's last assistant message has no toolUses key at all; ours neither
        assert structure(got) == structure(expected)
    assert structure(state["currentMessage"]) == structure(want["currentMessage"])
    # With the schema profile off and no description limit, the tools are the IDE's own.
    got_tools = state["currentMessage"]["userInputMessage"]["userInputMessageContext"]["tools"]
    assert (
        got_tools == want["currentMessage"]["userInputMessage"]["userInputMessageContext"]["tools"]
    )
    # The values that carry the conversation are the recording's.
    assert state["history"] == want["history"]
    current = state["currentMessage"]["userInputMessage"]
    assert current["content"] == want["currentMessage"]["userInputMessage"]["content"]
    assert current["modelId"] == "claude-sonnet-4.5" and current["origin"] == "AI_EDITOR"
    assert body["profileArn"] == ARN
    assert state["chatTriggerType"] == "MANUAL" and state["agentTaskType"] == "vibe"
    uuid.UUID(state["conversationId"])
    uuid.UUID(state["agentContinuationId"])
    check_kiro_shape(body)


def test_the_default_route_cuts_long_descriptions_and_applies_the_strict_profile() -> None:
    rec = recording(VIBE)
    d = rewrite(cursor_body_for_vibe(rec))
    tools = d.wire.body["conversationState"]["currentMessage"]["userInputMessage"][
        "userInputMessageContext"
    ]["tools"]
    want = rec["conversationState"]["currentMessage"]["userInputMessage"][
        "userInputMessageContext"
    ]["tools"]
    assert [t["toolSpecification"]["name"] for t in tools] == [
        t["toolSpecification"]["name"] for t in want
    ]
    for t in tools:
        spec = t["toolSpecification"]
        assert sorted(spec) == ["description", "inputSchema", "name"]
        assert len(spec["description"]) <= 10240
        schema = spec["inputSchema"]["json"]
        assert "$schema" not in schema and "additionalProperties" not in schema
        assert schema["type"] == "object"
    cut = [t for t in tools if t["toolSpecification"]["description"].endswith("...")]
    assert cut, "the recording has descriptions over 10240 characters"
    assert "tool descriptions cut to 10240 characters (Kiro's limit)" in d.summary
    assert "tool schemas sanitized (strict)" in d.summary


def test_the_intent_classification_recording_a_system_prompt_and_a_question() -> None:
    rec = recording(INTENT)
    h = rec["conversationState"]["history"]
    current = rec["conversationState"]["currentMessage"]["userInputMessage"]
    body = {
        "model": "simple-task",
        "messages": [
            {"role": "system", "content": h[0]["userInputMessage"]["content"]},
            {"role": "user", "content": current["content"]},
        ],
    }
    got = rewrite(body, kiro_route(profile_arn=ARN)).wire.body
    assert structure(got) == structure(rec)
    state = got["conversationState"]
    assert state["history"][0]["userInputMessage"]["content"] == h[0]["userInputMessage"]["content"]
    assert state["history"][1] == {"assistantResponseMessage": {"content": ACK, "toolUses": []}}
    assert state["currentMessage"]["userInputMessage"]["userInputMessageContext"] == {}
    assert state["currentMessage"]["userInputMessage"]["modelId"] == "simple-task"


def test_the_lenient_decoder_reads_the_recordings_back_and_round_trips() -> None:
    for name in (INTENT, VIBE):
        rec = recording(name)
        req = decode_request(rec, Counter())
        assert req.origin == "kiro" and req.stream
        again = encode_request(req, Counter())
        assert again == rec, name


# --------------------------------------------------------------------------- conversation


def claude_code_body(messages: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "tools": [
            {
                "name": "Read",
                "description": "Read a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
        "messages": messages,
        **extra,
    }


def test_claude_code_parallel_calls_and_results_in_kiros_shape() -> None:
    messages = [
        {"role": "user", "content": "read a and b"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading both."},
                {"type": "tool_use", "id": "toolu_a", "name": "Read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "Read", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                # answered out of order, one failed, one empty
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "", "is_error": True},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_a",
                    "content": [{"type": "text", "text": "A1"}, {"type": "text", "text": "A2"}],
                },
                {"type": "text", "text": "now summarize"},
            ],
        },
    ]
    d = rewrite(
        claude_code_body(messages), path="/v1/messages", route=kiro_route(client="anthropic")
    )
    body = d.wire.body
    check_kiro_shape(body)
    state = body["conversationState"]
    assert roles(state["history"]) == [
        "userInputMessage",
        "assistantResponseMessage",
        "userInputMessage",
        "assistantResponseMessage",
    ]
    assistant = state["history"][-1]["assistantResponseMessage"]
    assert assistant == {
        "content": "Reading both.",
        "toolUses": [
            {"toolUseId": "toolu_a", "name": "Read", "input": {"path": "a"}},
            {"toolUseId": "toolu_b", "name": "Read", "input": {"path": "b"}},
        ],
    }
    current = state["currentMessage"]["userInputMessage"]
    assert current["content"] == "now summarize"
    assert current["modelId"] == "claude-sonnet-4.5"
    assert current["userInputMessageContext"]["toolResults"] == [
        {"content": [{"text": "A1"}, {"text": "A2"}], "status": "success", "toolUseId": "toolu_a"},
        {"content": [{"text": EMPTY_RESULT}], "status": "error", "toolUseId": "toolu_b"},
    ]
    assert [
        t["toolSpecification"]["name"] for t in current["userInputMessageContext"]["tools"]
    ] == ["Read"]
    # Claude Code's own headers never reach Kiro; its key does, as a Bearer token.
    d2 = rewrite(
        claude_code_body(messages),
        path="/v1/messages?beta=true",
        route=kiro_route(client="anthropic", path="*/v1/messages"),
        headers={"x-api-key": "kiro-token", "anthropic-version": "2023-06-01"},
    )
    assert dict(d2.wire.set_headers)["authorization"] == "Bearer kiro-token"
    assert set(d2.wire.drop_headers) >= {"x-api-key", "anthropic-version"}
    assert d2.wire.path == "/generateAssistantResponse" and d2.wire.query == ()


def test_stray_results_become_text_and_unanswered_calls_get_an_error_result() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "Read", "arguments": "x"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "zz", "content": "from nowhere"},
    ]
    d = rewrite({"model": "m", "messages": messages})
    body = d.wire.body
    check_kiro_shape(body)
    current = body["conversationState"]["currentMessage"]["userInputMessage"]
    results = current["userInputMessageContext"]["toolResults"]
    assert results == [
        {"content": [{"text": "one"}], "status": "success", "toolUseId": "c1"},
        {"content": [{"text": NO_RESULT}], "status": "error", "toolUseId": "c2"},
    ]
    assert "[Tool result for zz]\nfrom nowhere" in current["content"]
    uses = body["conversationState"]["history"][-1]["assistantResponseMessage"]["toolUses"]
    assert uses[1]["input"] == {"_raw_arguments": "x"}


def test_roles_alternate_whatever_the_client_sent() -> None:
    messages = [
        {"role": "assistant", "content": "I start."},
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": "ok"},
        {"role": "assistant", "content": "more"},
    ]
    body = rewrite({"model": "m", "messages": messages}).wire.body
    check_kiro_shape(body)
    state = body["conversationState"]
    contents = [next(iter(h.values()))["content"] for h in state["history"]]
    assert contents == [
        "Continue.",
        "I start.",
        "one\n\ntwo\n\n<system>\nbe brief\n</system>",
        "ok\n\nmore",
    ]
    assert state["currentMessage"]["userInputMessage"]["content"] == "Continue."


def test_conversation_id_is_stable_across_turns_and_taken_from_claude_code() -> None:
    first = [{"role": "user", "content": "the first question"}]
    later = [
        *first,
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "a follow-up"},
    ]
    a = rewrite({"model": "m", "messages": first}).wire.body["conversationState"]
    b = rewrite({"model": "m", "messages": later}).wire.body["conversationState"]
    other = rewrite({"model": "m", "messages": [{"role": "user", "content": "x"}]}).wire.body
    assert a["conversationId"] == b["conversationId"]
    assert a["agentContinuationId"] == b["agentContinuationId"]
    assert other["conversationState"]["conversationId"] != a["conversationId"]
    session = "0b5e0c9e-1f5d-4a0e-9d55-3f7c1e2a9b10"
    body = claude_code_body(
        [{"role": "user", "content": "hi"}],
        metadata={"user_id": f"user_abc_account__session_{session}"},
    )
    d = rewrite(body, path="/v1/messages", route=kiro_route(client="anthropic"))
    assert d.wire.body["conversationState"]["conversationId"] == session


def test_model_names_map_to_kiro_model_ids_and_a_route_extends_the_table() -> None:
    assert model_id("claude-sonnet-4-5-20250929") == "claude-sonnet-4.5"
    assert model_id("claude-sonnet-4-5") == "claude-sonnet-4.5"
    assert model_id("claude-haiku-4-5-20251001") == "claude-haiku-4.5"
    assert model_id("claude-opus-4-5") == "claude-opus-4.5"
    assert model_id("claude-sonnet-4-6") == "claude-sonnet-4.6"
    assert model_id("claude-sonnet-4-20250514") == "claude-sonnet-4"
    assert model_id("claude-3-7-sonnet-20250219") == "CLAUDE_3_7_SONNET_20250219_V1_0"
    for own in ("claude-sonnet-4.5", "auto", "simple-task", "CLAUDE_SONNET_4_5_20250929_V1_0"):
        assert model_id(own) == own
    route = kiro_route(model_map={"claude-sonnet-4-6": "CLAUDE_SONNET_4_5_20250929_V1_0"})
    d = rewrite(
        {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "x"}]}, route
    )
    current = d.wire.body["conversationState"]["currentMessage"]["userInputMessage"]
    assert current["modelId"] == "CLAUDE_SONNET_4_5_20250929_V1_0"
    assert (
        "model claude-sonnet-4-6 → CLAUDE_SONNET_4_5_20250929_V1_0 (the route's model_map)"
        in d.summary
    )


def test_description_limit_is_a_route_option() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"name": "T", "description": "d" * 100, "input_schema": {"type": "object"}}],
    }
    d = rewrite(body, kiro_route(description_limit=40))
    spec = d.wire.body["conversationState"]["currentMessage"]["userInputMessage"][
        "userInputMessageContext"
    ]["tools"][0]["toolSpecification"]
    assert spec["description"] == "d" * 37 + "..."


def test_images_go_as_bytes_and_thinking_is_not_replayed() -> None:
    png = "iVBORw0KGgo="
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": png},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "a logo"},
            ],
        },
        {"role": "user", "content": "thanks"},
    ]
    d = rewrite(
        claude_code_body(messages), path="/v1/messages", route=kiro_route(client="anthropic")
    )
    history = d.wire.body["conversationState"]["history"]
    assert history[2]["userInputMessage"]["images"] == [{"format": "png", "source": {"bytes": png}}]
    assert history[3]["assistantResponseMessage"] == {"content": "a logo"}
    assert "reasoning in the history dropped (Kiro takes none back)" in d.summary


def test_a_token_file_key_and_profile_replace_the_clients() -> None:
    creds = RouteCredentials("file-token", "arn:from:file")
    d = rewrite(
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        kiro_route(token_file="/nonexistent/kiro-auth-token.json"),
        headers={"authorization": "Bearer client-key", "x-api-key": "other"},
        creds=creds,
    )
    assert dict(d.wire.set_headers)["authorization"] == "Bearer file-token"
    assert "x-api-key" in d.wire.drop_headers
    assert d.wire.body["profileArn"] == "arn:from:file"
    assert "Kiro token from the route's token file" in d.summary
    assert "file-token" not in repr(creds) and "file-token" not in repr(d)
    # the route's own profile wins over the file's
    d2 = rewrite(
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        kiro_route(profile_arn="arn:route"),
        creds=creds,
    )
    assert d2.wire.body["profileArn"] == "arn:route"


def test_thinking_asked_for_becomes_the_thinking_prompt_and_answers_are_parsed() -> None:
    body = claude_code_body(
        [{"role": "user", "content": "think"}], thinking={"type": "enabled", "budget_tokens": 2048}
    )
    d = rewrite(body, path="/v1/messages", route=kiro_route(client="anthropic"))
    assert d.plan.parse_text and d.plan.protocol == "bracket" and d.plan.tools == ("Read",)
    text = json.dumps(d.wire.body)
    assert "<thinking>" in text


# --------------------------------------------------------------------------- routes


def test_routes_refuse_kiro_clients_and_kiro_keys_on_other_upstreams(tmp_path: Path) -> None:
    f = tmp_path / "r.toml"
    f.write_text('[[routes]]\nname = "x"\nclient = "kiro"\n')
    with pytest.raises(RoutesError, match=r"routes\[0\]\.client: kiro is an upstream-only dialect"):
        load_routes(f)
    f.write_text('[[routes]]\nname = "x"\nupstream = "gemini"\ntoken_file = "/t"\n')
    with pytest.raises(RoutesError, match=r'token_file: only for upstream = "kiro"'):
        load_routes(f)
    f.write_text('[[routes]]\nname = "x"\nupstream = "kiro"\nrefresh_url = "http://x/r"\n')
    with pytest.raises(RoutesError, match="refresh_url: only with token_file"):
        load_routes(f)
    f.write_text('[[routes]]\nname = "x"\nupstream = "kiro"\ndescription_limit = 3\n')
    with pytest.raises(RoutesError, match="description_limit"):
        load_routes(f)
    f.write_text(
        '[[routes]]\nname = "k"\nupstream = "kiro"\npath = "*/v1/messages"\nclient = "anthropic"\n'
        'model_map = {"claude-sonnet-4-6" = "CLAUDE_SONNET_4_5_20250929_V1_0"}\n'
        'profile_arn = "arn:x"\ntoken_file = "~/.aws/sso/cache/kiro-auth-token.json"\n'
        'refresh_url = "http://127.0.0.1:1/refreshToken"\ndescription_limit = 4000\n'
    )
    (route,) = load_routes(f)
    assert dict(route.model_map or ()) == {"claude-sonnet-4-6": "CLAUDE_SONNET_4_5_20250929_V1_0"}
    assert route.description_limit == 4000
    hash(route)


def test_kiro_as_a_client_is_refused_by_its_encoders() -> None:
    from addon.model import UnsupportedShape

    kiro = DIALECTS["kiro"]
    with pytest.raises(UnsupportedShape, match="upstream-only"):
        kiro.stream_encoder()
    with pytest.raises(UnsupportedShape, match="upstream-only"):
        kiro.encode_response(None)  # type: ignore[arg-type]


def test_a_request_kiro_cannot_take_is_answered_in_the_clients_dialect() -> None:
    inc = Incoming(
        "POST", "h", "/v1/messages", {"x-api-key": "k"}, json.dumps({"model": 3}).encode()
    )
    d = decide(Settings(), kiro_route(client="anthropic"), inc, {})
    assert isinstance(d, Reject) and d.status == 400
    assert json.loads(d.body)["type"] == "error"


# --------------------------------------------------------------------------- real clients

CLIENT_DIALECTS = {
    "claude-code-": ("anthropic", "*/v1/messages"),
    "ai-sdk-6.0.326-anthropic-": ("anthropic", "*/messages"),
    "codex-": ("openai_responses", "*/responses"),
    "opencode-": ("openai_chat", "*/chat/completions"),
    "ai-sdk-6.0.326-openai-compatible-": ("openai_chat", "*/chat/completions"),
}


def client_recordings() -> list[str]:
    clients = FIXTURES / "clients"
    if not clients.is_dir():
        return []
    return sorted(
        p.name
        for p in clients.glob("*-turn*.request.json")
        if any(p.name.startswith(k) for k in CLIENT_DIALECTS)
    )


@pytest.mark.parametrize("name", client_recordings())
def test_every_recorded_client_conversation_is_one_kiro_takes(name: str) -> None:
    rec = json.loads((FIXTURES / "clients" / name).read_text())
    client, glob = next(v for k, v in CLIENT_DIALECTS.items() if name.startswith(k))
    route = kiro_route(client=client, path=glob)
    headers = {k.lower(): v for k, v in rec["headers"].items()}
    d = rewrite(rec["body"], route, path=rec["path"], headers=headers)
    check_kiro_shape(d.wire.body)
    assert d.wire.path == "/generateAssistantResponse"
    # the same conversation on every turn
    turn1 = json.loads((FIXTURES / "clients" / re.sub(r"turn\d", "turn1", name)).read_text())
    first = rewrite(turn1["body"], route, path=turn1["path"], headers=headers)
    state, first_state = d.wire.body["conversationState"], first.wire.body["conversationState"]
    assert state["conversationId"] == first_state["conversationId"]


def test_a_result_already_in_kiros_shape_is_kept() -> None:
    shaped = {"content": [{"text": "B1"}], "status": "error"}
    messages = [
        {"role": "user", "content": "read b"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "Read", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": json.dumps(shaped)},
    ]
    tools = [{"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}]
    d = rewrite({"model": "claude-sonnet-4-5", "messages": messages, "tools": tools})
    state = d.wire.body["conversationState"]
    results = state["currentMessage"]["userInputMessage"]["userInputMessageContext"]["toolResults"]
    assert results == [{**shaped, "toolUseId": "call_b"}]
    assert "tool results already in Kiro's shape kept" in d.summary


def test_blank_fields_kiro_refuses_are_filled_in_history_and_current_message() -> None:
    """Results only, images only, blank text, a blank result, a tool without description or
    schema type, a tool the history used that the request no longer offers."""
    pixel = "data:image/png;base64,iVBORw0KGgo="
    call = {"id": "call_r", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
    old = {"id": "call_g", "type": "function", "function": {"name": "Grep", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": pixel}}]},
        {"role": "assistant", "content": None, "tool_calls": [old]},
        {"role": "tool", "tool_call_id": "call_g", "content": "  "},
        {"role": "assistant", "content": " ", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_r", "content": "R"},
    ]
    tools = [
        {"type": "function", "function": {"name": "Read", "description": " ", "parameters": {}}},
        {"type": "function", "function": {"name": "Write", "parameters": {"properties": {}}}},
    ]
    d = rewrite({"model": "claude-sonnet-4-5", "messages": messages, "tools": tools})
    body = d.wire.body
    check_kiro_shape(body)
    state = body["conversationState"]
    history, current = state["history"], state["currentMessage"]["userInputMessage"]
    assert history[0]["userInputMessage"]["content"] == "(image)"
    assert history[1]["assistantResponseMessage"]["content"] == ""  # calls only, as the IDE
    assert history[2]["userInputMessage"]["content"] == "(tool results)"
    grep_result = history[2]["userInputMessage"]["userInputMessageContext"]["toolResults"][0]
    assert grep_result["content"] == [{"text": EMPTY_RESULT}]
    assert current["content"] == "(tool results)"
    specs = {
        t["toolSpecification"]["name"]: t["toolSpecification"]
        for t in current["userInputMessageContext"]["tools"]
    }
    assert specs["Read"]["description"] == "Read"
    assert specs["Write"]["inputSchema"]["json"]["type"] == "object"
    assert specs["Grep"]["description"] == HISTORY_TOOL
    assert "1 tools the history used but the request lacks declared" in d.summary
    assert "user turn of tool results only sent with the text (tool results)" in d.summary


SESSION = "0b5e0c9e-1f5d-4a0e-9d55-3f7c1e2a9b10"


@pytest.mark.parametrize(
    ("user_id", "expected"),
    [
        pytest.param(f"user_abc_account__session_{SESSION}", SESSION, id="older-form"),
        pytest.param(
            json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": SESSION}),
            SESSION,
            id="claude-code-2.1-json",
        ),
        pytest.param(
            json.dumps({"session_id": SESSION.upper(), "device_id": "x"}), SESSION, id="upper"
        ),
        pytest.param(json.dumps({"session_id": "not-a-uuid"}), None, id="json-without-uuid"),
        pytest.param('{"session_id": ', None, id="broken-json"),
        pytest.param("someone", None, id="neither"),
    ],
)
def test_the_session_id_is_read_from_both_forms_of_user_id(
    user_id: str, expected: str | None
) -> None:
    assert session_id(user_id) == expected
    body = claude_code_body([{"role": "user", "content": "hi"}], metadata={"user_id": user_id})
    d = rewrite(body, path="/v1/messages", route=kiro_route(client="anthropic"))
    conversation = d.wire.body["conversationState"]["conversationId"]
    if expected is None:
        assert conversation != SESSION and uuid.UUID(conversation)
    else:
        assert conversation == expected


def test_claude_code_2_1_recorded_bodies_keep_their_session_as_the_conversation() -> None:
    """The JSON ``user_id`` of real Claude Code 2.1.197 bodies, on every turn."""
    names = sorted((FIXTURES / "clients").glob("claude-code-2.1.197-default-turn*.request.json"))
    if not names:
        pytest.skip("Claude Code 2.1.197 recordings not available (../shared/fixtures/real)")
    assert len(names) == 3
    route = kiro_route(client="anthropic", path="*/v1/messages")
    ids = set()
    for path in names:
        rec = json.loads(path.read_text())
        session = json.loads(rec["body"]["metadata"]["user_id"])["session_id"]
        headers = {k.lower(): v for k, v in rec["headers"].items()}
        d = rewrite(rec["body"], route, path=rec["path"], headers=headers)
        ids.add(d.wire.body["conversationState"]["conversationId"])
    assert ids == {session}
