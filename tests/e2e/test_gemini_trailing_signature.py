"""End to end: Gemini 3's trailing signature part, through mitmdump, for clients of other dialects.

Gemini 3 ends a text answer with an empty text part that carries a ``thoughtSignature``
(the real stream ``gemini-api-stream-text-trailing-thoughtSignature-gemini3.vercel-ai.chunks.txt``,
replayed by the scripted upstream, streamed as SSE in random pieces or joined into one
``generateContent`` answer). The anthropic SDK's own accumulation
(``client.messages.stream(...).get_final_message()``, what Claude Code's ``-p`` prints from)
must end with the text, no thinking block after it; the openai SDK's chat and Responses clients
get no reasoning after the message. Turn 2, where the client sends the answer back without the
signature, must reach Gemini with the signature on the trailing empty part again (the
reasoning store), the way Gemini wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, ScriptedUpstream, SSEReply
from tests.e2e.test_gemini import check_contents
from tests.realdata import FIXTURES, read

RECORDING = (
    FIXTURES / "gemini-api-stream-text-trailing-thoughtSignature-gemini3.vercel-ai.chunks.txt"
)
if not RECORDING.exists():  # every test here replays it
    pytest.skip(f"recording {RECORDING.name} not available", allow_module_level=True)
KEY = "AIza-e2e-trailing-SECRET-key"
MODEL = "gemini-3-pro-preview"
THOUGHT = "Counting the r's one by one."


def chunks() -> list[dict[str, Any]]:
    """The recording, with a thought summary part first (``includeThoughts``)."""
    raw = read(RECORDING.name).decode()  # a skip where the recordings are not beside us
    out = [json.loads(line) for line in raw.splitlines() if line.strip()]
    first = json.loads(json.dumps(out[0]))
    first["candidates"][0]["content"]["parts"] = [{"text": THOUGHT, "thought": True}]
    return [first, *out]


def parts() -> list[dict[str, Any]]:
    return [p for c in chunks() for p in c["candidates"][0]["content"]["parts"]]


SIGNATURE = next(p["thoughtSignature"] for p in parts() if "thoughtSignature" in p)
TEXT = "".join(p["text"] for p in parts() if not p.get("thought"))
AGAIN = "Raspberry has three r's too."


class Gemini:
    """Validates as Gemini does; turn 1 is the recording, turn 2 a plain answer."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, rec: Recorded) -> JSONReply | SSEReply:
        path, _, query = rec.path.partition("?")
        stream = path == f"/v1beta/models/{MODEL}:streamGenerateContent"
        assert stream or path == f"/v1beta/models/{MODEL}:generateContent", rec.path
        assert (query == "alt=sse") == stream
        assert rec.headers.get("x-goog-api-key") == KEY
        body = rec.json()
        check_contents(body["contents"])
        self.bodies.append(body)
        if len(body["contents"]) == 1:
            answer = chunks()
        else:
            answer = [
                {
                    "candidates": [
                        {
                            "content": {"role": "model", "parts": [{"text": AGAIN}]},
                            "finishReason": "STOP",
                            "index": 0,
                        }
                    ],
                    "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 6},
                }
            ]
        if not stream:
            whole = json.loads(json.dumps(answer[-1]))
            whole["candidates"][0]["content"]["parts"] = [
                p for c in answer for p in c["candidates"][0]["content"]["parts"]
            ]
            return JSONReply(whole)
        sse = b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in answer)
        return SSEReply(sse, chunk_min=1, chunk_max=29, seed=len(self.bodies))

    def turn2_model_parts(self) -> list[dict[str, Any]]:
        (model,) = [c for c in self.bodies[1]["contents"] if c["role"] == "model"]
        return list(model["parts"])


@pytest.fixture
def gemini(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> tuple[Proxy, Gemini]:
    routes = tmp_path / "routes.toml"
    routes.write_text(
        "\n".join(
            f'[[routes]]\nname = "{client}-gemini"\npath = "{path}"\n'
            f'client = "{client}"\nupstream = "gemini"\n'
            for client, path in (
                ("anthropic", "*/v1/messages"),
                ("openai_chat", "*/chat/completions"),
                ("openai_responses", "*/v1/responses"),
            )
        )
    )
    script = Gemini()
    upstream.script = script
    return start_proxy(bridge_routes=str(routes)), script


QUESTION = "How many r's in strawberry?"
FOLLOW_UP = "And in raspberry?"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_claude_code_gets_its_text_last_and_turn2_carries_the_signature(
    gemini: tuple[Proxy, Gemini], stream: bool
) -> None:
    proxy, script = gemini
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=15)
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": QUESTION}],
    }
    if stream:
        with client.messages.stream(**params) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**params)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[-1].type == "text" and message.content[-1].text == TEXT
    assert message.stop_reason == "end_turn"
    # Claude Code sends its answer back as it got it: no signature anywhere.
    history = [b.model_dump(exclude={"citations", "parsed_output"}) for b in message.content]
    params["messages"] = [
        *params["messages"],
        {"role": "assistant", "content": history},
        {"role": "user", "content": FOLLOW_UP},
    ]
    again = client.messages.create(**params)
    assert again.content[-1].type == "text" and again.content[-1].text == AGAIN
    assert script.turn2_model_parts()[-1] == {"text": "", "thoughtSignature": SIGNATURE}
    assert KEY not in proxy.log_text() and "Traceback" not in proxy.log_text()


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_clients_get_no_reasoning_after_the_message(
    gemini: tuple[Proxy, Gemini], api: str
) -> None:
    proxy, script = gemini
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    if api == "chat":
        chunks_seen = list(
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": QUESTION}], stream=True
            )
        )
        deltas: list[Any] = [c.choices[0].delta for c in chunks_seen if c.choices]
        text = "".join(d.content or "" for d in deltas)
        reasoning = [
            (d.model_extra or {}).get("reasoning_content")
            for d in deltas
            if (d.model_extra or {}).get("reasoning_content") is not None
        ]
        assert text == TEXT and "".join(reasoning) == THOUGHT
        # Nothing of the reasoning kind once the text began.
        first_text = next(i for i, d in enumerate(deltas) if d.content)
        assert not any(
            (d.model_extra or {}).get("reasoning_content") is not None for d in deltas[first_text:]
        )
        history: Any = [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": text},
            {"role": "user", "content": FOLLOW_UP},
        ]
        again = client.chat.completions.create(model=MODEL, messages=history)
        assert again.choices[0].message.content == AGAIN
    else:
        with client.responses.stream(model=MODEL, input=QUESTION) as s:
            response = s.get_final_response()
        assert [o.type for o in response.output] == ["reasoning", "message"]
        assert response.output_text == TEXT
        again_r = client.responses.create(
            model=MODEL,
            input=[
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": response.output_text},
                {"role": "user", "content": FOLLOW_UP},
            ],
        )
        assert again_r.output_text == AGAIN
    assert script.turn2_model_parts()[-1] == {"text": "", "thoughtSignature": SIGNATURE}
    assert KEY not in proxy.log_text() and "Traceback" not in proxy.log_text()
