"""Capture (``addon.stream.capture``) and restore (``addon.transforms.restore``).

Real recordings (``../shared/fixtures/real``: Gemini API / Vertex / Gemini CLI's scripted
answers, Anthropic, DeepSeek / Grok / OpenCode's OpenAI-compatible streams, Codex's Responses
answers) go through each upstream dialect's stream decoder in a ``StreamProcessor`` with the
capture stage; then a client that dropped everything (Cursor's OpenAI shape, Claude Code's
Anthropic shape without thinking) sends the conversation back, the request is restored and
encoded for that upstream, and the upstream body must hold exactly what the upstream sent —
checked against the recording's own bytes, read independently here. Whole answers are
captured the same way. Then: a property test that restore never attaches a value captured
under another scope; Gemini's sentinel agreeing with the encoder; the seed's signature rules;
the thinking policy; failures that must not hurt.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects import DIALECTS
from addon.dialects.gemini import parts as gemini_parts
from addon.dialects.gemini.response import CALL_SIGNATURE
from addon.model import (
    JSON,
    Event,
    Finish,
    Message,
    MessageStart,
    ReasoningStyle,
    Request,
    StreamEnd,
    Text,
    TextDelta,
    Thinking,
    ThinkingConfig,
    ThinkingDelta,
    ToolCall,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
)
from addon.stores.reasoning import ReasoningStore, Scope, ScopedStore
from addon.stream.capture import CaptureStage, TurnRecorder, capture_response, merge_details
from addon.stream.output import join_runs
from addon.stream.processor import StreamProcessor
from addon.transforms.reasoning_record import (
    KIND_CALL,
    KIND_LATEST,
    KIND_TEXT,
    KIND_THINKING,
    Record,
    text_key,
)
from addon.transforms.restore import (
    GEMINI_SIGNATURE,
    MIN_SIGNATURE,
    SKIP_NOTE,
    SKIP_SIGNATURE,
    apply_signature_rules,
    needs_signed_thinking,
    restore_reasoning,
    restore_request,
    signature_valid,
)
from addon.transforms.thinking_policy import (
    apply_default_thinking,
    check_thinking_history,
    model_supports_thinking,
    thinking_on_by_default,
)
from tests.realdata import FIXTURES

SCOPE = Scope("route@upstream.example", "test-model")
LONG = "S" * MIN_SIGNATURE
"""A signature the seed's rule accepts."""


# --------------------------------------------------------------------------- recordings


def _read(name: str) -> str:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"recording {name} not available")
    return path.read_text(encoding="utf-8")


def streams(name: str) -> list[list[str]]:
    """The recording's answers, each as the JSON texts of its events (gemini-cli's recorded
    sessions hold one answer per ``generateContentStream`` line; other files one answer)."""
    text = _read(name)
    if name.endswith(".sse"):
        return [
            [
                line[len("data: ") :]
                for line in text.splitlines()
                if line.startswith("data: ") and line != "data: [DONE]"
            ]
        ]
    if name.endswith(".responses"):
        return [
            [json.dumps(chunk) for chunk in turn["response"]]
            for line in text.splitlines()
            if line.strip() and (turn := json.loads(line))["method"] == "generateContentStream"
        ]
    if name.startswith("antigravity-"):
        return [re.findall(r"^\s*'data: (.*)',?$", text, re.M)]
    return [[line for line in text.splitlines() if line.strip()]]


def payloads(name: str) -> list[str]:
    """The JSON texts of a recording's events (all its answers, in order)."""
    return [d for answer in streams(name) for d in answer]


def sse(datas: list[str]) -> bytes:
    return b"".join(f"data: {d}\n\n".encode() for d in datas)


class Collect:
    """A stage after capture: what reached the rest of the pipeline."""

    text_lane = None

    def __init__(self) -> None:
        self.events: list[Event] = []

    def feed(self, event: Event) -> list[Event]:
        self.events.append(event)
        return [event]

    def finish(self) -> list[Event]:
        return []


def style(dialect: str) -> ReasoningStyle:
    """The reasoning style of a dialect, as the plan passes it down (``Dialect.reasoning``)."""
    return DIALECTS[dialect].reasoning


def capture(
    upstream: str, datas: list[str], store: ReasoningStore | None = None, scope: Scope = SCOPE
) -> tuple[ScopedStore, list[Event]]:
    store = store if store is not None else ReasoningStore()
    view = store.scoped(scope)
    stage, seen = CaptureStage(view, style(upstream)), Collect()
    proc = StreamProcessor(
        DIALECTS[upstream].stream_decoder(),
        DIALECTS["openai_chat"].stream_encoder(),
        stages=[stage, seen],
    )
    raw = sse(datas)
    for i in range(0, len(raw), 997):  # split anywhere
        proc.feed(raw[i : i + 997])
    proc.finish()
    assert proc.error is None, proc.error
    assert stage.error is None, stage.error
    return view, seen.events


def turns_of(events: list[Event]) -> list[list[tuple[str, str, str]]]:
    """Each answer (a new ``MessageStart`` starts one) as its calls ``(id, name, arguments)``."""
    turns: list[list[tuple[str, str, str]]] = []
    args: dict[int, list[str]] = {}
    meta: dict[int, tuple[str, str]] = {}
    for e in events:
        if isinstance(e, MessageStart):
            for index, (call_id, name) in meta.items():  # a call never ended (a spliced stream)
                turns[-1].append((call_id, name, "".join(args[index]) or "{}"))
            turns.append([])
            args, meta = {}, {}
        elif isinstance(e, ToolCallStart):
            meta[e.index], args[e.index] = (e.id, e.name), [e.arguments]
        elif isinstance(e, ToolCallArgsDelta):
            args[e.index].append(e.delta)
        elif isinstance(e, ToolCallEnd) and e.index in meta:
            call_id, name = meta.pop(e.index)
            turns[-1].append((call_id, name, "".join(args.pop(e.index)) or "{}"))
    for index, (call_id, name) in meta.items():  # a call never ended (a spliced stream)
        turns[-1].append((call_id, name, "".join(args[index]) or "{}"))
    return turns


def visible_text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def cursor_request(
    turns: list[list[tuple[str, str, str]]], model: str, text: str | None = None
) -> Request:
    """Cursor's OpenAI body for the conversation so far: the calls, no reasoning, no extras."""
    messages: list[JSON] = [{"role": "user", "content": "Please do the task."}]
    for calls in turns:
        if not calls:
            continue
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in calls
                ],
            }
        )
        messages += [
            {"role": "tool", "tool_call_id": i, "name": n, "content": "ok"} for i, n, _ in calls
        ]
    if text is not None:
        messages.append({"role": "assistant", "content": text})
    messages.append({"role": "user", "content": "Go on."})
    body = {"model": model, "messages": messages, "stream": True}
    return DIALECTS["openai_chat"].decode_request(body, Counter())


def claude_request(calls: list[tuple[str, str, str]], model: str) -> Request:
    """Claude Code's body, its thinking blocks lost (another client, an edited history)."""
    body = {
        "model": model,
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [
            {"role": "user", "content": "Please do the task."},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)}
                    for i, n, a in calls
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": "ok"} for i, _, _ in calls
                ],
            },
        ],
    }
    return DIALECTS["anthropic"].decode_request(body, Counter())


def encode(req: Request, upstream: str) -> JSON:
    return DIALECTS[upstream].encode_request(req, Counter())


def thinking_on(req: Request) -> Request:
    return dataclasses.replace(req, thinking=ThinkingConfig(True, 2048))


# --------------------------------------------------------------------------- what was sent


def gemini_expected(datas: list[str]) -> list[list[str | None]]:
    """Per answer, each function call's signature as the wire gave it (a signed thought or text
    part before an unsigned call lends it its signature, as Gemini's request encoder does)."""
    answers: list[list[str | None]] = []
    last_id: str | None = None
    pending: str | None = None
    for data in datas:
        chunk = json.loads(data)
        for item in chunk if isinstance(chunk, list) else [chunk]:
            inner = item.get("response", item)
            rid = inner.get("responseId")
            if not answers or (rid is not None and rid != last_id and last_id is not None):
                answers.append([])
                pending = None
            last_id = rid if rid is not None else last_id
            for cand in inner.get("candidates") or []:
                for part in (cand.get("content") or {}).get("parts") or []:
                    sig = part.get("thoughtSignature")
                    fc = part.get("functionCall")
                    if isinstance(fc, dict) and fc.get("name"):
                        answers[-1].append(sig or pending)
                        pending = None
                    elif isinstance(fc, dict):
                        if sig and answers[-1] and answers[-1][-1] is None:
                            answers[-1][-1] = sig
                    elif sig:
                        pending = sig
    return answers


def anthropic_expected(datas: list[str]) -> list[list[JSON]]:
    """Per message, its thinking / redacted_thinking blocks as the wire gave them."""
    messages: list[list[JSON]] = []
    blocks: dict[int, JSON] = {}
    for data in datas:
        ev = json.loads(data)
        match ev.get("type"):
            case "message_start":
                messages.append([])
                blocks = {}
            case "content_block_start":
                block = ev["content_block"]
                if block["type"] == "thinking":
                    b = {"type": "thinking", "thinking": block.get("thinking", "")}
                    if block.get("signature"):
                        b["signature"] = block["signature"]
                    blocks[ev["index"]] = b
                    messages[-1].append(b)
                elif block["type"] == "redacted_thinking":
                    messages[-1].append({"type": "redacted_thinking", "data": block["data"]})
            case "content_block_delta" if ev["index"] in blocks:
                delta, b = ev["delta"], blocks[ev["index"]]
                if delta["type"] == "thinking_delta":
                    b["thinking"] += delta["thinking"]
                elif delta["type"] == "signature_delta":
                    b["signature"] = b.get("signature", "") + delta["signature"]
    return messages


def chat_reasoning(datas: list[str]) -> str:
    out = []
    for data in datas:
        chunk = json.loads(data)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    out.append(delta[key])
    return "".join(out)


def responses_expected(datas: list[str]) -> list[JSON]:
    return [
        ev["item"]
        for data in datas
        if (ev := json.loads(data)).get("type") == "response.output_item.done"
        and ev["item"]["type"] == "reasoning"
    ]


GEMINI_CALLS = [
    "gemini-api-stream-functionCall-thoughtSignature-gemini3.vercel-ai.chunks.txt",
    "gemini-vertex-stream-thought-parts-parallel-functionCall-partialArgs.vercel-ai.chunks.txt",
    "gemini-vertex-stream-functionCall-partialArgs-2calls.vercel-ai.chunks.txt",
    "gemini-vertex-stream-functionCall-nested-partialArgs.vercel-ai.chunks.txt",
    "gemini-cli-recorded-stream-multiturn-thought-functionCall-thoughtSignature.gemini-cli.responses",
    "gemini-cli-recorded-stream-thought-functionCall.gemini-cli.responses",
    "gemini-cli-recorded-stream-shell-functionCall.gemini-cli.responses",
    "antigravity-v1internal-sse-functionCall-thoughtSignature-captured.unnamed-repo.ts.excerpt.txt",
    "clients/gemini-cli-0.61.0-default-turn1.response.sse",
    "clients/gemini-cli-0.61.0-default-turn2.response.sse",
]
ANTHROPIC_CALLS = [
    "clients/claude-code-2.1.197-default-turn1.response.sse",
    "clients/claude-code-2.1.197-default-turn2.response.sse",
    "clients/claude-code-2.1.197-sonnet-4-6-turn2.response.sse",
    "clients/ai-sdk-6.0.326-anthropic-turn1.response.sse",
    "clients/ai-sdk-6.0.326-anthropic-turn2.response.sse",
    "anthropic-messages-stream-thinking-signature-tool_use-spliced-EDGECASE.vercel-ai.chunks.txt",
]
CHAT_CALLS = [
    "openai-chat-stream-deepseek-reasoning_content-then-tool_calls.vercel-ai.chunks.txt",
    "openai-chat-stream-grok-reasoning_content-tool_call.vercel-ai.chunks.txt",
    "clients/opencode-1.18.33-openai-compatible-turn1.response.sse",
    "clients/opencode-1.18.33-openai-compatible-turn2.response.sse",
    "clients/ai-sdk-6.0.326-openai-compatible-turn2.response.sse",
]
RESPONSES_CALLS = [
    "clients/codex-0.169.0-responses-gpt-5.5-turn1.response.sse",
    "clients/codex-0.169.0-responses-gpt-5.5-turn2.response.sse",
]
EVERY = [
    (u, n)
    for u, names in (
        ("gemini", GEMINI_CALLS),
        ("anthropic", ANTHROPIC_CALLS),
        ("openai_chat", CHAT_CALLS),
        ("openai_responses", RESPONSES_CALLS),
    )
    for n in names
]


# --------------------------------------------------------------------------- the stage


@pytest.mark.parametrize(("upstream", "name"), EVERY)
def test_capture_passes_every_event_through_unchanged(upstream: str, name: str) -> None:
    datas = payloads(name)
    outs = []
    for stages in ([], [CaptureStage(ReasoningStore().scoped(SCOPE), style(upstream))]):
        for client in ("openai_chat", "anthropic"):
            proc = StreamProcessor(
                DIALECTS[upstream].stream_decoder(),
                DIALECTS[client].stream_encoder(),
                stages=stages,
            )
            outs.append(b"".join(proc.feed(sse(datas)) + proc.finish()))
    assert outs[0] == outs[2] and outs[1] == outs[3]
    _, seen = capture(upstream, datas)
    plain = Collect()
    proc = StreamProcessor(
        DIALECTS[upstream].stream_decoder(), DIALECTS["openai_chat"].stream_encoder(), [plain]
    )
    proc.feed(sse(datas))
    proc.finish()
    # Split anywhere, text that arrives together may go through the stages as one delta.
    assert joined(seen) == joined(plain.events)


def joined(events: list[Event]) -> list[Event]:
    """Runs of plain text (or thinking) deltas joined, as the processor may join them."""
    return join_runs(events)


def test_a_failing_store_never_touches_the_stream() -> None:
    class Broken:
        def put(self, kind: str, key: str, value: JSON) -> None:
            raise OSError("disk full")

    datas = payloads(ANTHROPIC_CALLS[1])
    stage, seen = CaptureStage(Broken(), style("anthropic")), Collect()
    proc = StreamProcessor(
        DIALECTS["anthropic"].stream_decoder(),
        DIALECTS["openai_chat"].stream_encoder(),
        stages=[stage, seen],
    )
    out = b"".join(proc.feed(sse(datas)) + proc.finish())
    assert proc.error is None and b"[DONE]" in out
    assert stage.error == "OSError: disk full"
    _, reference = capture("anthropic", datas)
    assert joined(seen.events) == joined(reference)
    assert stage.finish() == [] and stage.finish() == []


# --------------------------------------------------------------------------- Gemini


@pytest.mark.parametrize("name", GEMINI_CALLS)
def test_gemini_signatures_come_back_exactly_on_the_calls_that_had_them(name: str) -> None:
    """Every answer of the recording is captured (a session: one store), then the whole
    conversation comes back from a client that kept none of the signatures."""
    store = ReasoningStore()
    turns: list[list[tuple[str, str, str]]] = []
    expected: list[list[str | None]] = []
    for answer in streams(name):
        _, events = capture("gemini", answer, store=store)
        calls = [t for t in turns_of(events) if t]
        want = [e for e in gemini_expected(answer) if e]
        assert [len(t) for t in calls] == [len(e) for e in want]
        turns += calls
        expected += want
    assert turns, "a recording with function calls"
    req = cursor_request(turns, "gemini-3-pro-preview")
    notes: Counter[str] = Counter()
    restored = restore_reasoning(req, store.scoped(SCOPE), style("gemini"), notes)
    assistants = [m for m in restored.messages if m.role == "assistant"]
    got = [
        [p.extra.get(GEMINI_SIGNATURE) for p in m.parts if isinstance(p, ToolCall)]
        for m in assistants
    ]
    assert got == expected
    n = sum(s is not None for e in expected for s in e)
    assert notes == (Counter({"reasoning restored from the store by tool-call id": n}) if n else {})
    # On the wire: the signatures the upstream sent, where it put them.
    body = encode(restored, "gemini")
    model_turns = [c for c in body["contents"] if c["role"] == "model"]
    wire = [
        [p.get("thoughtSignature") for p in c["parts"] if "functionCall" in p] for c in model_turns
    ]
    for sent, step in zip(wire, expected, strict=True):
        if any(step):
            assert sent == step
        else:  # nothing known: nothing restored (today's encoder may mark the step itself)
            assert sent[1:] == [None] * (len(step) - 1) and sent[0] in (None, SKIP_SIGNATURE)


def test_gemini_parallel_siblings_get_nothing() -> None:
    name = GEMINI_CALLS[1]  # thought, then read_theme (signed) and three read_screen calls
    view, events = capture("gemini", payloads(name))
    (calls,) = [t for t in turns_of(events) if t]
    assert [n for _, n, _ in calls] == ["read_theme", "read_screen", "read_screen", "read_screen"]
    restored = restore_reasoning(
        cursor_request([calls], "gemini-3-flash"), view, style("gemini"), Counter()
    )
    (msg,) = [m for m in restored.messages if m.role == "assistant"]
    sigs = [p.extra.get(GEMINI_SIGNATURE) for p in msg.parts if isinstance(p, ToolCall)]
    assert sigs[0] is not None and sigs[0].startswith("AY89a18a8")
    assert sigs[1:] == [None, None, None]


def test_gemini_for_a_claude_code_client_that_dropped_its_thinking() -> None:
    name = "clients/gemini-cli-0.61.0-default-turn2.response.sse"
    datas = payloads(name)
    view, events = capture("gemini", datas)
    (calls,) = [t for t in turns_of(events) if t]
    req = claude_request(calls, "gemini-3-pro-preview")
    body = encode(restore_reasoning(req, view, style("gemini"), Counter()), "gemini")
    (model,) = [c for c in body["contents"] if c["role"] == "model"]
    assert [p.get("thoughtSignature") for p in model["parts"]] == gemini_expected(datas)[0]


def test_gemini_text_turn_gets_its_trailing_signature_back() -> None:
    name = "gemini-api-stream-text-trailing-thoughtSignature-gemini3.vercel-ai.chunks.txt"
    datas = payloads(name)
    view, events = capture("gemini", datas)
    text = visible_text(events)
    assert text
    (want,) = _trailing(datas)
    req = cursor_request([], "gemini-3-pro-preview", text=text)
    notes: Counter[str] = Counter()
    body = encode(restore_reasoning(req, view, style("gemini"), notes), "gemini")
    assert notes == {"reasoning restored from the store by text hash": 1}
    (model,) = [c for c in body["contents"] if c["role"] == "model"]
    assert model["parts"][-1] == {"text": "", "thoughtSignature": want}
    # A client that re-flowed the text still matches; another text does not.
    reflowed = cursor_request([], "gemini-3-pro-preview", text="  " + " \n".join(text.split()))
    assert restore_reasoning(reflowed, view, style("gemini"), Counter()) != reflowed
    other = cursor_request([], "gemini-3-pro-preview", text=text + " more")
    assert restore_reasoning(other, view, style("gemini"), Counter()) == other


def _trailing(datas: list[str]) -> list[str]:
    return [
        p["thoughtSignature"]
        for d in datas
        for c in json.loads(d).get("candidates") or []
        for p in (c.get("content") or {}).get("parts") or []
        if p.get("thoughtSignature")
    ]


def test_a_gemini_clients_own_request_is_left_alone() -> None:
    body = json.loads(_read("clients/gemini-cli-0.61.0-default-turn3.request.json"))["body"]
    req = DIALECTS["gemini"].decode_request(body, Counter())
    req = dataclasses.replace(req, model="gemini-3-pro-preview")
    store = ReasoningStore()
    view = store.scoped(SCOPE)
    for m in req.messages:
        for p in m.parts:
            if isinstance(p, ToolCall):
                view.put(KIND_CALL, p.id, Record(signature="X" * 80).to_json())
    notes: Counter[str] = Counter()
    restored = restore_reasoning(
        req, view, style("gemini"), notes, signature_fallback="sentinel", origin=style(req.origin)
    )
    assert restored is req
    assert notes == {}


def test_sentinel_only_when_the_route_allows_it_and_where_the_encoder_puts_it() -> None:
    calls = [[("c1", "read", "{}"), ("c2", "glob", "{}")], [("c3", "read", "{}")]]
    req = cursor_request(calls, "gemini-3-pro-preview")
    empty = ReasoningStore().scoped(SCOPE)
    assert restore_reasoning(req, empty, style("gemini"), Counter()) is req  # fallback "none"
    assert restore_reasoning(req, None, style("gemini"), Counter()) is req
    notes: Counter[str] = Counter()
    marked = restore_reasoning(req, empty, style("gemini"), notes, signature_fallback="sentinel")
    sigs = [
        [p.extra.get(GEMINI_SIGNATURE) for p in m.parts if isinstance(p, ToolCall)]
        for m in marked.messages
        if m.role == "assistant"
    ]
    assert sigs == [[SKIP_SIGNATURE, None], [SKIP_SIGNATURE]]
    assert notes == {SKIP_NOTE: 2}
    body = encode(marked, "gemini")
    wire = [
        [p.get("thoughtSignature") for p in c["parts"] if "functionCall" in p]
        for c in body["contents"]
        if c["role"] == "model"
    ]
    assert wire == [[SKIP_SIGNATURE, None], [SKIP_SIGNATURE]]
    # While the Gemini encoder still marks unsigned steps itself (it does not know the route's
    # choice), it marks the same calls with the same words: the two agree.
    enc_notes: Counter[str] = Counter()
    plain = DIALECTS["gemini"].encode_request(req, enc_notes)
    if enc_notes[SKIP_NOTE]:
        assert plain == body
        assert enc_notes[SKIP_NOTE] == 2
    # Gemini 1.x / 2.x check no signatures: no sentinel.
    old = dataclasses.replace(req, model="gemini-2.5-pro")
    assert (
        restore_reasoning(old, empty, style("gemini"), Counter(), signature_fallback="sentinel")
        is old
    )


def test_consecutive_assistant_messages_are_one_gemini_step() -> None:
    req = Request(
        "openai_chat",
        "gemini-3-pro-preview",
        (
            Message("user", (Text("go"),)),
            Message("assistant", (ToolCall("a", "f", "{}"),)),
            Message("assistant", (ToolCall("b", "g", "{}"),)),
            Message("tool", (ToolResult("a", "ok"),)),
            Message("tool", (ToolResult("b", "ok"),)),
        ),
    )
    marked = restore_reasoning(req, None, style("gemini"), Counter(), signature_fallback="sentinel")
    assert marked.messages[1].parts[0].extra == {GEMINI_SIGNATURE: SKIP_SIGNATURE}  # type: ignore[union-attr]
    assert marked.messages[2].parts[0].extra == {}  # type: ignore[union-attr]


def test_a_step_the_client_kept_signed_is_not_touched() -> None:
    view = ReasoningStore().scoped(SCOPE)
    view.put(KIND_CALL, "a", Record(signature="stored" * 20).to_json())
    own = Message("assistant", (ToolCall("a", "f", "{}", extra={GEMINI_SIGNATURE: "kept" * 20}),))
    carried = Message("assistant", (Thinking("", "thought" * 20), ToolCall("a", "f", "{}")))
    google = Message(
        "assistant",
        (
            ToolCall(
                "a", "f", "{}", extra={"extra_content": {"google": {"thought_signature": "g"}}}
            ),
        ),
    )
    for m in (own, carried, google):
        req = Request("anthropic", "gemini-3-pro-preview", (Message("user", (Text("x"),)), m))
        assert (
            restore_reasoning(req, view, style("gemini"), Counter(), signature_fallback="sentinel")
            is req
        )


# --------------------------------------------------------------------------- Anthropic


@pytest.mark.parametrize("name", ANTHROPIC_CALLS)
def test_anthropic_thinking_blocks_come_back_before_the_tool_use(name: str) -> None:
    datas = payloads(name)
    view, events = capture("anthropic", datas)
    turns = turns_of(events)
    expected = anthropic_expected(datas)
    assert len(turns) == len(expected)
    req = thinking_on(cursor_request(turns, "claude-sonnet-4-5"))
    notes: Counter[str] = Counter()
    body = encode(restore_reasoning(req, view, style("anthropic"), notes), "anthropic")
    assistants = [t for t in body["messages"] if t["role"] == "assistant"]
    assert len(assistants) == len([t for t in turns if t])
    for turn, calls, want in zip(assistants, [t for t in turns if t], expected, strict=False):
        blocks = turn["content"]
        assert blocks[: len(want)] == want
        assert [b["id"] for b in blocks[len(want) :]] == [i for i, _, _ in calls]
    assert notes == {"reasoning restored from the store by tool-call id": len(assistants)}
    assert body.get("thinking", {}).get("type") == "enabled"  # the tool loop has its thinking


def test_anthropic_restore_only_with_thinking_on() -> None:
    datas = payloads(ANTHROPIC_CALLS[1])
    view, events = capture("anthropic", datas)
    req = cursor_request(turns_of(events), "claude-sonnet-4-5")  # no thinking asked for
    assert restore_reasoning(req, view, style("anthropic"), Counter()) is req


def test_anthropic_text_turn_by_text_hash() -> None:
    name = "anthropic-messages-stream-thinking-signature-text.vercel-ai.chunks.txt"
    datas = payloads(name)
    view, events = capture("anthropic", datas)
    (want,) = anthropic_expected(datas)
    req = thinking_on(cursor_request([], "claude-sonnet-4-5", text=visible_text(events)))
    notes: Counter[str] = Counter()
    body = encode(restore_reasoning(req, view, style("anthropic"), notes), "anthropic")
    (turn,) = [t for t in body["messages"] if t["role"] == "assistant"]
    assert turn["content"][: len(want)] == want
    assert notes == {"reasoning restored from the store by text hash": 1}


def test_anthropic_redacted_thinking_comes_back_whole() -> None:
    events = [
        {"type": "message_start", "message": {"id": "m", "model": "claude-opus-4-5", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Plan."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": LONG}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"p\": 1}"}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]  # fmt: skip
    datas = [json.dumps(e) for e in events]
    view, seen = capture("anthropic", datas)
    req = thinking_on(claude_request(turns_of(seen)[0], "claude-opus-4-5"))
    body = encode(restore_reasoning(req, view, style("anthropic"), Counter()), "anthropic")
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Plan.", "signature": LONG},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": 1}},
    ]


def test_a_client_that_kept_its_thinking_gets_nothing_added() -> None:
    datas = payloads(ANTHROPIC_CALLS[1])
    view, events = capture("anthropic", datas)
    req = thinking_on(cursor_request(turns_of(events), "claude-sonnet-4-5"))
    kept = dataclasses.replace(
        req,
        messages=tuple(
            dataclasses.replace(m, parts=(Thinking("mine", LONG), *m.parts))
            if m.role == "assistant"
            else m
            for m in req.messages
        ),
    )
    assert restore_reasoning(kept, view, style("anthropic"), Counter()) is kept


# --------------------------------------------------------------------------- OpenAI-compatible


@pytest.mark.parametrize("name", CHAT_CALLS)
def test_reasoning_content_comes_back_on_tool_call_turns(name: str) -> None:
    datas = payloads(name)
    view, events = capture("openai_chat", datas)
    turns = turns_of(events)
    want = chat_reasoning(datas)
    assert want
    req = cursor_request(turns, "deepseek-reasoner", text=None)
    notes: Counter[str] = Counter()
    body = encode(restore_reasoning(req, view, style("openai_chat"), notes), "openai_chat")
    (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == want
    assert [c["id"] for c in assistant["tool_calls"]] == [i for i, _, _ in turns[0]]
    assert notes == {"reasoning restored from the store by tool-call id": 1}


def test_reasoning_content_is_not_put_on_text_turns() -> None:
    name = "openai-chat-stream-deepseek-reasoning_content-text.vercel-ai.chunks.txt"
    view, events = capture("openai_chat", payloads(name))
    req = cursor_request([], "deepseek-reasoner", text=visible_text(events))
    assert restore_reasoning(req, view, style("openai_chat"), Counter()) is req


def test_openrouter_reasoning_details_and_googles_call_signature() -> None:
    def chunk(delta: JSON, finish: str | None = None) -> str:
        return json.dumps(
            {
                "id": "gen-1",
                "object": "chat.completion.chunk",
                "model": "google/gemini-3-pro-preview",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    detail = {"type": "reasoning.text", "format": "google-gemini-v1", "index": 0}
    google = {"google": {"thought_signature": "GSIG" * 20}}
    datas = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning": "Think ", "reasoning_details": [{**detail, "text": "Think "}]}),
        chunk({"reasoning_details": [{**detail, "text": "hard."}]}),  # details only: a RawEvent
        chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "ENC", "index": 1}]}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "tool_1",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                        "extra_content": google,
                    }
                ]
            }
        ),
        chunk({}, "tool_calls"),
        "[DONE]",
    ]
    view, events = capture("openai_chat", datas)
    req = cursor_request(turns_of(events), "google/gemini-3-pro-preview")
    notes: Counter[str] = Counter()
    body = encode(restore_reasoning(req, view, style("openai_chat"), notes), "openai_chat")
    (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "Think "
    assert assistant["reasoning_details"] == [
        {**detail, "text": "Think hard."},
        {"type": "reasoning.encrypted", "data": "ENC", "index": 1},
    ]
    assert assistant["tool_calls"][0]["extra_content"] == google
    assert notes == {"reasoning restored from the store by tool-call id": 2}


def test_merge_details() -> None:
    acc: list[JSON] = []
    merge_details(acc, [{"type": "t", "index": 0, "text": "a", "signature": None}])
    merge_details(acc, [{"type": "t", "index": 0, "text": "b", "signature": "s"}, "junk"])
    merge_details(acc, [{"type": "e", "data": "x"}, {"type": "e", "data": "y"}])  # no index
    assert acc == [
        {"type": "t", "index": 0, "text": "ab", "signature": "s"},
        {"type": "e", "data": "x"},
        {"type": "e", "data": "y"},
    ]


# --------------------------------------------------------------------------- Responses


@pytest.mark.parametrize("name", RESPONSES_CALLS)
def test_responses_reasoning_items_come_back_with_their_encrypted_content(name: str) -> None:
    datas = payloads(name)
    view, events = capture("openai_responses", datas)
    turns = turns_of(events)
    (item,) = responses_expected(datas)
    req = cursor_request(turns, "gpt-5.5")
    notes: Counter[str] = Counter()
    body = encode(
        restore_reasoning(req, view, style("openai_responses"), notes), "openai_responses"
    )
    kinds = [i.get("type") for i in body["input"]]
    at = kinds.index("reasoning")
    assert body["input"][at] == item  # the item as the upstream sent it, encrypted_content too
    assert kinds[at + 1 : at + 1 + len(turns[0])] == ["function_call"] * len(turns[0])
    assert notes == {"reasoning restored from the store by tool-call id": 1}


# --------------------------------------------------------------------------- whole answers


def _whole(upstream: str, body: JSON) -> ScopedStore:
    view = ReasoningStore().scoped(SCOPE)
    capture_response(DIALECTS[upstream].decode_response(body), view, style(upstream))
    return view


def test_whole_anthropic_answer() -> None:
    blocks = [
        {"type": "thinking", "thinking": "Plan it.", "signature": LONG},
        {"type": "redacted_thinking", "data": "REDACTED-DATA"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"p": 1}},
        {"type": "tool_use", "id": "toolu_b", "name": "glob", "input": {}},
    ]
    view = _whole(
        "anthropic",
        {"id": "msg", "type": "message", "role": "assistant", "model": "claude-opus-4-5",
         "content": blocks, "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}},
    )  # fmt: skip
    calls = [("toolu_a", "read", '{"p": 1}'), ("toolu_b", "glob", "{}")]
    req = thinking_on(cursor_request([calls], "claude-opus-4-5"))
    body = encode(restore_reasoning(req, view, style("anthropic"), Counter()), "anthropic")
    content = body["messages"][1]["content"]
    assert content[:2] == blocks[:2]
    assert [b["type"] for b in content[2:]] == ["tool_use", "tool_use"]
    assert view.get(KIND_THINKING, text_key("Plan it.")) == {"signature": LONG}
    assert view.get(KIND_LATEST, "") == {"signature": LONG}


def test_whole_gemini_answer() -> None:
    sig = "G" * 120
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Thinking about it.", "thought": True},
                        {"functionCall": {"name": "read", "args": {}}, "thoughtSignature": sig},
                        {"functionCall": {"name": "glob", "args": {"p": "*"}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "responseId": "resp-w",
    }
    view = _whole("gemini", body)
    answer = DIALECTS["gemini"].decode_response(body)
    calls = [(p.id, p.name, p.arguments) for p in answer.parts if isinstance(p, ToolCall)]
    req = cursor_request([calls], "gemini-3-pro-preview")
    out = encode(restore_reasoning(req, view, style("gemini"), Counter()), "gemini")
    (model,) = [c for c in out["contents"] if c["role"] == "model"]
    assert [p.get("thoughtSignature") for p in model["parts"]] == [sig, None]


def test_whole_gemini_text_answer_trailing_signature() -> None:
    sig = "T" * 80
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"text": "The answer is 4."}, {"text": "", "thoughtSignature": sig}],
                },
                "finishReason": "STOP",
            }
        ]
    }
    view = _whole("gemini", body)
    req = cursor_request([], "gemini-3-pro-preview", text="The answer is 4.")
    out = encode(restore_reasoning(req, view, style("gemini"), Counter()), "gemini")
    (model,) = [c for c in out["contents"] if c["role"] == "model"]
    assert model["parts"] == [{"text": "The answer is 4."}, {"text": "", "thoughtSignature": sig}]


def test_whole_deepseek_and_openrouter_answers() -> None:
    call = {"id": "call_w", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    for message, want in (
        ({"reasoning_content": "Because."}, {"reasoning_content": "Because."}),
        (
            {"reasoning": "Because.", "reasoning_details": [{"type": "reasoning.text", "text": "B"}]},
            {"reasoning_content": "Because.", "reasoning_details": [{"type": "reasoning.text", "text": "B"}]},
        ),
    ):  # fmt: skip
        body = {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [call],
                        **message,
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }
        view = _whole("openai_chat", body)
        req = cursor_request([[("call_w", "read", "{}")]], "deepseek-reasoner")
        out = encode(restore_reasoning(req, view, style("openai_chat"), Counter()), "openai_chat")
        (assistant,) = [m for m in out["messages"] if m["role"] == "assistant"]
        assert {k: assistant[k] for k in want} == want


def test_whole_responses_answer() -> None:
    item = {
        "type": "reasoning",
        "id": "rs_w",
        "summary": [{"type": "summary_text", "text": "Plan."}],
        "encrypted_content": "gAAAA-encrypted",
    }
    body = {
        "id": "resp_w",
        "object": "response",
        "status": "completed",
        "model": "gpt-5",
        "output": [
            item,
            {"type": "function_call", "id": "fc_w", "call_id": "call_w", "name": "read", "arguments": "{}"},
        ],
    }  # fmt: skip
    view = _whole("openai_responses", body)
    req = cursor_request([[("call_w", "read", "{}")]], "gpt-5")
    out = encode(
        restore_reasoning(req, view, style("openai_responses"), Counter()), "openai_responses"
    )
    assert [i for i in out["input"] if i.get("type") == "reasoning"] == [item]


def test_stream_and_whole_capture_write_the_same_records() -> None:
    datas = payloads("clients/claude-code-2.1.197-default-turn2.response.sse")
    streamed, events = capture("anthropic", datas)
    (blocks,) = anthropic_expected(datas)
    (calls,) = turns_of(events)
    body = {
        "id": "msg_rec_turn2",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-8",
        "content": [
            *blocks,
            *(
                {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)}
                for i, n, a in calls
            ),
        ],
        "stop_reason": "tool_use",
    }
    whole = _whole("anthropic", body)
    for i, _, _ in calls:
        assert streamed.get(KIND_CALL, i) == whole.get(KIND_CALL, i) is not None


# --------------------------------------------------------------------------- scopes


MARKERS = st.sampled_from(["a", "b", "c"])


@settings(max_examples=60, deadline=None)
@given(
    captures=st.lists(
        st.tuples(
            st.integers(0, 3),  # scope
            st.sampled_from(["gemini", "anthropic", "openai_chat", "openai_responses"]),
            st.sampled_from(["call_1", "call_2", "call_3"]),
            st.booleans(),  # a text turn instead of a call
        ),
        max_size=12,
    ),
    target=st.integers(0, 3),
    upstream=st.sampled_from(["gemini", "anthropic", "openai_chat", "openai_responses"]),
    fallback=st.sampled_from(["none", "sentinel"]),
)
def test_restore_never_attaches_a_value_of_another_scope(
    captures: list[tuple[int, str, str, bool]], target: int, upstream: str, fallback: Any
) -> None:
    scopes = [
        Scope("r1@host-a", "model-x"),
        Scope("r1@host-a", "model-y"),  # same upstream, another model
        Scope("r2@host-b", "model-x"),  # another upstream, same model
        Scope("r1@host-a", "model-x "),  # not the same model name either
    ]
    store = ReasoningStore()
    for n, (s, origin, call_id, text_turn) in enumerate(captures):
        mark = f"<scope{s}:{n}>" + "x" * MIN_SIGNATURE
        turn = TurnRecorder()
        turn.start(style(origin))
        extra: JSON = (
            {"openai_responses": {"id": f"rs{n}", "type": "reasoning"}}
            if origin == "openai_responses"
            else {}
        )
        turn.thinking(f"thinking {mark}", mark, extra)
        if text_turn:
            turn.text("the same visible text")
        else:
            turn.call(call_id, {GEMINI_SIGNATURE: mark} if origin == "gemini" else {})
        turn.flush(store.scoped(scopes[s]))
    messages = [Message("user", (Text("go"),))]
    for call_id in ("call_1", "call_2", "call_3"):
        messages += [
            Message("assistant", (Text("calling"), ToolCall(call_id, "f", "{}"))),
            Message("tool", (ToolResult(call_id, "ok"),)),
        ]
    messages += [
        Message("assistant", (Text("the same visible text"),)),
        Message("user", (Thinking("thinking <scope9:0>" + "x" * 10),)),
    ]
    req = Request("openai_chat", scopes[target].model, tuple(messages), thinking=ThinkingConfig())
    restored = restore_request(
        req, store.scoped(scopes[target]), upstream, Counter(), signature_fallback=fallback
    )
    values = json.dumps(
        [dataclasses.asdict(m) for m in restored.messages], default=str, ensure_ascii=False
    )
    found = set(re.findall(r"<scope(\d):\d+>", values))
    assert found <= {str(target), "9"}
    if not any(s == target for s, *_ in captures):
        # Nothing of this scope: nothing attached but the sentinel.
        assert values.count("x" * MIN_SIGNATURE) == 0


def test_scope_isolation_on_a_real_recording() -> None:
    name = "clients/gemini-cli-0.61.0-default-turn2.response.sse"
    store = ReasoningStore()
    view, events = capture("gemini", payloads(name), store=store)
    req = cursor_request([t for t in turns_of(events) if t], "gemini-3-pro-preview")
    for other in (Scope(SCOPE.upstream, "gemini-3-flash"), Scope("other@host", SCOPE.model)):
        assert restore_reasoning(req, store.scoped(other), style("gemini"), Counter()) is req
    assert restore_reasoning(req, view, style("gemini"), Counter()) is not req


# --------------------------------------------------------------------------- signature rules


def test_signature_validity() -> None:
    assert signature_valid(Thinking("text", "s" * 50))
    assert not signature_valid(Thinking("text", "s" * 49))
    assert not signature_valid(Thinking("text", None))
    assert signature_valid(Thinking("", "short"))  # a trailing signature
    assert not signature_valid(Thinking("", None))
    assert signature_valid(Thinking("data", redacted=True))
    assert not signature_valid(Thinking("", redacted=True))


def _rules(
    parts: tuple[Any, ...], view: ScopedStore | None
) -> tuple[tuple[Any, ...], Counter[str]]:
    req = Request(
        "openai_chat",
        "claude-sonnet-4-5",
        (Message("user", (Text("q"),)), Message("assistant", parts)),
    )
    notes: Counter[str] = Counter()
    out = apply_signature_rules(req, view, notes)
    return out.messages[1].parts, notes


def test_rules_keep_valid_blocks_and_drop_empty_ones() -> None:
    parts = (Thinking("ok", LONG), Thinking("", "trailing"), Text("answer"))
    assert _rules(parts, None) == (parts, Counter())
    out, notes = _rules((Thinking(""), Text("answer")), None)
    assert out == (Text("answer"),)
    assert notes == {"empty thinking block without a signature dropped": 1}


def test_rules_repair_by_tool_call_id_first() -> None:
    view = ReasoningStore().scoped(SCOPE)
    stored = (Thinking("the real thinking", LONG), Thinking("RED", redacted=True))
    view.put(KIND_CALL, "call_9", Record(stored).to_json())
    view.put(KIND_THINKING, text_key("cut thinking"), {"signature": "by-hash" * 10})
    out, notes = _rules(
        (Text("hi"), Thinking("cut thinking", "short"), ToolCall("call_9", "f", "{}")), view
    )
    assert out == (Text("hi"), *stored, ToolCall("call_9", "f", "{}"))
    assert notes == {"thinking signature repaired from the store by tool-call id": 1}


def test_rules_repair_by_thinking_hash_then_text_hash_then_latest() -> None:
    view = ReasoningStore().scoped(SCOPE)
    view.put(KIND_THINKING, text_key("known thinking"), {"signature": "H" * 60})
    out, notes = _rules((Thinking(" known\nthinking ", None), Text("t")), view)
    assert out == (Thinking(" known\nthinking ", "H" * 60), Text("t"))
    assert notes == {"thinking signature repaired from the store by thinking hash": 1}
    view.put(KIND_TEXT, text_key("visible"), Record((Thinking("orig", "O" * 60),)).to_json())
    out, notes = _rules((Thinking("changed", "x"), Text("visible")), view)
    assert out == (Thinking("orig", "O" * 60), Text("visible"))
    assert notes == {"thinking signature repaired from the store by text hash": 1}
    view.put(KIND_LATEST, "", {"signature": "L" * 70})
    out, notes = _rules((Thinking("unknown"), ToolCall("nope", "f", "{}")), view)
    assert out == (Thinking("unknown", "L" * 70), ToolCall("nope", "f", "{}"))
    assert notes == {"thinking signature repaired from the store by latest signature": 1}


def test_rules_turn_unrepairable_thinking_into_text() -> None:
    out, notes = _rules(
        (Thinking("lost", "short"), ToolCall("c", "f", "{}")), ReasoningStore().scoped(SCOPE)
    )
    assert out == (Text("lost"), ToolCall("c", "f", "{}"))
    assert notes == {"thinking without a valid signature sent as text": 1}


def test_rules_only_where_signatures_are_checked() -> None:
    assert needs_signed_thinking(style("anthropic"), "anything")
    assert needs_signed_thinking(style("gemini_code_assist"), "claude-sonnet-4-5-thinking")
    assert not needs_signed_thinking(style("gemini"), "gemini-3-pro-preview")
    assert not needs_signed_thinking(style("openai_chat"), "claude-sonnet-4-5")
    req = Request(
        "openai_chat",
        "deepseek-reasoner",
        (Message("assistant", (Thinking("plain reasoning"), ToolCall("c", "f", "{}"))),),
    )
    assert restore_request(req, None, style("openai_chat"), Counter()) is req


def test_latest_signature_is_only_a_valid_one() -> None:
    view = ReasoningStore().scoped(SCOPE)
    turn = TurnRecorder()
    turn.start(style("anthropic"))
    turn.thinking("t", "short-sig", {})
    turn.call("c", {})
    turn.flush(view)
    assert view.get(KIND_LATEST, "") is None
    assert view.get(KIND_THINKING, text_key("t")) == {"signature": "short-sig"}


# --------------------------------------------------------------------------- thinking policy


@pytest.mark.parametrize(
    ("model", "supports", "default"),
    [
        ("claude-sonnet-4-5", True, False),
        ("claude-opus-4-5", True, True),
        ("claude-opus-4-5-20251101", True, True),
        ("anthropic/claude-opus-4.5", True, True),
        ("us.anthropic.claude-opus-4-5-20251101-v1:0", True, True),
        ("claude-opus-4-50", True, False),
        ("claude-opus-4-1", True, False),
        ("claude-sonnet-4-5-thinking", True, True),
        ("gemini-3-pro-preview", True, False),
        ("models/gemini-3-pro", True, False),
        ("gemini-3-flash", False, False),
        ("gemini-2.5-flash-thinking", True, True),
        ("deepseek-reasoner", False, False),
        ("gpt-5", False, False),
        ("not-claude-x", False, False),
    ],
)
def test_model_lists(model: str, supports: bool, default: bool) -> None:
    assert model_supports_thinking(model) is supports
    assert thinking_on_by_default(model) is default


def test_default_thinking_and_budget() -> None:
    req = Request("openai_chat", "claude-opus-4-5", (Message("user", (Text("q"),)),))
    notes: Counter[str] = Counter()
    on = apply_default_thinking(req, notes, budget=4096)
    assert on.thinking == ThinkingConfig(True, 4096)
    assert notes == {"thinking on by default for claude-opus-4-5": 1}
    other = dataclasses.replace(req, model="claude-sonnet-4-5")
    assert apply_default_thinking(other, Counter(), budget=4096) is other
    asked = dataclasses.replace(other, thinking=ThinkingConfig(True))
    assert apply_default_thinking(asked, Counter(), budget=4096).thinking == ThinkingConfig(
        True, 4096
    )
    adaptive = dataclasses.replace(other, thinking=ThinkingConfig(True, adaptive=True))
    assert apply_default_thinking(adaptive, Counter(), budget=4096) is adaptive
    off = dataclasses.replace(req, thinking=ThinkingConfig(False))
    assert apply_default_thinking(off, Counter(), budget=4096) is off


def test_thinking_policy_model_list_and_the_routes_override() -> None:
    """On an upstream that checks thinking, a model the seed's list does not know to think gets
    no thinking request (``auto``); a route's ``reasoning = "on"`` sends it, and turns it on by
    default for any model."""
    asked = Request(
        "anthropic",
        "my-gateway-alias",
        (Message("user", (Text("q"),)),),
        thinking=ThinkingConfig(True, 2048),
    )
    notes: Counter[str] = Counter()
    dropped = restore_request(asked, None, style("anthropic"), notes)
    assert dropped.thinking is None
    assert notes == {"thinking not sent: my-gateway-alias is not known to think": 1}
    kept = restore_request(asked, None, style("anthropic"), Counter(), policy="on")
    assert kept.thinking == ThinkingConfig(True, 2048)
    for model in ("claude-sonnet-4-5", "gemini-3-pro-preview", "gpt-5-thinking"):
        same = dataclasses.replace(asked, model=model)
        assert restore_request(same, None, style("anthropic"), Counter()).thinking == asked.thinking
    # Another upstream (its own reasoning switch): the list does not decide there.
    assert restore_request(asked, None, style("openai_chat"), Counter()).thinking == asked.thinking
    # Default thinking: only listed models in auto, every model with the route's "on".
    silent = dataclasses.replace(asked, thinking=None)
    assert restore_request(silent, None, style("openai_chat"), Counter()).thinking is None
    on = restore_request(
        silent, None, style("openai_chat"), Counter(), policy="on", thinking_budget=1024
    )
    assert on.thinking == ThinkingConfig(True, 1024)


def test_history_check() -> None:
    def req(*assistant: Any) -> Request:
        return Request(
            "openai_chat",
            "claude-sonnet-4-5",
            (
                Message("user", (Text("q"),)),
                Message("assistant", (Thinking("old", LONG), ToolCall("a", "f", "{}"))),
                Message("tool", (ToolResult("a", "ok"),)),
                *(Message("assistant", tuple(p)) for p in assistant),
                Message("tool", (ToolResult("b", "ok"),)),
            ),
            thinking=ThinkingConfig(True, 2048),
        )

    notes: Counter[str] = Counter()
    without = check_thinking_history(req([ToolCall("b", "f", "{}")]), notes)
    assert without.thinking is None
    assert notes == {"thinking off: the last assistant turn used tools without thinking": 1}
    with_thinking = req([Thinking("t", LONG)], [ToolCall("b", "f", "{}")])  # one turn, 2 messages
    assert check_thinking_history(with_thinking, Counter()) is with_thinking
    text_only = req([Text("done")])
    assert check_thinking_history(text_only, Counter()) is text_only


def test_restore_request_puts_it_together() -> None:
    datas = payloads(ANTHROPIC_CALLS[1])
    view, events = capture("anthropic", datas)
    turns = turns_of(events)
    req = cursor_request(turns, "claude-opus-4-5")  # thinking on by default for Opus 4.5
    notes: Counter[str] = Counter()
    out = restore_request(req, view, style("anthropic"), notes, thinking_budget=3000)
    assert out.thinking == ThinkingConfig(True, 3000)
    assert isinstance(out.messages[1].parts[0], Thinking)
    assert notes == {
        "thinking on by default for claude-opus-4-5": 1,
        "reasoning restored from the store by tool-call id": 1,
    }
    # Nothing in the store: the tool turn has no thinking, so thinking goes off.
    notes = Counter()
    out = restore_request(req, ReasoningStore().scoped(SCOPE), style("anthropic"), notes)
    assert out.thinking is None
    assert notes == {
        "thinking on by default for claude-opus-4-5": 1,
        "thinking off: the last assistant turn used tools without thinking": 1,
    }
    # A route with reasoning off: no default.
    assert (
        restore_request(req, view, style("anthropic"), Counter(), default_thinking=False).thinking
        is None
    )


def test_a_broken_store_is_noted_and_the_request_goes_on() -> None:
    class Broken:
        def get(self, kind: str, key: str) -> JSON | None:
            raise OSError("disk gone")

    req = cursor_request([[("c", "f", "{}")]], "gemini-3-pro-preview")
    notes: Counter[str] = Counter()
    out = restore_reasoning(req, Broken(), style("gemini"), notes, signature_fallback="sentinel")
    assert notes == {"reasoning store unavailable (OSError: disk gone)": 1, SKIP_NOTE: 1}
    assert out.messages[1].parts[0].extra == {GEMINI_SIGNATURE: SKIP_SIGNATURE}  # type: ignore[union-attr]


@pytest.mark.parametrize("upstream", ["gemini", "openai_chat", "openai_responses"])
def test_every_call_id_is_asked_for_at_once_where_the_store_can(upstream: str) -> None:
    """One ``get_many`` for the history's call ids (one round trip to a Redis store); what it
    answered is what restore uses, and nothing is asked again one by one."""
    store = ReasoningStore()
    view = store.scoped(SCOPE)
    record = Record((Thinking("because", "S" * 60),), "S" * 60)
    view.put(KIND_CALL, "c2", record.to_json())
    asked: list[list[tuple[str, str]]] = []
    one_by_one: list[tuple[str, str]] = []

    class Batch:
        def get(self, kind: str, key: str) -> JSON | None:
            one_by_one.append((kind, key))
            return view.get(kind, key)

        def get_many(self, keys: Sequence[tuple[str, str]]) -> list[JSON | None]:
            asked.append(list(keys))
            return view.get_many(keys)

    req = cursor_request([[("c1", "f", "{}")], [("c2", "f", "{}"), ("c3", "g", "{}")]], "m")
    batched = restore_reasoning(req, Batch(), style(upstream), Counter())
    assert asked == [[(KIND_CALL, "c1"), (KIND_CALL, "c2"), (KIND_CALL, "c3")]]
    assert not [k for k in one_by_one if k[0] == KIND_CALL]
    assert batched == restore_reasoning(req, _OneByOne(view), style(upstream), Counter())


class _OneByOne:
    """The same store without ``get_many``."""

    def __init__(self, view: ScopedStore) -> None:
        self.view = view

    def get(self, kind: str, key: str) -> JSON | None:
        return self.view.get(kind, key)


def test_records_read_leniently() -> None:
    assert Record.from_json(None) is None
    assert Record.from_json({"thinking": "junk", "signature": 5}) == Record()
    rec = Record(
        (Thinking("t", "s", extra={"k": 1}), Thinking("d", redacted=True)), "g", {"a": 1}, {"b": 2}
    )
    assert Record.from_json(rec.to_json()) == rec
    assert not Record()


def test_constants_mirror_the_gemini_dialect() -> None:
    assert GEMINI_SIGNATURE == gemini_parts.SIGNATURE
    assert SKIP_SIGNATURE == gemini_parts.SKIP_SIGNATURE
    assert next(iter(CALL_SIGNATURE)) == gemini_parts.NAME


def test_spliced_stream_records_each_message() -> None:
    """A second ``message_start`` ends the first message's turn (vercel-ai's spliced edge case)."""
    view = ReasoningStore().scoped(SCOPE)
    stage = CaptureStage(view, style("anthropic"))
    events: list[Event] = [
        MessageStart("anthropic"),
        ThinkingDelta("first"),
        ThinkingDelta("", "sig-1"),
        ToolCallStart(1, "toolu_1", "f"),
        MessageStart("anthropic"),
        ThinkingDelta("second"),
        ThinkingDelta("", "sig-2"),
        ToolCallStart(1, "toolu_2", "f"),
        ToolCallEnd(1),
        Finish("tool_calls"),
        StreamEnd(),
    ]
    for e in events:
        assert stage.feed(e) == [e]
    stage.finish()
    first, second = (
        Record.from_json(view.get(KIND_CALL, "toolu_1")),
        Record.from_json(view.get(KIND_CALL, "toolu_2")),
    )
    assert first is not None and second is not None
    assert first.thinking == (Thinking("first", "sig-1"),)
    assert second.thinking == (Thinking("second", "sig-2"),)


def test_gemini_call_signature_copies_are_not_thinking() -> None:
    view = ReasoningStore().scoped(SCOPE)
    stage = CaptureStage(view, style("gemini"))
    events: list[Event] = [
        MessageStart("gemini"),
        ThinkingDelta("thought text"),
        ThinkingDelta("", "CALLSIG", extra=CALL_SIGNATURE),
        ToolCallStart(0, "c0", "f", "{}", extra={GEMINI_SIGNATURE: "CALLSIG"}),
        ToolCallEnd(0),
        ToolCallStart(1, "c1", "g", "{}"),
        ToolCallEnd(1),
        Finish("tool_calls"),
    ]
    for e in events:
        stage.feed(e)
    stage.finish()
    assert view.get(KIND_CALL, "c0") == {"signature": "CALLSIG"}
    assert view.get(KIND_CALL, "c1") is None  # a sibling: nothing to restore
