"""mitmweb / mitmproxy content view "cursor-bridge": what the bridge did to a flow.

Part of the shell (it imports mitmproxy); the text comes from ``addon.view``.
For a request the bridge rewrote: the route, the dialects, every decision, and a
diff of what the client sent against what the upstream got. For an answer: the
upstream's events and the client's as one timeline, for whole answers and for
streams (the first ``KEEP_STREAM_BYTES`` the upstream streamed are kept with the
originals; the client's side of a stream is there when mitmproxy stores
streamed bodies, ``store_streamed_bodies``). Everything shown is redacted.
"""

from __future__ import annotations

from mitmproxy import contentviews, http

from addon.dialects import DIALECTS
from addon.state import AnswerInfo, Original, OriginalStore
from addon.view import request_view, response_view


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
        if flow is None or message is None:
            raise ValueError("not a flow the bridge rewrote")
        part = "request" if isinstance(message, http.Request) else "response"
        found = self._originals.get(flow.id, part)
        if found is None:
            raise ValueError("not a flow the bridge rewrote (or its original was evicted)")
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
