"""End to end: a whole (non-streamed) answer is fetched by the bridge in the request hook
(``Fallbacks._whole``): mitmproxy opens no connection for it, neither to the loopback relay nor
to the upstream; a stream still goes by the relay (docs/architecture.md, "One upstream path")."""

from __future__ import annotations

import json
import re

from tests.e2e.harness import JSONReply, Proxy, ScriptedUpstream, raw_request
from tests.e2e.test_text_tools import openai_json

HEADERS = {"authorization": "Bearer k", "content-type": "application/json"}


def server_connects(proxy: Proxy, since: int) -> list[str]:
    """mitmproxy's own ``server connect`` lines since ``since``."""
    return re.findall(r"server connect \S+", proxy.log_text()[since:])


def test_a_whole_answer_opens_no_server_connection(
    proxy: Proxy, upstream: ScriptedUpstream
) -> None:
    body = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
    since = len(proxy.log_text())
    for _ in range(3):
        upstream.enqueue(JSONReply(openai_json("whole")))
        status, _, raw = raw_request(
            proxy.port, "POST", "/v1/chat/completions", json.dumps(body).encode(), HEADERS
        )
        assert status == 200 and b"whole" in raw, raw
    assert len(upstream.wait_for_requests(3)) == 3
    assert server_connects(proxy, since) == [], proxy.log_text()[since:]
