"""Images the bridge holds no bytes of, on a text-only route (issue 44 point 4,
docs/routes.md#images), plan level: a file the client uploaded to its provider (Responses
``input_image`` by ``file_id``, Anthropic's ``file`` source, a Gemini Files API or ``gs://``
``fileUri``) and an image by ``http(s)`` URL (OpenAI ``image_url``, Anthropic's ``url``
source, Responses ``image_url``, a Gemini ``fileData`` of a public URL), in a message and in a
tool result, in every client dialect. What each route does with them:

| image | ``images = false`` + vision taking URLs | + vision of bytes only | no vision | drop |
|---|---|---|---|---|
| bytes | caption | caption | 400 | left out |
| URL | caption of the URL (the bridge fetches nothing) | 400 | 400 | left out |
| file | 400 naming it | 400 | 400 | left out, said |"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import ClientError
from addon.plan import Incoming, Reject, Rewrite, decide
from addon.plan.captions import wanted
from addon.plan.images import image_key, images_of, source_of
from tests.unit.plan.test_images import DATA_URL, PATHS, in_tool_results

URL = "https://images.example.com/red.png?sig=s3cr3t"
URL_KEY = hashlib.sha256(URL.encode()).hexdigest()
GEMINI_FILE = "https://generativelanguage.googleapis.com/v1beta/files/abc-123"


def file_bodies() -> dict[str, dict[str, Any]]:
    """A file image in a user message and a tool result, per client dialect that has them."""
    return {
        "openai_responses": {"model": "m", "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "file_id": "file-abc", "detail": "high"},
            ]},
            {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_image", "file_id": "file-def"},
            ]},
        ]},
        "anthropic": {"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "file", "file_id": "file_011A"}},
                {"type": "text", "text": "read it"},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "image", "source": {"type": "file", "file_id": "file_011B"}},
                ]},
            ]},
        ]},
        "gemini": {"contents": [
            {"role": "user", "parts": [
                {"text": "look"}, {"fileData": {"mimeType": "image/png", "fileUri": GEMINI_FILE}},
            ]},
            {"role": "model", "parts": [{"functionCall": {"name": "shot", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {
                "name": "shot", "response": {"output": "done"},
                "parts": [{"fileData": {"mimeType": "image/png", "fileUri": "gs://b/o.png"}}],
            }}]},
        ]},
    }  # fmt: skip


def url_body(client: str) -> dict[str, Any]:
    """An image by URL in a user message of ``client``'s dialect."""
    return {
        "openai_chat": {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": URL}},
        ]}]},
        "anthropic": {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": URL}},
            {"type": "text", "text": "look"},
        ]}]},
        "openai_responses": {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": URL},
        ]}]},
        "gemini": {"contents": [{"role": "user", "parts": [
            {"text": "look"}, {"fileData": {"mimeType": "image/png", "fileUri": URL}},
        ]}]},
    }[client]  # fmt: skip


@pytest.mark.parametrize("client", ["openai_responses", "anthropic", "gemini"])
def test_a_file_image_is_found_as_a_file_in_a_message_and_a_tool_result(client: str) -> None:
    req = DIALECTS[client].decode_request(file_bodies()[client], Counter())
    found = images_of(req)
    assert len(found) == 2 and all(source_of(i) == "file" for i in found)
    in_results = in_tool_results(req)
    assert len(in_results) == 1
    assert image_key(found[0]) == hashlib.sha256(f"file:{found[0].file}".encode()).hexdigest()


@pytest.mark.parametrize("client", ["openai_responses", "anthropic"])
def test_a_file_image_goes_back_to_its_own_dialect_as_the_file(client: str) -> None:
    req = DIALECTS[client].decode_request(file_bodies()[client], Counter())
    sent = json.dumps(DIALECTS[client].encode_request(req, Counter()))
    if client == "anthropic":
        assert '{"type": "file", "file_id": "file_011A"}' in sent and "file_011B" in sent
    else:
        assert '"file_id": "file-abc"' in sent and '"file_id": "file-def"' in sent
        assert '"image_url"' not in sent


@pytest.mark.parametrize("client", list(PATHS))
def test_a_url_image_is_a_url(client: str) -> None:
    (image,) = images_of(DIALECTS[client].decode_request(url_body(client), Counter()))
    assert source_of(image) == "url" and image.url == URL and image_key(image) == URL_KEY


def routes(client: str, keys: dict[str, Any], eyes: str = "openai_chat") -> tuple[Route, ...]:
    text = Route(name="text", path=PATHS[client][0], client=client, upstream="openai_chat", **keys)  # type: ignore[arg-type]
    return text, Route(name="eyes", path="/eyes/*", upstream=eyes)  # type: ignore[arg-type]


def decided(client: str, body: dict[str, Any], rs: tuple[Route, ...], captions: Any) -> Any:
    inc = Incoming("POST", "h", PATHS[client][1], {}, json.dumps(body).encode())
    return decide(Settings(routes=rs), rs[0], inc, {}, captions=captions)


VISION = {"images": False, "vision": "eyes"}


@pytest.mark.parametrize("keys", [VISION, {"images": False}])
@pytest.mark.parametrize("client", ["openai_responses", "anthropic", "gemini"])
def test_a_file_image_is_a_400_naming_it_with_a_vision_route_or_without(
    client: str, keys: dict[str, Any]
) -> None:
    body = file_bodies()[client]
    rs = routes(client, keys)
    d = decided(client, body, rs, {})
    assert isinstance(d, Reject) and d.status == 400, d
    assert "image 1 of 2 in this request (message 1)" in d.message
    assert "a file the client uploaded to its provider" in d.message and "'text'" in d.message
    error = ClientError(d.message, code="images_not_supported")
    assert json.loads(d.body) == DIALECTS[client].encode_error(error)
    req = DIALECTS[client].decode_request(body, Counter())
    assert wanted((rs[0],), rs, req) == ()  # no caption call for a request refused anyway


@pytest.mark.parametrize("client", list(PATHS))
def test_a_url_image_is_captioned_by_its_url_where_the_vision_route_takes_urls(
    client: str,
) -> None:
    rs = routes(client, VISION)
    req = DIALECTS[client].decode_request(url_body(client), Counter())
    (w,) = wanted((rs[0],), rs, req)
    assert w.key == URL_KEY and w.image.url == URL  # the caption is kept under the URL's hash
    d = decided(client, url_body(client), rs, {("eyes", URL_KEY): "a red square"})
    assert isinstance(d, Rewrite), d
    assert URL not in d.body.decode() and "[image: a red square]" in d.body.decode()


@pytest.mark.parametrize("client", list(PATHS))
def test_a_url_image_is_a_400_where_the_vision_route_takes_bytes_only(client: str) -> None:
    rs = routes(client, VISION, eyes="gemini_code_assist")
    req = DIALECTS[client].decode_request(url_body(client), Counter())
    assert wanted((rs[0],), rs, req) == ()
    d = decided(client, url_body(client), rs, {})
    assert isinstance(d, Reject) and d.status == 400
    assert "vision route 'eyes' is sent image bytes only" in d.message
    assert "does not fetch URLs" in d.message
    assert "s3cr3t" not in d.message and "https://images.example.com/red.png" in d.message
    with_bytes = json.loads(json.dumps(url_body(client)).replace(URL, DATA_URL))
    if client == "anthropic":  # its bytes go in a base64 source
        source = {"type": "base64", "media_type": "image/png", "data": DATA_URL.split(",")[1]}
        with_bytes["messages"][0]["content"][0]["source"] = source
    elif client == "gemini":
        data = {"mimeType": "image/png", "data": DATA_URL.split(",")[1]}
        with_bytes["contents"][0]["parts"][1] = {"inlineData": data}
    req = DIALECTS[client].decode_request(with_bytes, Counter())
    assert len(wanted((rs[0],), rs, req)) == 1  # bytes: the same route captions them


@pytest.mark.parametrize("client", ["openai_responses", "anthropic", "gemini"])
def test_drop_leaves_out_files_and_says_so(client: str) -> None:
    d = decided(client, file_bodies()[client], routes(client, {"images": "drop"}), {})
    assert isinstance(d, Rewrite), d
    sent = d.body.decode()
    assert "file-abc" not in sent and "file_011A" not in sent and "abc-123" not in sent
    assert "2 image(s) left out (route: images = drop)" in d.summary
    assert "2 of them a file the client uploaded to its provider (no bytes)" in d.summary


@pytest.mark.parametrize("client", ["openai_responses", "anthropic", "gemini"])
def test_a_file_image_to_another_dialects_upstream_is_a_400_and_to_its_own_is_sent(
    client: str,
) -> None:
    """A route that sends images: another dialect's upstream cannot read the client's
    provider's file (a 400 naming it, before anything is sent); the client's own dialect's
    upstream gets the file as sent."""
    body = file_bodies()[client]
    d = decided(client, body, routes(client, {}), {})
    assert isinstance(d, Reject) and d.status == 400, d
    assert "image 1 of 2 in this request (message 1)" in d.message
    assert "'text'" in d.message and "openai_chat upstream" in d.message
    own = Route(name="own", path=PATHS[client][0], client=client, upstream=client)  # type: ignore[arg-type]
    sent = decided(client, body, (own,), {})
    assert isinstance(sent, Rewrite), sent
