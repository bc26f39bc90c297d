"""The "cursor-bridge" content view (mitmweb, mitmproxy's console): what the bridge did to a flow,
as text from ``addon.report.view`` — a request's route, dialects, decisions and diff, an answer's upstream
and client events as one timeline — redacted; one line, never a traceback, on a flow or part the
bridge did not rewrite. A view because a rewritten flow's bytes alone do not say what changed.
"""

from __future__ import annotations

from mitmproxy import contentviews, http

from addon.dialects import DIALECTS
from addon.redact import clean
from addon.report.counters import AnswerInfo, Original, OriginalStore
from addon.report.outcome import Action
from addon.report.view import note_view, request_view, response_view
from addon.shell.notes import META_KEY


class BridgeContentview(contentviews.Contentview):
    def __init__(self, originals: OriginalStore) -> None:
        self._originals = originals

    @property
    def name(self) -> str:
        return "cursor-bridge"

    @property
    def syntax_highlight(self) -> contentviews.SyntaxHighlight:
        return "none"

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        flow, message = metadata.flow, metadata.http_message
        if not isinstance(flow, http.HTTPFlow) or message is None:
            return note_view("not an HTTP flow: nothing the bridge rewrote")
        part = "request" if isinstance(message, http.Request) else "response"
        try:
            return self._render(flow, part, data)
        except Exception as e:  # a bug of ours: one line, as everywhere else
            return note_view(f"the {part} could not be shown ({type(e).__name__}: {clean(e, 300)})")

    def _render(self, flow: http.HTTPFlow, part: str, data: bytes) -> str:
        found = self._originals.get(flow.id, part)
        if found is None:
            return note_view(_why_nothing(flow, part, self._originals.get(flow.id, "request")))
        # The flow's credential values (an upstream that echoed the client's key), from every
        # body shown and from the text around them.
        redact = found.secrets
        data, body = redact.bytes(data), redact.bytes(found.body)
        info = found.answer
        if info is None:
            return redact(
                request_view(
                    summary=found.summary,
                    facts=found.facts,
                    decisions=found.decisions,
                    client_body=body,
                    upstream_body=data,
                    attempts=tuple((what, redact.bytes(sent)) for what, sent in found.attempts),
                )
            )
        return redact(self._response(found, info, body, data))

    def _response(self, found: Original, info: AnswerInfo, body: bytes, data: bytes) -> str:
        return response_view(
            summary=found.summary,
            facts=found.facts,
            decisions=found.decisions,
            upstream=DIALECTS[info.upstream],
            upstream_framing=info.upstream_framing,
            upstream_body=body,
            client=DIALECTS[info.client],
            client_framing=info.client_framing,
            client_body=data or None,
            stream=info.stream,
            cut=info.cut,
        )

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        flow, message = metadata.flow, metadata.http_message
        if flow is None or message is None:
            return -1
        part = "request" if isinstance(message, http.Request) else "response"
        # Above the JSON view for the flows it rewrote, invisible for all others.
        return 2 if self._originals.get(flow.id, part) is not None else -1


def _why_nothing(flow: http.HTTPFlow, part: str, request: object) -> str:
    """One line: why the view has nothing of this part to show."""
    meta = flow.metadata.get(META_KEY)
    if not isinstance(meta, dict):
        return "not a flow the bridge rewrote (no route matched it)"
    action = meta.get("action")
    why = meta.get("reason") or meta.get("error")
    if action == Action.PASSTHROUGH:
        return f"passed through untouched: {clean(why, 300)}"
    if action == Action.REJECTED:
        return f"the bridge answered itself, the upstream was not asked: {clean(why, 300)}"
    if request is None:
        return "what this flow was before the bridge rewrote it is not kept (the last 200 are)"
    return "no timeline: the upstream's answer was not rewritten as an answer (see the comment)"
