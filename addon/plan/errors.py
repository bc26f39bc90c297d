"""Error bodies for a flow's client, from its frozen plan: an upstream error re-shaped for
the client's dialect (``error_body``), an error the upstream sent inside its framing
(``upstream_error``) or as a 2xx body (``success_error``), an answer the bridge cannot
translate (``unreadable_answer``), the message of an upstream error body (``error_message``)
and the status its type names (``named_status``). Pure: bytes in, bytes out; the flow's
secrets never reach a body."""

from __future__ import annotations

from typing import Any

from addon.dialects import DIALECTS
from addon.model import ClientError, StreamError, UnsupportedShape
from addon.plan.flow_plan import FlowPlan
from addon.plan.values import (
    MAX_ERROR_QUOTE,
    SHAPE_ERRORS,
    UpstreamError,
    error_bytes,
    load_json,
    short,
)
from addon.stream.output import cut_message
from addon.stream.sse import encode_pairs


def error_message(plan: FlowPlan, raw: bytes) -> str:
    """The message of an upstream error body (its dialect's), else its text (cut)."""
    try:
        message = plan.upstream.error_message(load_json(raw))
    except (ValueError, RecursionError, UnsupportedShape, *SHAPE_ERRORS):
        message = None
    return message or raw[: MAX_ERROR_QUOTE * 4].decode("utf-8", "replace")


def named_status(plan: FlowPlan, body: Any) -> int | None:
    """The HTTP status an upstream error body names by its type or code, read as its
    dialect's error, else as another dialect's (llama-server writes OpenAI's shape on
    ``/v1/messages``); None when it names none."""
    for dialect in (plan.upstream, *DIALECTS.values()):
        try:
            status = dialect.error_status(body)
        except (UnsupportedShape, *SHAPE_ERRORS):
            status = None
        if status is not None:
            return status
    return None


def success_error(plan: FlowPlan, raw: bytes) -> tuple[int, bytes, str] | None:
    """A 2xx body that is an upstream error, not an answer (a gateway's ``200`` with
    ``{"error": …}``): ``(status, the client's body, message)``, the status the error's type
    or code names (502 when it names none: the upstream failed), the body in the client's
    dialect (a same-dialect client's own shape as it came). None when it is no error body.
    For a body that did not decode as an answer (a Responses answer with ``status: failed``
    holds an ``error`` too, and is an answer). An upstream that answers only in frames
    (Kiro) and sent JSON naming no status: None, the answer is told as what came instead."""
    try:
        body = load_json(raw)
        message = plan.upstream.error_message(body)
    except (ValueError, RecursionError, UnsupportedShape, *SHAPE_ERRORS):
        return None
    if not message:
        return None
    status = named_status(plan, body)
    if status is None:
        if plan.upstream_framing == "aws_eventstream":
            return None  # Kiro answers in frames only: told as what came (``not_a_stream``)
        status = 502
    if plan.same_dialect and not foreign_error(plan, raw):
        return status, raw, message
    client_body, message = error_body(plan, status, raw)
    return status, client_body, message


def error_body(plan: FlowPlan, status: int, raw: bytes) -> tuple[bytes, str]:
    """An upstream error re-shaped for the client's dialect: ``(body, message)``. Any
    body works: one that is not a readable error object is quoted (cut)."""
    kind: int | None = None
    try:
        body = load_json(raw)
        message = plan.upstream.error_message(body)
        kind = named_status(plan, body) if message else None
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
    if kind is not None and plan.upstream.error_type(kind) != plan.upstream.error_type(status):
        named = plan.client.error_type(kind)
    error = ClientError(plan.secrets(message), status=status, type=named)
    return error_bytes(plan.client, error), message


def foreign_error(plan: FlowPlan, raw: bytes) -> bool:
    """Whether an upstream error on a same-dialect route is an error body of another shape
    than its dialect writes (llama-server answers OpenAI's ``{"error": …}`` on
    ``/v1/messages``; LiteLLM answers it on Gemini's ``:generateContent``, without Google's
    ``status`` name): its client could not read it, so it is re-shaped too. Not JSON, or no
    error message the dialect reads: False (passed on as it came)."""
    try:
        body = load_json(raw)
        message = plan.upstream.error_message(body)
    except (ValueError, RecursionError, UnsupportedShape):
        return False
    if not message or not isinstance(body, dict):
        return False
    own = load_json(error_bytes(plan.client, ClientError(message, status=400)))
    if not set(own) <= set(body):
        return True
    return _names_missing(own.get("error"), body.get("error"))


def _names_missing(own: object, theirs: object) -> bool:
    """Whether the error object ``theirs`` lacks a text field the dialect's own error object
    names the error by (OpenAI's and Anthropic's ``type``, Google's ``status``); fields the
    dialect leaves empty (OpenAI's ``param``, ``code``) are not asked for."""
    if not isinstance(own, dict) or not isinstance(theirs, dict):
        return False
    return any(isinstance(v, str) and k not in theirs for k, v in own.items())


def upstream_error(plan: FlowPlan, e: UpstreamError) -> bytes:
    """An error the upstream sent inside its answer's framing (a Kiro exception frame), as
    an error body in the client's dialect (its status: ``e.status``)."""
    message = plan.secrets(e.message)
    return error_bytes(plan.client, ClientError(message, status=e.status, code=e.code))


def cut_answer(plan: FlowPlan, cause: str) -> bytes:
    """A 502 body in the client's dialect for a whole answer whose body the upstream broke off
    (``cause``: ``upstream_cut``, ``upstream_reset``, ``upstream_idle``)."""
    message = f"cursor-bridge: the upstream's answer broke off before its end ({cause})"
    return error_bytes(plan.client, ClientError(message, status=502, code=cause))


def cut_event(plan: FlowPlan, cause: str) -> bytes:
    """The client's dialect error event (SSE) naming ``cause`` that ends an error stream the
    upstream broke off (a non-2xx ``text/event-stream`` passed on as it came: its status said
    error already, the SDK reads the body whole); the event a cut 2xx stream ends with, the
    type for 503."""
    encoder = plan.client.stream_encoder(plan.defaults)
    pairs = encoder.feed(StreamError(plan.secrets(cut_message(cause)), cause))
    return b"".join(encode_pairs(pairs) + encode_pairs(encoder.finish()))


def unreadable_answer(plan: FlowPlan, why: str) -> bytes:
    """A 502 body in the client's dialect for an upstream answer the bridge cannot turn
    into the client's dialect (on a same-dialect route the answer is passed on instead)."""
    return error_bytes(
        plan.client,
        ClientError(
            f"cursor-bridge could not translate the {plan.upstream.name} upstream's answer "
            f"for this {plan.client.name} client: {plan.secrets(why)}",
            status=502,
            code="untranslatable_answer",
        ),
    )


def unreadable_why(e: BaseException) -> str:
    """Why an answer could not be read, for its comment line and the client's 502."""
    return "nested too deeply" if isinstance(e, RecursionError) else short(e)
