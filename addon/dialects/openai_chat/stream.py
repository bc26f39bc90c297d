"""OpenAI ``chat.completion.chunk`` streams (an OpenAI-compatible upstream) → unified events.

Contract: sans-IO. ``OpenAIChatStreamDecoder.feed`` takes the ``data`` of one SSE event and
returns unified events; ``finish()`` ends a cut stream with a ``StreamError``. Only choice 0 is
modelled: ``n > 1`` raises ``UnsupportedShape``. The encoder is ``stream_encode.py``."""

from __future__ import annotations

import dataclasses
import json

from addon.dialects.base import DecoderFastPath
from addon.dialects.framed import framed_texts, unquoted_run
from addon.jsonio import dumps, loads
from addon.model import (
    JSON,
    STREAM_CUT,
    Event,
    Finish,
    MessageStart,
    RawEvent,
    StreamEnd,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UnsupportedShape,
    UsageEvent,
)

from .errors import status_of
from .request import NAME
from .response import decode_usage, finish_reason

_ENVELOPE = ("id", "object", "created", "model", "system_fingerprint")
_CHUNK_KNOWN = frozenset({*_ENVELOPE, "choices", "usage"})
_CHOICE_KNOWN = frozenset({"index", "delta", "finish_reason"})
_DELTA_KNOWN = frozenset({"role", "content", "tool_calls", "reasoning_content", "reasoning"})
_NO_EXTRA: JSON = {}
_NOT_PLAIN = ('"tool_calls"', "reasoning", '"extra_content"', '"error"', '"function_call"')
"""What makes a chunk worth decoding on a same-dialect route (``skippable``)."""


class OpenAIChatStreamDecoder:
    """Chat chunks → unified events. Fields of a chunk the model does not know (chunk, choice
    and delta level: ``logprobs``, ``usage: null``, ``obfuscation`` …) ride on the first event
    made from it (``extra["wire"]``), so that an OpenAI client gets them back. Its fast path
    reads plain text chunks by their frame (``_learn``)."""

    @property
    def fast_path(self) -> DecoderFastPath:
        """Its own frames, ``skippable`` and runs (``DecoderFastPath``)."""
        return self

    def __init__(self) -> None:
        self._started = False
        self._envelope: JSON = {}
        self._calls: dict[int, str] = {}  # wire index -> id, for calls already started
        self._last_index: int | None = None
        self._finished = False
        self._ended = False
        """A finish reason, ``[DONE]`` or an error was read: the stream was not cut."""
        self._plain = True
        """No tool call and no reasoning read yet (see ``skippable``)."""
        self._frame: tuple[str, str] | None = None
        """The text around the ``content`` string of the last plain text chunk (``_learn``)."""
        self._learnt = False
        """A plain text chunk was decoded (its frame learnt, if it has one): until then none
        is ``skippable``, so that ``skippable_run`` has a frame to look for."""
        self.text_frame: tuple[bytes, bytes] | None = None
        """The frame as the bytes of a whole SSE event before and after its text's JSON string,
        the string's quotes included (``StreamDecoder``: an event of this shape whose middle
        is one JSON string is a plain text chunk, that text and nothing else)."""
        self.plain_frame: tuple[bytes, bytes] | None = None
        """``text_frame`` until a tool call or reasoning is read, then None: an event of that
        frame is ``skippable`` (the processor's skip lane looks for it)."""

    def skippable(self, data: str) -> bool:
        """Whether this event's data is a plain text chunk that nobody but an encoder of this
        dialect would read: after the first chunk, before any tool call or reasoning, a chunk
        with ``content`` and without calls, reasoning, extras, an error or a finish reason.
        A same-dialect stream with nothing to change passes such a chunk on as its bytes,
        without decoding it (``StreamProcessor(raw_ok=True)``). A look at the text only: a
        false "no" costs the decoding, never a wrong answer."""
        if not (self._plain and self._started and self._learnt) or '"content"' not in data:
            return False
        for marker in _NOT_PLAIN:
            if marker in data:
                return False
        at = data.find('"finish_reason"')
        return at == -1 or data[at + 15 : at + 24].lstrip(" :").startswith("null")

    def feed(self, data: str, event: str | None) -> list[Event]:
        if data == "[DONE]":
            self._ended = True
            return [*self._end_calls(), StreamEnd()]
        frame = self._frame
        if frame is not None and data.startswith(frame[0]) and data.endswith(frame[1]):
            text = self._framed_text(data, frame)
            if text is not None:
                return [TextDelta(text)] if text else []
        try:
            chunk = loads(data)
        except ValueError as e:
            raise UnsupportedShape(f"chunk is not JSON: {data[:60]!r}") from e
        if not isinstance(chunk, dict):
            raise UnsupportedShape("chunk is not a JSON object")
        text = _plain_text(chunk, self._started, self._envelope)
        if text is not None:
            if text:
                self._learn(data, text)
            return [TextDelta(text)] if text else []
        if "error" in chunk and "choices" not in chunk:
            return self._error(chunk)
        out: list[Event] = []
        # The common chunk (envelope, choices, maybe usage) costs set operations in C only.
        chunk_extra = (
            {}
            if chunk.keys() <= _CHUNK_KNOWN
            else {k: v for k, v in chunk.items() if k not in _CHUNK_KNOWN}
        )
        if "usage" in chunk and chunk["usage"] is None:
            chunk_extra["usage"] = None
        self._envelope_of(chunk, chunk_extra, out)
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise UnsupportedShape("chunk choices is not a list")
        choice_extra, delta_extra = self._choices(choices, out)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            out.append(UsageEvent(decode_usage(usage)))
        extra: JSON = {}
        if chunk_extra:
            extra["chunk"] = chunk_extra
        if choice_extra:
            extra["choice"] = choice_extra
        if delta_extra:
            extra["delta"] = delta_extra
        if not out:
            # Nothing the model understands (empty deltas, keep-alives, provider notes).
            return [RawEvent(NAME, chunk)] if extra or not choices else []
        if extra:
            for i, ev in enumerate(out):
                if not isinstance(ev, ToolCallEnd):
                    out[i] = _with_extra(ev, extra)
                    break
        return out

    def _error(self, chunk: JSON) -> list[Event]:
        err = chunk["error"]
        message = err.get("message") if isinstance(err, dict) else str(err)
        kind = err.get("type") if isinstance(err, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        # LiteLLM adds the status beside the error (``status_code``), some gateways write it
        # as the code.
        status = status_of(code, kind, chunk.get("status_code"))
        self._ended = True
        self._calls = {}  # calls still open never ended: no ToolCallEnd for them
        return [StreamError(str(message), kind, origin=NAME, raw=chunk, status=status)]

    def _envelope_of(self, chunk: JSON, chunk_extra: JSON, out: list[Event]) -> None:
        """``MessageStart`` from the first chunk; later, envelope fields that changed go into
        ``chunk_extra``."""
        if not self._started:
            self._started = True
            self._envelope = {k: chunk[k] for k in _ENVELOPE if k in chunk}
            out.append(
                MessageStart(
                    NAME,
                    id=chunk.get("id"),
                    model=chunk.get("model"),
                    created=chunk.get("created"),
                    envelope=self._envelope,
                )
            )
            return
        # Some gateways change the envelope mid-stream; keep what they sent. Fast check:
        # the chunk has exactly the first chunk's envelope keys, with the same values.
        env = self._envelope
        fields = len(chunk) - ("choices" in chunk) - ("usage" in chunk) - len(chunk_extra)
        if fields != len(env) or not env.items() <= chunk.items():
            for k in _ENVELOPE:
                if k in chunk and chunk[k] != env.get(k):
                    chunk_extra[k] = chunk[k]

    def _choices(self, choices: list[object], out: list[Event]) -> tuple[JSON, JSON]:
        """The events of the (one) choice; its and its delta's unknown fields."""
        choice_extra: JSON = {}
        delta_extra: JSON = {}
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                raise UnsupportedShape("chunk with more than one choice (n > 1)")
            if not choice.keys() <= _CHOICE_KNOWN:
                choice_extra = {k: v for k, v in choice.items() if k not in _CHOICE_KNOWN}
            delta = choice.get("delta") or {}
            if not delta.keys() <= _DELTA_KNOWN:
                delta_extra = {k: v for k, v in delta.items() if k not in _DELTA_KNOWN}
            self._decode_delta(delta, out)
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self._ended = True
                out.extend(self._end_calls())
                out.append(Finish(finish_reason(reason), raw=reason))
        return choice_extra, delta_extra

    def _learn(self, data: str, text: str) -> None:
        """Keep the text around this plain chunk's ``content`` string: the upstream repeats it
        on every text chunk (same envelope, same keys in the same order), so the next ones
        are read by comparing their ends and decoding only the string between them."""
        self._learnt = True
        value = dumps(text)
        at = data.find('"content":' + value)
        if at == -1 or data.find('"content":' + value, at + 1) != -1:
            # Written another way (escapes, spaces): the general path.
            self._frame = self.text_frame = self.plain_frame = None
            return
        start = at + len('"content":')
        frame = self._frame = (data[: start + 1], data[start + len(value) - 1 :])
        self.text_frame = (
            b"data: " + frame[0].encode("utf-8", "surrogatepass"),
            frame[1].encode("utf-8", "surrogatepass") + b"\n\n",
        )
        self.plain_frame = self.text_frame if self._plain else None

    def text_run(self, chunk: bytes) -> tuple[str, int] | None:
        """A chunk of whole SSE events that are all plain text chunks in the learned frame
        (``_learn``), read in one pass (``framed_texts``, exact): their text joined and how
        many there were. None when any part of the chunk is anything else (it is then read
        event by event, with the same text)."""
        frame = self.text_frame
        if frame is None:
            return None
        n, string, value = framed_texts(chunk, *frame)
        if not n:
            return None
        if string is not None:
            return string[1:-1].decode("ascii"), n
        return (value, n) if isinstance(value, str) else None

    def skippable_run(self, chunk: bytes) -> int:
        """How many events ``chunk`` holds if every one is ``skippable`` (a plain text chunk in
        the learned frame, before any call or reasoning, no quote, control character or
        closing backslash in its text: ``unquoted_run``); 0 otherwise. Escapes inside a text
        are not checked: an event whose text holds an escape JSON has not (``\\x``) passes as
        the upstream's bytes, as it would event by event."""
        frame = self.plain_frame
        return 0 if frame is None else unquoted_run(chunk, *frame)

    @staticmethod
    def _framed_text(data: str, frame: tuple[str, str]) -> str | None:
        """The string between the frame's ends, if it is one JSON string and nothing else
        (msgspec refuses trailing text: a chunk shaped otherwise is read whole)."""
        head, tail = frame
        if len(data) < len(head) + len(tail):
            return None
        try:
            text = loads(data[len(head) - 1 : len(data) - len(tail) + 1])
        except ValueError:
            return None
        return text if type(text) is str else None

    def _decode_delta(self, delta: JSON, out: list[Event]) -> None:
        if len(delta) == 1 and "content" in delta:  # the common chunk: a piece of text
            content = delta["content"]
            if isinstance(content, str) and content:
                out.append(TextDelta(content))
            return
        if self._plain and (
            "tool_calls" in delta or "reasoning_content" in delta or "reasoning" in delta
        ):
            self._plain = False
            self.plain_frame = None
        for key in ("reasoning_content", "reasoning"):  # DeepSeek/Grok; OpenRouter/vLLM
            text = delta.get(key)
            if isinstance(text, str) and text:
                out.append(
                    ThinkingDelta(
                        text, extra={"field": key} if key != "reasoning_content" else _NO_EXTRA
                    )
                )
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(TextDelta(content))
        for pos, call in enumerate(delta.get("tool_calls") or []):
            if isinstance(call, dict):
                self._decode_call(pos, call, out)

    def _decode_call(self, pos: int, call: JSON, out: list[Event]) -> None:
        index = call.get("index")
        if not isinstance(index, int):
            # Some providers omit the index: a new id starts a call, otherwise continue the last.
            if call.get("id") and call["id"] not in self._calls.values():
                index = len(self._calls) + pos
            else:
                index = self._last_index if self._last_index is not None else pos
        self._last_index = index
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = "" if args is None else json.dumps(args, ensure_ascii=False)
        call_extra = {k: v for k, v in call.items() if k not in ("index", "id", "type", "function")}
        if index not in self._calls:
            call_id = str(call.get("id") or f"call_{index}")
            self._calls[index] = call_id
            out.append(
                ToolCallStart(index, call_id, str(fn.get("name") or ""), args, extra=call_extra)
            )
        elif args:
            # GLM repeats "type" and an empty name on follow-up fragments: both are ignored.
            out.append(ToolCallArgsDelta(index, args, extra=call_extra))

    def _end_calls(self) -> list[Event]:
        ended: list[Event] = [ToolCallEnd(i) for i in self._calls]
        self._calls = {}
        return ended

    def finish(self) -> list[Event]:
        if self._finished:
            return []
        self._finished = True
        if self._ended:
            return self._end_calls()
        # Cut: a call still open never ended, so it gets no ToolCallEnd (a ``ToolCallEnd``
        # says the upstream finished the call; a cut one must never reach a client as whole).
        self._calls = {}
        return [StreamError(STREAM_CUT, "upstream_cut")]


def _plain_text(chunk: JSON, started: bool, env: JSON) -> str | None:
    """The text of the common chunk — the first chunk's envelope (``env``) unchanged, one choice,
    a delta with only ``content``, no finish, no usage, nothing else — else None (the
    general path decodes it). Same events as the general path, a fraction of the work."""
    if not started or "usage" in chunk or not chunk.keys() <= _CHUNK_KNOWN:
        return None
    choices = chunk.get("choices")
    if (
        type(choices) is not list
        or len(choices) != 1
        or len(chunk) != len(env) + 1
        or not env.items() <= chunk.items()
    ):
        return None
    choice = choices[0]
    if (
        type(choice) is not dict
        or not choice.keys() <= _CHOICE_KNOWN
        or choice.get("index", 0) != 0
        or choice.get("finish_reason") is not None
    ):
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or len(delta) != 1:
        return None
    content = delta.get("content")
    return content if type(content) is str else None


def _with_extra(event: Event, extra: JSON) -> Event:
    """A copy of ``event`` with the wire extras of its source chunk attached."""
    if isinstance(event, ToolCallEnd | StreamEnd | RawEvent | StreamError):
        return event
    return dataclasses.replace(event, extra={**event.extra, "wire": extra})
