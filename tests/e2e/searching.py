"""What the web search e2e tests share (docs/tools.md#web-search): the query, the results the
scripted SearXNG gives for it, and a chat upstream's model that searches, then answers from
the results it is fed."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.harness import JSONReply, Recorded
from tests.e2e.test_text_tools import openai_json

QUERY = "mitmproxy addon hooks"
DOCS = {
    "url": "https://docs.mitmproxy.org/stable/api/events.html",
    "title": "Event Hooks",
    "content": "Addons hook into events such as request and response.",
}
GITHUB = {
    "url": "https://github.com/mitmproxy/mitmproxy",
    "title": "mitmproxy on GitHub",
    "content": "An interactive TLS-capable intercepting proxy.",
}
ANSWER = f"Per {DOCS['url']}: hooks are events."


def results(*found: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    """SearXNG's results for ``QUERY``: ``found``, in order."""
    return {QUERY: list(found)}


def web_search_call(call_id: str = "call_s1") -> dict[str, Any]:
    """An OpenAI chat tool call of the ``web_search`` function the bridge offers."""
    args = json.dumps({"query": QUERY})
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "web_search", "arguments": args},
    }


def searching(call_id: str = "call_s1") -> JSONReply:
    """A chat completion whose one choice calls ``web_search`` for ``QUERY``."""
    reply = openai_json("")
    reply["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [web_search_call(call_id)],
    }
    reply["choices"][0]["finish_reason"] = "tool_calls"
    return JSONReply(reply)


def chat_model(rec: Recorded) -> JSONReply:
    """The upstream's model: searches first, then answers from the tool result it was given."""
    last = rec.json()["messages"][-1]
    if last["role"] != "tool":
        return searching()
    found = json.loads(last["content"])
    return JSONReply(openai_json(f"Per {found[0]['url']}: hooks are events."))
