"""The keys-in-answers addon (``addon.shell.answer_redact``), hook by hook with mitmproxy's
helpers: which keys it holds, what it does to headers, whole bodies and streams — and that with
no key held it leaves a stream's callable as it was (the fast path untouched)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from addon.redact import KeyRedactor
from addon.shell.addons import Addons, make_addons
from addon.shell.answer_redact import redacting

ROUTE_KEY = "sk-route-SECRET/0123+456789"
POOL_B = "sk-pool-b-SECRET-abcdef"
ALICE = "sk-alice-0123456789abcdef"
ROUTES = (
    '[[routes]]\nname = "keyed"\npath = "/keyed/*"\napi_key_env = "CB_ROUTE_KEY"\n'
    '[[routes]]\nname = "pool"\npath = "/pool/*"\napi_key_env = ["CB_ROUTE_KEY", "CB_POOL_B"]\n'
    '[[routes]]\nname = "open"\npath = "*/chat/completions"\n'
)


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Addons]:
    monkeypatch.setenv("CB_ROUTE_KEY", ROUTE_KEY)
    monkeypatch.setenv("CB_POOL_B", POOL_B)
    routes, keys = tmp_path / "routes.toml", tmp_path / "keys.toml"
    routes.write_text(ROUTES)
    keys.write_text(f'alice = "{ALICE}"\n')
    b = make_addons()
    with taddons.context(*b.all) as tctx:
        tctx.configure(b.settings, bridge_routes=str(routes))
        tctx.configure(b.client_keys, bridge_client_keys=str(keys))
        yield b


def answered(
    body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None, auth: str = ""
) -> http.HTTPFlow:
    req = tutils.treq(path=b"/v1/chat/completions", headers=http.Headers([]))
    if auth:
        req.headers["authorization"] = f"Bearer {auth}"
    resp = tutils.tresp(headers=http.Headers(headers or []), content=body)
    return tflow.tflow(req=req, resp=resp)


def test_the_keys_held_are_every_routes_and_a_listed_client_key_sent(bundle: Addons) -> None:
    keys = bundle.redaction.keys(answered())
    assert (
        keys.body(f"{ROUTE_KEY} {POOL_B} {ALICE}".encode())
        == f"[REDACTED] [REDACTED] {ALICE}".encode()
    )
    keys = bundle.redaction.keys(answered(auth=ALICE))
    assert keys.body(ALICE.encode()) == b"[REDACTED]"
    other = "sk-not-listed-0123456789"  # the client's own key, not the proxy's
    assert bundle.redaction.keys(answered(auth=other)).body(other.encode()) == other.encode()


def test_kiro_tokens_read_are_held(bundle: Addons) -> None:
    bundle.kiro._tokens["/tmp/token.json"] = ("aoa-access-TOKEN-123", "aor-refresh-TOKEN-456")
    keys = bundle.redaction.keys(answered())
    assert keys.body(b"aoa-access-TOKEN-123 aor-refresh-TOKEN-456") == b"[REDACTED] [REDACTED]"


def test_no_key_held_leaves_the_stream_as_it_is(
    bundle: Addons, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CB_ROUTE_KEY")
    monkeypatch.delenv("CB_POOL_B")
    f = answered(headers=[(b"x-echo", ROUTE_KEY.encode())])

    def read(data: bytes) -> list[bytes]:
        return [data]

    assert f.response is not None
    f.response.stream = read
    bundle.redaction.responseheaders(f)
    assert f.response.stream is read  # not wrapped: no cost at all


def test_headers_and_the_reason_are_redacted(bundle: Addons) -> None:
    f = answered(b"{}", [(b"x-echo", f"made with {ROUTE_KEY}".encode())])
    assert f.response is not None
    f.response.reason = f"Bad key {POOL_B}"
    bundle.redaction.responseheaders(f)  # a whole answer: its head is redacted in ``response``
    assert f.response.headers["x-echo"] == f"made with {ROUTE_KEY}"
    bundle.redaction.response(f)
    assert f.response.headers["x-echo"] == "made with [REDACTED]"
    assert f.response.reason == "Bad key [REDACTED]"
    assert "held a key of the proxy's 2 time(s): redacted" in f.comment


def test_a_whole_gzip_body_is_redacted_and_encoded_again(bundle: Addons) -> None:
    body = f'{{"error": {{"message": "key {ROUTE_KEY.replace("/", chr(92) + "/")}"}}}}'.encode()
    f = answered(headers=[(b"content-encoding", b"gzip")])
    assert f.response is not None
    f.response.raw_content = gzip.compress(body)
    f.response.headers["content-length"] = str(len(f.response.raw_content))
    bundle.redaction.response(f)
    assert (
        gzip.decompress(f.response.raw_content or b"")
        == b'{"error": {"message": "key [REDACTED]"}}'
    )
    assert f.response.headers["content-length"] == str(len(f.response.raw_content or b""))


def test_trailers_are_redacted(bundle: Addons) -> None:
    f = answered(b"ok")
    assert f.response is not None
    f.response.trailers = http.Headers([(b"x-key", POOL_B.encode())])
    bundle.redaction.response(f)
    assert f.response.trailers["x-key"] == "[REDACTED]"


def test_a_raw_gzip_stream_is_decompressed_and_redacted(bundle: Addons) -> None:
    f = answered(headers=[(b"content-encoding", b"gzip"), (b"content-length", b"99")])
    assert f.response is not None
    f.response.stream = True
    bundle.redaction.responseheaders(f)
    assert "content-encoding" not in f.response.headers
    assert "content-length" not in f.response.headers
    assert f.response.headers["transfer-encoding"] == "chunked"
    read = f.response.stream
    assert callable(read)
    comp = zlib.compressobj(wbits=31)
    body = f"data: key {ROUTE_KEY}\n\n".encode()
    out = b""
    for i in range(0, len(body), 5):
        piece = comp.compress(body[i : i + 5]) + comp.flush(zlib.Z_SYNC_FLUSH)
        out += b"".join(read(piece))
    out += b"".join(read(comp.flush())) + b"".join(read(b""))
    assert out == b"data: key [REDACTED]\n\n"
    assert "held a key of the proxy's 1 time(s): redacted" in f.comment


def test_the_processors_output_is_redacted_and_the_tail_flushed() -> None:
    keys = KeyRedactor([ROUTE_KEY])
    given = [b"data: a\n\n", ROUTE_KEY.encode()[:5], ROUTE_KEY.encode()[5:] + b" x", b"tail"]
    calls = iter([[given[0]], [given[1]], given[2], [], [given[3]]])
    read = redacting(lambda data: next(calls), keys.stream())
    assert read(b"1") == [b"data: a\n\n"]
    assert read(b"2") == []  # the start of the key: held
    assert read(b"3") == [b"[REDACTED] x"]
    assert read(b"4") == []
    assert read(b"") == [b"tail"]


def test_a_failure_ends_the_stream_never_passes_it_unsearched() -> None:
    keys = KeyRedactor([ROUTE_KEY])

    def broken(data: bytes) -> list[bytes]:
        raise RuntimeError("bug")

    read = redacting(broken, keys.stream())
    assert read(ROUTE_KEY.encode()) == []
    assert read(b"more") == []


def test_it_sees_every_answer_after_the_others_wrote_it(bundle: Addons) -> None:
    order = bundle.all
    at = order.index(bundle.redaction)
    assert at > order.index(bundle.stream) and at > order.index(bundle.answers)
    assert at > order.index(bundle.fallbacks) and at < order.index(bundle.report)
