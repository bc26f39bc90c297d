"""Option and routes-file errors: one clear line naming the option or key (issue 8, Configuration).

The real mitmdump runs are in ``tests/e2e/test_attack.py``; here the pieces:
typing of deferred ``--set`` values, the settings checks, the routes file, and
how the addons report a bad value before and after mitmproxy is running.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons

from addon.config.options import ConfigError, check_deferred_option, parse_settings
from addon.config.routes_file import RoutesError, load_routes
from addon.shell import option_checks as options
from addon.shell.addons import make_addons
from addon.shell.host_filter import proxy_excludes
from addon.shell.option_checks import check_deferred_options
from tests.unit.shell.started import started

# --------------------------------------------------------------------------- deferred --set


@pytest.mark.parametrize(
    ("name", "given", "value"),
    [
        ("bridge_tool_strict", [], True),
        ("bridge_tool_strict", ["true"], True),
        ("bridge_tool_strict", ["false"], False),
        ("bridge_tool_strict", ["toggle"], True),
        ("bridge_tool_desc_max_chars", ["120"], 120),
        ("bridge_tool_mode", ["invoke"], "invoke"),
        ("bridge_routes", [""], ""),
    ],
)
def test_set_values_are_typed_as_mitmproxy_types_them(
    name: str, given: list[str], value: Any
) -> None:
    assert check_deferred_option(name, given, from_text=True) == value


@pytest.mark.parametrize(
    ("name", "given", "message"),
    [
        ("bridge_tool_strict", ["maybe"], "bridge_tool_strict takes true or false, not 'maybe'"),
        ("bridge_tool_desc_max_chars", ["abc"], "bridge_tool_desc_max_chars takes a whole number"),
        ("bridge_retry_timeout", ["1.5"], "bridge_retry_timeout takes a whole number"),
        ("bridge_tool_mode", [], "bridge_tool_mode needs a value"),
        ("bridge_tool_mode", ["a", "b"], "bridge_tool_mode was given more than once"),
        ("bridge_tool_mod", ["invoke"], "unknown option bridge_tool_mod (did you mean bridge_tool_mode?)"),
        ("bridge_zzzz", ["1"], "unknown option bridge_zzzz; cursor-bridge's options are bridge_"),
    ],
)  # fmt: skip
def test_bad_set_values_name_the_option(name: str, given: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_deferred_option(name, given, from_text=True)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("bridge_tool_strict", True, True),
        ("bridge_tool_strict", "yes", False),
        ("bridge_tool_desc_max_chars", 10, True),
        ("bridge_tool_desc_max_chars", True, False),
        ("bridge_tool_desc_max_chars", "10", False),
        ("bridge_models", "a,b", True),
        ("bridge_models", ["a"], False),
    ],
)
def test_typed_values_from_a_config_file_are_checked(name: str, value: Any, ok: bool) -> None:
    if ok:
        assert check_deferred_option(name, value, from_text=False) == value
    else:
        with pytest.raises(ConfigError, match=name):
            check_deferred_option(name, value, from_text=False)


class _Unconverted:
    def __init__(self, *val: str) -> None:
        self.val = list(val)


class _Options:
    def __init__(self, **deferred: Any) -> None:
        self.deferred = deferred


def test_deferred_options_are_checked_before_mitmproxy_applies_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    opts = _Options(
        bridge_tool_strict=_Unconverted("maybe"),
        bridge_tool_mod=_Unconverted("invoke"),
        bridge_tool_desc_max_chars=_Unconverted("90"),
        bridge_tool_mode="bracket",  # typed, from a config file
        stream_large_bodies=_Unconverted("1m"),  # not ours: left to mitmproxy
    )
    with caplog.at_level(logging.ERROR, "cursor_bridge"):
        check_deferred_options(opts)
    assert opts.deferred["bridge_tool_desc_max_chars"] == 90
    assert opts.deferred["bridge_tool_mode"] == "bracket"
    assert isinstance(opts.deferred["stream_large_bodies"], _Unconverted)
    assert "bridge_tool_strict" not in opts.deferred and "bridge_tool_mod" not in opts.deferred
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all(line.startswith("cursor-bridge: ") for line in lines)
    assert any("bridge_tool_strict takes true or false, not 'maybe'" in line for line in lines)
    assert any("did you mean bridge_tool_mode?" in line for line in lines)


# --------------------------------------------------------------------------- settings


def _read(**values: Any) -> Any:
    def read(name: str) -> Any:
        if name in values:
            return values[name]
        raise AttributeError(name)

    return read


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bridge_tool_strict": "maybe"}, "bridge_tool_strict takes true or false"),
        ({"bridge_tool_desc_max_chars": "abc"}, "bridge_tool_desc_max_chars takes a whole number"),
        ({"bridge_tool_param_desc_max_chars": 0}, "must be at least 1"),
        ({"bridge_thinking_output": "loud"}, "must be one of reasoning, hidden, not 'loud'"),
    ],
)
def test_settings_refuse_values_of_the_wrong_type(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_settings(_read(**values), {})


# --------------------------------------------------------------------------- routes file


def _routes(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "routes.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[routes]]\nname = "a"\nmethods = []\n', "routes[0].methods: must list at least one"),
        ('[[routes]]\nname = "a"\nmethods = ["PO ST"]\n', "routes[0].methods: 'PO ST' is not an HTTP method"),
        ('[[routes]]\nname = "a"\nmethods = "POST"\n', "routes[0].methods: Input should be a list"),
        ('[[routes]]\nname = "a"\npath = ""\n', "routes[0].path: must not be empty"),
        ('[[routes]]\nname = "a"\npath = "v1/chat"\n', "routes[0].path: must be a glob over the path"),
        ('[[routes]]\nname = "a"\nhost = " "\n', "routes[0].host: must not be empty"),
        ('[[routes]]\nname = ""\n', "routes[0].name: must not be empty"),
        ('[[routes]]\nname = "a"\nclient = "cursor"\n', "routes[0].client: Input should be 'openai_chat', 'anthropic'"),
        ('[[routes]]\nname = "a"\ntool_mod = "invoke"\n', "routes[0].tool_mod: unknown key (allowed: name, host, path"),
        ('[[route]]\nname = "a"\n', "route: unknown key (allowed: routes)"),
        ('[[routes]]\nname = "a"\ncache_control = "maybe"\n', "routes[0].cache_control: Input should be 'auto', 'keep' or 'drop' (got 'maybe')"),
    ],
)  # fmt: skip
def test_routes_file_errors_are_one_line_naming_file_key_and_allowed_values(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _routes(tmp_path, text)
    with pytest.raises(RoutesError) as info:
        load_routes(path)
    text = str(info.value)
    assert text.startswith(f"routes file '{path}': ") and message in text and "\n" not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_routes_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = _routes(tmp_path, b'[[routes]]\nname = "caf\xe9"\n')
    with pytest.raises(RoutesError, match=r"routes file '.*routes\.toml': not UTF-8 text"):
        load_routes(path)


# --------------------------------------------------------------------------- the addons


@pytest.fixture
def addons() -> Iterator[tuple[Any, taddons.context]]:
    options._REFUSED.clear()  # what earlier tests had refused before mitmproxy was "running"
    bundle = make_addons()
    with taddons.context(*bundle.all) as tctx:
        yield bundle, tctx


def test_before_running_a_bad_value_is_one_error_line_not_a_traceback(
    addons: tuple[Any, taddons.context], caplog: pytest.LogCaptureFixture
) -> None:
    bundle, tctx = addons
    with caplog.at_level(logging.ERROR, "cursor_bridge"):
        tctx.options.update(bridge_tool_mode="magic")  # no OptionsError: mitmdump's startup
        tctx.options.update(bridge_models="a,a")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "cursor-bridge: bridge_tool_mode must be one of native, invoke, bracket, not 'magic'",
        "cursor-bridge: bridge_models lists a more than once",  # two addons read it: said once
    ]
    assert all(r.exc_info is None for r in errors)
    assert bundle.settings.settings.tool_mode == "native"


def test_once_running_a_bad_value_is_refused_and_the_old_one_kept(
    addons: tuple[Any, taddons.context],
) -> None:
    bundle, tctx = addons
    started(bundle.all)
    tctx.options.update(bridge_tool_mode="invoke")
    with pytest.raises(exceptions.OptionsError, match="bridge_tool_mode must be one of") as info:
        tctx.options.update(bridge_tool_mode="magic")
    assert info.value.__cause__ is None
    assert tctx.options.bridge_tool_mode == "invoke"
    assert bundle.settings.settings.tool_mode == "invoke"
    with pytest.raises(exceptions.OptionsError, match="bridge_retry_timeout"):
        tctx.options.update(bridge_retry_timeout=0)


# --------------------------------------------------------------------------- allow / ignore hosts


@pytest.mark.parametrize(
    ("names", "allow", "ignore", "excluded"),
    [
        (["api.example.com:443"], [], [], False),
        (["api.example.com:443"], [r"example\.com"], [], False),
        (["API.EXAMPLE.COM:443"], [r"example\.com"], [], False),
        (["other.org:80"], [r"example\.com"], [], True),
        (["other.org:80", "api.example.com:80"], [r"example\.com"], [], False),
        (["api.example.com:443"], [], [r"^api\."], True),
        (["api.example.com:443"], [r"example"], [r":443$"], True),
        (["api.example.com:443"], ["(unclosed"], [], True),
        (["api.example.com:443"], [], ["(unclosed"], False),
    ],
)
def test_proxy_host_filters_match_as_mitmproxy_matches(
    names: list[str], allow: list[str], ignore: list[str], excluded: bool
) -> None:
    assert proxy_excludes(names, allow, ignore) is excluded
