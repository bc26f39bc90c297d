"""What every dialect offers: a codec for requests, whole responses and streams.

Contract: a dialect turns its wire JSON into the unified model and back. It
never sees bytes of a socket, headers or mitmproxy; SSE framing belongs to
``addon.stream``. Decoders are lenient (unknown fields are kept in ``extra``),
encoders produce what the wire's official clients accept."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict

import msgspec

from addon.dialects.searches import SearchShape
from addon.model import (
    JSON,
    AnswerDefaults,
    CacheMarks,
    ClientError,
    Event,
    Notes,
    OpaqueTool,
    ReasoningStyle,
    Request,
    Response,
    SchemaProfile,
)


class DecoderFastPath(Protocol):
    """What a stream decoder offers the fast path (``addon.stream.fastpath``), for speed: plain
    text is most of a stream.

    ``text_frame``: the bytes of a whole SSE event before and after a JSON string (its quotes
    included) such that an event of exactly that shape is a plain text chunk holding that
    string's text and nothing else (None while no such frame is known). ``plain_frame``: the
    same while such an event is also ``skippable`` (None otherwise)."""

    @property
    def text_frame(self) -> tuple[bytes, bytes] | None: ...
    @property
    def plain_frame(self) -> tuple[bytes, bytes] | None: ...
    def skippable(self, data: str) -> bool:
        """Whether nobody but an encoder of this dialect would read this event's data."""
        ...

    def text_run(self, chunk: bytes) -> tuple[str, int] | None:
        """Whole events that are all plain text: their text joined and how many; else None."""
        ...

    def skippable_run(self, chunk: bytes) -> int:
        """How many events ``chunk`` holds when every one is ``skippable``, else 0."""
        ...


@dataclass(frozen=True, slots=True)
class RouteFacts:
    """What a route tells a dialect's ``prepare`` (plain values: dialects know no routes)."""

    model_mapped: bool = False
    """The route's ``model_map`` chose the model's name: the dialect keeps it as it is."""
    profile_arn: str | None = None
    description_limit: int | None = None


@dataclass(frozen=True, slots=True)
class TokenCount:
    """How an upstream counts a request's tokens itself (Gemini's ``countTokens``)."""

    request: Callable[[Request, Target, str, Notes], tuple[str, Query, JSON]]
    """``(path, query, body)`` of the counting call, for the dialect named."""
    answer: Callable[[Any], int | None]
    """The count in its answer; None: not there."""


class StreamDecoder(Protocol):
    """One upstream SSE event in, unified events out; ``fast_path``: what it offers the fast
    path, or None."""

    @property
    def fast_path(self) -> DecoderFastPath | None: ...
    def feed(self, data: str, event: str | None) -> list[Event]: ...
    def finish(self) -> list[Event]: ...


class EncoderFastPath(Protocol):
    """What a stream encoder offers the fast path, for speed.

    ``text_sse(text, quoted=None) -> bytes | None`` gives the SSE bytes that ``feed`` of a
    plain ``TextDelta(text)`` (``text`` not empty) would give, with the same change of state,
    when that is a fast path (a text block already open); None, with nothing done, when it is
    not. ``quoted``, when given, is ``dumpb(text)``: the JSON string the caller had already
    (the upstream's, read as it was), written as it is; with a plain text (printable ASCII
    without a backslash) ``text`` may be None, the encoder reading it from ``quoted``.

    ``text_frame``: the bytes ``text_sse`` last wrote before and after a text's JSON string,
    for as long as the next plain text would get the same frame and change nothing else (None
    from a ``feed`` or ``finish`` that may change that): the caller may then write ``head +
    quoted + tail`` itself."""

    @property
    def text_frame(self) -> tuple[bytes, bytes] | None: ...
    def text_sse(self, text: str | None, quoted: bytes | None = None) -> bytes | None: ...


class StreamEncoder(Protocol):
    """Unified events in, ``(event name, data)`` pairs out; ``finish`` is idempotent.
    ``fast_path``: what it offers the fast path, or None."""

    @property
    def fast_path(self) -> EncoderFastPath | None: ...
    def feed(self, event: Event) -> list[tuple[str | None, str]]: ...
    def finish(self) -> list[tuple[str | None, str]]: ...


class StreamEncoderFactory(Protocol):
    """A dialect's stream encoder class: built with the answer's defaults (the model the
    client asked for, the time), or none."""

    def __call__(self, defaults: AnswerDefaults = ...) -> StreamEncoder: ...


def count_at(raw: Any, *path: str) -> int | None:
    """The token count at ``path`` in a usage object (an int, not a bool), else None."""
    for key in path:
        raw = raw.get(key) if isinstance(raw, dict) else None
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def unsupported_tool(tool: OpaqueTool, index: int, upstream: str) -> ClientError:
    """The 400 for a tool of a kind ``upstream`` (``"an Anthropic upstream"``) cannot run that
    reached its encoder: routes leave such tools out before (``leave_out_tools``), so this is
    what a direct caller of the encoder gets."""
    return ClientError(
        f"tool '{tool.name or tool.type}' has type '{tool.type}', which {upstream} cannot run; "
        "remove it from the request",
        param=f"tools[{index}]",
        code="unsupported_tool",
    )


def sse_text_frame(data: str, marker: str, *, last: bool = False) -> tuple[bytes, bytes] | None:
    """The SSE event ``data: {data}`` cut around the empty JSON string that ends ``marker``
    (its first occurrence, or its last with ``last``): the bytes before and after a text's JSON
    string, for ``StreamEncoder.text_sse``. None when ``marker`` is not in ``data``."""
    raw, mark = data.encode(), marker.encode()
    at = raw.rfind(mark) if last else raw.find(mark)
    if at == -1:
        return None
    cut = at + len(mark) - 2
    return b"data: " + raw[:cut], raw[cut + 2 :] + b"\n\n"


type Query = tuple[tuple[str, str], ...]

type Framing = Literal["sse", "json_array", "aws_eventstream"]
"""How a streamed body is cut into events: server-sent events, the items of one JSON array
(Gemini without ``alt=sse``), or AWS event-stream binary frames (Kiro,
``application/vnd.amazon.eventstream``; upstream side only)."""


class PathFields(TypedDict, total=False):
    """Request fields a client dialect carries in its path (``Dialect.from_path``)."""

    model: str
    stream: bool
    stream_explicit: bool


@dataclass(frozen=True, slots=True)
class Target:
    """Where the client sent its request, as plain values, for the upstream dialect to place its
    own request (``Dialect.place``)."""

    path: str
    """The client's path, without the query string."""
    query: Query
    client_suffix: str
    """The end of the client dialect's endpoint path (``/messages``, ``/responses``)."""
    same_dialect: bool
    upstream_path: str | None = None
    """A route's ``upstream_path`` (it may carry a query of its own); it always wins."""
    project: str | None = None
    """A route's ``project`` (Gemini Code Assist wraps the body with it)."""
    client_base: str | None = None
    """The client's path before its dialect's endpoint and API version, when the client
    dialect can tell (``Dialect.path_base``): ``/proxy`` of
    ``/proxy/v1beta/models/m:streamGenerateContent``."""


_VERSION = re.compile(r"/v\d+[a-z]*\d*$")
"""A trailing API version segment: ``/v1``, ``/v1beta``, ``/v1internal``."""


def endpoint_base(t: Target) -> str:
    """The client's path without its dialect's endpoint and a trailing API version segment:
    ``""`` of ``/v1/chat/completions``, ``/proxy`` of ``/proxy/v1/messages``; a path that does
    not end with the endpoint is kept whole (``/proxy/anthropic``). For upstream dialects
    whose paths carry their own version (Gemini's ``/v1beta/models/…``)."""
    if t.client_base is not None:
        return t.client_base
    path = t.path
    if t.client_suffix and path.endswith(t.client_suffix):
        path = path[: -len(t.client_suffix)]
    return _VERSION.sub("", path.rstrip("/"))


def suffix_placement(suffix: str) -> Callable[[Request, Target], tuple[str, Query]]:
    """The usual placement: same dialect → the client's path and query; another dialect → the
    client's path with its endpoint swapped for ``suffix`` (``/v1/messages`` →
    ``/v1/chat/completions``) and without the client dialect's query (``?beta=true``). A client
    dialect that knows where its endpoint starts (``Target.client_base``: Gemini's
    ``/v1beta/models/{model}:streamGenerateContent``) gets ``{base}/v1{suffix}``."""

    def place(req: Request, t: Target) -> tuple[str, Query]:
        if t.upstream_path is not None:
            return split_path(t.upstream_path, t.query if t.same_dialect else ())
        if t.same_dialect:
            return t.path, t.query
        if t.client_base is not None:
            return f"{t.client_base}/v1{suffix}", ()
        path = t.path
        if t.client_suffix and path.endswith(t.client_suffix):
            path = path[: -len(t.client_suffix)] + suffix
        elif not path.endswith(suffix):
            path = path.rstrip("/") + suffix
        return path, ()

    return place


def split_path(path: str, fallback_query: Query) -> tuple[str, Query]:
    """``/a/b?x=1`` → ``("/a/b", (("x", "1"),))``; no query in ``path`` → ``fallback_query``."""
    from urllib.parse import parse_qsl

    base, sep, query = path.partition("?")
    if not sep:
        return base, fallback_query
    return base, tuple(parse_qsl(query, keep_blank_values=True))


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    path: str
    """The end of the chat endpoint's path (``/chat/completions``, ``/messages``)."""
    decode_request: Callable[[JSON, Notes], Request]
    encode_request: Callable[[Request, Notes], JSON]
    decode_response: Callable[[JSON], Response]
    encode_response: Callable[[Response], JSON]
    stream_decoder: Callable[[], StreamDecoder]
    stream_encoder: StreamEncoderFactory
    encode_error: Callable[[ClientError], JSON]
    error_message: Callable[[Any], str | None]
    """The message of an error body the upstream sent in this dialect, if there is one."""
    error_type: Callable[[int], str]
    """The error type this dialect's API writes for an HTTP status (``rate_limit_error``,
    ``RESOURCE_EXHAUSTED`` …): the dialect's one table (its ``errors`` module), used by
    ``encode_error`` and by the error event that ends its streams."""
    error_status: Callable[[Any], int | None]
    """The HTTP status an error body the upstream sent in this dialect names by its own type
    (its ``errors`` table read backwards), if it names one."""
    place: Callable[[Request, Target], tuple[str, Query]] | None = None
    """Path and query of the upstream request; ``None``: ``suffix_placement(path)``."""
    key_headers: tuple[str, ...] = ("authorization",)
    """Where a client of this dialect puts its API key, in the order they are read
    (``authorization`` values lose their ``Bearer`` prefix)."""
    key_query: str | None = None
    """A query parameter a client of this dialect may carry its key in instead (Gemini:
    ``?key=``), read after ``key_headers`` and never sent to another dialect's upstream."""
    auth_header: str = "authorization"
    """Where this dialect's upstream wants the key (``authorization`` gets ``Bearer``)."""
    fixed_headers: tuple[tuple[str, str], ...] = ()
    """Headers an upstream of this dialect needs, set when the client did not send them."""
    own_headers: tuple[str, ...] = ()
    """Name prefixes of headers only this dialect understands (``anthropic-``): removed when the
    request goes to an upstream of another dialect."""
    framing: Callable[[Query], Framing] | None = None
    """How a streamed body of this dialect is framed, given the query of its request (Gemini:
    ``sse`` with ``alt=sse``, else one JSON array); ``None``: always ``sse``."""
    envelope: Callable[[JSON, Request, Target], JSON] | None = None
    """Wraps the encoded body for an upstream of this dialect (Code Assist's
    ``{model, project, user_prompt_id, request}``); ``None``: sent as encoded."""
    from_path: Callable[[str, Query], PathFields] | None = None
    """What a client of this dialect says in its path and query rather than its body (Gemini:
    the model, and whether it streams), read after ``decode_request``."""
    runs_tool: Callable[[OpaqueTool], bool] | None = None
    """Whether an upstream of this dialect runs a tool of a kind only some dialects carry
    (``OpaqueTool``: Codex's ``namespace``, OpenAI's hosted ``web_search``, Anthropic's server
    tools, Gemini's ``googleSearch`` …); ``None``: those of its own dialect and no other. The
    others are left out before encoding (``addon.transforms.tools.leave_out_tools``)."""
    late_signatures: bool = False
    """Whether this dialect's answers may carry a signature-only reasoning part after the
    text (Gemini 3 ends a text answer with an empty text part holding a ``thoughtSignature``):
    a client of another dialect then gets it only where it signs what follows
    (``addon.transforms.signatures``). Without it no stage watches the answer's text for it,
    and plain text keeps the stream's fast path."""
    schema_profile: SchemaProfile | None = None
    """The tool-schema profile requests to this upstream get unless the route names one
    (Gemini refuses much of JSON Schema: ``gemini``; Kiro: ``strict``); ``None``: the
    ``bridge_schema`` option's."""
    reasoning: ReasoningStyle = "none"
    """What this dialect's answers carry as reasoning (``addon.model.ReasoningStyle``): what the
    reasoning store captures from an upstream of this dialect and gives back to it."""
    reasoning_switch: bool = True
    """Whether the upstream has a reasoning switch and carries reasoning back: the store then
    restores what a client dropped. False (Kiro): a client's thinking request becomes the
    thinking prompt (``<thinking>`` tags), and nothing is restored."""
    answer_text_calls: Literal["bracket"] | None = None
    """A text tool-call protocol this upstream's models write in their answers at times
    although the request has native tools (Kiro: ``[Calling tool: X]``): a native answer is
    read for such calls too (the request keeps its native tools)."""
    native_custom_tools: bool = False
    """Whether the upstream takes custom (freeform) tools as they are (Responses); else they
    are carried as function tools and their calls unwrapped."""
    prepare: Callable[[Request, Notes, RouteFacts], Request] | None = None
    """The upstream's last step before encoding, with what the route says (Kiro: the model
    mapped to its ``modelId``, long tool descriptions moved); ``None``: nothing."""
    token_count: TokenCount | None = None
    """The upstream's own token counting, for Anthropic's ``count_tokens`` (Gemini);
    ``None``: the request goes to the upstream's ``count_tokens`` as it came."""
    token_count_endpoint: bool = False
    """Whether clients of this dialect ask ``<chat path>/count_tokens`` (Anthropic's
    ``/messages/count_tokens``): the bridge answers it for an upstream without one
    (``addon.plan.count_tokens``)."""
    counts_tokens: bool = True
    """Whether the upstream answers Anthropic's ``count_tokens`` (as itself or translated);
    False (Kiro): the bridge's estimate answers and the upstream is not asked."""
    route_keys: frozenset[str] = frozenset()
    """The route keys only some upstream dialects take (``addon.config.routes.DIALECT_KEYS``) that a
    route to this one may give (Kiro: ``token_file``, ``profile_arn`` …); the others are
    refused at start."""
    cache_marks: CacheMarks | None = None
    """Where this dialect's requests carry prompt-cache breakpoints, and the route default
    (``addon.transforms.cache``); ``None``: they carry none (the upstream caches by itself)."""
    cache_key: bool = False
    """Whether this dialect's requests carry OpenAI's ``prompt_cache_key``."""
    web_search: SearchShape | None = None
    """How a client of this dialect asks for web search with a tool of its own kinds, and how
    the searches the bridge ran for the model show in its answer (``addon.dialects.searches``);
    None: the bridge runs no search for it (docs/tools.md#web-search)."""
    path_base: Callable[[str], str | None] | None = None
    """Where this dialect's endpoint starts in a client's path: the part before it and its API
    version (Gemini: ``/proxy`` of ``/proxy/v1beta/models/m:generateContent``), or None when
    the path does not show it. Without the hook the endpoint is found as the ``path`` suffix."""

    def requested_model(self, body: bytes, path: str) -> str | None:
        """The model a client of this dialect asks for, read cheaply before any decode (a
        route's ``model`` globs): from the path where the dialect carries it there
        (``from_path``: Gemini), else the body's top-level ``model`` string. None: the body
        is not a JSON object with one."""
        if self.from_path is not None:
            model = self.from_path(path.split("?", 1)[0], ()).get("model")
            if model:
                return model
        return body_model(body)

    def placement(self, req: Request, target: Target) -> tuple[str, Query]:
        return (self.place or suffix_placement(self.path))(req, target)

    def runs(self, tool: OpaqueTool) -> bool:
        """``runs_tool``, or by default: a tool of this dialect's own kinds."""
        return tool.origin == self.name if self.runs_tool is None else self.runs_tool(tool)

    def framing_for(self, query: Query) -> Framing:
        return "sse" if self.framing is None else self.framing(query)


class _ModelField(msgspec.Struct):
    model: str | None = None


_read_model = msgspec.json.Decoder(_ModelField).decode


def body_model(body: bytes) -> str | None:
    """The top-level ``model`` string of a JSON object, or None. msgspec skips every other
    field without building it: a fraction of a full decode's time on a large body."""
    try:
        return _read_model(body.removeprefix(b"\xef\xbb\xbf")).model
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None


@dataclass(frozen=True, slots=True)
class WireRequest:
    """Everything the shell sets on the upstream request: it decides nothing itself."""

    body: JSON = field(repr=False)
    path: str
    query: Query
    set_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Set (replacing) on the request; may hold the API key, so never shown."""
    drop_headers: tuple[str, ...] = ()
    """Removed from the request (lower-case names)."""
    origin: tuple[Literal["http", "https"], str, int] | None = None
    """Scheme, host and port the request goes to (a route's ``upstream_url``); None: where
    the client sent it."""


def describe(notes: Notes) -> str:
    """``Counter({"flat tools → OpenAI": 3})`` → ``"3 flat tools → OpenAI"``, joined by "; "."""
    return "; ".join(f"{n} {what}" for what, n in notes.items())
