"""The calibrated estimate (``addon.plan.calibration``, issue 44 point 2): after 5 answers of a
route and model, the estimate of the recorded Claude Code, Codex and Gemini CLI requests is
within 15% of the upstream's count. OpenAI's o200k tables stand for the upstream's counter:
each answer's "real" prompt tokens are the tables' count of the chat body the request becomes.
The answers are the recorded conversation cut at each message (the requests a client sends as
it grows); the estimate is then asked of each request not learned from."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from addon.config.routes import Route
from addon.dialects import DIALECTS
from addon.model import Request
from addon.plan.calibration import Calibration, Shared, store_key
from addon.plan.count_tokens import CountLocally, count_calibration_key, count_request
from addon.plan.token_counter import count_calibrated, learn_answer
from addon.transforms.tokenizers import count_chat
from addon.transforms.tokens import estimate_input_tokens
from addon.transforms.tools import leave_out_tools
from tests.realdata import read

pytest.importorskip("bpe_openai")

CLIENTS = {
    "claude-code-2.1.197-default": "anthropic",
    "codex-0.169.0-responses-gpt-5.5": "openai_responses",
    "gemini-cli-0.61.0-default": "gemini",
}
ROUTE = Route(name="local", path="*", client="anthropic", upstream="openai_chat")


def requests(stem: str, dialect: str) -> list[Request]:
    """One client's last recorded turn cut at each message, shortest first: the requests it
    sends as the conversation grows (turns 1 and 2 are two of them)."""
    body = json.loads(read(f"clients/{stem}-turn3.request.json"))["body"]
    req = DIALECTS[dialect].decode_request(body, Counter())
    req = leave_out_tools(req, DIALECTS["openai_chat"].runs, "chat", Counter())
    req = replace(req, model="local-model")
    return [replace(req, messages=req.messages[:k]) for k in range(1, len(req.messages) + 1)]


def upstream_count(req: Request) -> int:
    """The tables' count of the chat body the request becomes (the upstream's counter)."""
    chat = DIALECTS["openai_chat"].encode_request(req, Counter())
    n = count_chat("o200k", chat)
    assert n is not None
    return n


@pytest.mark.parametrize("stem", list(CLIENTS))
def test_five_answers_bring_the_estimate_within_15_percent(stem: str) -> None:
    reqs = requests(stem, CLIENTS[stem])
    assert len(reqs) >= 6
    calibration = Calibration()
    learned, asked = reqs[:5], reqs[5:]
    for req in learned:
        learn_answer(calibration, ROUTE, req, upstream_count(req))
    for req in asked:
        want = upstream_count(req)
        counted = count_calibrated(ROUTE, req, None, calibration)
        assert counted.estimated and counted.calibrated == 5
        assert abs(counted.tokens - want) <= 0.15 * want, (counted.tokens, want)


def test_without_answers_the_plain_estimate_answers() -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hello " * 200}]}
    req = DIALECTS["anthropic"].decode_request({"model": "m", **body}, Counter())
    counted = count_calibrated(ROUTE, req, body, Calibration())
    assert counted.tokens == estimate_input_tokens(body) and counted.calibrated == 0


def test_the_ratio_is_a_median_rounded_up_and_bounded() -> None:
    c = Calibration(window=3)
    for real in (150, 10_000, 160, 170):  # 10_000 / 100: no count of the same request
        c.learn("r", "m", 100, real)
    scaled = c.scale("r", "m", 10)
    assert scaled is not None and scaled.answers == 3 and scaled.tokens == 16  # 1.6 * 10
    c.learn("r", "m", 100, 0)
    assert c.scale("r", "other", 10) is None
    small = Calibration(max_keys=2)
    for route in ("a", "b", "c"):
        small.learn(route, "m", 10, 12)
    assert small.scale("a", "m", 10) is None and small.scale("c", "m", 10) is not None
    third = Calibration()
    third.learn("r", "m", 3, 4)
    got = third.scale("r", "m", 10)
    assert got is not None and got.tokens == 14  # 13.33… rounded up


def test_a_routes_tables_are_not_calibrated() -> None:
    gpt = Route(name="gpt", path="*", client="anthropic", upstream="openai_chat")
    c = Calibration()
    req = DIALECTS["anthropic"].decode_request(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, Counter()
    )
    learn_answer(c, gpt, req, 1000)
    assert c.scale("gpt", "gpt-4o", 10) is None


def test_count_tokens_answers_the_calibrated_estimate_and_says_so() -> None:
    route = Route(
        name="local",
        path="*/v1/messages",
        client="anthropic",
        upstream="openai_chat",
        count_tokens="estimate",
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there " * 50}]}
    req = DIALECTS["anthropic"].decode_request(body, Counter())
    c = Calibration()
    for _ in range(5):
        learn_answer(c, route, req, 1000)
    got = count_request(
        route, "/v1/messages/count_tokens", json.dumps(body).encode(), {}, (), {}, calibration=c
    )
    assert isinstance(got, CountLocally) and got.estimated
    assert json.loads(got.body) == {"input_tokens": 1000}
    assert "calibrated on 5 answers" in got.comment


def test_a_lesson_and_a_counts_key_name_the_route_and_the_model_as_sent() -> None:
    """What the store keeps a lesson under is what a count of the same model reads: the
    route and the model as sent upstream (its ``model_map``'s name); none for tables."""
    route = Route(
        name="local",
        path="*/v1/messages",
        client="anthropic",
        upstream="openai_chat",
        model_map={"claude-*": "local-model"},
    )
    body = {"model": "claude-x", "messages": [{"role": "user", "content": "hi " * 100}]}
    key = count_calibration_key(route, json.dumps(body).encode())
    assert key == store_key("local", "local-model")
    req = DIALECTS["anthropic"].decode_request({**body, "model": "local-model"}, Counter())
    lesson = learn_answer(Calibration(), route, req, 150)
    assert lesson is not None and lesson[0] == key and lesson[1] > 0
    assert learn_answer(Calibration(), route, req, 10**9) is None  # no count of the same
    assert count_calibration_key(route, b"not json") is None
    gpt = Route(name="gpt", path="*/v1/messages", client="anthropic", upstream="openai_chat")
    assert count_calibration_key(gpt, json.dumps({**body, "model": "gpt-4o"}).encode()) is None


def test_shared_ratios_count_where_read_else_the_processs() -> None:
    local = Calibration()
    local.learn("r", "m", 10, 30)
    shared = Shared(local, {store_key("r", "m"): [1.5]}, lambda key: [2.5])
    got = shared.scale("r", "m", 10)
    assert got is not None and got.tokens == 20 and got.answers == 2  # median of 1.5, 2.5
    assert Shared(local, {}, lambda key: []).scale("r", "m", 10) == local.scale("r", "m", 10)
    assert Shared(local, {store_key("r", "m"): []}, lambda key: []).scale("r", "m", 10) is None
