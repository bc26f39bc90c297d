"""The client keys addon (``addon.shell.client_key_gate``), hook by hook with mitmproxy's helpers."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import taddons, tflow, tutils

from addon.shell.addons import Addons, make_addons
from addon.shell.notes import META_KEY
from tests.unit.shell.started import started

ALICE = "sk-alice-0123456789abcdef"
BOB = "sk-bob-fedcba9876543210"
ROUTE_KEY = "sk-route-SECRET-0123456789"
ROUTES = '[[routes]]\nname = "keyed"\npath = "*/chat/completions"\napi_key_env = "CB_ROUTE_KEY"\n'
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Addons, taddons.context, Path]]:
    monkeypatch.setenv("CB_ROUTE_KEY", ROUTE_KEY)
    monkeypatch.setenv("CB_BOB", BOB)
    routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
    routes.write_text(ROUTES)
    keys.write_text(f'alice = "{ALICE}"\n')
    b = make_addons()
    with taddons.context(*b.all) as tctx:
        tctx.configure(b.settings, bridge_routes=str(routes))
        tctx.configure(b.client_keys, bridge_client_keys=str(keys))
        started(b.all)
        yield b, tctx, keys


def flow(key: str | None) -> http.HTTPFlow:
    headers = [(b"content-type", b"application/json")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    req = tutils.treq(
        host="api.example.com",
        port=443,
        scheme=b"https",
        method=b"POST",
        path=b"/v1/chat/completions",
        headers=http.Headers(headers),
        content=json.dumps(BODY).encode(),
    )
    return tflow.tflow(req=req)


def run(b: Addons, f: http.HTTPFlow) -> None:
    b.client_keys.request(f)
    b.request.request(f)


def test_a_listed_key_is_admitted_named_and_replaced_by_the_routes(
    bundle: tuple[Addons, taddons.context, Path], caplog: pytest.LogCaptureFixture
) -> None:
    b, _, _ = bundle
    f = flow(ALICE)
    run(b, f)
    assert f.response is None
    assert f.request.headers["authorization"] == f"Bearer {ROUTE_KEY}"
    assert f.metadata[META_KEY]["client_name"] == "alice"
    assert f.metadata[META_KEY]["action"] == "rewritten"  # the rewrite kept the name
    record = b.report.flows.get(f.id)
    assert record is not None and record.client_name == "alice"
    shown = json.dumps(f.metadata[META_KEY]) + f.comment + caplog.text
    assert ALICE not in shown and ROUTE_KEY not in shown


@pytest.mark.parametrize(
    ("key", "why"),
    [
        pytest.param(None, "no key in authorization (Bearer)", id="missing"),
        pytest.param("sk-wrong-0123456789abcdef", "the key in authorization is not", id="wrong"),
    ],
)
def test_anything_else_is_answered_401_with_one_line_naming_no_key(
    bundle: tuple[Addons, taddons.context, Path],
    caplog: pytest.LogCaptureFixture,
    key: str | None,
    why: str,
) -> None:
    b, _, _ = bundle
    caplog.set_level(logging.INFO, "cursor_bridge")
    f = flow(key)
    run(b, f)
    assert f.response is not None and f.response.status_code == 401
    assert json.loads(f.response.content or b"")["error"]["code"] == "invalid_api_key"
    lines = [r.getMessage() for r in caplog.records if r.name == "cursor_bridge"]
    (line,) = [x for x in lines if "rejected" in x]
    assert "route=keyed" in line and why in line
    assert f.metadata[META_KEY]["action"] == "rejected"
    assert "client_name" not in f.metadata[META_KEY]
    assert b.report.flows.get(f.id) is None
    for secret in (ALICE, ROUTE_KEY, key or ALICE):
        assert secret not in caplog.text + f.comment + json.dumps(f.metadata[META_KEY])


def test_a_route_without_a_key_of_the_proxys_is_not_checked(
    bundle: tuple[Addons, taddons.context, Path], tmp_path: Path
) -> None:
    b, tctx, _ = bundle
    open_routes = tmp_path / "open.toml"
    open_routes.write_text('[[routes]]\nname = "open"\npath = "*/chat/completions"\n')
    tctx.configure(b.settings, bridge_routes=str(open_routes))
    f = flow(None)
    run(b, f)
    assert f.response is None and f.metadata[META_KEY]["action"] == "rewritten"


def test_a_changed_file_takes_effect_and_a_bad_one_keeps_the_keys(
    bundle: tuple[Addons, taddons.context, Path], caplog: pytest.LogCaptureFixture
) -> None:
    b, _, keys = bundle
    keys.write_text('bob = { env = "CB_BOB" }\n')
    os.utime(keys, ns=(1, 1))  # a new mtime whatever the clock's resolution
    f = flow(BOB)
    run(b, f)
    assert f.response is None and f.metadata[META_KEY]["client_name"] == "bob"
    f = flow(ALICE)
    run(b, f)
    assert f.response is not None and f.response.status_code == 401
    caplog.clear()
    keys.write_text("bob = ")
    for _ in range(2):
        f = flow(BOB)
        run(b, f)
        assert f.response is None  # the previous keys stay
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not valid TOML" in warnings[0].getMessage()
    assert BOB not in caplog.text


def test_the_reload_command_reads_the_file_now(
    bundle: tuple[Addons, taddons.context, Path],
) -> None:
    b, _, keys = bundle
    keys.write_text(f'carol = "{BOB}"\n')
    assert "1 client key(s)" in b.client_keys.reload_client_keys()
    f = flow(BOB)
    run(b, f)
    assert f.metadata[META_KEY]["client_name"] == "carol"
    keys.write_text('carol = { env = "CB_NOT_SET" }\n')
    assert "the previous ones stay" in b.client_keys.reload_client_keys()


def test_a_bad_file_is_refused_naming_the_problem(
    bundle: tuple[Addons, taddons.context, Path], tmp_path: Path
) -> None:
    b, tctx, _ = bundle
    bad = tmp_path / "bad.toml"
    bad.write_text('x = { env = "CB_NOT_SET" }\n')
    with pytest.raises(exceptions.OptionsError, match="'CB_NOT_SET' is not set"):
        tctx.options.update(bridge_client_keys=str(bad))
    f = flow(ALICE)  # the keys in use stay
    run(b, f)
    assert f.metadata[META_KEY]["client_name"] == "alice"


def test_no_file_checks_nothing(bundle: tuple[Addons, taddons.context, Path]) -> None:
    b, tctx, _ = bundle
    tctx.options.update(bridge_client_keys="")
    f = flow(None)
    run(b, f)
    assert f.response is None
