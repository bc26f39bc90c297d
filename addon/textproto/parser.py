"""Incremental parser: model text → text, thinking and tool-call events.

Contract: sans-IO. ``feed(text) -> list[Event]`` takes text split anywhere (inside a tag, a
trigger or a JSON string); ``finish()`` flushes and is idempotent. Plain text leaves at once;
only a suffix that could begin a marker is held back, a call until it is complete and valid.
More: docs/tools.md#tools-for-upstreams-without-tool-calling."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Literal

from addon import jsonio
from addon.model import Event, TextDelta, ThinkingDelta, ToolCallEnd, ToolCallStart

type TextProtocol = Literal["invoke", "bracket"]

THINK_TAGS = {"<thinking>": "</thinking>", "<think>": "</think>"}
BRACKET_OPEN = "[Calling tool: "
MAX_NAME = 200
"""Longest tool name (plus attribute syntax) the header of a call may hold before it is text."""


class State(Enum):
    TEXT = auto()
    THINK = auto()
    HEADER = auto()  # after a call marker, until the arguments' "{"
    ARGS = auto()  # inside the JSON arguments
    CLOSE = auto()  # invoke only: after the JSON, until </invoke>


# Every legal transition, in one place; anything else is a bug and raises.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.TEXT: frozenset({State.THINK, State.HEADER, State.TEXT}),
    State.THINK: frozenset({State.TEXT}),
    State.HEADER: frozenset({State.ARGS, State.TEXT}),  # TEXT: not a call after all
    State.ARGS: frozenset({State.CLOSE, State.TEXT}),  # TEXT: bracket call done, or rejected
    State.CLOSE: frozenset({State.TEXT}),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class _Call:
    raw: list[str] = field(default_factory=list)  # everything since the marker, for fallback
    header: str = ""
    name: str = ""
    args: list[str] = field(default_factory=list)
    depth: int = 0
    size: int = 0
    in_string: bool = False
    escape: bool = False
    close: str = ""

    def scan(self, text: str) -> int:
        """Follow the JSON arguments' nesting through ``text``: the end of the object (just
        past its closing brace) if it is in ``text``, else -1."""
        depth, in_string, escape = self.depth, self.in_string, self.escape
        end = -1
        for i, ch in enumerate(text):
            if in_string:
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    end = i + 1
                    break
        self.depth, self.in_string, self.escape = depth, in_string, escape
        return end


def parse_header(protocol: TextProtocol | None, header: str) -> str | None:
    """The tool name in a call's header (what comes between its marker and its arguments),
    None when the header is not the protocol's."""
    if protocol == "invoke":
        # \n<invoke name="TOOL">  (whitespace around is tolerated)
        h = header.strip()
        prefix = '<invoke name="'
        if not (h.startswith(prefix) and h.endswith('">')):
            return None
        name = h[len(prefix) : -2]
        return name if name and '"' not in name else None
    # bracket: NAME]\nInput:
    name, sep, after = header.partition("]")
    if not sep or "\n" in name.strip() or not name.strip():
        return None
    if after.strip() not in ("Input:", "Input"):
        return None
    return name.strip()


def default_ids(n: int) -> str:
    """A fresh OpenAI-style call id (``call_`` + 24 hex digits)."""
    return f"call_{secrets.token_hex(12)}"


class TextProtocolParser:
    """Words: *marker* what starts a block: a thinking tag (``<thinking>``, ``<think>``), this
    request's ``invoke`` trigger, ``bracket``'s ``[Calling tool: ``; *header* what follows a
    call marker up to its JSON arguments; *rejected* a would-be call given back as the text it
    was (the reason kept in ``rejected``)."""

    def __init__(
        self,
        protocol: TextProtocol | None,
        *,
        trigger: str | None = None,
        tools: Collection[str] = (),
        thinking_tags: bool = True,
        ids: Callable[[int], str] = default_ids,
        readable: Callable[[str], bool] | None = None,
        max_call: int | None = None,
    ) -> None:
        if protocol == "invoke" and not trigger:
            raise ValueError("the invoke protocol needs this request's trigger")
        self.protocol = protocol
        self.trigger = trigger
        self.tools = frozenset(tools)
        self.ids = ids
        self.readable = readable
        """Arguments that are not strict JSON but that this says can be read as an object
        (argument repair is on) make a call all the same; the repair stage fixes them."""
        self.max_call = max_call
        """A call whose arguments grow past this many characters is text (memory is bounded)."""
        self.calls = 0
        """How many tool calls were emitted."""
        self.rejected: list[str] = []
        """Why candidate calls were emitted as text (for the shell's log)."""
        self._markers: list[str] = []
        if thinking_tags:
            self._markers += list(THINK_TAGS)
        if protocol == "invoke" and trigger:
            self._markers.append(trigger)
        elif protocol == "bracket":
            self._markers.append(BRACKET_OPEN)
        self._longest = max((len(m) for m in self._markers), default=0)
        firsts = sorted({m[0] for m in self._markers if m})
        self._firsts = re.compile("[" + "".join(map(re.escape, firsts)) + "]") if firsts else None
        """The first characters of the markers: text without any of them holds no marker and
        ends in no part of one."""
        ascii_firsts = all(c.isascii() for c in firsts)
        self._firsts_raw = (
            re.compile(b"[" + b"".join(re.escape(c.encode()) for c in firsts) + b"]").search
            if firsts and ascii_firsts
            else None
        )
        """The same for a plain text's JSON string (``text_sink``)."""
        self.text_sink: Callable[[bytes], bool] | None = None
        """While ``take_text`` would take any text without a marker's first character (after
        it took one, until the next ``feed`` or ``finish``): ``take_text`` for a plain text
        given as its JSON string (printable ASCII without a backslash, quotes included)."""
        self._state = State.TEXT
        self._held = ""  # TEXT/THINK: a suffix that may begin a marker
        self._closer = ""  # THINK: the closing tag we wait for
        self._call: _Call | None = None
        self._after_call_ws = ""  # whitespace right after a call: dropped if another call follows
        self._just_called = False
        self._finished = False

    # ------------------------------------------------------------------ public

    def feed(self, text: str) -> list[Event]:
        self.text_sink = None
        out: list[Event] = []
        if text and not self._finished:
            self._run(text, out)
        return _merge(out)

    def take_text(self, text: str) -> bool:
        """Whether ``feed(text)`` would give back exactly ``[TextDelta(text)]`` and change
        nothing but what it saw: plain text between calls, with nothing held and no marker or
        start of one in it. Then it is counted as fed (True); otherwise nothing is done."""
        if (
            not text
            or self._state is not State.TEXT
            or self._held
            or self._just_called
            or self._finished
        ):
            return False
        if self._firsts is not None and self._firsts.search(text) is not None:
            return False
        if self.text_sink is None and (self._firsts is None or self._firsts_raw is not None):
            self.text_sink = self._take_quoted
        return True

    def _take_quoted(self, quoted: bytes) -> bool:
        return self._firsts_raw is None or self._firsts_raw(quoted) is None

    def finish(self) -> list[Event]:
        self.text_sink = None
        if self._finished:
            return []
        self._finished = True
        out: list[Event] = []
        if self._state is State.THINK:
            if self._held:
                out.append(ThinkingDelta(self._held))
        elif self._state is State.TEXT:
            self._text(self._held, out)
        else:
            # A call still open at the end: it never closed, so it is text.
            # (bracket calls end with their JSON, so an open one is incomplete too.)
            self._reject("the call was not complete when the answer ended", out, refeed=False)
        self._held = ""
        self._state = State.TEXT  # the end: whatever was open is closed
        return _merge(out)

    # ------------------------------------------------------------------ states

    def _goto(self, new: State) -> None:
        if new not in TRANSITIONS[self._state]:
            raise IllegalTransition(f"text protocol parser: {self._state.name} → {new.name}")
        self._state = new

    def _run(self, text: str, out: list[Event]) -> None:
        # Each state handler consumes a prefix of ``text`` and returns the rest.
        while text:
            match self._state:
                case State.TEXT:
                    text = self._in_text(text, out)
                case State.THINK:
                    text = self._in_think(text, out)
                case State.HEADER:
                    text = self._in_header(text, out)
                case State.ARGS:
                    text = self._in_args(text, out)
                case State.CLOSE:
                    text = self._in_close(text, out)

    def _in_text(self, text: str, out: list[Event]) -> str:
        buf = self._held + text
        self._held = ""
        best = -1
        marker = ""
        for m in self._markers:
            i = buf.find(m)
            if i != -1 and (best == -1 or i < best):
                best, marker = i, m
        if best == -1:
            keep = _partial_suffix(buf, self._markers, self._longest)
            self._text(buf[: len(buf) - keep], out)
            self._held = buf[len(buf) - keep :]
            return ""
        self._text(buf[:best], out)
        rest = buf[best + len(marker) :]
        if marker in THINK_TAGS:
            self._flush_ws(out)
            self._goto(State.THINK)
            self._closer = THINK_TAGS[marker]
        else:
            self._call = _Call(raw=[marker])
            self._goto(State.HEADER)
        return rest

    def _in_think(self, text: str, out: list[Event]) -> str:
        buf = self._held + text
        self._held = ""
        i = buf.find(self._closer)
        if i == -1:
            keep = _partial_suffix(buf, (self._closer,), len(self._closer))
            if len(buf) > keep:
                out.append(ThinkingDelta(buf[: len(buf) - keep]))
            self._held = buf[len(buf) - keep :]
            return ""
        if i:
            out.append(ThinkingDelta(buf[:i]))
        self._goto(State.TEXT)
        return buf[i + len(self._closer) :]

    def _in_header(self, text: str, out: list[Event]) -> str:
        call = self._call
        assert call is not None
        brace = text.find("{")
        part = text if brace == -1 else text[:brace]
        call.header += part
        call.raw.append(part)
        rest = "" if brace == -1 else text[brace:]
        if len(call.header) > MAX_NAME + 40:
            self._reject("no arguments after the call marker", out)
            return rest
        if brace == -1:
            return ""
        name = parse_header(self.protocol, call.header)
        if name is None:
            self._reject(f"malformed call header {call.header.strip()[:60]!r}", out)
            return rest
        call.name = name
        self._goto(State.ARGS)
        return text[brace:]

    def _in_args(self, text: str, out: list[Event]) -> str:
        call = self._call
        assert call is not None
        end = call.scan(text)
        part = text if end == -1 else text[:end]
        call.args.append(part)
        call.raw.append(part)
        call.size += len(part)
        if self.max_call is not None and call.size > self.max_call:
            self._reject(f"a call longer than {self.max_call} characters", out, refeed=False)
            return "" if end == -1 else text[end:]
        if end == -1:
            return ""
        if self.protocol == "invoke":
            self._goto(State.CLOSE)
        else:
            self._complete(out)
        return text[end:]

    def _in_close(self, text: str, out: list[Event]) -> str:
        call = self._call
        assert call is not None
        want = "</invoke>"
        for i, ch in enumerate(text):
            if not call.close and ch.isspace():
                call.raw.append(ch)
                continue
            call.close += ch
            call.raw.append(ch)
            if not want.startswith(call.close):
                self._reject("the <invoke> tag was not closed", out)
                return text[i + 1 :]
            if call.close == want:
                self._complete(out)
                return text[i + 1 :]
        return ""

    # ------------------------------------------------------------------ outcomes

    def _complete(self, out: list[Event]) -> None:
        call = self._call
        assert call is not None
        args = "".join(call.args)
        try:
            parsed = jsonio.loads(args)
        except ValueError:
            if self.readable is None or not self.readable(args):
                self._reject(f"arguments of {call.name!r} are not valid JSON", out, refeed=False)
                return
            parsed = {}  # readable as an object once repaired (the repair stage does it)
        if not isinstance(parsed, dict):
            self._reject(f"arguments of {call.name!r} are not an object", out, refeed=False)
            return
        if call.name not in self.tools:
            self._reject(f"tool {call.name!r} was not declared in the request", out, refeed=False)
            return
        self._after_call_ws = ""  # whitespace between calls is layout, not content
        self._just_called = True
        index = self.calls
        self.calls += 1
        out.append(ToolCallStart(index, self.ids(index), call.name, args))
        out.append(ToolCallEnd(index))
        self._call = None
        self._goto(State.TEXT)

    def _reject(self, why: str, out: list[Event], refeed: bool = True) -> None:
        """Emit the would-be call as text and go on parsing after its marker."""
        call = self._call
        assert call is not None
        self.rejected.append(why)
        raw = "".join(call.raw)
        self._call = None
        self._goto(State.TEXT)
        marker, rest = raw[: len(call.raw[0])], raw[len(call.raw[0]) :]
        self._text(marker, out)
        if refeed and rest:
            # What followed the marker may hold real text or another marker: parse it again.
            self._run(rest, out)
        else:
            self._text(rest, out)

    def _text(self, text: str, out: list[Event]) -> None:
        if not text:
            return
        if self._just_called and not text.strip():
            self._after_call_ws += text
            return
        self._flush_ws(out)
        out.append(TextDelta(text))

    def _flush_ws(self, out: list[Event]) -> None:
        self._just_called = False
        if self._after_call_ws:
            out.append(TextDelta(self._after_call_ws))
            self._after_call_ws = ""


def _partial_suffix(buf: str, markers: Collection[str], longest: int) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of a marker."""
    start = max(0, len(buf) - longest + 1)
    for i in range(start, len(buf)):
        tail = buf[i:]
        for m in markers:
            if m.startswith(tail):
                return len(buf) - i
    return 0


def _merge(events: list[Event]) -> list[Event]:
    """Adjacent text (or thinking) deltas of one feed become one delta."""
    out: list[Event] = []
    for e in events:
        last = out[-1] if out else None
        if isinstance(e, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(last.text + e.text)
        elif (
            isinstance(e, ThinkingDelta) and isinstance(last, ThinkingDelta) and not last.signature
        ):
            out[-1] = ThinkingDelta(last.text + e.text, e.signature)
        else:
            out.append(e)
    return out
