"""Client noise (``addon.transforms.client_noise``): Claude Code's billing line left out of
what another vendor gets, kept for Anthropic's own API; and through ``decide``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from addon.config.options import Settings
from addon.config.routes import Route
from addon.model import Image, Message, Notes, Request, Text
from addon.plan import Incoming, Rewrite, decide
from addon.transforms.client_noise import noise_for, strip_client_noise

LINE = "x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=sdk-cli;"
FIXTURE = (
    Path(__file__).parents[2] / "fixtures/claude_code/claude-code-2.1.197-default-main.request.json"
)


def request(*system: str) -> Request:
    return Request(
        origin="anthropic",
        model="m",
        messages=(
            Message("system", tuple(Text(t) for t in system)),
            Message("user", (Text("hi"),)),
        ),
    )


@pytest.mark.parametrize(
    ("upstream", "host", "route", "noise"),
    [
        ("openai_chat", "api.openai.com", None, True),
        ("anthropic", "api.anthropic.com", None, False),
        ("anthropic", "API.Anthropic.com.", None, False),
        ("anthropic", "api.deepseek.com", None, True),
        ("anthropic", "127.0.0.1", None, True),
        ("anthropic", "evil-anthropic.com", None, True),
        ("openai_chat", "anthropic.com", None, True),
        ("anthropic", "127.0.0.1", False, False),
        ("anthropic", "api.anthropic.com", True, True),
    ],
)
def test_whose_noise(upstream: str, host: str, route: bool | None, noise: bool) -> None:
    assert noise_for(upstream, host, route) is noise


def test_a_block_of_its_own_is_left_out_whole() -> None:
    notes: Notes = Counter()
    out = strip_client_noise(request(LINE, "You are an agent."), notes)
    assert out.messages[0].parts == (Text("You are an agent."),)
    assert out.messages[1:] == request().messages[1:]
    assert notes == Counter({"client billing line left out (1): not sent to another vendor": 1})


@pytest.mark.parametrize(
    "line", [LINE, LINE + " cch=00ff12;", "X-Anthropic-Billing-Header: cc_version=9;", "  " + LINE]
)
def test_a_line_inside_a_text_is_left_out_with_its_newline(line: str) -> None:
    out = strip_client_noise(request(f"{line}\nYou are an agent.\nBe brief."), Counter())
    assert out.messages[0].parts == (Text("You are an agent.\nBe brief."),)


def test_per_request_variants_give_the_same_request() -> None:
    a = strip_client_noise(request(LINE + " cch=1;", "sys"), Counter())
    b = strip_client_noise(request(LINE + " cch=2;", "sys"), Counter())
    assert a == b


def test_nothing_to_strip_is_the_same_object() -> None:
    req = request("You are an agent. The x-anthropic-billing-header: is explained here.")
    assert strip_client_noise(req, Counter()) is req
    only_user = Request(
        model="m", messages=(Message("user", (Text(LINE), Image("data:,"))),), origin="anthropic"
    )
    assert strip_client_noise(only_user, Counter()) is only_user


def test_a_system_message_of_the_line_alone_is_left_out() -> None:
    out = strip_client_noise(request(LINE), Counter())
    assert [m.role for m in out.messages] == ["user"]


def _decided(route: Route, host: str) -> Rewrite:
    body = json.loads(FIXTURE.read_text())["body"]
    raw = json.dumps(body).encode()
    d = decide(
        Settings(),
        route,
        Incoming("POST", host, "/v1/messages", {}, raw, 443),
        {},
    )
    assert isinstance(d, Rewrite), d
    return d


def test_the_recorded_request_to_each_upstream() -> None:
    to_chat = _decided(Route(name="r", client="anthropic", upstream="openai_chat"), "api.x.ai")
    assert b"x-anthropic-billing-header" not in to_chat.body
    assert "client billing line left out (1)" in to_chat.summary
    to_anthropic = _decided(
        Route(name="r", client="anthropic", upstream="anthropic"), "api.anthropic.com"
    )
    assert to_anthropic.body is to_anthropic.original
