"""End to end: images the bridge holds no bytes of, on a text-only route (issue 44 point 4,
docs/routes.md#images). A real mitmdump before the text route's scripted upstream (OpenAI
chat, ``images = false``) and a vision route's (OpenAI chat at its own ``upstream_url``: its
requests take an image by URL, the service fetches it).

- A URL image (OpenAI chat ``image_url``, Anthropic ``url`` source, a Gemini ``fileData`` of a
  public https URL inside a ``functionResponse``): the vision route gets the URL as it came
  (the bridge fetches nothing), the text route the caption; the next turn's same URL is the
  cached caption, no second call.
- A file the client uploaded to its provider (Responses ``input_image`` by ``file_id``,
  Anthropic's ``file`` source, a Gemini Files API ``fileUri``): a 400 in the client's dialect
  naming the image and why, with a vision route and without; no upstream asked.
- ``images = "drop"``: left out, the flow comment says so (and how many had no bytes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from mitmproxy import io as mitmio

from tests.e2e.harness import Proxy, ScriptedUpstream, raw_request
from tests.e2e.test_vision import (
    CAPTION,
    VISION_KEY,
    bridge,
    image_question,
    image_url,
    no_image,
    openai_client,
    vision,
)

__all__ = ["bridge", "vision"]  # fixtures: the bridge before both upstreams, the vision one

IMAGE_URL = "https://images.example.com/shots/red-square.png?X-Amz-Signature=s3cr3tsig"


def captioned_url(vision: ScriptedUpstream) -> None:
    """The vision route was asked once, with the URL as the client gave it."""
    (asked,) = vision.requests
    image = asked.json()["messages"][0]["content"][1]
    assert image == image_url(IMAGE_URL)
    assert asked.headers["authorization"] == f"Bearer {VISION_KEY}"


def test_a_url_in_an_openai_chat_request_goes_to_the_vision_route_as_a_url(
    bridge: Callable[..., Proxy], upstream: ScriptedUpstream, vision: ScriptedUpstream
) -> None:
    p = bridge(client="openai_chat")
    client = openai_client(p, "sk-c")
    content = image_question(image_url(IMAGE_URL))
    for _ in range(2):  # the second turn: the caption kept by the URL, no second call
        got = client.chat.completions.create(
            model="claude-x", messages=[{"role": "user", "content": content}]
        )
        assert got.choices[0].message.content == "It is red."
    captioned_url(vision)
    first, second = upstream.requests
    no_image(first)
    assert IMAGE_URL not in first.body.decode() and f"[image: {CAPTION}]" in first.body.decode()
    assert first.json()["messages"] == second.json()["messages"]


def test_a_url_source_of_an_anthropic_client_is_captioned_by_its_url(
    bridge: Callable[..., Proxy], upstream: ScriptedUpstream, vision: ScriptedUpstream
) -> None:
    p = bridge(client="anthropic")
    client = anthropic.Anthropic(base_url=p.base_url, api_key="sk-ant-c", max_retries=0, timeout=20)
    got = client.messages.create(
        model="claude-x",
        max_tokens=50,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "url", "url": IMAGE_URL}},
                    {"type": "text", "text": "What colour?"},
                ],
            }
        ],
    )
    assert got.content[0].type == "text" and got.content[0].text == "It is red."
    captioned_url(vision)
    (rec,) = upstream.requests
    no_image(rec)
    assert f"[image: {CAPTION}]" in rec.body.decode()


def test_a_gemini_tool_results_url_image_is_captioned_not_left_out(
    bridge: Callable[..., Proxy], upstream: ScriptedUpstream, vision: ScriptedUpstream
) -> None:
    p = bridge(client="gemini")
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "Open the screenshot."}]},
            {"role": "model", "parts": [{"functionCall": {"name": "open", "args": {}}}]},
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "open",
                            "response": {"output": "opened"},
                            "parts": [
                                {"fileData": {"mimeType": "image/png", "fileUri": IMAGE_URL}}
                            ],
                        }
                    }
                ],
            },
        ]
    }
    status, _, answer = raw_request(
        p.port,
        "POST",
        "/v1beta/models/gemini-x:generateContent",
        json.dumps(body).encode(),
        {"content-type": "application/json", "x-goog-api-key": "g-client"},
        timeout=20,
    )
    assert status == 200, answer[:300]
    captioned_url(vision)
    (rec,) = upstream.requests
    no_image(rec)
    (tool,) = [m for m in rec.json()["messages"] if m["role"] == "tool"]
    assert f"[image: {CAPTION}]" in json.dumps(tool)


FILES: dict[str, tuple[str, bytes, dict[str, str], str]] = {
    # client: (path, body, headers, the file's id as the 400 names it)
    "openai_responses": (
        "/v1/responses",
        json.dumps(
            {
                "model": "gpt-x",
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "What colour?"},
                            {"type": "input_image", "file_id": "file-abc123", "detail": "auto"},
                        ],
                    }
                ],
            }
        ).encode(),
        {"content-type": "application/json", "authorization": "Bearer sk-c"},
        "file-abc123",
    ),
    "anthropic": (
        "/v1/messages",
        json.dumps(
            {
                "model": "claude-x",
                "max_tokens": 50,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "file", "file_id": "file_011X"}},
                            {"type": "text", "text": "What colour?"},
                        ],
                    }
                ],
            }
        ).encode(),
        {
            "content-type": "application/json",
            "x-api-key": "sk-ant-c",
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "files-api-2025-04-14",
        },
        "file_011X",
    ),
    "gemini": (
        "/v1beta/models/gemini-x:generateContent",
        json.dumps(
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [
                            {"text": "What colour?"},
                            {
                                "fileData": {
                                    "mimeType": "image/png",
                                    "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc-123",
                                }
                            },
                        ],
                    }
                ]
            }
        ).encode(),
        {"content-type": "application/json", "x-goog-api-key": "g-client"},
        "files/abc-123",
    ),
}


def send_file(p: Proxy, client: str) -> tuple[int, bytes]:
    """``client``'s request with its uploaded file (``FILES``) through ``p``: status, body."""
    path, body, headers, _ = FILES[client]
    status, _, answer = raw_request(p.port, "POST", path, body, headers, timeout=20)
    return status, answer


def refused_naming_the_file(
    p: Proxy, client: str, upstream: ScriptedUpstream, vision: ScriptedUpstream
) -> dict[str, Any]:
    """``client``'s file request is a 400 naming the file as uploaded to its provider, no
    upstream asked, no traceback: the error as the client got it."""
    file_id = FILES[client][3]
    status, answer = send_file(p, client)
    assert status == 400, answer[:300]
    error: dict[str, Any] = json.loads(answer)
    message = json.dumps(error)
    assert file_id in message and "uploaded to its provider" in message
    assert upstream.requests == [] and vision.requests == []
    assert "Traceback" not in p.log_text()
    return error


@pytest.mark.parametrize("keys", ['images = false\nvision = "eyes"', "images = false"])
@pytest.mark.parametrize("client", list(FILES))
def test_a_file_the_client_uploaded_is_a_400_in_its_dialect_naming_it(
    client: str,
    keys: str,
    bridge: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    vision: ScriptedUpstream,
) -> None:
    p = bridge(keys, client)
    error = refused_naming_the_file(p, client, upstream, vision)
    message = json.dumps(error)
    if client == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    elif client == "gemini":
        assert error["error"]["status"] == "INVALID_ARGUMENT" and error["error"]["code"] == 400
    else:
        assert error["error"]["type"] == "invalid_request_error"
    assert "image 1 of 1" in message and "'text'" in message


@pytest.mark.parametrize("client", list(FILES))
def test_drop_leaves_out_a_file_image_and_says_so(
    client: str,
    bridge: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    vision: ScriptedUpstream,
    tmp_path: Path,
) -> None:
    saved = tmp_path / "flows"
    p = bridge('images = "drop"', client, save_stream_file=saved)
    file_id = FILES[client][3]
    status, answer = send_file(p, client)
    assert status == 200, answer[:300]
    (rec,) = upstream.requests
    no_image(rec)
    assert file_id not in rec.body.decode() and "What colour?" in rec.body.decode()
    assert vision.requests == []
    p.stop()
    with saved.open("rb") as f:
        (flow,) = list(mitmio.FlowReader(f).stream())
    assert "1 image(s) left out (route: images = drop)" in flow.comment, flow.comment
    assert "1 of them a file the client uploaded to its provider (no bytes)" in flow.comment


@pytest.mark.parametrize("client", list(FILES))
def test_a_file_the_client_uploaded_is_a_400_on_a_route_that_sends_images_elsewhere(
    client: str,
    bridge: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    vision: ScriptedUpstream,
) -> None:
    """A route that sends images (no ``images`` key) to another dialect's upstream: the
    provider's file cannot be read there (its encoder had only an empty URL to send), so the
    client gets a 400 naming it, and no upstream is asked."""
    p = bridge("", client)
    message = json.dumps(refused_naming_the_file(p, client, upstream, vision))
    assert "'text'" in message and "openai_chat upstream" in message
