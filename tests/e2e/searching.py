"""What the web search e2e tests share (docs/tools.md#web-search): the query, the results the
scripted SearXNG gives for it, and a chat upstream's model that searches, then answers from
the results it is fed."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.harness import JSONReply, Recorded, SSEReply, sse_from_payloads
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


def searching(call_id: str = "call_s1", rec: Recorded | None = None) -> JSONReply | SSEReply:
    """A chat completion whose one choice calls ``web_search`` for ``QUERY`` (streamed when
    ``rec`` asked for a stream)."""
    reply = openai_json("")
    reply["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [web_search_call(call_id)],
    }
    reply["choices"][0]["finish_reason"] = "tool_calls"
    return chat_reply(rec, reply)


def chat_model(rec: Recorded) -> JSONReply | SSEReply:
    """The upstream's model: searches first, then answers from the tool result it was given."""
    last = rec.json()["messages"][-1]
    if last["role"] != "tool":
        return searching(rec=rec)
    found = json.loads(last["content"])
    return chat_reply(rec, openai_json(f"Per {found[0]['url']}: hooks are events."))


def chat_reply(rec: Recorded | None, completion: dict[str, Any]) -> JSONReply | SSEReply:
    """``completion`` as OpenAI answers the request: whole, or (``stream: true``) as its
    ``chat.completion.chunk`` stream — the role, the text in pieces, each call, the finish,
    then the usage in a last chunk without choices (``stream_options.include_usage``)."""
    if rec is None or not rec.json().get("stream"):
        return JSONReply(completion)
    return SSEReply(sse_from_payloads(chat_chunks(completion)), chunk_min=5, chunk_max=40, seed=1)


def chat_chunks(completion: dict[str, Any]) -> list[Any]:
    """A chat completion as the chunks OpenAI streams it (then ``[DONE]``)."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {k: completion[k] for k in ("id", "created", "model")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        one = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "object": "chat.completion.chunk", "choices": [one]}

    out: list[Any] = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    out += [chunk({"content": text[i : i + 8]}) for i in range(0, len(text), 8)]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        start = {"index": i, "id": call["id"], "type": "function"}
        out.append(
            chunk({"tool_calls": [{**start, "function": {"name": fn["name"], "arguments": ""}}]})
        )
        out.append(
            chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
        )
    out.append(chunk({}, choice["finish_reason"]))
    usage = {**head, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]}
    return [*out, usage, "[DONE]"]
