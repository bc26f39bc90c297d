"""``FlowPlan``: what ``decide`` settled for one flow, and the answer side that works on
it: ``stream_processor`` builds the stream pipeline, ``decode_answer`` / ``encode_answer``
turn a whole answer around, ``needs_retry`` says whether a required tool call is missing,
``error_body`` re-shapes an upstream error for a client of another dialect. Nothing here
logs; the shell does, from what these return."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from addon.dialects import Dialect
from addon.dialects.base import Framing
from addon.model import (
    JSON,
    NO_DEFAULTS,
    AnswerDefaults,
    ClientError,
    Event,
    Notes,
    Request,
    Response,
    StreamError,
    Thinking,
    ToolCall,
    UnsupportedShape,
)
from addon.plan.values import (
    CONTENT_TYPES,
    MAX_ERROR_QUOTE,
    SHAPE_ERRORS,
    UpstreamError,
    dump,
    error_bytes,
    load_json,
    short,
)
from addon.redact import Secrets
from addon.routes import Route
from addon.store import ReasoningStore, ScopedStore
from addon.stream.capture import CaptureStage, capture_response
from addon.stream.custom_tools import CustomToolStage
from addon.stream.decompress import make_decompressor
from addon.stream.eventstream import split_all
from addon.stream.foreign import not_a_stream, quote
from addon.stream.loop_guard import LoopGuardStage
from addon.stream.processor import MAX_EVENT_BYTES, Stage, StreamProcessor
from addon.stream.repair import RepairStage
from addon.stream.stages import (
    HideThinkingStage,
    RedactErrorStage,
    TextToolStage,
    TrailingSignatureStage,
)
from addon.stream.whole import (
    StreamFailed,
    response_events,
    response_from_events,
    sse_from_response,
)
from addon.textproto.parser import Protocol, TextProtocolParser
from addon.transforms.custom_tools import unwrap_custom_calls
from addon.transforms.loop_guard import LoopVerdict, guard_response
from addon.transforms.repair import ToolSchemas, parse_arguments, repair_response
from addon.transforms.signatures import drop_trailing_signatures
from addon.transforms.staged_retry import Stage as Stage_
from addon.transforms.staged_retry import stage_request
from addon.transforms.text_tools import parse_text_tools


@dataclass(slots=True)
class FlowPlan:
    """What ``decide`` settled for one flow; kept until its answer has been rewritten."""

    route: Route
    client: Dialect
    upstream: Dialect
    notes: Notes = field(default_factory=Counter)
    protocol: Protocol | None = None
    trigger: str | None = None
    tools: tuple[str, ...] = ()
    parse_text: bool = False
    """Parse the answer's text for tool calls and/or thinking tags."""
    tool_required: bool = False
    hide_thinking: bool = False
    stream: bool = False
    """The client asked for a stream."""
    custom_tools: frozenset[str] = frozenset()
    """Custom (freeform) tools carried as function tools: their calls are unwrapped."""
    upstream_framing: Framing = "sse"
    """How the upstream frames its stream (from the upstream request's query)."""
    client_framing: Framing = "sse"
    """How the client wants its stream framed (from the client's query)."""
    schemas: ToolSchemas = field(default_factory=ToolSchemas)
    """The request's own tool schemas, for argument repair (empty: no repair)."""
    repair_log: list[JSON] = field(default_factory=list)
    """One structured record per call that was still invalid or had colliding keys; the shell
    logs and clears them."""
    loop: LoopVerdict | None = None
    """The loop guard's finding on this request's history: the answer's calls are judged
    against it (the history's fingerprint and run, as plain values)."""
    loop_fallback: bool = False
    """``bridge_loop_fallback`` on a native route with a verdict: an answer that repeats the
    call is asked again with the invoke text protocol (``invoke_body``)."""
    loop_replaced: int = 0
    """Calls of the answer the loop guard replaced by its message."""
    loop_asked: bool = False
    """The loop guard asked the upstream again (``invoke_body``)."""
    encode_invoke: Callable[[], bytes] | None = None
    """The upstream body of the loop guard's second request (the invoke protocol); switches
    this plan to read that protocol's answer."""
    request_notes: Notes = field(default_factory=Counter)
    """``notes`` as they were when the request went upstream: what the answer added is the
    rest (``answer_notes``)."""
    max_event_bytes: int = MAX_EVENT_BYTES
    """The bound of what a stream's rewrite holds (``bridge_max_event_bytes``)."""
    host: str = ""
    """The upstream host (part of the reasoning store's scope)."""
    store: ReasoningStore | None = None
    """The process-wide reasoning store (None: off)."""
    sink: ScopedStore | None = None
    """The store's view for this flow's scope (upstream, model as sent): restore reads it,
    capture writes it."""
    capture: CaptureStage | None = None
    capture_error: str | None = None
    """Why capturing this answer stopped (a store that cannot write …), for the shell's log."""
    unified: Request | None = None
    """The unified request as it was encoded for the upstream: the staged retry's start."""
    encode_stage: Callable[[Request], bytes] | None = None
    """Encodes a staged retry's request exactly as the first one was (dialect, path, key)."""
    processor: StreamProcessor | None = None
    parser: TextProtocolParser | None = None
    profile_arn: str | None = None
    """A ``profileArn`` the shell read for a Kiro route (its token file's), when the route
    names none."""
    defaults: AnswerDefaults = NO_DEFAULTS
    """The model the client asked for and when: what its answer says where the upstream's
    says nothing (Kiro sends neither), streamed or whole."""
    _answer_head: tuple[int | None, str | None] = (None, None)
    """The streamed answer's status and content type (``stream_processor``)."""
    secrets: Secrets = field(default_factory=Secrets, repr=False)
    """The flow's exact credential values: redacted from the error bodies the bridge writes
    (never in ``meta``)."""

    @property
    def label(self) -> str:
        return f"cursor-bridge [{self.route.name}]"

    @property
    def drops_late_signatures(self) -> bool:
        """A signature-only reasoning part after the answer's content is left out: the
        upstream may send one (``Dialect.late_signatures``) to a client of another dialect."""
        return self.upstream.late_signatures and not self.same_dialect

    @property
    def same_dialect(self) -> bool:
        return self.client.name == self.upstream.name

    def new_parser(self) -> TextProtocolParser:
        self.parser = TextProtocolParser(
            self.protocol,
            trigger=self.trigger,
            tools=self.tools,
            readable=_readable_object if self.schemas else None,
            max_call=self.max_event_bytes,
        )
        return self.parser

    def meta(self) -> dict[str, Any]:
        """Plain data for ``flow.metadata`` (never a header, never a key)."""
        out: dict[str, Any] = {
            "route": self.route.name,
            "action": "rewritten",
            "client": self.client.name,
            "upstream": self.upstream.name,
            "stream": self.stream,
            "changes": dict(self.notes),
        }
        if self.protocol:
            out["tool_protocol"] = self.protocol
            if self.trigger:
                out["trigger"] = self.trigger
        return out

    # ------------------------------------------------------------------ answers

    def stream_processor(
        self,
        content_encoding: str | None,
        keep_original: int = 0,
        *,
        status: int | None = None,
        content_type: str | None = None,
    ) -> StreamProcessor:
        """The pipeline for a 2xx SSE answer (``keep_original``: how many of the upstream's
        bytes to keep for the view; ``status`` and ``content_type``: the answer's, named when
        its body is not the stream its framing promised). Raises ``UnsupportedEncoding``."""
        decompressor = make_decompressor(content_encoding)
        stages: list[Stage] = []
        if self.sink is not None:
            # First: it must see the upstream's own events, before any stage changes them.
            self.capture = CaptureStage(self.sink)
            stages.append(self.capture)
        if self.parse_text:
            stages.append(TextToolStage(self.new_parser()))
        if self.custom_tools:
            stages.append(CustomToolStage(self.custom_tools))
        if self.schemas:
            stages.append(
                RepairStage(self.schemas, self.notes, self.repair_log.append, self.max_event_bytes)
            )
        if self.loop is not None:
            # After repair: a call is judged as the client would get it.
            stages.append(LoopGuardStage(self.loop, self._loop_replaced))
        if self.drops_late_signatures:
            stages.append(TrailingSignatureStage())
        if self.hide_thinking:
            stages.append(HideThinkingStage())
        if self.secrets and not self.same_dialect:
            stages.append(RedactErrorStage(self.secrets))
        self.processor = StreamProcessor(
            self.upstream.stream_decoder(),
            self.client.stream_encoder(self.defaults),
            stages=stages,
            decompressor=decompressor,
            framing_in=self.upstream_framing,
            framing_out=self.client_framing,
            same_dialect=self.same_dialect,
            max_event_bytes=self.max_event_bytes,
            whole=self._whole_events,
            keep_original=keep_original,
            raw_ok=not (
                self.parse_text or self.custom_tools or self.hide_thinking or self.loop is not None
            ),
            # The text protocol rewrites the text anyway: runs of it read together are parsed
            # and re-encoded as one, on same-dialect routes too.
            coalesce=not self.same_dialect or self.parse_text,
            status=status,
            content_type=content_type,
            redact=self.secrets if self.secrets else None,
        )
        self._answer_head = (status, content_type)
        return self.processor

    def _whole_events(self, raw: bytes) -> list[Event]:
        """A 2xx body sent as an event stream that is not one, read whole: the events of the
        answer it holds, else a ``StreamError`` with the upstream's error message or a quote.
        (Only for another dialect: a same-dialect client gets such a body as it is.)"""
        try:
            body = load_json(raw)
        except (ValueError, RecursionError):
            body = None
        if isinstance(body, dict):
            try:
                message = self.upstream.error_message(body)
                if not message:
                    return response_events(self.upstream.decode_response(body))
            except (UnsupportedShape, RecursionError, *SHAPE_ERRORS):
                message = None
            if message:
                return [StreamError(message, "upstream_error")]
        status, content_type = self._answer_head
        why = not_a_stream(self.upstream_framing, raw, status=status, content_type=content_type)
        if why is None:  # it began like one (and then was not)
            why = f"the upstream answered with a body that is not an event stream: {quote(raw)}"
        return [StreamError(why, "upstream_error")]

    def decode_answer(
        self, raw: bytes, *, status: int | None = None, content_type: str | None = None
    ) -> Response:
        """A whole upstream answer → unified, parsed and filtered as the route says.

        Raises ``ValueError`` / ``UnsupportedShape`` / ``RecursionError`` for an answer it
        cannot read, ``UpstreamError`` for an error the upstream sent in its stream framing.
        An upstream that answers only in its stream framing (Kiro's frames) and sent something
        else (an HTML sign-in page, JSON): ``UnsupportedShape`` saying what came instead (its
        ``status`` and ``content_type`` when given, its first bytes)."""
        if self.upstream_framing == "aws_eventstream":
            why = not_a_stream("aws_eventstream", raw, status=status, content_type=content_type)
            if why is not None:
                raise UnsupportedShape(why)
            return self._decode_frames(raw)
        try:
            body = load_json(raw)
        except ValueError as e:
            raise UnsupportedShape(f"the answer is not strict JSON ({short(e)})") from None
        if not isinstance(body, dict):
            raise UnsupportedShape("the answer is JSON but not an object")
        try:
            return self._decode_answer(body)
        except SHAPE_ERRORS as e:
            raise UnsupportedShape(
                f"unexpected answer shape ({type(e).__name__}: {short(e)})"
            ) from None

    def _decode_frames(self, raw: bytes) -> Response:
        """An upstream that answers only in AWS event-stream frames (Kiro), asked for a whole
        answer: its stream decoder over the frames, the events assembled into one answer."""
        frames, error = split_all(raw)
        if error is not None:
            raise UnsupportedShape(f"cannot read the event stream ({short(error)})")
        decoder = self.upstream.stream_decoder()
        events = [e for f in frames for e in decoder.feed(f.text, f.event)]
        events += decoder.finish()
        try:
            answer = response_from_events(events, self.upstream.name)
        except StreamFailed as e:
            raise UpstreamError(e.error.message, e.status, e.error.type) from None
        except SHAPE_ERRORS as e:
            raise UnsupportedShape(
                f"unexpected answer shape ({type(e).__name__}: {short(e)})"
            ) from None
        return self._filtered(answer)

    def _decode_answer(self, body: JSON) -> Response:
        answer = self.upstream.decode_response(body)
        if self.sink is not None:
            try:
                capture_response(answer, self.sink)
            except Exception as e:  # remembering never costs the client its answer
                self.capture_error = f"{type(e).__name__}: {e}"
        return self._filtered(answer)

    def stage_body(self, stage: Stage_) -> bytes:
        """The upstream body of a staged retry (``addon.transforms.staged_retry``). Raises
        ``ValueError`` when this flow cannot be retried that way."""
        if self.unified is None or self.encode_stage is None:
            raise ValueError("no request to retry")
        return self.encode_stage(stage_request(self.unified, stage, self.notes))

    def error_message(self, raw: bytes) -> str:
        """The message of an upstream error body (its dialect's), else its text (cut)."""
        try:
            message = self.upstream.error_message(load_json(raw))
        except (ValueError, RecursionError, UnsupportedShape, *SHAPE_ERRORS):
            message = None
        return message or raw[: MAX_ERROR_QUOTE * 4].decode("utf-8", "replace")

    def _filtered(self, answer: Response) -> Response:
        """A decoded whole answer, parsed and filtered as the route says."""
        if self.parse_text:
            answer = parse_text_tools(answer, self.new_parser())
        if self.custom_tools:
            answer = unwrap_custom_calls(answer, self.custom_tools)
        if self.schemas:
            answer, records = repair_response(answer, self.schemas, self.notes)
            self.repair_log.extend(records)
        if self.loop is not None:
            answer, replaced = guard_response(answer, self.loop)
            if replaced:
                self._loop_replaced(replaced)
        if self.drops_late_signatures:
            answer = drop_trailing_signatures(answer)
        if self.hide_thinking:
            answer = dataclasses.replace(
                answer, parts=tuple(p for p in answer.parts if not isinstance(p, Thinking))
            )
        return answer

    def answer_notes(self) -> Notes:
        """What rewriting the answer changed (repairs …): the notes the request did not have."""
        return self.notes - self.request_notes

    def needs_retry(self, answer: Response) -> bool:
        """A required tool call is missing (not when the loop guard replaced it)."""
        return (
            self.tool_required
            and not self.loop_replaced
            and not any(isinstance(p, ToolCall) for p in answer.parts)
        )

    # ------------------------------------------------------------------ the loop guard

    def _loop_replaced(self, n: int = 1) -> None:
        assert self.loop is not None
        self.loop_replaced += n
        self.notes[self.loop.stop_note] += n

    @property
    def loop_held(self) -> bool:
        """A stream the shell reads whole before the client gets it: the loop guard may ask
        again (``loop_fallback``), and a stream cannot wait for a second request."""
        return self.stream and self.loop_fallback

    @property
    def loop_ask_again(self) -> bool:
        """The answer repeated the call and the route asks again with the invoke protocol."""
        return self.loop_fallback and self.loop_replaced > 0

    def invoke_body(self) -> bytes | None:
        """The loop guard's second request: the same conversation with the tools in the
        prompt (invoke); from here on this plan reads that protocol's answer, and judges it
        again (no third request). None when it cannot be written (the first answer stays)."""
        if self.encode_invoke is None:
            return None
        self.loop_fallback, self.loop_replaced = False, 0
        self.sink = self.capture = None  # the store keeps native answers only
        try:
            body = self.encode_invoke()
        except (ClientError, UnsupportedShape, ValueError, RecursionError, *SHAPE_ERRORS):
            return None
        self.notes["loop guard: asked again with the invoke text protocol"] += 1
        self.loop_asked = True
        return body

    def client_answer(self, raw: bytes, content_type: str) -> tuple[bytes, str]:
        """A 2xx answer read whole (a retry's, or a stream held back), as the client's body
        and its content type: through the stream pipeline when it is a stream, else decoded
        and encoded. Raises as ``decode_answer`` and ``encode_answer`` do."""
        ctype = content_type.lower()
        if self.stream and (
            not ctype.startswith("application/json") or self.upstream_framing == "json_array"
        ):
            processor = self.stream_processor(None)
            body = b"".join([*processor.feed(raw), *processor.finish()])
            self.processor = None
            return body, CONTENT_TYPES[self.client_framing]
        body = self.encode_answer(self.decode_answer(raw))
        return body, CONTENT_TYPES[self.client_framing] if self.stream else "application/json"

    def encode_answer(self, answer: Response) -> bytes:
        """The client's body: its dialect's whole answer, or a stream when it asked for one.
        Raises ``UnsupportedShape`` (a value of an unforeseen type in the answer),
        ``ValueError`` (no strict JSON for it) or ``RecursionError``."""
        try:
            return self._encode_answer(answer)
        except SHAPE_ERRORS as e:
            raise UnsupportedShape(
                f"unexpected answer shape ({type(e).__name__}: {short(e)})"
            ) from None

    def _encode_answer(self, answer: Response) -> bytes:
        if not answer.model or answer.created is None:
            answer = dataclasses.replace(
                answer,
                model=answer.model or self.defaults.model or None,
                created=self.defaults.created if answer.created is None else answer.created,
            )
        if self.stream:
            encoder = self.client.stream_encoder(self.defaults)
            return sse_from_response(answer, encoder, self.client_framing)
        return dump(self.client.encode_response(answer))

    def error_body(self, status: int, raw: bytes) -> tuple[bytes, str]:
        """An upstream error re-shaped for the client's dialect: ``(body, message)``. Any
        body works: one that is not a readable error object is quoted (cut)."""
        kind: int | None = None
        try:
            body = load_json(raw)
            message = self.upstream.error_message(body)
            kind = self.upstream.error_status(body)
        except (ValueError, RecursionError, UnsupportedShape):
            message = None
        if not message:
            text = raw[: MAX_ERROR_QUOTE * 4].decode("utf-8", "replace").strip()
            message = f"upstream answered HTTP {status}" + (
                f": {text[:MAX_ERROR_QUOTE]}" if text else ""
            )
        # The status stays the upstream's; the type is the client dialect's for it, or for the
        # status the upstream's own type names when that type is not the one the upstream's
        # dialect uses for the status anyway (a Kiro 400 that is a ThrottlingException; not
        # OpenAI's server_error on a 503, which says less than the status).
        named = None
        if kind is not None and self.upstream.error_type(kind) != self.upstream.error_type(status):
            named = self.client.error_type(kind)
        error = ClientError(self.secrets(message), status=status, type=named)
        return error_bytes(self.client, error), message

    def upstream_error(self, e: UpstreamError) -> bytes:
        """An error the upstream sent inside its answer's framing (a Kiro exception frame), as
        an error body in the client's dialect (its status: ``e.status``)."""
        message = self.secrets(e.message)
        return error_bytes(self.client, ClientError(message, status=e.status, code=e.code))

    def unreadable_answer(self, why: str) -> bytes:
        """A 502 body in the client's dialect for an upstream answer the bridge cannot turn
        into the client's dialect (on a same-dialect route the answer is passed on instead)."""
        return error_bytes(
            self.client,
            ClientError(
                f"cursor-bridge could not translate the {self.upstream.name} upstream's answer "
                f"for this {self.client.name} client: {self.secrets(why)}",
                status=502,
                code="untranslatable_answer",
            ),
        )


def _readable_object(arguments: str) -> bool:
    """Text-protocol arguments that argument repair can read as an object."""
    return isinstance(parse_arguments(arguments).value, dict)
