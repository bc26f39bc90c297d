"""Bad input never crashes: any JSON body gives a request, a ClientError or UnsupportedShape."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from addon.dialects.openai_chat import DIALECT as OPENAI
from addon.model import ClientError, Notes, UnsupportedShape
from addon.transforms.tools import check_tools, sanitize_tool_schemas

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
)
keys = st.sampled_from(
    [
        "type",
        "text",
        "name",
        "id",
        "input",
        "content",
        "tool_use_id",
        "thinking",
        "signature",
        "function",
        "arguments",
        "parameters",
        "input_schema",
        "image_url",
        "source",
        "url",
        "x",
    ]
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
blocks = st.dictionaries(
    keys,
    values,
    max_size=4,
).map(
    lambda d: {**d, "type": d.get("type") if isinstance(d.get("type"), str) else "text"}
) | st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "text",
                "tool_use",
                "tool_result",
                "thinking",
                "image",
                "image_url",
                "redacted_thinking",
                "weird",
            ]
        ),
    },
    optional={
        k: values
        for k in [
            "text",
            "name",
            "id",
            "input",
            "content",
            "tool_use_id",
            "thinking",
            "source",
            "image_url",
        ]
    },
)
messages = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "developer"]),
        "content": st.none() | st.text(max_size=8) | st.lists(blocks, max_size=4),
    },
    optional={
        "tool_calls": st.lists(st.dictionaries(keys, values, max_size=3), max_size=2),
        "tool_call_id": st.text(max_size=4),
    },
)
tools = st.lists(
    st.dictionaries(keys, values, max_size=4)
    | st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.dictionaries(keys, values, max_size=4)}
    ),
    max_size=3,
)
bodies = st.fixed_dictionaries(
    {"model": st.text(max_size=5), "messages": st.lists(messages, max_size=4)},
    optional={"tools": tools, "tool_choice": values, "stream": st.booleans()},
)


@settings(max_examples=500, deadline=None)
@given(bodies)
def test_any_body_is_decoded_refused_or_passed_through(body: dict[str, Any]) -> None:
    notes: Notes = Counter()
    try:
        req = OPENAI.decode_request(body, notes)
        check_tools(req)
        req = sanitize_tool_schemas(req, "strict", notes)
        out = OPENAI.encode_request(req, notes)
    except (ClientError, UnsupportedShape):
        return
    assert isinstance(out["messages"], list)
