"""A tool call on a message of a role that cannot carry one (system, user, developer) is a
client error for every client dialect, never a crash of an encoder: the whole class of
"a call where no upstream can place it", found by the chat fuzz test (a system message
with ``tool_calls``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from addon.dialects import DIALECTS
from addon.model import ClientError, Notes, UnsupportedShape

CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
USE = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}

BODIES: dict[str, list[dict[str, Any]]] = {
    "openai_chat": [
        {"model": "m", "messages": [{"role": role, "content": "x", "tool_calls": [CALL]}]}
        for role in ("system", "user", "developer")
    ]
    + [
        {"model": "m", "messages": [{"role": role, "content": [USE]}]}
        for role in ("system", "user", "developer")
    ],
    "anthropic": [
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [USE]}]},
    ],
    "gemini": [
        {"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f", "args": {}}}]}]},
    ],
}
UPSTREAMS = ("openai_chat", "anthropic", "openai_responses", "gemini", "kiro")


@pytest.mark.parametrize(
    ("client", "body"), [(c, b) for c, bodies in BODIES.items() for b in bodies]
)
@pytest.mark.parametrize("upstream", UPSTREAMS)
def test_a_call_where_no_role_carries_one_is_refused_or_placed(
    client: str, body: dict[str, Any], upstream: str
) -> None:
    notes: Notes = Counter()
    try:
        req = DIALECTS[client].decode_request(body, notes)
        out = DIALECTS[upstream].encode_request(req, notes)
    except (ClientError, UnsupportedShape) as e:
        assert str(e)
        return
    assert isinstance(out, dict)


def test_the_chat_refusal_names_the_message() -> None:
    body = BODIES["openai_chat"][0]
    with pytest.raises(ClientError, match=r"messages\[0\]: only assistant messages"):
        DIALECTS["openai_chat"].decode_request(body, Counter())
