"""Routes files: validation that names the bad key, and matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from addon.config.routes import DEFAULT_ROUTES, match
from addon.config.routes_file import RoutesError, load_routes


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "routes.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("host", "path", "method", "matched"),
    [
        pytest.param("api.openai.com", "/v1/chat/completions", "POST", True, id="openai"),
        pytest.param(
            "gw.local",
            "/openai/deployments/x/chat/completions?api-version=1",
            "POST",
            True,
            id="azure-like",
        ),
        pytest.param("api.openai.com", "/v1/chat/completions", "GET", False, id="get"),
        pytest.param("api.openai.com", "/v1/models", "GET", False, id="models"),
        pytest.param("api.openai.com", "/v1/chat/completions/x", "POST", False, id="suffix"),
    ],
)
def test_default_route(host: str, path: str, method: str, matched: bool) -> None:
    assert (match(DEFAULT_ROUTES, host, path, method) is not None) == matched


def test_routes_file_first_match_wins(tmp_path: Path) -> None:
    routes = load_routes(
        write(
            tmp_path,
            """
[[routes]]
name = "gemini-gateway"
host = "*.example.com"
path = "/v1/chat/completions"
schema = "strict"
upstream_path = "/openai/v1/chat/completions"

[[routes]]
name = "rest"
methods = ["post"]
""",
        )
    )
    first = match(routes, "API.example.com", "/v1/chat/completions", "POST")
    assert first is not None and first.name == "gemini-gateway"
    assert first.schema_profile == "strict"
    assert first.upstream_path == "/openai/v1/chat/completions"
    other = match(routes, "api.openai.com", "/v1/chat/completions", "POST")
    assert other is not None and other.name == "rest" and other.schema_profile is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '[[routes]]\nname = "a"\nschema = "strct"\n',
            "routes[0].schema: Input should be 'none', 'strict' or 'gemini'",
            id="bad-schema",
        ),
        pytest.param(
            '[[routes]]\nname = "a"\ncolour = "red"\n',
            "routes[0].colour: unknown key",
            id="unknown-key",
        ),
        pytest.param(
            '[[routes]]\nhost = "*"\n', "routes[0].name: Field required", id="missing-name"
        ),
        pytest.param(
            '[[routes]]\nname = "a"\nclient = "soap"\n', "routes[0].client", id="bad-dialect"
        ),
        pytest.param(
            '[[routes]]\nname = "a"\nupstream_path = "v1/x"\n',
            "routes[0].upstream_path",
            id="relative-path",
        ),
        pytest.param(
            '[[routes]]\nname = "a"\n[[routes]]\nname = "a"\n',
            "route names must be unique: a",
            id="dupe",
        ),
        pytest.param("routes = []\n", "routes: List should have at least 1 item", id="empty"),
        pytest.param("[[routes]\n", "not valid TOML", id="toml-syntax"),
    ],
)
def test_bad_routes_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(RoutesError) as info:
        load_routes(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_routes_file(tmp_path: Path) -> None:
    with pytest.raises(RoutesError, match="cannot read it"):
        load_routes(tmp_path / "nope.toml")


def test_the_file_model_mirrors_the_route_field_for_field() -> None:
    """``Route`` is a plain dataclass (no pydantic at start); the routes file's pydantic model
    must take exactly its fields, with the same defaults."""
    import dataclasses

    from addon.config.routes import Route
    from addon.config.routes_file import RouteFields

    fields = {f.name: f.default for f in dataclasses.fields(Route)}
    model = {n: f.default for n, f in RouteFields.model_fields.items()}
    assert model.keys() == fields.keys()
    for name, default in fields.items():
        if default is not dataclasses.MISSING:
            assert model[name] == default, name


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"upstream_path": "v1/x"}, "must start with '/'"),
        ({"methods": ()}, "at least one HTTP method"),
        ({"path": "chat"}, "glob over the path"),
        ({"client": "kiro"}, "upstream-only dialect"),
        ({"token_file": "t.json"}, 'only for upstream = "kiro"'),
        ({"upstream": "kiro", "description_limit": 3}, "at least 16"),
        ({"api_key_env": "NOT A NAME"}, "environment variable name"),
    ],
)
def test_a_route_built_in_code_is_checked_as_a_file_route_is(
    keys: dict[str, object], message: str
) -> None:
    from addon.config.routes import Route

    with pytest.raises(ValueError, match=message):
        Route(name="r", **keys)  # type: ignore[arg-type]


def test_a_route_from_a_file_is_the_route_built_in_code(tmp_path: Path) -> None:
    from addon.config.routes import Route

    (route,) = load_routes(
        write(
            tmp_path,
            '[[routes]]\nname = "k"\nupstream = "kiro"\nmethods = ["post"]\nschema = "none"\n'
            'model_map = {"a" = "B"}\n',
        )
    )
    assert route == Route(
        name="k", upstream="kiro", methods=("post",), schema_profile="none", model_map={"a": "B"}
    )  # type: ignore[arg-type]
    assert route.methods == ("POST",) and route.model_map == (("a", "B"),)
