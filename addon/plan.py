"""What to do with a flow, decided with plain values: the shell only applies it.

Contract: sans-IO (no mitmproxy, no sockets). The request side is one call,
``decide(settings, incoming, env)``, returning one of

- ``Pass``: leave the flow alone (not routed, or routed but not readable on a
  same-dialect route — then with a reason to log and show);
- ``Reject``: answer the client ourselves, in its dialect (a client mistake, a
  body another dialect cannot take, a key the route needs and lacks);
- ``Rewrite``: the ``WireRequest`` to send upstream and the ``FlowPlan`` that
  says how to rewrite the answer.

The answer side works on the ``FlowPlan``: ``stream_processor`` builds the
stream pipeline for an SSE answer, ``decode_answer`` / ``encode_answer`` turn a
whole answer around, ``needs_retry`` says whether a required tool call is
missing, ``error_body`` re-shapes an upstream error for a client of another
dialect. The loop guard's verdict on the history (``FlowPlan.loop``) is carried
as plain values; the answer is judged against it (``guard_response`` whole, the
``LoopGuardStage`` in a stream), and ``invoke_body`` / ``client_answer`` give the
shell its second request and that answer's body. Nothing here logs; the shell
does, from what these return.

Strict JSON both ways: ``load_json`` refuses ``NaN``, ``Infinity`` and numbers
that overflow a float (``1e400``), ``dump`` never writes them. A body the bridge
cannot read or cannot write strictly is passed on untouched when client and
upstream speak the same dialect, and answered with an error in the client's
dialect otherwise (``_not_understood``, ``FlowPlan.unreadable_answer``); an
exception nobody expected becomes the same kind of decision
(``internal_error``). Text quoted from input into reasons and messages goes
through ``short`` (redacted, escaped, cut).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from addon.config import Settings
from addon.dialects import DIALECTS, Dialect
from addon.dialects.base import Framing, Query, WireRequest, describe
from addon.dialects.kiro import NAME as KIRO
from addon.dialects.kiro.placement import DESCRIPTION_LIMIT
from addon.dialects.kiro.placement import prepare as kiro_prepare
from addon.jsonio import dumpb, loads, same
from addon.model import (
    JSON,
    NO_DEFAULTS,
    AnswerDefaults,
    ClientError,
    Event,
    Notes,
    OpaqueTool,
    Request,
    Response,
    StreamError,
    Thinking,
    ToolCall,
    ToolMode,
    UnsupportedShape,
)
from addon.redact import Secrets, clean
from addon.routes import Route, match
from addon.store import ReasoningStore, Scope, ScopedStore
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
from addon.textproto.invoke import make_trigger
from addon.textproto.parser import Protocol, TextProtocolParser
from addon.transforms.cache import strip_cache_control
from addon.transforms.custom_tools import unwrap_custom_calls, wrap_custom_tools
from addon.transforms.loop_guard import LoopVerdict, check_loop, guard_response
from addon.transforms.repair import ToolSchemas, parse_arguments, repair_response, schemas_of
from addon.transforms.restore import restore_request
from addon.transforms.signatures import drop_trailing_signatures
from addon.transforms.staged_retry import Stage as Stage_
from addon.transforms.staged_retry import stage_request
from addon.transforms.text_tools import TextToolSettings, apply_text_tools, parse_text_tools
from addon.transforms.thinking import apply_thinking_prompt, resolve_model
from addon.transforms.tools import check_tools, leave_out_tools, sanitize_tool_schemas
from addon.wire import build_wire

MAX_REASON = 200
"""Reasons and messages quoted from input are cut to this many characters."""
SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError)
"""What a lenient codec raises on a shape it did not foresee (a value of another type
where it expected an object): the body is not understood, like ``UnsupportedShape`` —
passed on (same dialect) or a 400 (another), never a traceback."""
MAX_ERROR_QUOTE = 500
"""Characters of an upstream's unreadable error body quoted in the client's error."""
clock: Callable[[], float] = time.time
"""The time a client's answer says it was made, where the upstream's does not say
(``AnswerDefaults``); tests that compare the bytes of two answers pin it."""


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Incoming:
    """The client's request as plain values. ``headers`` may hold keys: never shown."""

    method: str
    host: str
    path: str
    """Path and query, as sent."""
    headers: Mapping[str, str] = field(repr=False)
    """Names lower-case."""
    body: bytes = field(repr=False, default=b"")

    @property
    def bare_path(self) -> str:
        return self.path.split("?", 1)[0]

    @property
    def query(self) -> Query:
        from urllib.parse import parse_qsl

        q = self.path.partition("?")[2]
        # surrogateescape: a %FF (not UTF-8) survives the trip back (the shell encodes alike)
        return tuple(parse_qsl(q, keep_blank_values=True, errors="surrogateescape")) if q else ()


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
        return _error_bytes(self.client, error), message

    def upstream_error(self, e: UpstreamError) -> bytes:
        """An error the upstream sent inside its answer's framing (a Kiro exception frame), as
        an error body in the client's dialect (its status: ``e.status``)."""
        message = self.secrets(e.message)
        return _error_bytes(self.client, ClientError(message, status=e.status, code=e.code))

    def unreadable_answer(self, why: str) -> bytes:
        """A 502 body in the client's dialect for an upstream answer the bridge cannot turn
        into the client's dialect (on a same-dialect route the answer is passed on instead)."""
        return _error_bytes(
            self.client,
            ClientError(
                f"cursor-bridge could not translate the {self.upstream.name} upstream's answer "
                f"for this {self.client.name} client: {self.secrets(why)}",
                status=502,
                code="untranslatable_answer",
            ),
        )


class UpstreamError(UnsupportedShape):
    """A whole answer that is an upstream error in its stream framing (a Kiro exception frame):
    the client gets it in its dialect with ``status``."""

    def __init__(self, message: str, status: int, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class RouteCredentials:
    """A key the shell read for the route (a Kiro token file's access token), sent upstream
    instead of the client's; never shown."""

    key: str = field(repr=False)
    profile_arn: str | None = None


@dataclass(frozen=True, slots=True)
class Pass:
    """Leave the flow alone. ``reason`` set: it was routed, say why it was not rewritten."""

    route: Route | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """Answer the client ourselves (the upstream is not called)."""

    route: Route
    status: int
    body: bytes
    message: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    plan: FlowPlan
    wire: WireRequest
    summary: str
    original: bytes = field(repr=False)
    body: bytes = field(repr=False, default=b"")
    """``wire.body`` as strict JSON: what the upstream gets. The client's body itself (the same
    object) when a same-dialect rewrite left it as it was (``unchanged``)."""


type Decision = Pass | Reject | Rewrite

CONTENT_TYPES: dict[Framing, str] = {
    "sse": "text/event-stream; charset=utf-8",
    "json_array": "application/json",
    "aws_eventstream": "application/vnd.amazon.eventstream",
}
"""The content type of a stream in each framing."""


# --------------------------------------------------------------------------- request


def route_for(settings: Settings, method: str, host: str, path: str) -> Route | None:
    """The first route that matches, or None: the flow is not the bridge's."""
    return match(settings.routes, host, path, method)


def decide(
    settings: Settings,
    route: Route,
    incoming: Incoming,
    env: Mapping[str, str],
    creds: RouteCredentials | None = None,
    store: ReasoningStore | None = None,
    secrets: Secrets | None = None,
) -> Decision:
    """Decode, transform and encode one routed request (see the module docstring). ``creds``:
    what the shell read for the route (a Kiro token file), sent instead of any other key;
    ``store``: the reasoning store (restores what the client dropped; captures the answer)."""
    client, upstream = DIALECTS[route.client], DIALECTS[route.upstream]
    plan = FlowPlan(
        route,
        client,
        upstream,
        max_event_bytes=settings.max_event_bytes,
        host=incoming.host,
        store=store,
        secrets=secrets or Secrets(),
    )
    if creds is not None:
        plan.profile_arn = creds.profile_arn
    try:
        body = load_json(incoming.body)
        if not isinstance(body, dict):
            raise UnsupportedShape("the body is JSON but not an object")
    except (ValueError, UnsupportedShape) as e:
        return _not_understood(plan, f"request body is not a JSON object ({short(e)})")
    except RecursionError:
        return _not_understood(plan, "request body is nested too deeply")
    notes = plan.notes
    # First, on every route: the comment's first line names both dialects.
    notes[f"request {client.name} → {upstream.name}"] += 1
    env_key: str | None = None
    if creds is not None:
        env_key = creds.key
    elif route.api_key_env is not None:
        env_key = env.get(route.api_key_env) or None
        if env_key is None:
            return _reject(
                plan,
                ClientError(
                    f"the bridge's route '{route.name}' takes its API key from the environment "
                    f"variable {route.api_key_env}, which is not set",
                    status=500,
                    code="bridge_configuration",
                ),
            )
    try:
        decoded = client.decode_request(body, notes)
        if client.from_path is not None:
            decoded = dataclasses.replace(
                decoded, **client.from_path(incoming.bare_path, incoming.query)
            )
        plan.defaults = AnswerDefaults(decoded.model, int(clock()))
        unified = transform(decoded, plan, settings)

        def wire_for(req: Request, notes: Notes) -> WireRequest:
            return build_wire(
                req,
                client,
                upstream,
                path=incoming.bare_path,
                query=incoming.query,
                headers=incoming.headers,
                notes=notes,
                upstream_path=route.upstream_path,
                env_key=env_key,
                project=route.project,
            )

        wire = wire_for(unified, notes)
        plan.unified = unified
        plan.encode_stage = lambda req: dump(wire_for(req, Counter()).body)
        if plan.loop_fallback:
            plan.encode_invoke = lambda: dump(
                wire_for(transform(decoded, plan, settings, "invoke"), notes).body
            )
        if plan.same_dialect and decoded.origin == upstream.name:
            _keep_explicit_empties(body, wire.body)
        if creds is not None and notes.pop("API key from the route's environment variable", 0):
            notes["Kiro token from the route's token file"] += 1
        as_sent = (
            plan.same_dialect
            and decoded.origin == upstream.name
            and unchanged(incoming.body, body, wire.body)
        )
        encoded = incoming.body if as_sent else dump(wire.body)
    except UnsupportedShape as e:
        return _not_understood(plan, f"request not understood ({short(e)})")
    except ClientError as e:
        return _reject(plan, e)
    except RecursionError:
        return _not_understood(plan, "request body is nested too deeply")
    except SHAPE_ERRORS as e:  # a codec met a value of a type it did not foresee
        return _not_understood(
            plan, f"request not understood (unexpected shape: {type(e).__name__}: {short(e)})"
        )
    except ValueError as e:  # dump: a value JSON has no room for
        return _not_understood(plan, f"request cannot be written as strict JSON ({short(e)})")
    plan.stream = unified.stream
    plan.upstream_framing = upstream.framing_for(wire.query)
    plan.client_framing = client.framing_for(incoming.query)
    summary = describe(notes) or "no changes needed"
    plan.request_notes = Counter(notes)
    return Rewrite(plan, wire, summary, incoming.body, encoded)


def _readable_object(arguments: str) -> bool:
    """Text-protocol arguments that argument repair can read as an object."""
    return isinstance(parse_arguments(arguments).value, dict)


def internal_error(route: Route, e: BaseException) -> Pass | Reject:
    """What the client gets when the bridge itself failed on its request (a bug): the request
    untouched on a same-dialect route, else a 500 in the client's dialect. Never raises."""
    plan = FlowPlan(route, DIALECTS[route.client], DIALECTS[route.upstream])
    why = f"internal error ({type(e).__name__}: {short(e)})"
    if plan.same_dialect:
        return Pass(route, why)
    return _reject(
        plan,
        ClientError(
            f"cursor-bridge failed on this {plan.client.name} request: {why}",
            status=500,
            code="bridge_internal_error",
        ),
    )


_EMPTY: tuple[Any, ...] = (None, False, "", [], {})


SAME_MIN_BYTES = 16 * 1024
"""A same-dialect body this large or larger is looked at for being unchanged (``unchanged``)…"""
SAME_BYTES_PER_VALUE = 256
"""…within a budget of one container or value (not shared by both) per this many bytes."""


def unchanged(raw: bytes, original: JSON, body: JSON) -> bool:
    """Whether ``body``, what the codecs wrote for the upstream, is the client's ``original``
    again (``jsonio.same``): then its bytes ``raw`` go upstream as the client sent them, and
    the body is not written anew (for a 10 MB body, a third of the bridge's time). A small
    body is not compared (that costs about what writing it does), nor one with a byte order
    mark (the upstream gets none)."""
    if len(raw) < SAME_MIN_BYTES or raw.startswith(b"\xef\xbb\xbf"):
        return False
    return same(original, body, len(raw) // SAME_BYTES_PER_VALUE)


def _keep_explicit_empties(original: JSON, body: JSON) -> None:
    """Top-level fields the client set to an explicit nothing (``"stream": false``,
    ``"tool_choice": null``, ``"system": ""``, ``"stop_sequences": []`` …) that the codec
    left out: the upstream gets them as sent. Only for a same-dialect route whose body was
    decoded as that dialect (a Cursor Responses-shaped body on /chat/completions is not)."""
    for key, value in original.items():
        if key not in body and any(value == e and type(value) is type(e) for e in _EMPTY):
            body[key] = value


GEMINI_DIALECTS = frozenset({"gemini", "gemini_code_assist"})


def transform(req: Request, plan: FlowPlan, s: Settings, mode: ToolMode | None = None) -> Request:
    """The route's transforms, in order; decisions go to ``plan``. ``mode``: a tool mode
    instead of the route's (the loop guard's second request)."""
    notes, route = plan.notes, plan.route
    model, thinking = resolve_model(req.model, s.models)
    if thinking:
        notes[f"{req.model} → {model} with thinking"] += 1
        req = dataclasses.replace(req, model=model)
    check_tools(req)
    if (route.tool_repair or s.tool_repair) == "on":
        plan.schemas = schemas_of(req)  # the client's own schemas, before any profile
    mode = mode or route.tool_mode or s.tool_mode
    # The loop guard reads the history while it is still structured (before a text protocol);
    # the answer is judged against its verdict.
    verdict = check_loop(req, s.loop_max_repeat)
    if verdict is not None and plan.loop is None:
        notes[verdict.note] += 1
    plan.loop = verdict
    plan.loop_fallback = verdict is not None and s.loop_fallback and mode == "native"
    if mode == "native":
        req = leave_out_tools(req, plan.upstream.runs, f"the {plan.upstream.name} upstream", notes)
    else:
        req = leave_out_tools(req, _runs_nothing, f"the {mode} text protocol", notes)
    if req.origin != plan.upstream.name:
        req = _foreign_extras(req, plan.upstream, notes)
        if route.cache_control != "keep":
            req = strip_cache_control(req, notes)
    if route.reasoning == "off" and req.thinking is not None and not thinking:
        notes["reasoning request not sent (route: reasoning = off)"] += 1
        req = dataclasses.replace(req, thinking=None)
    kiro = plan.upstream.name == KIRO
    if mode == "native" and not kiro:
        # What the client dropped comes back from the store (scoped to this upstream and the
        # model as sent); the signature rules and the thinking policy apply.
        if plan.store is not None:
            plan.sink = plan.store.scoped(Scope.of(route.name, plan.host, req.model))
        req = restore_request(
            req,
            plan.sink,
            plan.upstream.name,
            notes,
            signature_fallback=route.signature_fallback,
            thinking_budget=s.thinking_budget,
            default_thinking=route.reasoning != "off" and not thinking,
            policy="on" if route.reasoning == "on" else "auto",
        )
    # Gemini refuses much of JSON Schema: its upstreams get the gemini profile unless the
    # route names one; Kiro gets the strict one.
    auto = "gemini" if plan.upstream.name in GEMINI_DIALECTS else "strict" if kiro else s.schema
    req = sanitize_tool_schemas(req, route.schema_profile or auto, notes)
    # Thinking asked for by name (BASE-thinking), or by a client's switch on an upstream that
    # only has text: ask for <thinking> tags and parse them. Before the text protocol renders
    # tool results as user text, so the hint never lands after a tool result.
    # Kiro has no reasoning switch: a client's thinking request is the thinking prompt there.
    asked = req.thinking is not None and req.thinking.enabled and (mode != "native" or kiro)
    if thinking or asked:
        plan.parse_text = True
        req = apply_thinking_prompt(req, notes)
    if mode != "native" or plan.upstream.name != "openai_responses":
        req, plan.custom_tools = wrap_custom_tools(req, notes)
    tools = [t.name for t in req.tools or () if t.name]
    choice = req.tool_choice
    if mode != "native":
        plan.protocol = mode
        plan.trigger = make_trigger() if mode == "invoke" else None
        plan.tools = tuple(tools)
        plan.parse_text = True
        plan.tool_required = bool(tools) and (
            (choice is not None and choice.mode in ("required", "tool"))
            or (s.tool_strict and (choice is None or choice.mode != "none"))
        )
        settings = TextToolSettings(mode, plan.trigger, s.desc_limit, s.param_limit)
        req = apply_text_tools(req, settings, notes)
    elif kiro and tools:
        # Kiro's models still write "[Calling tool: X]" text at times: the answer (only) is
        # read for such calls; the request keeps its native tools.
        plan.protocol, plan.tools, plan.parse_text = "bracket", tuple(tools), True
    if kiro:
        req = kiro_prepare(
            req,
            notes,
            model_map=dict(route.model_map or ()),
            profile_arn=route.profile_arn or plan.profile_arn,
            description_limit=route.description_limit or DESCRIPTION_LIMIT,
        )
    plan.hide_thinking = s.thinking_output == "hidden"
    return req


def _runs_nothing(tool: OpaqueTool) -> bool:
    """A text protocol carries function tools only."""
    return False


def _foreign_extras(req: Request, upstream: Dialect, notes: Notes) -> Request:
    """Fields only the client's dialect has are not sent to another: name them."""
    # ``__…__`` keys are a codec's private tables (items, turn layout), not the client's fields.
    fields = sorted(k for k in req.extra if not (k.startswith("__") and k.endswith("__")))
    if fields and req.origin != upstream.name:
        notes[f"{req.origin}-only fields not sent: {', '.join(fields)}"] += 1
    return req


def _not_understood(plan: FlowPlan, why: str) -> Pass | Reject:
    """Same dialect: the upstream can read what we could not, pass it. Otherwise the upstream
    cannot either (another dialect, another path): say so in the client's dialect."""
    if plan.same_dialect:
        return Pass(plan.route, why)
    return _reject(
        plan,
        ClientError(
            f"cursor-bridge could not translate this {plan.client.name} request for the "
            f"{plan.upstream.name} upstream: {why}",
            code="untranslatable_request",
        ),
    )


def _reject(plan: FlowPlan, e: ClientError) -> Reject:
    if plan.secrets:  # a message that quotes the request never quotes the flow's key
        message = plan.secrets(e.message)
        e = ClientError(message, param=e.param, code=e.code, status=e.status, type=e.type)
    return Reject(plan.route, e.status, _error_bytes(plan.client, e), e.message)


def _error_bytes(client: Dialect, e: ClientError) -> bytes:
    """The client dialect's error body; its own shape always (a message that will not encode
    is replaced by one that does)."""
    try:
        return dump(client.encode_error(e))
    except (ValueError, RecursionError):
        plain = ClientError(
            clean(e.message, MAX_ERROR_QUOTE), status=e.status, code=e.code, type=e.type
        )
        return dump(client.encode_error(plain))


# --------------------------------------------------------------------------- helpers


def dump(body: Any) -> bytes:
    """Strict JSON for the wire: UTF-8, compact. A lone surrogate (``"\\ud83d"`` in the input)
    cannot be UTF-8: then the whole body is written with ASCII escapes, still valid JSON.
    Raises ``RecursionError`` for data nested too deeply. What it writes was read by
    ``load_json``, which lets no ``NaN`` / ``Infinity`` in (``addon.jsonio``)."""
    return dumpb(body)


def load_json(raw: bytes | str) -> Any:
    """Strict JSON: UTF-8 only (RFC 8259; ``json.loads`` alone would take UTF-16/32 and
    surrogates encoded as UTF-8 bytes), no ``NaN``, ``Infinity``, ``-Infinity`` or floats
    that overflow (``1e400``): ``ValueError``, as for anything else ``json.loads`` refuses.
    Nesting too deep raises ``RecursionError``. Empty input is not JSON. A leading UTF-8
    byte order mark is ignored (RFC 8259 allows it)."""
    if isinstance(raw, bytes | bytearray):
        return loads(bytes(raw).removeprefix(b"\xef\xbb\xbf"))
    return loads(raw.removeprefix("\ufeff"))


def short(e: BaseException | str) -> str:
    """A message cut to ``MAX_REASON`` characters, safe to log and show whatever it holds:
    credentials redacted, surrogates and control characters escaped (``addon.redact``)."""
    return clean(e, MAX_REASON)
