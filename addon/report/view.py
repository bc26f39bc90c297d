"""The text of the "cursor-bridge" content view: what the bridge did to one flow.

Contract: sans-IO (no mitmproxy); the shell's content view hands in what it kept and shows
what comes back (docs/observability.md). Nothing here raises on what it is shown (bad JSON,
deep nesting, lone surrogates, garbage bytes: a line says what could not be read), the output
is bounded, and every line goes through ``addon.redact``."""

from __future__ import annotations

import difflib
import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from addon.dialects.base import Dialect, Framing
from addon.jsonio import loads
from addon.model import (
    Event,
    Finish,
    MessageStart,
    StreamError,
    TextDelta,
    ThinkingDelta,
    ToolCallArgsDelta,
    ToolCallStart,
    Usage,
    UsageEvent,
)
from addon.redact import escape, redact
from addon.report.outcome import cache_fields
from addon.stream.processor import StreamProcessor
from addon.stream.whole import response_events

MAX_STRING = 300
"""Strings longer than this are cut in the diff (with how much was left out)."""
MAX_DIFF_LINES = 4000
MAX_ROWS = 2000
COLUMN = 80
"""Width of the timeline's left column."""


# --------------------------------------------------------------------------- request


def request_view(
    *,
    summary: str,
    facts: Sequence[tuple[str, str]],
    decisions: Sequence[str],
    client_body: bytes,
    upstream_body: bytes,
    attempts: Sequence[tuple[str, bytes]] = (),
) -> str:
    """The route, dialects and decisions, then a unified diff of the JSON the client sent
    against the JSON the upstream got.

    ``attempts``: what each later attempt sent (a staged retry …), each shown as a diff
    against the attempt before it. JSON is diffed with its keys sorted: a key the encoder
    wrote elsewhere is no change."""
    lines = _head(summary, facts, decisions)
    before, after = _pretty(client_body), _pretty(upstream_body)
    lines += ["", "# JSON keys sorted"]
    diff = _diff(before, after, "client sent", "upstream got")
    lines += diff or ["# the upstream got the body the client sent (no change)"]
    previous, name = after, "upstream got"
    for what, body in attempts:
        lines.append("")
        sent = _pretty(body)
        diff = _diff(previous, sent, name, f"{what} sent")
        if diff:
            lines += [f"# {what}: sent this body (its changes to the one before)", *diff]
        else:
            lines.append(f"# {what}: sent the same body again")
        previous, name = sent, f"{what} sent"
    return _safe("\n".join(lines)) + "\n"


def _diff(before: list[str], after: list[str], a: str, b: str, n: int = 2) -> list[str]:
    """A unified diff of the lines, matched without the commas that end them: a value that
    became the last one (or stopped being it) is no change."""
    bare = difflib.SequenceMatcher(
        None, [x.removesuffix(",") for x in before], [x.removesuffix(",") for x in after], False
    )
    diff = [f"--- {a}", f"+++ {b}"]
    for group in bare.get_grouped_opcodes(n):
        a0, b0 = group[0][1], group[0][3]
        a1, b1 = group[-1][2], group[-1][4]
        diff.append(f"@@ -{a0 + 1},{a1 - a0} +{b0 + 1},{b1 - b0} @@")
        for op, i1, i2, j1, j2 in group:
            if op == "equal":
                diff += [" " + line for line in after[j1:j2]]
                continue
            diff += ["-" + line for line in before[i1:i2]]
            diff += ["+" + line for line in after[j1:j2]]
    if len(diff) == 2:
        return []
    if len(diff) > MAX_DIFF_LINES:
        left = len(diff) - MAX_DIFF_LINES
        diff = [*diff[:MAX_DIFF_LINES], f"# … {left:,} more diff lines not shown"]
    return diff


def _head(summary: str, facts: Sequence[tuple[str, str]], decisions: Sequence[str]) -> list[str]:
    """The summary, the facts as aligned ``name: value`` lines, the decisions one per line."""
    width = max((len(k) for k, _ in facts), default=0)
    lines = [f"# cursor-bridge: {summary}", *(f"{k + ':':<{width + 1}} {v}" for k, v in facts)]
    if decisions:
        lines += ["", "decisions:", *(f"- {d}" for d in decisions)]
    return lines


def _pretty(body: bytes) -> list[str]:
    """A body as lines to diff: JSON pretty-printed with its keys sorted and long strings
    cut, else its text."""
    try:
        text = json.dumps(_cut(loads(body)), indent=2, ensure_ascii=False, sort_keys=True)
    except (ValueError, TypeError, RecursionError):
        text = body.decode("utf-8", "replace")
    return text.splitlines()


def _cut(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            return f"{value[:MAX_STRING]}…(+{len(value) - MAX_STRING:,} chars)"
        return value
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v) for v in value]
    return value


def _safe(text: str) -> str:
    """Lone surrogates escaped (they cannot be encoded), keys redacted."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "\n".join(escape(line) for line in text.split("\n"))
    return redact(text, tokens=False)


# --------------------------------------------------------------------------- events


class _Recorder:
    """A stream encoder that keeps the events it is given and writes nothing."""

    fast_path: None = None
    """Nothing for the fast path (``StreamEncoder``)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def feed(self, event: Event) -> list[tuple[str | None, str]]:
        self.events.append(event)
        return []

    def finish(self) -> list[tuple[str | None, str]]:
        return []


def events_of(
    dialect: Dialect, framing: Framing, body: bytes, stream: bool
) -> tuple[list[Event], str | None]:
    """The unified events in a body ``dialect`` wrote: a stream in ``framing``, or a whole
    JSON answer (told apart by the body itself: a whole answer sent to a streaming client
    is a stream, Kiro answers whole in event-stream frames; ``stream`` is what was
    expected). Returns the events read and why the rest could not be (None: all read)."""
    if framing != "aws_eventstream" and body.lstrip()[:1] == b"{":
        whole = _whole_events(dialect, body)
        if whole is not None:
            return whole, None
        if not stream:
            return [], f"not a JSON answer {dialect.name} writes"
    recorder = _Recorder()
    try:
        processor = StreamProcessor(
            dialect.stream_decoder(),
            recorder,
            framing_in=framing,
            framing_out="sse",
            same_dialect=False,
        )
        processor.feed(body)
        processor.finish()
    except Exception as e:  # the view must show what it can
        return recorder.events, f"{type(e).__name__}: {e}"
    if processor.error is None and processor.skipped:
        return recorder.events, f"{processor.skipped} unreadable event(s): {processor.skip_reason}"
    return recorder.events, processor.error


def _whole_events(dialect: Dialect, body: bytes) -> list[Event] | None:
    try:
        return response_events(dialect.decode_response(loads(body)))
    except Exception:
        return None


# --------------------------------------------------------------------------- timeline


@dataclass(slots=True)
class _Row:
    key: str
    """What the row is (kind and index): rows with equal keys are aligned."""
    text: str
    chunks: int = 1


def _rows(events: Sequence[Event]) -> list[_Row]:
    rows: list[_Row] = []
    calls: dict[int, _Row] = {}
    names: dict[int, tuple[str, str]] = {}
    args: dict[int, list[str]] = {}
    run: tuple[str, list[str], int] | None = None  # kind, texts, chunks

    def flush() -> None:
        nonlocal run
        if run is not None:
            kind, texts, chunks = run
            text = "".join(texts)
            label = f"{kind} {_quote(text)} ({chunks} chunk{'s' if chunks > 1 else ''}, {len(text):,} chars)"
            rows.append(_Row(kind, label, chunks))
            run = None

    for event in events:
        match event:
            case TextDelta(text=t) | ThinkingDelta(text=t):
                kind = "text" if isinstance(event, TextDelta) else "reasoning"
                if not t and not (isinstance(event, ThinkingDelta) and event.signature):
                    continue
                if run is None or run[0] != kind:
                    flush()
                    run = (kind, [], 0)
                run[1].append(t)
                run = (kind, run[1], run[2] + 1)
                continue
        flush()
        match event:
            case MessageStart(model=model):
                rows.append(_Row("start", f"start model={model or '?'}"))
            case ToolCallStart(index=i, id=call_id, name=name, arguments=a):
                names[i], args[i] = (name, call_id), [a]
                calls[i] = _Row(f"call {name}", "")
                rows.append(calls[i])
            case ToolCallArgsDelta(index=i, delta=d):
                args.setdefault(i, []).append(d)
                if i in calls:
                    calls[i].chunks += 1
            case UsageEvent(usage=u):
                rows.append(_Row("usage", f"usage {usage_text(u)}"))
            case Finish(reason=reason, raw=raw):
                rows.append(_Row("finish", f"finish {reason}" + (f" ({raw})" if raw else "")))
            case StreamError(message=message):
                rows.append(_Row("error", f"error: {message}"))
    flush()
    for i, row in calls.items():
        name, call_id = names[i]
        text = "".join(args.get(i, []))
        shown = text[:200].replace("\n", "\\n") + ("…" if len(text) > 200 else "")
        row.text = f"tool call #{i} {name} id={call_id} args {shown}"
    return rows


def usage_text(u: Usage) -> str:
    """An answer's usage in one line: ``in`` every prompt token (cached or not), ``out``
    every answer token, then the cache's counts as the flow's log line writes them
    (``addon.report.outcome.cache_fields``); each only when the upstream reported it."""
    pairs: list[tuple[str, object]] = [("in", u.prompt_tokens), ("out", u.output_tokens)]
    pairs += cache_fields(u)
    return " ".join(f"{k}={v}" for k, v in pairs if v is not None) or "(no counts)"


def _quote(text: str, limit: int = 200) -> str:
    shown = json.dumps(text[:limit], ensure_ascii=False)
    return shown + ("…" if len(text) > limit else "")


def response_view(
    *,
    summary: str,
    facts: Sequence[tuple[str, str]],
    decisions: Sequence[str] = (),
    upstream: Dialect,
    upstream_framing: Framing,
    upstream_body: bytes,
    client: Dialect,
    client_framing: Framing,
    client_body: bytes | None,
    stream: bool,
    cut: bool = False,
) -> str:
    """The upstream's events and the client's as one timeline in two columns."""
    lines = _head(summary, facts, decisions)
    up_events, up_error = events_of(upstream, upstream_framing, upstream_body, stream)
    left = _rows(up_events)
    right: list[_Row] = []
    notes: list[str] = []
    if cut:
        notes.append(f"# only the first {len(upstream_body):,} bytes of the upstream's stream kept")
    if up_error:
        notes.append(f"# upstream: not all read: {up_error}")
    if client_body is None:
        notes.append("# the client's side: no body")
    else:
        client_events, client_error = events_of(client, client_framing, client_body, stream)
        right = _rows(client_events)
        if client_error:
            notes.append(f"# client: not all read: {client_error}")
    lines += ["", *notes] if notes else [""]
    lines += _pair(f"upstream sent ({upstream.name})", f"client got ({client.name})")
    lines += _pair("─" * 20, "─" * 20)
    matcher = difflib.SequenceMatcher(None, [r.key for r in left], [r.key for r in right], False)
    shown = 0
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        pairs: list[tuple[_Row | None, _Row | None]]
        if op == "equal":
            pairs = list(zip(left[a0:a1], right[b0:b1], strict=True))
        else:
            pairs = [(r, None) for r in left[a0:a1]] + [(None, r) for r in right[b0:b1]]
        for a, b in pairs:
            if shown == MAX_ROWS:
                lines.append(f"# … {len(left) + len(right) - 2 * shown:,}+ more rows not shown")
                return _safe("\n".join(lines)) + "\n"
            lines += _pair(a.text if a else "", b.text if b else "")
            shown += 1
    return _safe("\n".join(lines)) + "\n"


def _pair(left: str, right: str) -> list[str]:
    """One row: a left text longer than the column goes on over the lines below, indented,
    broken between words where it can be (whole, as the right one is)."""
    parts = textwrap.wrap(left, COLUMN, subsequent_indent="  ", break_on_hyphens=False) or [""]
    lines = [f"{parts[0]:<{COLUMN}} │ {right}".rstrip()]
    lines += [f"{part:<{COLUMN}} │" for part in parts[1:]]
    return lines


def note_view(note: str) -> str:
    """The view's text for a flow it has nothing to show of: one line saying why."""
    return _safe(f"# cursor-bridge: {note}") + "\n"
