"""Anthropic's prompt cache as Anthropic documents it, sans-IO, for scripted upstreams.

``PromptCache`` takes a Messages request body (a dict) and either refuses it with Anthropic's
400 body (``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``) or
works out the ``usage`` Anthropic would report and updates its entries. Time comes from an
injectable clock (seconds). ``message_body`` / ``message_sse`` write the answer around that
usage, whole or streamed, in the shape of the real recordings
(``../shared/fixtures/real/anthropic-messages-sse-*.sse``, ``clients/claude-code-*``).

The contract, rule by rule:

- **The prompt** is the ordered list of blocks: each tool definition, each system block (a
  string ``system`` is one text block), each content block of each message (a string
  ``content`` is one text block). A block's identity is its canonical JSON (keys sorted, no
  whitespace) without ``cache_control`` (the marker does not change what is cached) and with
  its message's role; a ``tool_use`` block's ``input`` keeps its key order, as the docs warn
  that reordered keys break caches. Messages' blocks are also keyed by ``tool_choice``,
  ``thinking`` and whether any image is present ("What invalidates the cache": those change
  the messages cache only).
- **Tokens** are a deterministic estimate: ``ceil(len(canonical JSON bytes) / 4)`` per block
  (``estimate_tokens``), at least 1.
- **Cache keys** are cumulative hashes of the blocks up to a position, scoped by model.
- **Breakpoints**: a block's ``cache_control``, a ``cache_control`` inside a ``tool_result``'s
  content (a breakpoint of the enclosing block, counted too), and the top-level
  ``cache_control`` ("automatic caching": a breakpoint on the last block that can carry one:
  not thinking / redacted_thinking / empty text; a no-op when that block already has one of
  the same TTL; it takes one of the 4 slots).
- **Refused** (the message after the location is Anthropic's own words where they were found
  in public reports, quoted below; the location follows those reports, pydantic's style
  elsewhere): ``cache_control`` on a message object, a thinking or redacted_thinking block or
  a citation ("…cache_control: Extra inputs are not permitted"); not an object; a ``type``
  other than ``"ephemeral"`` ("Input should be 'ephemeral'"); a ``ttl`` other than ``"5m"`` /
  ``"1h"`` ("Input should be '5m' or '1h'"); on an empty text block ("cache_control cannot be
  set for empty text blocks"); more than 4 ("A maximum of 4 blocks with cache_control may be
  provided. Found N."); a 1h breakpoint after a 5m one in the order tools → system → messages
  ("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note
  that blocks are processed in the following order: `tools`, `system`, `messages`."); the
  automatic breakpoint landing on a block whose own ``cache_control`` has another TTL (the
  docs say 400; the wording here is ours).
- **Reads**: for each breakpoint the cache looks for a live entry at the breakpoint's block
  and then one block at a time backwards, 20 checks in all, the breakpoint's own block being
  the first (the docs' example: a breakpoint on block 30 checks 30, 29, …, 11 = check #20).
  ``cache_read_input_tokens`` is the tokens of the longest prefix hit (position A). Every hit
  entry's TTL starts again ("refreshed for no additional cost each time the cached content
  is used").
- **Writes** happen only at breakpoints after A whose prefix reaches the model's minimum
  cacheable length (``DOCUMENTED_MIN_TOKENS``, else 1024): B = the last such 1h breakpoint,
  C = the last such breakpoint; ``ephemeral_1h_input_tokens`` = B - A,
  ``ephemeral_5m_input_tokens`` = C - B (or C - A without B),
  ``cache_creation_input_tokens`` = their sum. A shorter prefix is not cached: its tokens
  count as input. ``input_tokens`` = the rest (total - read - written).
- **TTLs**: 5 minutes by default, 1 hour with ``ttl: "1h"``; an entry is gone at its expiry.

Not modelled: thinking blocks dropped from the context when a non-tool-result user turn
follows; web search / citations toggles; concurrency (an entry is readable as soon as its
request was accounted).

Sources: Anthropic's prompt caching page (platform.claude.com/docs/en/build-with-claude/
prompt-caching: automatic caching and its edge cases, "How automatic prefix checking works"
and the 20-block lookback example, cache limitations and minimum lengths, what cannot be
cached, what invalidates the cache, tracking cache performance, 1-hour cache and "Mixing
different TTLs"), read through public copies of it; ``anthropic`` SDK 2.14 types (``Usage``,
``CacheCreation``, ``MessageDeltaUsage``, ``CacheControlEphemeralParam``; thinking and
redacted_thinking params have no ``cache_control``); the 400 messages as public projects
quoted them from the API (count limit, TTL order with its location, empty text with
``system.0`` / ``messages.0.content.1.text``, ``messages.N.content.0.thinking.cache_control:
Extra inputs are not permitted``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

LOOKBACK = 20
"""Blocks checked per breakpoint, its own block included."""
MAX_BREAKPOINTS = 4
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
DEFAULT_MIN_TOKENS = 1024
DOCUMENTED_MIN_TOKENS: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-6*", 4096),
    ("claude-opus-4-5*", 4096),
    ("claude-haiku-4-5*", 4096),
    ("claude-sonnet-4-6*", 2048),
    ("claude-3-5-haiku*", 2048),
    ("claude-3-haiku*", 2048),
    ("*haiku*", 2048),
)
"""(model glob, minimum cacheable tokens), first match wins; other models: 1024. From the
docs' "Cache limitations"."""
TTL_ORDER = (
    "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. "
    "Note that blocks are processed in the following order: `tools`, `system`, `messages`."
)
_NO_CACHE_CONTROL = ("thinking", "redacted_thinking")


def error_body(message: str) -> dict[str, Any]:
    """Anthropic's 400 body for an invalid request."""
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


class CacheRefused(Exception):
    """A body Anthropic refuses; ``body`` is its 400 answer."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.body = error_body(message)


# --------------------------------------------------------------------------- the prompt


def canonical(value: Any) -> bytes:
    """Keys sorted, no whitespace, UTF-8; ``cache_control`` left out at every level; a
    ``tool_use``'s ``input`` keeps the order it came in."""
    return json.dumps(
        _strip(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _strip(v) for k, v in value.items() if k != "cache_control"}
        if value.get("type") in ("tool_use", "server_tool_use") and "input" in value:
            out["input"] = json.dumps(value["input"], separators=(",", ":"), ensure_ascii=False)
        return out
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def estimate_tokens(value: Any) -> int:
    """The token estimate of a block (any JSON value): ceil(canonical bytes / 4), at least 1."""
    return max(1, math.ceil(len(canonical(value)) / 4))


@dataclass(frozen=True)
class Marker:
    """One ``cache_control`` in the body: where it is and what it says."""

    block: int
    """The prompt block it marks (-1: the top-level one, before placement)."""
    loc: str
    value: Any
    empty_text: bool = False

    @property
    def ttl(self) -> str:
        return str(self.value.get("ttl", "5m")) if isinstance(self.value, dict) else "5m"


@dataclass(frozen=True)
class PromptBlock:
    loc: str
    kind: str
    """The block's ``type`` (``"tool"`` for a tool definition)."""
    role: str
    """``"tools"``, ``"system"``, or the message's role."""
    tokens: int
    digest: bytes
    can_carry: bool
    """May carry the automatic breakpoint (not thinking, redacted_thinking or empty text)."""


@dataclass
class Prompt:
    """A body read as Anthropic's cache reads it."""

    model: str
    blocks: list[PromptBlock] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    """Locations of ``cache_control`` where none may sit."""
    automatic: Marker | None = None
    keys: list[bytes] = field(default_factory=list)
    """Cumulative cache key at each block."""
    totals: list[int] = field(default_factory=list)
    """Cumulative tokens at each block."""

    @property
    def total_tokens(self) -> int:
        return self.totals[-1] if self.totals else 0


def read_prompt(body: Mapping[str, Any]) -> Prompt:
    """The prompt blocks, markers and cumulative keys of ``body`` (no checks)."""
    prompt = Prompt(str(body.get("model") or ""))
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        _add(prompt, f"tools.{i}", "tools", tool, "tool")
    system = body.get("system")
    if isinstance(system, str):
        _add(prompt, "system", "system", {"type": "text", "text": system}, "text")
    elif isinstance(system, list):
        for i, block in enumerate(system):
            _add(prompt, f"system.{i}", "system", block, _kind(block))
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    first_message = len(prompt.blocks)
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = str(message.get("role"))
        if "cache_control" in message:
            prompt.misplaced.append(f"messages.{i}.cache_control")
        content = message.get("content")
        if isinstance(content, str):
            _add(prompt, f"messages.{i}.content", role, {"type": "text", "text": content}, "text")
        elif isinstance(content, list):
            for j, block in enumerate(content):
                _add(prompt, f"messages.{i}.content.{j}", role, block, _kind(block))
    if "cache_control" in body:
        prompt.automatic = Marker(-1, "cache_control", body["cache_control"])
    _key(prompt, body, messages, first_message)
    return prompt


def _kind(block: Any) -> str:
    return str(block.get("type")) if isinstance(block, dict) else ""


def _add(prompt: Prompt, loc: str, role: str, block: Any, kind: str) -> None:
    index = len(prompt.blocks)
    empty = kind == "text" and isinstance(block, dict) and block.get("text") == ""
    if isinstance(block, dict):
        if "cache_control" in block:
            if kind in _NO_CACHE_CONTROL:
                prompt.misplaced.append(f"{loc}.{kind}.cache_control")
            else:
                prompt.markers.append(Marker(index, loc, block["cache_control"], empty))
        for k, citation in enumerate(block.get("citations") or ()):
            if isinstance(citation, dict) and "cache_control" in citation:
                prompt.misplaced.append(f"{loc}.{kind}.citations.{k}.cache_control")
        inner = block.get("content") if kind == "tool_result" else None
        for k, part in enumerate(inner if isinstance(inner, list) else ()):
            if isinstance(part, dict) and "cache_control" in part:
                part_empty = _kind(part) == "text" and part.get("text") == ""
                sub = f"{loc}.content.{k}"
                prompt.markers.append(Marker(index, sub, part["cache_control"], part_empty))
    digest = hashlib.sha256(role.encode() + b"\0" + canonical(block)).digest()
    tokens = estimate_tokens(block)
    prompt.blocks.append(
        PromptBlock(loc, kind, role, tokens, digest, kind not in _NO_CACHE_CONTROL and not empty)
    )


def _key(prompt: Prompt, body: Mapping[str, Any], messages: list[Any], first: int) -> None:
    images = any(
        isinstance(b, dict) and b.get("type") == "image"
        for m in messages
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for b in m["content"]
    )
    settings = canonical(
        {"tool_choice": body.get("tool_choice"), "thinking": body.get("thinking"), "images": images}
    )
    key = hashlib.sha256(b"model\0" + prompt.model.encode()).digest()
    total = 0
    for i, block in enumerate(prompt.blocks):
        if i == first:
            key = hashlib.sha256(key + b"settings\0" + settings).digest()
        key = hashlib.sha256(key + block.digest).digest()
        total += block.tokens
        prompt.keys.append(key)
        prompt.totals.append(total)


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Breakpoint:
    block: int
    ttl: str
    loc: str


def check(prompt: Prompt) -> list[Breakpoint]:
    """The request's breakpoints in prompt order; CacheRefused where Anthropic answers 400."""
    if prompt.misplaced:
        raise CacheRefused(f"{prompt.misplaced[0]}: Extra inputs are not permitted")
    markers = list(prompt.markers)
    for marker in [*markers, *([prompt.automatic] if prompt.automatic else [])]:
        _check_value(marker)
    for marker in markers:
        if marker.empty_text:
            where = marker.loc if marker.loc.startswith("system") else f"{marker.loc}.text"
            raise CacheRefused(f"{where}: cache_control cannot be set for empty text blocks")
    points = [Breakpoint(m.block, m.ttl, m.loc) for m in markers]
    if prompt.automatic is not None:
        points = _place_automatic(prompt, prompt.automatic, points)
    if len(points) > MAX_BREAKPOINTS:
        raise CacheRefused(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(points)}."
        )
    points.sort(key=lambda p: p.block)
    seen_5m = False
    for point in points:
        if point.ttl == "1h" and seen_5m:
            raise CacheRefused(f"{point.loc}.cache_control.ttl: {TTL_ORDER}")
        seen_5m = seen_5m or point.ttl == "5m"
    return points


def _check_value(marker: Marker) -> None:
    value, loc = marker.value, marker.loc
    if not isinstance(value, dict):
        raise CacheRefused(
            f"{loc}.cache_control: Input should be a valid dictionary or object to extract "
            "fields from"
        )
    if value.get("type") != "ephemeral":
        raise CacheRefused(f"{loc}.cache_control.type: Input should be 'ephemeral'")
    if "ttl" in value and value["ttl"] not in TTL_SECONDS:
        raise CacheRefused(f"{loc}.cache_control.ttl: Input should be '5m' or '1h'")
    extra = sorted(set(value) - {"type", "ttl"})
    if extra:
        raise CacheRefused(f"{loc}.cache_control.{extra[0]}: Extra inputs are not permitted")


def _place_automatic(prompt: Prompt, auto: Marker, points: list[Breakpoint]) -> list[Breakpoint]:
    target = next(
        (i for i in reversed(range(len(prompt.blocks))) if prompt.blocks[i].can_carry), None
    )
    if target is None:
        return points  # nothing eligible: caching is skipped
    own = [p for p in points if p.block == target]
    if own and all(p.ttl == auto.ttl for p in own):
        return points
    if own:
        raise CacheRefused(
            f"cache_control: the automatic cache breakpoint (ttl='{auto.ttl}') falls on "
            f"{prompt.blocks[target].loc}, whose cache_control has ttl='{own[0].ttl}'"
        )
    return [*points, Breakpoint(target, auto.ttl, prompt.blocks[target].loc)]


def breakpoint_count(body: Mapping[str, Any]) -> int:
    """How many breakpoints ``body`` asks for (explicit markers, plus the automatic one where
    it takes a slot), valid or not."""
    prompt = read_prompt(body)
    try:
        return len(check(prompt))
    except CacheRefused:
        return len(prompt.markers) + (prompt.automatic is not None)


# --------------------------------------------------------------------------- the cache


@dataclass(frozen=True)
class CacheUsage:
    """What one request read, wrote and paid in full, in tokens."""

    input_tokens: int
    cache_read_input_tokens: int
    ephemeral_5m_input_tokens: int
    ephemeral_1h_input_tokens: int
    breakpoints: int

    @property
    def cache_creation_input_tokens(self) -> int:
        return self.ephemeral_5m_input_tokens + self.ephemeral_1h_input_tokens

    @property
    def total_input_tokens(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def usage(self, output_tokens: int = 1) -> dict[str, Any]:
        """Anthropic's ``usage`` object (as ``message_start`` and whole answers carry it)."""
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.ephemeral_5m_input_tokens,
                "ephemeral_1h_input_tokens": self.ephemeral_1h_input_tokens,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }


@dataclass
class _Entry:
    ttl: str
    expires: float


class PromptCache:
    """Anthropic's prompt cache for one organization: ``account(body)`` refuses or returns the
    request's ``CacheUsage`` and writes / refreshes entries; ``refusal(body)`` only checks."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        min_tokens: Sequence[tuple[str, int]] = DOCUMENTED_MIN_TOKENS,
        default_min_tokens: int = DEFAULT_MIN_TOKENS,
        lookback: int = LOOKBACK,
    ) -> None:
        self.clock = clock
        self.min_tokens = tuple(min_tokens)
        self.default_min_tokens = default_min_tokens
        self.lookback = lookback
        self._entries: dict[bytes, _Entry] = {}

    def minimum(self, model: str) -> int:
        """The minimum cacheable prefix of ``model``, in tokens."""
        return next(
            (n for glob, n in self.min_tokens if fnmatchcase(model, glob)), self.default_min_tokens
        )

    def refusal(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Anthropic's 400 body for ``body``, or None; changes nothing."""
        try:
            check(read_prompt(body))
        except CacheRefused as e:
            return e.body
        return None

    def account(self, body: Mapping[str, Any]) -> CacheUsage:
        """The usage Anthropic reports for ``body``; reads refresh and writes add entries.
        Raises CacheRefused (with the 400 body) for a body Anthropic refuses."""
        prompt = read_prompt(body)
        points = check(prompt)
        now = self.clock()
        self._entries = {k: e for k, e in self._entries.items() if e.expires > now}
        hit = -1
        for point in points:
            for pos in range(point.block, max(-1, point.block - self.lookback), -1):
                entry = self._entries.get(prompt.keys[pos])
                if entry is not None:
                    entry.expires = now + TTL_SECONDS[entry.ttl]
                    hit = max(hit, pos)
                    break
        read = prompt.totals[hit] if hit >= 0 else 0
        floor = self.minimum(prompt.model)
        writes = [p for p in points if p.block > hit and prompt.totals[p.block] >= floor]
        for point in writes:
            self._entries[prompt.keys[point.block]] = _Entry(
                point.ttl, now + TTL_SECONDS[point.ttl]
            )
        hour = [p for p in writes if p.ttl == "1h"]
        b = prompt.totals[hour[-1].block] if hour else read
        c = prompt.totals[writes[-1].block] if writes else read
        return CacheUsage(
            input_tokens=prompt.total_tokens - c,
            cache_read_input_tokens=read,
            ephemeral_5m_input_tokens=c - b,
            ephemeral_1h_input_tokens=b - read,
            breakpoints=len(points),
        )

    def entries(self) -> int:
        """Live entries now."""
        now = self.clock()
        return sum(1 for e in self._entries.values() if e.expires > now)

    def clear(self) -> None:
        self._entries.clear()


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]
    id: str


def content_blocks(text: str | None, calls: Sequence[ToolCall] = ()) -> list[dict[str, Any]]:
    """An answer's content: a text block (if any), then the tool calls."""
    out: list[dict[str, Any]] = [] if text is None else [{"type": "text", "text": text}]
    out += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in calls]
    return out


def message_body(
    message_id: str, model: str, content: list[dict[str, Any]], usage: CacheUsage
) -> dict[str, Any]:
    """A whole Messages answer carrying ``usage``."""
    calls = any(b.get("type") == "tool_use" for b in content)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": usage.usage(output_tokens(content)),
    }


def output_tokens(content: list[dict[str, Any]]) -> int:
    return sum(estimate_tokens(b) for b in content) or 1


def message_events(
    message_id: str, model: str, content: list[dict[str, Any]], usage: CacheUsage
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stream's (event, data) pairs: message_start with the input-side usage, ping, each
    block (text in a few deltas, tool input as partial JSON), message_delta (cumulative
    usage, as the current API sends it), message_stop."""
    whole = message_body(message_id, model, content, usage)
    start = whole | {"content": [], "stop_reason": None, "usage": usage.usage(1)}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(content):
        if block["type"] == "text":
            empty, deltas = {"type": "text", "text": ""}, _text_deltas(block["text"])
        else:
            empty = {k: v for k, v in block.items()} | {"input": {}}
            deltas = _json_deltas(json.dumps(block["input"]))
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": empty},
        )
        for delta in deltas:
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    final = {k: v for k, v in whole["usage"].items() if k not in ("cache_creation", "service_tier")}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
            "usage": final,
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _text_deltas(text: str) -> list[dict[str, Any]]:
    cut = max(1, len(text) // 3)
    parts = [text[i : i + cut] for i in range(0, len(text), cut)] or [""]
    return [{"type": "text_delta", "text": p} for p in parts]


def _json_deltas(args: str) -> list[dict[str, Any]]:
    cut = max(1, len(args) // 3)
    parts = ["", *(args[i : i + cut] for i in range(0, len(args), cut))]
    return [{"type": "input_json_delta", "partial_json": p} for p in parts]


def message_sse(
    message_id: str, model: str, content: list[dict[str, Any]], usage: CacheUsage
) -> bytes:
    """``message_events`` as SSE bytes (``event:`` and ``data:`` lines)."""
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
        for name, data in message_events(message_id, model, content, usage)
    )
