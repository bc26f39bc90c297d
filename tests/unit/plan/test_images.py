"""Images on a text-only route (issue 44 point 4, docs/routes.md#images), plan level.

Every image of a request is found in each client dialect's decoded shape (OpenAI
``image_url`` with a ``data:`` or ``https:`` URL, Anthropic ``image`` blocks base64 and url,
inside a ``tool_result`` too, Responses ``input_image`` in a message and in a tool's output,
Gemini ``inlineData`` in a message and in a ``functionResponse``'s parts), named by the hash of
its bytes; ``decide`` on a route with ``images = false`` sends the vision route's caption in its
place (or refuses with a 400 without a vision route, a 502 without the caption), ``images =
"drop"`` leaves them out and says how many. The vision route's request (``caption_calls``) in
each upstream dialect, its answer read (``read_caption``), and the routes file's checks."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from typing import Any

import pytest

from addon.config.images import check_vision
from addon.config.options import Settings
from addon.config.routes import Route, When
from addon.config.routes_file import read_routes
from addon.dialects import DIALECTS
from addon.model import ClientError, Image, Request, ToolResult
from addon.plan import Incoming, Reject, Rewrite, decide, route_for
from addon.plan.captions import CAPTION_PROMPT, Caption, caption_calls, read_caption, wanted
from addon.plan.images import image_key, images_of
from tests.realdata import read

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAIAQMAAAD+wSzIAAAABlBMVEX/AAD///9BHTQRAAAADklEQVQI12P4"
    "z8DAwMAAGH4CAcoA/ykAAAAASUVORK5CYII="
)
B64 = base64.b64encode(PNG).decode()
DATA_URL = f"data:image/png;base64,{B64}"
HASH = hashlib.sha256(PNG).hexdigest()
WEB = "https://example.com/cat.png"
CAPTIONS = {
    ("eyes", HASH): "a red square",
    ("eyes", hashlib.sha256(WEB.encode()).hexdigest()): "a cat",
}

PATHS = {
    "openai_chat": ("*/chat/completions", "/v1/chat/completions"),
    "anthropic": ("*/v1/messages", "/v1/messages"),
    "openai_responses": ("*/responses", "/v1/responses"),
    "gemini": ("*/models/*:*enerateContent", "/v1beta/models/m:generateContent"),
}


def bodies() -> dict[str, dict[str, Any]]:
    """One request per client dialect: the PNG in a user message and in a tool's result, and
    an image by URL where the dialect has one."""
    return {
        "openai_chat": {
            "model": "m",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": DATA_URL}},
                    {"type": "image_url", "image_url": {"url": WEB, "detail": "low"}},
                ]},
            ],
        },
        "anthropic": {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {"role": "user", "content": [
                    {"type": "image", "source": {"type": "url", "url": WEB}},
                    {"type": "text", "text": "read it"},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "x"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [
                        {"type": "image", "source": {
                            "type": "base64", "media_type": "image/png", "data": B64}},
                    ]},
                ]},
            ],
        },
        "openai_responses": {
            "model": "m",
            "input": [
                {"role": "user", "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": WEB},
                ]},
                {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [
                    {"type": "input_image", "image_url": DATA_URL},
                ]},
            ],
        },
        "gemini": {
            "contents": [
                {"role": "user", "parts": [
                    {"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": B64}},
                ]},
                {"role": "model", "parts": [{"functionCall": {"name": "shot", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {
                    "name": "shot", "response": {"output": "done"},
                    "parts": [{"inlineData": {"mimeType": "image/png", "data": B64}}],
                }}]},
            ],
        },
    }  # fmt: skip


def decoded(client: str) -> Any:
    return DIALECTS[client].decode_request(bodies()[client], Counter())


def in_tool_results(req: Request) -> list[Image]:
    """The images inside the request's tool results."""
    return [
        q
        for m in req.messages
        for p in m.parts
        if isinstance(p, ToolResult) and not isinstance(p.content, str)
        for q in p.content
        if isinstance(q, Image)
    ]


@pytest.mark.parametrize("client", list(PATHS))
def test_every_image_is_found_in_each_dialects_shape_message_and_tool_result(client: str) -> None:
    req = decoded(client)
    found = images_of(req)
    keys = [image_key(i) for i in found]
    assert HASH in keys  # the PNG, by the hash of its bytes whatever the dialect's shape
    assert len(found) == 2
    in_results = in_tool_results(req)
    assert bool(in_results) == (client != "openai_chat")


def test_the_key_is_the_bytes_hash_for_data_urls_and_the_urls_for_others() -> None:
    assert image_key(Image(DATA_URL)) == HASH
    assert image_key(Image(f"data:image/jpeg;base64,{B64}")) == HASH  # the bytes, not the type
    assert image_key(Image(WEB)) == hashlib.sha256(WEB.encode()).hexdigest()


def route(client: str, upstream: str = "openai_chat", **keys: Any) -> Route:
    return Route(name="text", path=PATHS[client][0], client=client, upstream=upstream, **keys)  # type: ignore[arg-type]


def decided(client: str, r: Route, captions: Any = None) -> Any:
    inc = Incoming("POST", "h", PATHS[client][1], {}, json.dumps(bodies()[client]).encode())
    eyes = Route(name="eyes", path=PATHS[client][0], client=r.client)
    return decide(Settings(routes=(r, eyes)), r, inc, {}, captions=captions)


@pytest.mark.parametrize("upstream", ["openai_chat", "anthropic", "gemini", "openai_responses"])
@pytest.mark.parametrize("client", list(PATHS))
def test_images_become_their_captions_on_a_text_only_route(client: str, upstream: str) -> None:
    d = decided(client, route(client, upstream, images=False, vision="eyes"), CAPTIONS)
    assert isinstance(d, Rewrite), getattr(d, "reason", d)
    sent = d.body.decode()
    assert B64 not in sent and WEB not in sent  # no image at all
    assert "[image: a red square]" in sent
    assert "image(s) captioned by the vision route 'eyes'" in d.summary
    images = [p for m in d.plan.unified.messages for p in m.parts if isinstance(p, Image)]
    assert images == []


@pytest.mark.parametrize("client", list(PATHS))
def test_an_image_with_no_vision_route_is_a_400_in_the_clients_dialect(client: str) -> None:
    d = decided(client, route(client, images=False))
    assert isinstance(d, Reject)
    assert d.status == 400
    body = json.loads(d.body)
    assert "no vision route" in json.dumps(body)
    assert body == DIALECTS[client].encode_error(
        ClientError(d.message, code="images_not_supported")
    )


def test_a_missing_caption_is_a_502_naming_the_vision_route() -> None:
    d = decided("anthropic", route("anthropic", images=False, vision="eyes"), {})
    assert isinstance(d, Reject)
    assert d.status == 502
    assert "vision route 'eyes'" in d.message


@pytest.mark.parametrize("client", list(PATHS))
def test_drop_leaves_them_out_and_says_how_many(client: str) -> None:
    d = decided(client, route(client, images="drop"))
    assert isinstance(d, Rewrite)
    assert B64 not in d.body.decode() and WEB not in d.body.decode()
    assert "2 image(s) left out (route: images = drop)" in d.summary


def test_a_route_that_sends_images_is_unchanged() -> None:
    d = decided("openai_chat", route("openai_chat"))
    assert isinstance(d, Rewrite)
    assert B64 in d.body.decode()


def test_the_recorded_claude_code_image_turn_is_captioned() -> None:
    recorded = json.loads(read("clients/claude-code-2.1.197-image-read-turn2.request.json"))
    body, path = recorded["body"], recorded["path"]
    r = route("anthropic", images=False, vision="eyes")
    req = DIALECTS["anthropic"].decode_request(body, Counter())
    (w,) = wanted((r,), (r, Route(name="eyes")), req)
    inc = Incoming("POST", "h", path, {}, json.dumps(body).encode())
    eyes = Route(name="eyes", path="*/v1/messages", client="anthropic")
    d = decide(Settings(routes=(r, eyes)), r, inc, {}, captions={w.name: "a red square"})
    assert isinstance(d, Rewrite)
    sent = json.loads(d.body)
    tool_msgs = [m for m in sent["messages"] if m["role"] == "tool"]
    assert "[image: a red square]" in json.dumps(tool_msgs)
    assert '"image_url"' not in d.body.decode()


# --------------------------------------------------------------------------- the caption call


def vision_route(upstream: str, **keys: Any) -> Route:
    return Route(
        name="eyes",
        upstream=upstream,  # type: ignore[arg-type]
        upstream_url="http://127.0.0.1:9/base",
        api_key_env="VISION_KEY",
        model_map=(("*", "looker-1"),),
        **keys,
    )


@pytest.mark.parametrize(
    ("upstream", "path", "header"),
    [
        ("openai_chat", "/base/v1/chat/completions", ("authorization", "Bearer vk")),
        ("anthropic", "/base/v1/messages", ("x-api-key", "vk")),
        ("gemini", "/base/v1beta/models/looker-1:generateContent", ("x-goog-api-key", "vk")),
        ("openai_responses", "/base/v1/responses", ("authorization", "Bearer vk")),
    ],
)
def test_the_caption_call_in_the_vision_routes_dialect(
    upstream: str, path: str, header: tuple[str, str]
) -> None:
    inc = Incoming("POST", "h", "/v1/messages", {"x-api-key": "client-key"}, b"")
    (call,) = caption_calls(
        vision_route(upstream),
        Image(DATA_URL),
        DIALECTS["anthropic"],
        inc,
        {"VISION_KEY": "vk"},
        "m",
    )
    assert call.origin == ("http", "127.0.0.1", 9)
    assert call.path == path
    assert header in call.headers
    assert "client-key" not in repr(call.headers)  # the vision route's key, never the client's
    assert call.model == "looker-1" and call.key_name == "VISION_KEY"
    body = call.body.decode()
    assert CAPTION_PROMPT in body and B64 in body
    assert '"stream":true' not in body


def test_a_key_pool_gives_one_call_per_key_and_a_missing_key_is_said() -> None:
    pooled = vision_route("openai_chat", images=None)
    pooled = Route(
        **{
            **{f: getattr(pooled, f) for f in pooled.__dataclass_fields__},
            "api_key_env": ("A", "B"),
        }
    )
    inc = Incoming("POST", "h", "/v1/chat/completions", {}, b"")
    calls = caption_calls(
        pooled, Image(WEB), DIALECTS["openai_chat"], inc, {"A": "a", "B": "b"}, "m"
    )
    assert [c.key_name for c in calls] == ["A", "B"]
    with pytest.raises(Exception, match="takes its API key from A"):
        caption_calls(pooled, Image(WEB), DIALECTS["openai_chat"], inc, {}, "m")


def test_the_clients_key_goes_to_a_vision_route_on_the_clients_own_upstream() -> None:
    own = Route(name="eyes")
    inc = Incoming("POST", "h", "/v1/chat/completions", {"authorization": "Bearer ck"}, b"")
    (call,) = caption_calls(own, Image(WEB), DIALECTS["openai_chat"], inc, {}, "gpt-v")
    assert call.origin is None and ("authorization", "Bearer ck") in call.headers
    assert call.model == "gpt-v" and call.key_name == ""


def test_the_caption_is_read_from_the_answer_or_why_not() -> None:
    r = vision_route("openai_chat")
    ok = {
        "id": "c", "object": "chat.completion", "created": 1, "model": "looker-1",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "  A red\nsquare. "}}],
        "usage": {"prompt_tokens": 90, "completion_tokens": 4, "total_tokens": 94},
    }  # fmt: skip
    got = read_caption(r, 200, json.dumps(ok).encode())
    assert isinstance(got, Caption)
    assert got.text == "A red square."
    assert got.usage is not None and got.usage.output_tokens == 4
    err = {"error": {"message": "model overloaded", "type": "server_error"}}
    assert read_caption(r, 503, json.dumps(err).encode()) == "HTTP 503: model overloaded"
    assert read_caption(r, 200, b"<html>") == "its answer is not a JSON object"


def test_only_chain_routes_that_caption_want_captions_each_image_once() -> None:
    req = decoded("anthropic")
    text = route("anthropic", images=False, vision="eyes")
    eyes = Route(name="eyes")
    assert wanted((route("anthropic"),), (eyes,), req) == ()
    got = wanted((text, text), (text, eyes), req)
    assert sorted(w.key for w in got) == sorted({image_key(i) for i in images_of(req)})


# --------------------------------------------------------------------------- the routes file


def test_the_routes_file_checks_images_and_vision() -> None:
    ok = read_routes(
        {
            "routes": [
                {"name": "t", "images": False, "vision": "v"},
                {"name": "v"},
                {"name": "d", "images": "drop"},
            ]
        }
    )
    check_vision(ok)
    assert ok[0].images is False and ok[0].vision == "v" and ok[2].images == "drop"
    with pytest.raises(ValueError, match="vision: only with images = false"):
        read_routes({"routes": [{"name": "t", "vision": "v"}]})
    with pytest.raises(ValueError, match="images"):
        read_routes({"routes": [{"name": "t", "images": "no"}]})
    with pytest.raises(ValueError, match="no other route is named 'w'"):
        check_vision(read_routes({"routes": [{"name": "t", "images": False, "vision": "w"}]}))
    blind = read_routes(
        {"routes": [{"name": "t", "images": False, "vision": "v"}, {"name": "v", "images": "drop"}]}
    )
    with pytest.raises(ValueError, match="must see images"):
        check_vision(blind)


def test_when_images_sees_an_image_a_tool_read() -> None:
    """Claude Code's ``Read`` of a PNG sends the image inside a ``tool_result``: a route with
    ``when = {images = true}`` takes that turn (it did not before: only a message's own parts
    were looked at)."""
    recorded = json.loads(read("clients/claude-code-2.1.197-image-read-turn2.request.json"))
    seeing = Route(name="seeing", path="*/v1/messages", client="anthropic", when=When(images=True))
    rest = Route(name="rest", path="*/v1/messages", client="anthropic")
    settings = Settings(routes=(seeing, rest))
    body = json.dumps(recorded["body"]).encode()
    assert route_for(settings, "POST", "h", recorded["path"], body) is seeing
    first = json.loads(read("clients/claude-code-2.1.197-image-read-turn1.request.json"))
    assert (
        route_for(settings, "POST", "h", first["path"], json.dumps(first["body"]).encode()) is rest
    )
