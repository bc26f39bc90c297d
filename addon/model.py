"""The unified conversation: what every dialect decodes into and encodes from.

Contract: plain data only. Nothing here knows a wire format, mitmproxy, sockets or asyncio.
N client dialects and M upstream dialects meet here: N + M codecs instead of N x M converters.
``extra``: wire fields a codec does not model, kept with the dialect they came from
(``origin``): an encoder of the same dialect puts them back, another ignores them."""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

type JSON = dict[str, Any]
"""A decoded JSON object."""

type Notes = Counter[str]
"""What codecs and transforms changed, counted by description: shown in mitmweb's flow comment.
A note's text is for people only: what a counter counts is a ``TalliedNote``'s ``tally``."""


class Tally(Enum):
    """What a note counts as, beside its text: a call's arguments changed (the flow's
    ``repairs=``) or reasoning the client dropped put back from the store (``restores=``)."""

    REPAIR = "repair"
    RESTORE = "restore"


class TalliedNote(str):
    """A note (its text, as any other note) that also counts as ``tally``: ``addon.report.outcome``
    counts these by their ``tally``, never by their text. Equal to its text, so a ``Notes``
    counter, the comment and the metadata see a plain note."""

    tally: Tally

    def __new__(cls, text: str, tally: Tally) -> TalliedNote:
        note = super().__new__(cls, text)
        note.tally = tally
        return note

    def __reduce__(self) -> tuple[type[TalliedNote], tuple[str, Tally]]:
        return TalliedNote, (str(self), self.tally)


type ReasoningStyle = Literal[
    "none", "signed_parts", "signed_blocks", "reasoning_items", "reasoning_fields"
]
"""What an upstream dialect's answers carry as reasoning, for the reasoning store to capture
and restore (``Dialect.reasoning``; docs/reasoning.md): a thought signature per part (Gemini),
signed thinking blocks (Anthropic), reasoning items (Responses), reasoning fields on the
message (OpenAI-compatible chat), or nothing to keep."""


# --------------------------------------------------------------------------- parts

# Parts and events are frozen dataclasses with slots, made once per stream delta, so cheap
# (pydantic only for wire shapes and configuration, where validation is the point). ``extra``
# kept with its ``origin`` is how an OpenAI -> OpenAI route keeps ``system_fingerprint``.

type CacheTTL = Literal["5m", "1h"]
"""How long a prompt-cache entry lives without use (Anthropic's ``ttl``; 5m when unsaid)."""


@dataclass(frozen=True, slots=True)
class CacheMark:
    """A prompt-cache breakpoint after this part or tool: the prefix up to here may be cached
    (Anthropic's ``cache_control: {"type": "ephemeral"}``, the same on OpenRouter's and
    LiteLLM's chat content parts). Written only by dialects that have it."""

    ttl: CacheTTL | None = None
    """The entry's lifetime as the client said it; None: the upstream's default (5m)."""
    by_bridge: bool = False
    """Placed by the bridge (``transforms.cache.place_breakpoints``), not by the client."""


@dataclass(frozen=True, slots=True)
class Text:
    """Visible text."""

    text: str
    extra: JSON = field(default_factory=dict)
    """Unmodelled fields of the wire part."""
    cache: CacheMark | None = None
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class Image:
    """An image, as a URL (``https:`` or ``data:`` URL), or a file the client's provider keeps
    (``file``)."""

    url: str
    detail: str | None = None
    """OpenAI's ``detail`` hint (``low`` / ``high`` / ``auto``), when given."""
    extra: JSON = field(default_factory=dict)
    cache: CacheMark | None = None
    file: str | None = None
    """The id or URI of a file the client uploaded to its provider (a Responses
    ``input_image``'s ``file_id``, an Anthropic ``file`` source's ``file_id``, a Gemini Files
    API or ``gs://`` ``fileUri``): the bridge holds neither its bytes nor a URL anyone else
    may read (``url`` is then empty, or Gemini's URI)."""
    kind: Literal["image"] = "image"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant made."""

    id: str
    name: str
    arguments: str
    """The arguments as JSON text, exactly as the model produced them; for a ``custom`` call
    (OpenAI freeform tools such as Codex's ``apply_patch``) the raw input text."""
    extra: JSON = field(default_factory=dict)
    custom: bool = False
    """A call of a custom (freeform) tool: ``arguments`` is raw text, not JSON."""
    cache: CacheMark | None = None
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call, sent back by the client."""

    tool_call_id: str
    content: str | tuple[Part, ...]
    """A string, or parts (text, images) when the client sent blocks."""
    name: str | None = None
    """The tool's name, when the client says it (OpenAI's ``name`` on tool messages)."""
    is_error: bool = False
    extra: JSON = field(default_factory=dict)
    custom: bool = False
    """The output of a custom (freeform) tool call (Responses ``custom_tool_call_output``)."""
    cache: CacheMark | None = None
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class Thinking:
    """The model's reasoning, possibly with a provider signature."""

    text: str
    signature: str | None = None
    """Anthropic/Gemini signature proving the reasoning is the model's own; kept, never invented."""
    redacted: bool = False
    """Anthropic ``redacted_thinking``: ``text`` holds the opaque ``data``."""
    extra: JSON = field(default_factory=dict)
    kind: Literal["thinking"] = "thinking"


@dataclass(frozen=True, slots=True)
class Opaque:
    """A wire part the unified model does not understand, kept verbatim for its dialect."""

    origin: str
    """The dialect the part came from; only that dialect's encoder re-emits it."""
    data: JSON
    kind: Literal["opaque"] = "opaque"


type Part = Text | Image | ToolCall | ToolResult | Thinking | Opaque

type Role = Literal["system", "developer", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of the conversation."""

    role: Role
    parts: tuple[Part, ...]
    string_content: bool = False
    """The content arrived as a plain string; encode it as one again where possible."""
    extra: JSON = field(default_factory=dict)
    """Unmodelled message fields (``name``, provider extras)."""


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call."""

    name: str
    description: str | None
    parameters: JSON
    """JSON Schema of the arguments object."""
    strict: bool | None = None
    extra: JSON = field(default_factory=dict)
    """Unmodelled fields of the function definition."""
    format: JSON | None = None
    """Set for a custom (freeform) tool: its input format (``{"type": "text"}`` or
    ``{"type": "grammar", "syntax": "lark", "definition": …}``); ``parameters`` is then
    unused. Upstreams without custom tools get it as a function with one string
    parameter (``addon.transforms.custom_tools``)."""
    cache: CacheMark | None = None


@dataclass(frozen=True, slots=True)
class OpaqueTool:
    """A tool of a kind only its own dialect can carry (e.g. OpenAI ``custom`` tools)."""

    origin: str
    name: str | None
    type: str
    data: JSON


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """Whether and which tool the model must call."""

    mode: Literal["auto", "none", "required", "tool"]
    name: str | None = None
    """The tool to call when ``mode == "tool"``."""
    kind: str | None = None
    """With ``mode == "tool"`` and no ``name``: a tool of a kind only the client's dialect has,
    by its type (a Responses hosted-tool choice, ``{"type": "file_search"}``); its own encoder
    writes it from the client's ``extra``."""
    disable_parallel: bool | None = None
    """Anthropic's ``disable_parallel_tool_use``."""


@dataclass(frozen=True, slots=True)
class Request:
    """A chat request in no particular dialect."""

    origin: str
    """The dialect it was decoded from; ``extra`` belongs to that dialect."""
    model: str
    messages: tuple[Message, ...]
    tools: tuple[Tool | OpaqueTool, ...] | None = None
    tool_choice: ToolChoice | None = None
    stream: bool = False
    stream_explicit: bool = False
    """The client said whether to stream (``"stream": false`` in its body, Gemini's
    ``:generateContent`` path): an upstream dialect with a ``stream`` field gets it written
    out, false too (some gateways stream when the field is absent)."""
    params: Params = field(default_factory=lambda: Params())
    thinking: ThinkingConfig | None = None
    """Whether the client asked for reasoning (Anthropic ``thinking``, a ``-thinking`` model)."""
    extra: JSON = field(default_factory=dict)
    """Top-level fields no codec models (stream_options, provider extras), for ``origin`` only."""


@dataclass(frozen=True, slots=True)
class Params:
    """Sampling and limit parameters that every dialect has in some form."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    """Anthropic/Gemini only; OpenAI-compatible upstreams that take it get it as an extra."""
    stop: tuple[str, ...] | None = None
    user: str | None = None
    """An end-user id (OpenAI ``user``, Anthropic ``metadata.user_id``)."""
    seed: int | None = None
    """OpenAI chat ``seed`` / Gemini ``generationConfig.seed``."""
    presence_penalty: float | None = None
    """OpenAI chat ``presence_penalty`` / Gemini ``presencePenalty``."""
    frequency_penalty: float | None = None
    """OpenAI chat ``frequency_penalty`` / Gemini ``frequencyPenalty``."""
    service_tier: str | None = None
    """OpenAI chat and Responses ``service_tier`` (the same values in both)."""
    cache_key: str | None = None
    """OpenAI's ``prompt_cache_key`` (chat and Responses): requests that share it and a prefix
    are routed to the same cache."""


type Effort = Literal["minimal", "low", "medium", "high", "xhigh"]


@dataclass(frozen=True, slots=True)
class ThinkingConfig:
    enabled: bool = True
    budget_tokens: int | None = None
    effort: Effort | None = None
    """How hard to think, when the client said (Anthropic ``output_config.effort``, OpenAI
    ``reasoning_effort`` / Responses ``reasoning.effort``)."""
    adaptive: bool = False
    """Anthropic ``{"type": "adaptive"}``: the model decides whether and how much to think."""


# --------------------------------------------------------------------------- settings

type SchemaProfile = Literal["none", "strict", "gemini"]
"""How tool parameter schemas are cleaned for the upstream (see ``addon.transforms.schema``)."""
SCHEMA_PROFILES: tuple[SchemaProfile, ...] = ("none", "strict", "gemini")

type ToolMode = Literal["native", "invoke", "bracket"]
"""How tools reach the upstream: its own tool calling, or a text protocol in the prompt."""
TOOL_MODES: tuple[ToolMode, ...] = ("native", "invoke", "bracket")


type CachePolicy = Literal["auto", "keep", "drop"]
"""What reaches the upstream of a client's prompt-cache breakpoints (route key ``cache_control``):
``keep`` the client's, ``auto`` the client's and the bridge's own where the client placed none,
``drop`` none."""


@dataclass(frozen=True, slots=True)
class CacheMarks:
    """Where a dialect's requests carry prompt-cache breakpoints (``Dialect.cache_marks``)."""

    parts: frozenset[str]
    """The part kinds (``Text.kind`` …) a breakpoint may sit on."""
    tools: bool
    """Whether the bridge may place one on the last tool definition."""
    default: CachePolicy
    """The policy when a route says none (and the client speaks this dialect too: ``keep``
    whatever this says, unless it says ``auto``)."""


# --------------------------------------------------------------------------- errors


class ClientError(Exception):
    """A mistake in the client's request that the proxy answers itself (no upstream call)."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status
        self.type = type
        """The error type to write, when not the one the client dialect uses for ``status``
        (an upstream error whose own type names another status: ``Dialect.error_status``)."""


class UnsupportedShape(Exception):
    """A body or event we cannot read: the caller passes the original through untouched."""


# --------------------------------------------------------------------------- responses

type FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error", "other"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one answer, one meaning whatever the dialect (docs/streams.md#usage);
    None where the upstream did not say. ``input_tokens``: prompt tokens neither read from nor
    written to a cache (Anthropic's ``input_tokens``); ``cache_read_tokens`` /
    ``cache_write_tokens``: the prompt tokens read from / written to it; ``output_tokens``:
    every answer token, reasoning included, ``reasoning_tokens`` the reasoning part of them.
    ``raw`` is the upstream's own usage object when ``origin`` matches."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    origin: str = ""
    raw: JSON = field(default_factory=dict)
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    @property
    def prompt_tokens(self) -> int | None:
        """Every prompt token, cached or not (OpenAI's ``prompt_tokens``, Gemini's
        ``promptTokenCount``); None while the uncached part is not known."""
        if self.input_tokens is None:
            return None
        return self.input_tokens + (self.cache_read_tokens or 0) + (self.cache_write_tokens or 0)

    @property
    def total(self) -> int | None:
        """The upstream's total, else prompt + output when both are known, else None."""
        if self.total_tokens is not None:
            return self.total_tokens
        prompt = self.prompt_tokens
        return None if prompt is None or self.output_tokens is None else prompt + self.output_tokens

    def then(self, new: Usage) -> Usage:
        """These counts updated by ``new``, a later report of the same upstream's stream
        (Anthropic: input at ``message_start``, output at ``message_delta``; LiteLLM: zeros
        first, every count at the end): its counts win where it has them."""
        if self.origin != new.origin:
            return new

        def pick(mine: int | None, theirs: int | None) -> int | None:
            return theirs if theirs is not None else mine

        return Usage(
            input_tokens=pick(self.input_tokens, new.input_tokens),
            output_tokens=pick(self.output_tokens, new.output_tokens),
            total_tokens=pick(self.total_tokens, new.total_tokens),
            origin=new.origin,
            raw={**self.raw, **new.raw},
            cache_read_tokens=pick(self.cache_read_tokens, new.cache_read_tokens),
            cache_write_tokens=pick(self.cache_write_tokens, new.cache_write_tokens),
            reasoning_tokens=pick(self.reasoning_tokens, new.reasoning_tokens),
        )


@dataclass(frozen=True, slots=True)
class Response:
    """A whole (non-streamed) answer."""

    origin: str
    id: str | None
    model: str | None
    parts: tuple[Part, ...]
    finish: FinishReason | None
    finish_raw: str | None = None
    """The upstream's own finish reason string."""
    usage: Usage | None = None
    created: int | None = None
    extra: JSON = field(default_factory=dict)
    """Unmodelled fields by level, e.g. ``{"top": {...}, "choice": {...}, "message": {...}}``."""


# --------------------------------------------------------------------------- stream events


@dataclass(frozen=True, slots=True)
class AnswerDefaults:
    """What a client's answer says when the upstream's does not say it (Kiro sends no model and
    no time): the model the client asked for, and when it asked (Unix seconds). Plain values the
    plan hands the client's encoders; an answer's own model and time win."""

    model: str = ""
    created: int = 0
    nonce: str = ""
    """Random letters and digits the plan makes per flow (``new_nonce``), from which a client
    dialect's encoder writes the answer's id where the upstream's is not the client's own: every
    encoder of one answer (fast path or not, read whole or in pieces) the same, two answers
    never one (Claude Code merges assistant messages that share an id). Empty: a fresh id each
    time an encoder is made."""


_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
NONCE_CHARS = 32


def new_nonce() -> str:
    """``NONCE_CHARS`` random base62 characters (``AnswerDefaults.nonce``)."""
    return "".join(secrets.choice(_BASE62) for _ in range(NONCE_CHARS))


NO_DEFAULTS = AnswerDefaults(nonce=new_nonce())
"""For encoders made outside a flow's plan (tools, tests): one nonce for the process, so that
two reads of one answer give the same bytes; every flow's plan has its own (``decide``)."""


@dataclass(frozen=True, slots=True)
class MessageStart:
    """The answer begins; carries the envelope every later chunk repeats."""

    origin: str
    id: str | None = None
    model: str | None = None
    created: int | None = None
    envelope: JSON = field(default_factory=dict)
    """Envelope fields of ``origin`` repeated on every chunk (e.g. ``system_fingerprint``)."""
    extra: JSON = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    extra: JSON = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str
    signature: str | None = None
    """A signature for the thinking so far (Anthropic ``signature_delta``)."""
    extra: JSON = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    index: int
    """Position of the call in this answer, as the upstream numbered it."""
    id: str
    name: str
    arguments: str = ""
    """A first fragment of the arguments that arrived together with the start."""
    extra: JSON = field(default_factory=dict)
    custom: bool = False
    """A custom (freeform) tool call: its argument fragments are raw input text."""


@dataclass(frozen=True, slots=True)
class ToolCallArgsDelta:
    index: int
    delta: str
    extra: JSON = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """The upstream ended the call (its finish, its block's stop, its item's done …): only
    then is it whole. A call the stream was cut inside, or that an error ended, gets none, and
    no stage or encoder makes it look whole (issue 26)."""

    index: int


@dataclass(frozen=True, slots=True)
class UsageEvent:
    usage: Usage
    extra: JSON = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason
    raw: str | None = None
    """The upstream's own reason string (e.g. ``tool_calls``, ``end_turn``)."""
    extra: JSON = field(default_factory=dict)


STREAM_CUT = "the upstream's stream ended before its finish (cut short upstream)"
"""The message of the ``StreamError`` (type ``upstream_cut``) a decoder reports at the end of
a stream that never said it was complete."""


BRIDGE_ERROR_STATUS = {
    "bridge_stream_error": 500,
    **dict.fromkeys(("upstream_cut", "upstream_reset", "upstream_idle"), 503),
}
"""The HTTP status of the bridge's own ``StreamError`` types: a failure of the bridge itself
500; a stream the upstream broke off (``upstream_cut`` …) 503, which every client's SDK and
agent takes for a failure worth trying again (Anthropic ``overloaded_error``, OpenAI
``server_error``, Gemini ``UNAVAILABLE``); any other error without a status (a 2xx body that is
no stream, ``upstream_error``; an upstream type nobody knows) stands for 502."""


@dataclass(frozen=True, slots=True)
class StreamError:
    """An error that ends the answer: the upstream's own error event, or one the bridge saw."""

    message: str
    type: str | None = None
    """The upstream's own type or code (``rate_limit_error``, ``RESOURCE_EXHAUSTED``,
    ``ThrottlingException``), or the bridge's (``upstream_cut``)."""
    origin: str = ""
    raw: JSON = field(default_factory=dict)
    status: int | None = None
    """The HTTP status the error stands for, read by its dialect's decoder (from its type, or
    the status it names); None when it names none (see ``http_status``)."""

    @property
    def http_status(self) -> int:
        """The status a client's error type is derived from (each dialect's ``error_type``)."""
        if self.status is not None:
            return self.status
        return BRIDGE_ERROR_STATUS.get(self.type or "", 502)


@dataclass(frozen=True, slots=True)
class RawEvent:
    """A wire event with nothing the model understands; re-emitted only to its own dialect."""

    origin: str
    data: JSON


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The upstream said the answer is complete (OpenAI ``[DONE]``, Anthropic ``message_stop``)."""


type Event = (
    MessageStart
    | TextDelta
    | ThinkingDelta
    | ToolCallStart
    | ToolCallArgsDelta
    | ToolCallEnd
    | UsageEvent
    | Finish
    | StreamError
    | RawEvent
    | StreamEnd
)
