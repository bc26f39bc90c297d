"""Small helpers shared by the unit tests: read SSE bytes back as the official SDKs would (and
check the Responses framing), cut an input into pieces, feed a processor or a stage to its end.

One copy each; a test module that needs one imports it from here, never from another test
module (``docs/tests.md``)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any, Protocol

from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from addon.model import Event
from addon.stream.sse import EventDecoder, LineDecoder, SSEEvent
from tests.realdata import read

type Pairs = list[tuple[str | None, str]]
"""``(event name, data)`` as the SSE layer hands them over."""


class Stage(Protocol):
    """A stream stage as the processor drives it (``addon.stream.stages.Stage``)."""

    def feed(self, event: Event) -> list[Event]: ...
    def finish(self) -> list[Event]: ...


class Processor(Protocol):
    """What the shell drives: ``addon.stream.processor.StreamProcessor``'s byte interface."""

    def feed(self, data: bytes) -> list[bytes]: ...
    def finish(self) -> list[bytes]: ...


STREAM_EVENT: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)


def sse_events(raw: bytes) -> list[SSEEvent]:
    """The events of an SSE body, through the bridge's own SSE decoder."""
    lines, decoder = LineDecoder(), EventDecoder()
    out: list[SSEEvent] = []
    for line, _ in [*lines.feed(raw), *lines.finish()]:
        item = decoder.feed_line(line)
        if isinstance(item, SSEEvent):
            out.append(item)
    last = decoder.finish()
    if last is not None:
        out.append(last)
    return out


def pairs_of(raw: bytes) -> Pairs:
    """``(event name, data)`` of an SSE body, through the bridge's own SSE decoder."""
    return [(e.event, e.data) for e in sse_events(raw)]


def payloads(sse: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body (``[DONE]`` included)."""
    return [
        line[len("data: ") :] for line in sse.decode().splitlines() if line.startswith("data: ")
    ]


def accumulate(datas: list[str]) -> dict[str, Any]:
    """What an SDK's OpenAI chat stream accumulator would build, plus the raw fragments."""
    acc: dict[str, Any] = {
        "content": "",
        "reasoning": "",
        "calls": {},
        "finish": None,
        "usage": None,
    }
    for data in datas:
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        if chunk.get("usage"):
            acc["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            acc["content"] += delta.get("content") or ""
            acc["reasoning"] += delta.get("reasoning_content") or delta.get("reasoning") or ""
            for call in delta.get("tool_calls") or []:
                slot = acc["calls"].setdefault(
                    call["index"], {"id": None, "name": "", "fragments": []}
                )
                slot["id"] = slot["id"] or call.get("id")
                fn = call.get("function") or {}
                if fn.get("name"):
                    slot["name"] = slot["name"] or fn["name"]
                if fn.get("arguments"):
                    slot["fragments"].append(fn["arguments"])
            if choice.get("finish_reason"):
                acc["finish"] = choice["finish_reason"]
    return acc


def recorded(name: str) -> Pairs:
    """An Anthropic recording as ``(event, data)`` pairs, as the SSE layer hands them over.

    ``.chunks.txt`` files hold one event payload per line; they are framed the way
    the API frames them (``event: <type>``), without OpenAI's ``data: [DONE]``.
    """
    raw = read(name)
    if name.endswith(".chunks.txt"):
        raw = b"".join(
            f"event: {json.loads(line)['type']}\ndata: {line}\n\n".encode()
            for line in raw.decode().splitlines()
            if line.strip()
        )
    return pairs_of(raw)


def sdk_message(pairs: Pairs, *, strict: bool = True) -> Any:
    """What the anthropic SDK's ``client.messages.stream(...)`` would build from these events.

    ``strict``: every event must also validate against the SDK's types (the SDK itself
    builds them leniently; vercel-ai's hand-written fixtures omit a thinking block's
    ``signature``, so recordings are read leniently, our output strictly).
    """
    snapshot: Any = None
    bufs: dict[int, bytes] = {}
    for name, data in pairs:
        if name in ("ping", "error"):  # not message events; the SDK's stream skips / raises
            continue
        event: Any = STREAM_EVENT.validate_json(data) if strict else json.loads(data)
        if strict:
            assert name == event.type  # the SSE event name is the payload's type
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot is not None
    return snapshot


def content_of(message: Any) -> list[dict[str, Any]]:
    """An SDK message's content blocks as dicts, comparable across streams."""
    blocks: list[dict[str, Any]] = [
        b.model_dump(exclude={"citations", "parsed_output", "caller"}) for b in message.content
    ]
    for b in blocks:
        if b.get("type") == "thinking":
            b["signature"] = b["signature"] or ""  # a start without the key, or with "": same
    return blocks


def check_sequence(pairs: Pairs, unended: bool = False) -> list[dict[str, Any]]:
    """The Responses framing: each payload's type is its event name; sequence numbers count
    from 0; created and in_progress first; every item added is done once — with
    ``unended`` (a failed or restarted answer), but a call item that never ended, which is
    never done (a client runs a call at its ``output_item.done``) and is not in the output;
    one terminal event, last."""
    datas = [json.loads(d) for _, d in pairs]
    for (name, _), data in zip(pairs, datas, strict=True):
        assert data["type"] == name
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    assert [d["type"] for d in datas[:2]] == ["response.created", "response.in_progress"]
    terminal = ("response.completed", "response.incomplete", "response.failed")
    assert datas[-1]["type"] in terminal
    assert sum(d["type"] in terminal for d in datas) == 1
    added = [d["output_index"] for d in datas if d["type"] == "response.output_item.added"]
    done = [d["output_index"] for d in datas if d["type"] == "response.output_item.done"]
    assert added == list(range(len(added)))
    kinds = {
        d["output_index"]: d["item"]["type"]
        for d in datas
        if d["type"] == "response.output_item.added"
    }
    never = [i for i in added if i not in done]
    assert not never or unended, never
    assert all(kinds[i] in ("function_call", "custom_tool_call") for i in never)
    assert sorted(done) == [i for i in added if i not in never]
    done_items = {
        d["output_index"]: d["item"] for d in datas if d["type"] == "response.output_item.done"
    }
    assert datas[-1]["response"]["output"] == [done_items[i] for i in sorted(done_items)]
    return datas


def sdk_final(pairs: Pairs) -> Any:
    """What the openai SDK's Responses stream builds from these events (the final response)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    last: Any = None
    for _, data in pairs:
        event = construct_type(type_=ResponseStreamEvent, value=json.loads(data))
        for ev in state.handle_event(event):  # type: ignore[arg-type]
            last = ev
    assert last is not None
    return last.response


def split[T: (str, bytes)](data: T, cuts: Sequence[int]) -> list[T]:
    """``data`` cut at ``cuts`` (each taken modulo ``len(data) + 1``); pieces may be empty."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


def whole(data: bytes) -> list[bytes]:
    """``data`` as one piece."""
    return [data]


def bytewise(data: bytes) -> list[bytes]:
    """``data`` one byte a piece."""
    return [data[i : i + 1] for i in range(len(data))]


def feed_pieces(processor: Processor, pieces: Sequence[bytes]) -> bytes:
    """What ``processor`` writes for ``pieces`` fed in order: never an empty chunk (it would end
    an HTTP/1 body), and ``finish`` is idempotent."""
    out: list[bytes] = []
    for piece in pieces:
        chunks = processor.feed(piece)
        assert all(chunks), "never an empty chunk mid-stream"
        out += chunks
    out += processor.finish()
    assert processor.finish() == []
    return b"".join(out)


def feed_at(processor: Processor, data: bytes, cuts: Sequence[int]) -> bytes:
    """What ``processor`` writes for ``data`` fed in pieces cut at ``cuts`` (``feed_pieces``)."""
    points = [0, *sorted(set(cuts)), len(data)]
    return feed_pieces(processor, [data[a:b] for a, b in itertools.pairwise(points)])


def feed_stage(stage: Stage, events: Sequence[Event]) -> list[Event]:
    """What a stream stage (``feed`` / ``finish``) makes of ``events``; ``finish`` is idempotent."""
    out: list[Event] = []
    for e in events:
        out += stage.feed(e)
    out += stage.finish()
    assert stage.finish() == []
    return out
