"""mitmweb / mitmproxy content view "cursor-bridge": what the client sent vs what went upstream.

Part of the shell (it imports mitmproxy). For a request the bridge rewrote it
shows the summary, the client's original body and the body the upstream got;
for a rewritten whole answer, the upstream's original and what the client got.
Streamed answers are rewritten on the fly and not kept twice; start mitmweb
with ``--set store_streamed_bodies=true`` to see what the client received.
What it shows goes through ``addon.redact`` (keys and credential parameters
redacted; long tokens such as thinking signatures are left to see).
"""

from __future__ import annotations

import json

from mitmproxy import contentviews, http

from addon.redact import clean, escape, redact
from addon.state import OriginalStore
from addon.stream.eventstream import split_all


def _pretty(body: bytes) -> str:
    try:
        text = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        text = _event_stream(body) or body.decode("utf-8", "replace")
    # Lone surrogates (from "\ud83d" in the JSON) cannot be shown: escaped.
    return redact(escape_surrogates(text), tokens=False)


def _event_stream(body: bytes) -> str | None:
    """AWS event-stream frames (a Kiro answer) as one ``event-type: payload`` line each."""
    if len(body) < 16 or body[:1] in (b"{", b"["):
        return None
    frames, error = split_all(body)
    if not frames:
        return None
    lines = [f"{f.event}: {f.text}" for f in frames]
    if error is not None:
        lines.append(f"# {error}")
    return "\n".join(lines)


def escape_surrogates(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "\n".join(escape(line) for line in text.split("\n"))


class BridgeContentview(contentviews.Contentview):
    def __init__(self, originals: OriginalStore) -> None:
        self._originals = originals

    @property
    def name(self) -> str:
        return "cursor-bridge"

    @property
    def syntax_highlight(self) -> contentviews.SyntaxHighlight:
        return "yaml"  # YAML highlighting is JSON-friendly (see mitmproxy's docs)

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        flow, message = metadata.flow, metadata.http_message
        if flow is None or message is None:
            raise ValueError("not a flow the bridge rewrote")
        part = "request" if isinstance(message, http.Request) else "response"
        found = self._originals.get(flow.id, part)
        if found is None:
            raise ValueError("not a flow the bridge rewrote (or its original was evicted)")
        before, after = (
            ("client sent", "upstream got")
            if part == "request"
            else ("upstream sent", "client got")
        )
        return (
            f"# cursor-bridge: {clean(found.summary, 2000)}\n\n"
            f"# ── {after} (rewritten) ──\n{_pretty(data)}\n\n"
            f"# ── {before} (original) ──\n{_pretty(found.body)}\n"
        )

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        flow, message = metadata.flow, metadata.http_message
        if flow is None or message is None:
            return -1
        part = "request" if isinstance(message, http.Request) else "response"
        # Above the JSON view for the flows it rewrote, invisible for all others.
        return 2 if self._originals.get(flow.id, part) is not None else -1
