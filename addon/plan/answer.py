"""The answer side of a flow: its frozen ``FlowPlan`` and its ``AnswerState`` (what changes
while the answer is read: the flow's notes, repair records, the loop guard's count, the
stream's processor and parser). ``stream_processor`` builds the stream pipeline,
``decode_answer`` / ``encode_answer`` turn a whole answer around, ``needs_retry`` says
whether a required tool call is missing, ``ask_again`` writes the loop guard's second
request. Sans-IO: nothing here logs; the shell does, from what these return and record."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from addon.dialects import kiro
from addon.model import (
    JSON,
    ClientError,
    Event,
    Notes,
    Response,
    StreamError,
    Thinking,
    ToolCall,
    UnsupportedShape,
    Usage,
)
from addon.plan.errors import cut_event, named_status
from addon.plan.flow_plan import FlowPlan
from addon.plan.values import (
    CONTENT_TYPES,
    SHAPE_ERRORS,
    UpstreamError,
    dump,
    load_json,
    short,
)
from addon.stream.capture import CaptureStage, capture_response
from addon.stream.custom_calls import CustomToolStage
from addon.stream.decompress import make_decompressor
from addon.stream.eventstream import split_all
from addon.stream.foreign import not_a_stream, quote
from addon.stream.guard_stage import LoopGuardStage
from addon.stream.hold_calls import RepairStage
from addon.stream.processor import StreamProcessor
from addon.stream.second_call import SearchCalls
from addon.stream.stages import (
    AnswerModelStage,
    CallIdStage,
    HideThinkingStage,
    RedactErrorStage,
    Stage,
    TextToolStage,
    TrailingSignatureStage,
    with_model,
)
from addon.stream.whole import (
    StreamFailed,
    response_events,
    response_from_events,
    sse_from_response,
)
from addon.textproto.parser import TextProtocolParser
from addon.transforms import staged_retry
from addon.transforms.call_ids import RENAMED_NOTE, fresh_call_ids
from addon.transforms.custom_tools import unwrap_custom_calls
from addon.transforms.loop_guard import guard_response
from addon.transforms.repair import repair_response
from addon.transforms.signatures import drop_trailing_signatures
from addon.transforms.text_tools import parse_text_tools


@dataclass(slots=True)
class AnswerState:
    """What changes while one flow's answer is read (the shell's ``FlowRun`` holds it)."""

    notes: Notes = field(default_factory=Counter)
    """The flow's notes: the request's (``FlowPlan.request_notes``), then what the answer
    adds (repairs, the loop guard …)."""
    repair_log: list[JSON] = field(default_factory=list)
    """One structured record per call that was still invalid or had colliding keys; the shell
    logs and clears them."""
    loop_replaced: int = 0
    """Calls of the answer the loop guard replaced by its message."""
    loop_asked: bool = False
    """The loop guard asked the upstream again (``ask_again``)."""
    capture: CaptureStage | None = None
    capture_error: str | None = None
    """Why capturing this answer stopped (a store that cannot write …), for the shell's log."""
    processor: StreamProcessor | None = None
    parser: TextProtocolParser | None = None
    head: tuple[int | None, str | None] = (None, None)
    """The streamed answer's status and content type (``stream_processor``)."""
    usage: Usage | None = None
    """What the upstream reported of the answer the client gets (a stream's reports merged,
    ``Usage.then``; a retried answer's replace the first's), for the flow's log line and
    view; None when it reported nothing."""
    searches: int = 0
    """Web searches the bridge ran for this answer (``addon.plan.web_search``): the usage
    ledger's ``searches`` column."""

    @classmethod
    def of(cls, plan: FlowPlan) -> AnswerState:
        """A flow's state as its request left it."""
        return cls(Counter(plan.request_notes))

    def answer_notes(self, plan: FlowPlan) -> Notes:
        """What rewriting the answer changed (repairs …): the notes the request did not have."""
        return self.notes - plan.request_notes

    def searched(self, answer: Response, searches: int) -> int:
        """The answer of a flow whose web searches the bridge ran: its usage every upstream
        call's (``web_search.shown`` adds them up), and ``searches`` counted."""
        self.usage, self.searches = answer.usage, searches
        return searches

    def saw_usage(self, usage: Usage) -> None:
        """One more usage report of the streamed answer (``CallIdStage``)."""
        self.usage = usage if self.usage is None else self.usage.then(usage)

    def new_parser(self, plan: FlowPlan) -> TextProtocolParser:
        self.parser = plan.new_parser()
        return self.parser

    def replaced(self, plan: FlowPlan, n: int = 1) -> None:
        """The loop guard replaced ``n`` calls of the answer."""
        assert plan.loop is not None
        self.loop_replaced += n
        self.notes[plan.loop.stop_note] += n


# ---------------------------------------------------------------------- streams


class Attach(Enum):
    """What the shell does with an answer's body once its head came (``attach_kind``)."""

    LEAVE = "left to mitmproxy: read whole (another dialect's error, a held loop), or no stream"
    RAW = "streamed as it comes: a flow the bridge does not rewrite"
    ERROR_STREAM = "a same-dialect error stream, as it comes (``error_stream``)"
    REWRITE = "the plan's stream processor (``stream_processor``)"


def attach_kind(
    plan: FlowPlan | None, status: int, content_type: str, *, passed: bool, loop_retry: bool
) -> Attach:
    """How an answer whose head says ``status`` and ``content_type`` is read (the rules:
    docs/streams.md, "Stream rules"): a stream (SSE; for a streaming client, a Gemini JSON
    array or Kiro's AWS event-stream) is rewritten when 2xx; a same-dialect error stream is
    passed on as it comes (never buffered), another dialect's buffered to be re-shaped; a
    loop the guard may ask again (``loop_retry``) is read whole. ``plan`` None: the flow is
    not rewritten; ``passed``: it was passed through untouched, and still streams."""
    ctype = content_type.lower()
    sse = ctype.startswith("text/event-stream")
    json = ctype.startswith("application/json") or "+json" in ctype
    stream = plan is not None and plan.upstream_streams
    array = stream and plan is not None and plan.upstream_framing == "json_array" and json
    binary = (
        stream
        and plan is not None
        and plan.upstream_framing == "aws_eventstream"
        and ctype.startswith(kiro.CONTENT_TYPE)
    )
    if not (sse or array or binary):
        return Attach.LEAVE
    if plan is None:
        return Attach.RAW if passed else Attach.LEAVE
    if not (200 <= status < 300):
        if not plan.same_dialect:
            return Attach.LEAVE  # buffered: re-shaped for the client when it is whole
        return Attach.ERROR_STREAM if sse else Attach.RAW
    if plan.loop_held and loop_retry:
        return Attach.LEAVE
    return Attach.REWRITE


def stream_headers(
    plan: FlowPlan, content_encoding: str | None, http1: bool
) -> tuple[list[str], list[tuple[str, str]]]:
    """The headers a rewritten stream's answer drops and puts: its length (and its encoding,
    undone as it comes) go, an HTTP/1 client gets it chunked, another framing says its type."""
    drop = ["content-length", "content-encoding"] if content_encoding else ["content-length"]
    put = [("transfer-encoding", "chunked")] if http1 else []
    if plan.client_framing != plan.upstream_framing:
        put.append(("content-type", CONTENT_TYPES[plan.client_framing]))
    return drop, put


def error_stream(
    plan: FlowPlan, cut: Callable[[], str | None] | None
) -> Callable[[bytes], Sequence[bytes]]:
    """The reader of an error stream passed on as it came (a non-2xx ``text/event-stream`` on
    a same-dialect route; its status said error, the SDK reads the body whole): at the body's
    end, when the upstream broke it off (``cut`` names the cause), the client's dialect error
    event (``cut_event``) ends it well-formed, on lines of its own after a half-written
    event."""
    tail = b"\n\n"

    def read(data: bytes) -> Sequence[bytes]:
        nonlocal tail
        if data:
            tail = (tail + data)[-2:]
            return [data]
        cause = cut() if cut is not None else None
        if not cause:
            return []
        return [(b"" if tail == b"\n\n" else b"\n\n") + cut_event(plan, cause)]

    return read


def stream_processor(
    plan: FlowPlan,
    state: AnswerState,
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
    state.usage = None  # a new answer: its own reports only
    calls = _search_calls(plan, state)
    state.processor = StreamProcessor(
        calls or plan.upstream.stream_decoder(),
        plan.client.stream_encoder(plan.defaults),
        stages=_stages(plan, state),
        decompressor=decompressor,
        framing_in=plan.upstream_framing,
        framing_out=plan.client_framing,
        same_dialect=plan.same_dialect,
        max_event_bytes=plan.max_event_bytes,
        whole=lambda raw: _whole_events(plan, state, raw),
        keep_original=keep_original,
        # An event nobody reads may pass as the upstream's bytes on a same-dialect route
        # unless a stage says it changes such events (``Stage.changes_bytes``).
        raw_ok=True,
        # The text protocol rewrites the text anyway: runs of it read together are parsed
        # and re-encoded as one, on same-dialect routes too.
        coalesce=not plan.same_dialect or plan.parse_text,
        status=status,
        content_type=content_type,
        redact=plan.secrets if plan.secrets else None,
        fast=plan.fast_path,
    )
    state.head = (status, content_type)
    if calls is not None:
        calls.moves = (state.processor.second_call, state.processor.second_call_ended)
    return state.processor


def _search_calls(plan: FlowPlan, state: AnswerState) -> SearchCalls | None:
    """The decoder of a stream whose web searches the relay's leg runs between its upstream
    calls (``WebSearch.live``): one body of several calls, read as one answer."""
    search, shape = plan.search, plan.client.web_search
    if search is None or not search.live or shape is None:
        return None

    def ran(n: int) -> None:
        state.notes["web search run live by the bridge"] += n - state.searches
        state.searches = n

    decoder = plan.upstream.stream_decoder
    return SearchCalls(decoder, search.ask.name, search.nonce, shape, plan.client.name, ran)


def _stages(plan: FlowPlan, state: AnswerState) -> list[Stage]:
    """The stream's stages, in order, as the plan says."""
    # First of all: every later stage sees the call ids the client will send back.
    stages: list[Stage] = [CallIdStage(plan.history_ids, lambda: _renamed(state), state.saw_usage)]
    if plan.sink is not None:
        # Next: it must see the upstream's own events (but the ids the client gets), before
        # any stage changes them.
        state.capture = CaptureStage(plan.sink, plan.upstream.reasoning)
        stages.append(state.capture)
    if plan.parse_text:
        stages.append(TextToolStage(state.new_parser(plan)))
    if plan.custom_tools:
        stages.append(CustomToolStage(plan.custom_tools))
    if plan.schemas:
        stages.append(
            RepairStage(plan.schemas, state.notes, state.repair_log.append, plan.max_event_bytes)
        )
    if plan.loop is not None:
        # After repair: a call is judged as the client would get it.
        stages.append(LoopGuardStage(plan.loop, lambda: state.replaced(plan)))
    if plan.drops_late_signatures:
        stages.append(TrailingSignatureStage())
    if plan.hide_thinking:
        stages.append(HideThinkingStage())
    if plan.secrets and not plan.same_dialect:
        stages.append(RedactErrorStage(plan.secrets))
    if plan.rename_answer:
        stages.append(AnswerModelStage(plan.defaults.model))
    return stages


def _whole_events(plan: FlowPlan, state: AnswerState, raw: bytes) -> list[Event]:
    """A 2xx body sent as an event stream that is not one, read whole: the events of the
    answer it holds, else a ``StreamError`` with the upstream's error message (and the status
    its type names; 502 when none) or a quote.
    (Only for another dialect: a same-dialect client gets such a body as it is.)"""
    try:
        body = load_json(raw)
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        try:
            message = plan.upstream.error_message(body)
            if not message:
                return response_events(plan.upstream.decode_response(body))
        except (UnsupportedShape, RecursionError, *SHAPE_ERRORS):
            message = None
        if message:
            # The status its type names, as for an error answered with its status.
            return [StreamError(message, "upstream_error", status=named_status(plan, body))]
    status, content_type = state.head
    why = not_a_stream(plan.upstream_framing, raw, status=status, content_type=content_type)
    if why is None:  # it began like one (and then was not)
        why = f"the upstream answered with a body that is not an event stream: {quote(raw)}"
    return [StreamError(why, "upstream_error")]


# ---------------------------------------------------------------------- whole answers


def decode_answer(
    plan: FlowPlan,
    state: AnswerState,
    raw: bytes,
    *,
    status: int | None = None,
    content_type: str | None = None,
) -> Response:
    """A whole upstream answer → unified, parsed and filtered as the route says.

    Raises ``ValueError`` / ``UnsupportedShape`` / ``RecursionError`` for an answer it
    cannot read, ``UpstreamError`` for an error the upstream sent in its stream framing.
    An upstream that answers only in its stream framing (Kiro's frames) and sent something
    else (an HTML sign-in page, JSON): ``UnsupportedShape`` saying what came instead (its
    ``status`` and ``content_type`` when given, its first bytes)."""
    if plan.upstream_framing == "aws_eventstream":
        why = not_a_stream("aws_eventstream", raw, status=status, content_type=content_type)
        if why is not None:
            raise UnsupportedShape(why)
        return _filtered(plan, state, _fresh_ids(plan, state, _decode_frames(plan, raw)))
    try:
        body = load_json(raw)
    except ValueError as e:
        raise UnsupportedShape(f"the answer is not strict JSON ({short(e)})") from None
    if not isinstance(body, dict):
        raise UnsupportedShape("the answer is JSON but not an object")
    try:
        answer = _fresh_ids(plan, state, plan.upstream.decode_response(body))
        if plan.sink is not None:
            try:
                capture_response(answer, plan.sink, plan.upstream.reasoning)
            except Exception as e:  # remembering never costs the client its answer
                state.capture_error = f"{type(e).__name__}: {e}"
        return _filtered(plan, state, answer)
    except SHAPE_ERRORS as e:
        raise UnsupportedShape(
            f"unexpected answer shape ({type(e).__name__}: {short(e)})"
        ) from None


def _fresh_ids(plan: FlowPlan, state: AnswerState, answer: Response) -> Response:
    """The answer's calls under ids the client has not seen yet, before anything reads them
    (the store's capture, repair, the loop guard): ``addon.transforms.call_ids``."""
    answer, renamed = fresh_call_ids(answer, plan.history_ids)
    if renamed:
        state.notes[RENAMED_NOTE] += renamed
    return answer


def _renamed(state: AnswerState) -> None:
    state.notes[RENAMED_NOTE] += 1


def _decode_frames(plan: FlowPlan, raw: bytes) -> Response:
    """An upstream that answers only in AWS event-stream frames (Kiro), asked for a whole
    answer: its stream decoder over the frames, the events assembled into one answer."""
    frames, error = split_all(raw)
    if error is not None:
        raise UnsupportedShape(f"cannot read the event stream ({short(error)})")
    decoder = plan.upstream.stream_decoder()
    events = [e for f in frames for e in decoder.feed(f.text, f.event)]
    events += decoder.finish()
    try:
        return response_from_events(events, plan.upstream.name)
    except StreamFailed as e:
        raise UpstreamError(e.error.message, e.status, e.error.type) from None
    except SHAPE_ERRORS as e:
        raise UnsupportedShape(
            f"unexpected answer shape ({type(e).__name__}: {short(e)})"
        ) from None


def _filtered(plan: FlowPlan, state: AnswerState, answer: Response) -> Response:
    """A decoded whole answer, parsed and filtered as the route says; its usage is the
    flow's from now on (a retried answer's replaces the first's)."""
    state.usage = answer.usage
    if plan.parse_text:
        answer = parse_text_tools(answer, state.new_parser(plan))
    if plan.custom_tools:
        answer = unwrap_custom_calls(answer, plan.custom_tools)
    if plan.schemas:
        answer, records = repair_response(answer, plan.schemas, state.notes)
        state.repair_log.extend(records)
    if plan.loop is not None:
        answer, replaced = guard_response(answer, plan.loop)
        if replaced:
            state.replaced(plan, replaced)
    if plan.drops_late_signatures:
        answer = drop_trailing_signatures(answer)
    if plan.hide_thinking:
        answer = dataclasses.replace(
            answer, parts=tuple(p for p in answer.parts if not isinstance(p, Thinking))
        )
    return answer


def encode_answer(plan: FlowPlan, answer: Response) -> bytes:
    """The client's body: its dialect's whole answer, or a stream when it asked for one.
    Raises ``UnsupportedShape`` (a value of an unforeseen type in the answer),
    ``ValueError`` (no strict JSON for it) or ``RecursionError``."""
    try:
        if plan.rename_answer:
            answer = renamed(answer, plan.defaults.model)
        if not answer.model or answer.created is None:
            answer = dataclasses.replace(
                answer,
                model=answer.model or plan.defaults.model or None,
                created=plan.defaults.created if answer.created is None else answer.created,
            )
        if plan.stream:
            encoder = plan.client.stream_encoder(plan.defaults)
            search = plan.client.web_search  # the blocks of the bridge's searches
            opaque = search.events if search is not None else None
            return sse_from_response(answer, encoder, plan.client_framing, opaque)
        return dump(plan.client.encode_response(answer))
    except SHAPE_ERRORS as e:
        raise UnsupportedShape(
            f"unexpected answer shape ({type(e).__name__}: {short(e)})"
        ) from None


def renamed(answer: Response, model: str) -> Response:
    """The whole answer naming ``model`` (``FlowPlan.rename_answer``), in the wire fields it
    kept too (a same-dialect answer is written from them)."""
    return dataclasses.replace(answer, model=model, extra=with_model(answer.extra, model))


def client_answer(
    plan: FlowPlan, state: AnswerState, raw: bytes, content_type: str
) -> tuple[bytes, str]:
    """A 2xx answer read whole (a retry's, or a stream held back), as the client's body
    and its content type: through the stream pipeline when it is a stream, else decoded
    and encoded. Raises as ``decode_answer`` and ``encode_answer`` do."""
    ctype = content_type.lower()
    if plan.upstream_streams and (
        not ctype.startswith("application/json") or plan.upstream_framing == "json_array"
    ):
        processor = stream_processor(plan, state, None)
        body = b"".join([*processor.feed(raw), *processor.finish()])
        state.processor = None
        return body, CONTENT_TYPES[plan.client_framing]
    body = encode_answer(plan, decode_answer(plan, state, raw))
    return body, CONTENT_TYPES[plan.client_framing] if plan.stream else "application/json"


def needs_retry(plan: FlowPlan, state: AnswerState, answer: Response) -> bool:
    """A required tool call is missing (not when the loop guard replaced it)."""
    return (
        plan.tool_required
        and not state.loop_replaced
        and not any(isinstance(p, ToolCall) for p in answer.parts)
    )


def stage_body(plan: FlowPlan, state: AnswerState, stage: staged_retry.Stage) -> bytes:
    """The upstream body of a staged retry (``addon.transforms.staged_retry``). Raises
    ``ValueError`` when this flow cannot be retried that way."""
    if plan.unified is None or plan.encode_stage is None:
        raise ValueError("no request to retry")
    return plan.encode_stage(staged_retry.stage_request(plan.unified, stage, state.notes))


# ---------------------------------------------------------------------- the loop guard


def loop_ask_again(plan: FlowPlan, state: AnswerState) -> bool:
    """The answer repeated the call and the route asks again with the invoke protocol."""
    return plan.loop_fallback and state.loop_replaced > 0


def ask_again(plan: FlowPlan, state: AnswerState) -> tuple[FlowPlan, bytes] | None:
    """The loop guard's second request: the same conversation with the tools in the prompt
    (invoke), and the plan that reads that protocol's answer and judges it again (no third
    request; the store keeps native answers only). None when it cannot be written (the
    first answer stays)."""
    if plan.encode_invoke is None:
        return None
    state.loop_replaced = 0
    state.capture = None
    try:
        second, body = plan.encode_invoke(plan, state.notes)
    except (ClientError, UnsupportedShape, ValueError, RecursionError, *SHAPE_ERRORS):
        return None
    state.notes["loop guard: asked again with the invoke text protocol"] += 1
    state.loop_asked = True
    return second, body
