"""A route's ``expose_as`` (issue 44 point 3): the models a route serves listed under names a
client keeps, in the list of that client's dialect (checked against the official SDKs' own
types), and a request naming one routed to that route with the model it stands for."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest
from anthropic.pagination import SyncPage
from anthropic.types import ModelInfo
from openai.types import Model

from addon.config.options import Settings
from addon.config.routes import Route, When, match
from addon.config.routes_file import read_routes
from addon.plan import Incoming, Rewrite, decide, route_for
from addon.plan.list_shapes import SHAPES, merged_list
from addon.plan.model_lists import models_plan

ANTHROPIC_HEADERS = {"x-api-key": "sk-client", "anthropic-version": "2023-06-01"}
OPENAI_HEADERS = {"authorization": "Bearer sk-client"}
ROUTES = """
[[routes]]
name = "claude-code"
path = "*/v1/messages"
client = "anthropic"
model_map = {"*haiku*" = "deepseek-chat", "*" = "deepseek-reasoner"}
expose_as = "claude-{model}"

[[routes]]
name = "cursor"
model = "qwen3-coder"
expose_as = ["gpt-qwen"]

[[routes]]
name = "gemini"
path = "*/models/*:*enerateContent"
client = "gemini"
model_map = {"*" = "glm-4.6"}
expose_as = ["gemini-glm"]

[[routes]]
name = "rest"
"""


def routes() -> tuple[Route, ...]:
    return read_routes(tomllib.loads(ROUTES))


def problem(text: str) -> str:
    with pytest.raises(ValueError) as e:
        read_routes(tomllib.loads(text))
    return str(e.value)


# ----------------------------------------------------------------------------- the key


def test_a_rule_names_each_model_the_route_serves() -> None:
    route = routes()[0]
    assert route.exposes("claude-deepseek-chat") and route.exposes("claude-deepseek-reasoner")
    assert route.mapped_model("claude-deepseek-chat") == "deepseek-chat"
    assert route.mapped_model("claude-deepseek-reasoner") == "deepseek-reasoner"
    # a name it does not expose goes through model_map as before
    assert route.mapped_model("claude-3-5-haiku") == "deepseek-chat"
    assert not route.exposes("claude-deepseek") and not route.exposes(None)


def test_a_listed_name_stands_for_the_model_model_map_sends_or_the_one_served() -> None:
    one = Route("one", model=("qwen3-coder",), expose_as=["gpt-qwen", "claude-qwen"])  # type: ignore[arg-type]
    assert one.expose_as == ("gpt-qwen", "claude-qwen")
    assert one.mapped_model("claude-qwen") == "qwen3-coder"
    both = Route("b", model_map=(("fast", "m1"), ("slow", "m2")), expose_as=("fast", "slow"))
    assert (both.mapped_model("fast"), both.mapped_model("slow")) == ("m1", "m2")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ('"claude-"', "the rule 'claude-' has no {model}"),
        ('"{modle}"', "the rule '{modle}' has no {model}"),
        ('"a-{model}-{model}"', "holds braces other than one {model}"),
        ('"claude-*-{model}"', "is a glob"),
        ('["claude-*"]', "'claude-*' is a glob"),
        ('["a b"]', "holds a space"),
        ('["a", "a"]', "names 'a' twice"),
        ("[]", 'a rule like "claude-{model}" or a list of names'),
        ("3", 'a rule like "claude-{model}" or a list of names'),
    ],
)
def test_a_bad_value_is_refused_naming_the_route(value: str, said: str) -> None:
    got = problem(f'[[routes]]\nname = "ds"\nmodel_map = {{"*" = "x"}}\nexpose_as = {value}\n')
    assert said in got and "expose_as" in got and "(in route 'ds')" in got, got


def test_a_route_that_names_no_model_or_has_when_is_refused() -> None:
    got = problem('[[routes]]\nname = "any"\nmodel = "gpt-*"\nexpose_as = "claude-{model}"\n')
    assert "names no model it serves" in got and "(in route 'any')" in got, got
    got = problem(
        '[[routes]]\nname = "two"\nmodel_map = {"a" = "m1", "b" = "m2"}\nexpose_as = ["c"]\n'
    )
    assert "which model 'c' stands for is not known" in got and "(in route 'two')" in got, got
    got = problem(
        '[[routes]]\nname = "bg"\nwhen = {background = true}\nmodel_map = {"*" = "m"}\n'
        'expose_as = "claude-{model}"\n'
    )
    assert "not with when" in got and "(in route 'bg')" in got, got
    with pytest.raises(ValueError, match="not with when"):
        Route("bg", model_map=(("*", "m"),), expose_as="c-{model}", when=When(background=True))


def test_two_routes_exposing_one_name_are_refused_naming_both() -> None:
    from addon.config.routes_file import RoutesError, load_routes

    text = (
        '[[routes]]\nname = "first"\npath = "*/v1/messages"\nclient = "anthropic"\n'
        'model_map = {"*" = "deepseek-chat"}\nexpose_as = "claude-{model}"\n\n'
        '[[routes]]\nname = "second"\npath = "*/v1/messages"\nclient = "anthropic"\n'
        'model = "deepseek-chat"\nexpose_as = ["claude-deepseek-chat"]\n'
    )
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "routes.toml"
        path.write_text(text)
        with pytest.raises(RoutesError) as e:
            load_routes(path)
        said = str(e.value)
        assert "'first' and 'second' both expose 'claude-deepseek-chat'" in said, said
        # another client dialect's route may expose the same name: its requests differ
        path.write_text(text.replace('client = "anthropic"\nmodel = ', "model = ", 1))
        assert len(load_routes(path)) == 2


# ----------------------------------------------------------------------------- routing


def body(model: str) -> bytes:
    msgs = [{"role": "user", "content": "hi"}]
    return json.dumps({"model": model, "max_tokens": 64, "messages": msgs}).encode()


def test_an_exposed_name_takes_its_route_before_an_earlier_route_and_goes_as_its_model() -> None:
    earlier = Route("claude-main", path="*/v1/messages", client="anthropic", upstream="anthropic")
    exposing = routes()[0]
    settings = Settings(routes=(earlier, exposing))
    path = "/v1/messages"
    route = route_for(settings, "POST", "h", path, body("claude-deepseek-chat"))
    assert route is exposing
    assert route_for(settings, "POST", "h", path, body("claude-sonnet-4-6")) is earlier
    # the exposed name needs the route's path: a chat request does not take it
    assert match((exposing,), "h", "/v1/chat/completions", "POST", lambda _: "x") is None
    d = decide(
        settings, exposing, Incoming("POST", "h", path, {}, body("claude-deepseek-chat")), {}
    )
    assert isinstance(d, Rewrite), d
    assert json.loads(d.body)["model"] == "deepseek-chat"
    assert d.plan.rename_answer  # the client's answer names the model it asked for
    assert "claude-deepseek-chat → deepseek-chat (the route's expose_as)" in d.summary, d.summary


# ----------------------------------------------------------------------------- the lists


def plan_for(headers: dict[str, str], path: str = "/v1/models", query: tuple[Any, ...] = ()):  # type: ignore[no-untyped-def]
    found = models_plan(
        routes(), (), ("GET", path, "https", "api.example.com", 443), headers, query, {}, None, True
    )
    assert found is not None
    return found


def test_each_clients_list_shows_its_dialects_exposed_names() -> None:
    ant = plan_for(ANTHROPIC_HEADERS)
    assert ant.shape is SHAPES["anthropic"]
    assert "claude-deepseek-chat" in ant.models and "claude-deepseek-reasoner" in ant.models
    assert "gpt-qwen" not in ant.models and "gemini-glm" not in ant.models
    assert dict(ant.display)["claude-deepseek-chat"] == "deepseek-chat"
    oai = plan_for(OPENAI_HEADERS)
    assert oai.shape is SHAPES["openai_chat"] and "gpt-qwen" in oai.models
    assert "qwen3-coder" in oai.models  # the literal names are listed as before
    assert not any(m.startswith("claude-deepseek") for m in oai.models)
    gem = plan_for({}, "/v1beta/models", (("key", "AIza-client"),))
    assert gem.shape is SHAPES["gemini"] and "gemini-glm" in gem.models
    # Claude Code asks ?limit=1000; a later page (after_id) is left as the upstream answers
    assert plan_for(ANTHROPIC_HEADERS, "/v1/models?limit=1000", (("limit", "1000"),)).models
    assert plan_for(ANTHROPIC_HEADERS, "/v1/models", (("after_id", "x"),)).models == ()


def test_anthropics_list_is_what_its_sdk_reads() -> None:
    """The names added to Anthropic's own list (paging kept), each a valid ``ModelInfo``."""
    upstream = {
        "data": [{"type": "model", "id": "claude-up", "display_name": "Claude Up",
                  "created_at": "2025-01-01T00:00:00Z", "lifecycle": "active"}],
        "has_more": True, "first_id": "claude-up", "last_id": "claude-up",
    }  # fmt: skip
    got = merged_list(
        SHAPES["anthropic"],
        (200, True, json.dumps(upstream).encode()),
        ("claude-up", "claude-deepseek-chat"),
        {"claude-deepseek-chat": "deepseek-chat"},
    )
    listed = json.loads(got.body)
    assert got.added == 1 and got.merged
    assert listed["data"][0] == upstream["data"][0]  # the upstream's own entry as it came
    assert (listed["has_more"], listed["first_id"], listed["last_id"]) == (
        True,
        "claude-up",
        "claude-up",
    )  # fmt: skip  (the next page starts after the upstream's last model)
    infos = [ModelInfo.model_validate(m) for m in listed["data"]]
    assert infos[1].id == "claude-deepseek-chat" and infos[1].display_name == "deepseek-chat"
    assert infos[1].type == "model" and infos[1].created_at.year == 1970
    page = SyncPage[ModelInfo].model_validate(
        {**json.loads(merged_list(SHAPES["anthropic"], (404, False, b""), ("a",), {}).body)}
    )
    assert [m.id for m in page.data] == ["a"] and page.has_more is False
    assert (page.first_id, page.last_id) == ("a", "a")


def test_another_apis_list_is_written_again_in_the_clients_shape() -> None:
    """An OpenAI-compatible upstream's list to an Anthropic client, and the reverse."""
    theirs = {"object": "list", "data": [{"id": "deepseek-chat", "object": "model",
                                          "owned_by": "deepseek"}]}  # fmt: skip
    got = merged_list(SHAPES["anthropic"], (200, True, json.dumps(theirs).encode()), ("x",), {})
    listed = json.loads(got.body)
    assert [ModelInfo.model_validate(m).id for m in listed["data"]] == ["deepseek-chat", "x"]
    assert listed["has_more"] is False and listed["last_id"] == "x"
    back = merged_list(SHAPES["openai_chat"], (200, True, got.body), ("y",), {})
    out = json.loads(back.body)
    assert out["object"] == "list"
    assert [Model.model_validate(m).id for m in out["data"]] == ["deepseek-chat", "x", "y"]
    gem = {"models": [{"name": "models/gemini-up", "displayName": "Gemini Up"}]}
    same = merged_list(SHAPES["gemini"], (200, True, json.dumps(gem).encode()), ("g",), {})
    assert json.loads(same.body)["models"] == [
        gem["models"][0],
        {"name": "models/g", "displayName": "g", "supportedGenerationMethods": [
            "generateContent", "streamGenerateContent", "countTokens"]},
    ]  # fmt: skip


def test_a_list_whose_client_key_was_removed_is_in_the_checked_routes_shape() -> None:
    """The client-key gate removes the client's key before the catalogue reads the request:
    the route the key was checked for says whose list it is (a Gemini one, here)."""
    gemini = routes()[2]
    found = models_plan(
        routes(), (), ("GET", "/v1beta/models", "https", "h", 443), {}, (), {}, gemini, True
    )
    assert found is not None and found.shape is SHAPES["gemini"]
    assert "gemini-glm" in found.models
