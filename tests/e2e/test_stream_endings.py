"""End to end, issue 42: every way an upstream ends a stream early reaches the client as its
dialect's error, never a transport error.

A real ``mitmdump -s addon/main.py`` with one route per (client dialect, route kind): the
translated route (its upstream speaks OpenAI chat) and the same-dialect route, both to
``Cutter``, a raw socket upstream that writes the start of a stream in the upstream's dialect
(the text ``Hel`` + ``lo``) and then ends it early, one way per test:

- ``chunked_close``: a chunked body, the connection closed without the last chunk;
- ``chunked_reset``: the same, the connection reset (RST; an HTTP/2 upstream is reached over
  HTTP/1.1 by the relay, so its stream reset is this row);
- ``close_delimited``: a body without framing, the connection closed before the stream's end;
- ``short_length``: a body shorter than its ``Content-Length``, the connection closed;
- ``idle``: nothing more sent, the connection left open, past ``bridge_stream_idle_timeout``.

Read by the official SDKs (openai chat and Responses, anthropic) and raw httpx (Gemini): the
text before the cut arrives, then openai's chat stream and anthropic's stream raise their API
error type, openai's Responses stream yields ``response.failed``, a Gemini client reads an
error chunk in a cleanly ended body; the flow's log line says how it ended (⚠) and the usage
ledger counts the flow.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from addon.stores.ledger import open_ledger
from tests.e2e.harness import HOST, Proxy, free_port
from tests.real.clients.loop import answer

CLIENTS = ("openai_chat", "anthropic", "openai_responses", "gemini")
ENDINGS = ("chunked_close", "chunked_reset", "close_delimited", "short_length", "idle")
CAUSE = {
    "chunked_close": "upstream_cut",
    "chunked_reset": "upstream_reset",
    "close_delimited": "upstream_cut",
    "short_length": "upstream_cut",
    "idle": "upstream_idle",
}
PATHS = {
    "openai_chat": "*/chat/completions",
    "anthropic": "*/v1/messages",
    "openai_responses": "*/responses",
    "gemini": "*enerateContent",
}
NOTHING = ("nothing_close", "nothing_reset")
"""Endings after the head alone: nothing of the body delivered."""
POOL_KEYS = {"CB_E2E_END_KEY_A": "sk-end-A-SECRET", "CB_E2E_END_KEY_B": "sk-end-B-SECRET"}
BAD_LOG = ("Traceback", "Logging error", "internal error", "Addon error")
ERROR_EVENTS = {
    "openai_chat": b'data: {"error": {"message": "The server is overloaded.", "type": '
    b'"server_error", "param": null, "code": null}}\n\n',
    "anthropic": b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
    b'"message": "Overloaded"}}\n\n',
}
"""The error event an OpenAI or Anthropic service streams (its SSE error shape)."""


def started(dialect: str) -> list[bytes]:
    """The first events of a stream in ``dialect``: up to the text, written as ``Hel`` and
    ``lo``, and nothing after it (no finish, no usage past the start, no end)."""
    body = answer(dialect, True, "Hello").body  # type: ignore[union-attr]
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]
    at = next(i for i, e in enumerate(events) if b'"Hello"' in e)
    text = events[at].replace(b', "finishReason": "STOP"', b"")
    text = re.sub(rb', "usageMetadata": \{[^}]*\}', b"", text)
    return [*events[:at], text.replace(b'"Hello"', b'"Hel"'), text.replace(b'"Hello"', b'"lo"')]


def upstream_dialect(path: str) -> str:
    if ":streamGenerateContent" in path or ":generateContent" in path:
        return "gemini"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "openai_responses"
    return "openai_chat"


class Cutter:
    """A raw HTTP/1.1 upstream on 127.0.0.1 that answers each request with the start of a
    stream in the dialect its path names, then ends it the way ``ending`` says."""

    def __init__(self) -> None:
        self.ending = "chunked_close"
        self.status = 200
        """The status line's; another than 200: the body is the start of the dialect's error
        event (a gateway that answers a streamed request with an error stream), then the
        ending."""
        self.queue: deque[str] = deque()
        """Endings for the next requests, in order, before ``ending``."""
        self.paths: deque[str] = deque()
        self.keys: list[str] = []
        self.closed_at: float | None = None
        """When the idle ending saw the bridge close the connection."""
        self._server = socket.create_server((HOST, 0))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            conn.settimeout(10)
            got = self._request(conn)
            if got is None:
                return
            path, asked, key = got
            self.paths.append(path)
            self.keys.append(key)
            dialect = upstream_dialect(path)
            ending = self.queue.popleft() if self.queue else self.ending
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            if self.status != 200:
                head = b"HTTP/1.1 %d Unavailable\r\ncontent-type: text/event-stream\r\n" % (
                    self.status
                )
            if dialect == "gemini":
                stream = ":streamGenerateContent" in path
            else:
                stream = json.loads(asked or b"{}").get("stream") is True
            if not stream:
                reply = answer(dialect, False, "Hello")
                whole = json.dumps(reply.body).encode()  # type: ignore[union-attr]
                events = [whole[: len(whole) // 2]]  # half of it, then the ending
                head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            elif ending == "complete":
                events = [answer(dialect, True, "Hello").body]  # type: ignore[list-item]
            elif self.status != 200:
                events = [ERROR_EVENTS[dialect][:40]]  # the error event, broken off inside
            else:
                events = started(dialect) if ending not in NOTHING else []
            if ending == "close_delimited":
                conn.sendall(head + b"connection: close\r\n\r\n" + b"".join(events))
            elif ending == "short_length":
                body = b"".join(events)
                conn.sendall(head + b"content-length: %d\r\n\r\n" % (len(body) + 500) + body)
            else:
                conn.sendall(head + b"transfer-encoding: chunked\r\n\r\n")
                for e in events:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(e), e))
            if ending == "complete":
                conn.sendall(b"0\r\n\r\n")
                conn.shutdown(socket.SHUT_WR)
            elif ending in ("chunked_reset", "nothing_reset"):
                time.sleep(0.3)  # the bytes reach the bridge before the reset
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif ending == "idle":
                self._until_closed(conn)
            elif ending == "trickle":
                self._trickle(conn, events[-1])
            else:
                conn.shutdown(socket.SHUT_WR)

    def _trickle(self, conn: socket.socket, event: bytes) -> None:
        """The last event again every 0.05 s until the bridge closes the connection."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            ready, _, _ = select.select([conn], [], [], 0.05)
            try:
                if ready and conn.recv(1024) == b"":
                    break
                conn.sendall(b"%x\r\n%s\r\n" % (len(event), event))
            except OSError:
                break
        self.closed_at = time.monotonic()

    def _until_closed(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + 15
        conn.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                if conn.recv(1024) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        self.closed_at = time.monotonic()

    @staticmethod
    def _request(conn: socket.socket) -> tuple[str, bytes, str] | None:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return None
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        need = int(m.group(1)) if m else 0
        while len(body) < need:
            more = conn.recv(65536)
            if not more:
                return None
            body += more
        auth = re.search(rb"(?im)^authorization:\s*bearer\s+(\S+)", head)
        return head.split(b" ")[1].decode(), body, auth.group(1).decode() if auth else ""


def routes_text(port: int) -> str:
    out = []
    for client in CLIENTS:
        for kind, upstream in (("cross", "openai_chat"), ("same", client)):
            out.append(
                f'[[routes]]\nname = "{client}-{kind}"\npath = "{PATHS[client]}"\n'
                f'model = "{kind}"\nclient = "{client}"\nupstream = "{upstream}"\n'
                f'upstream_url = "http://{HOST}:{port}"\nclient_key = true\n'
            )
    url = f"http://{HOST}:{port}"
    for name, extra in (("chain-a", 'fallback = ["chain-b"]'), ("chain-b", "")):
        out.append(
            f'[[routes]]\nname = "{name}"\nmodel = "chain"\nupstream_url = "{url}"\n'
            f"client_key = true\ncooldown = 0\n{extra}\n"
        )
    keys = ", ".join(f'"{k}"' for k in POOL_KEYS)
    out.append(
        f'[[routes]]\nname = "pool"\nmodel = "pool"\nupstream_url = "{url}"\n'
        f"api_key_env = [{keys}]\n"
    )
    return "\n".join(out)


@pytest.fixture(scope="module")
def cutter() -> Iterator[Cutter]:
    c = Cutter()
    yield c
    c.close()


@pytest.fixture(scope="module")
def bridge(cutter: Cutter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("endings")
    (tmp / "routes.toml").write_text(routes_text(cutter.port))
    options = {
        "bridge_metrics": f"{HOST}:{free_port()}",
        "bridge_routes": str(tmp / "routes.toml"),
        "bridge_stream_idle_timeout": 1,
        "bridge_store": str(tmp / "store.db"),
    }
    with pytest.MonkeyPatch.context() as env:
        for name, value in POOL_KEYS.items():
            env.setenv(name, value)
        with Proxy(cutter.port, options) as p:
            yield p


# --------------------------------------------------------------------------- the clients


def read_chat(proxy: Proxy, model: str) -> tuple[str, str]:
    """The text an OpenAI chat client read, and the message of the API error it raised."""
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=20)
    seen = []
    with pytest.raises(openai.APIError) as raised:
        for c in client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            seen += [ch.delta.content or "" for ch in c.choices]
    assert not isinstance(raised.value, openai.APIConnectionError)
    return "".join(seen), str(raised.value)


def read_anthropic(proxy: Proxy, model: str) -> tuple[str, str]:
    client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=20)
    seen = []
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        client.messages.stream(
            model=model, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                seen.append(event.delta.text)
    body = raised.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "overloaded_error", body
    return "".join(seen), str(raised.value)


def read_responses(proxy: Proxy, model: str) -> tuple[str, str]:
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=20)
    seen, last = [], None
    for event in client.responses.create(model=model, input="hi", stream=True):
        if event.type == "response.output_text.delta":
            seen.append(event.delta)
        last = event
    assert last is not None and last.type == "response.failed", last
    error = last.response.error
    assert error is not None and error.code == "server_error"
    return "".join(seen), error.message


def read_gemini(proxy: Proxy, model: str) -> tuple[str, str]:
    url = f"{proxy.base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    seen, chunks = [], []
    with (
        httpx.Client(timeout=20) as client,
        client.stream("POST", url, json=body, headers={"x-goog-api-key": "k"}) as got,
    ):
        assert got.status_code == 200
        for line in got.iter_lines():  # a transport error would raise here
            if line.startswith("data:"):
                chunks.append(json.loads(line[5:]))
    for c in chunks:
        for cand in c.get("candidates") or []:
            assert not cand.get("finishReason"), c
            seen += [p.get("text", "") for p in cand.get("content", {}).get("parts", [])]
    error = chunks[-1]["error"]
    assert (error["code"], error["status"]) == (503, "UNAVAILABLE"), error
    return "".join(seen), str(error["message"])


READERS: dict[str, Callable[[Proxy, str], tuple[str, str]]] = {
    "openai_chat": read_chat,
    "anthropic": read_anthropic,
    "openai_responses": read_responses,
    "gemini": read_gemini,
}


def flow_line(proxy: Proxy, since: int, route: str) -> str:
    regex = re.compile(rf"cursor-bridge flow .*route={re.escape(route)}\b.*")
    deadline = time.monotonic() + 10
    while (m := regex.search(proxy.log_text(), since)) is None:
        assert time.monotonic() < deadline, proxy.log_text()[since:]
        time.sleep(0.05)
    return m.group(0)


def bridge_lines(proxy: Proxy, since: int) -> list[str]:
    """The bridge's own log lines since ``since`` (mitmproxy's connection lines left out)."""
    return [x for x in proxy.log_text()[since:].splitlines() if "cursor-bridge" in x]


def metric(proxy: Proxy, name: str) -> float:
    """A counter's value on the bridge's ``/metrics`` (0 when it is not there)."""
    got = httpx.get(f"http://{proxy.options['bridge_metrics']}/metrics", timeout=10).text
    m = re.search(rf"(?m)^{re.escape(name)} (\S+)$", got)
    return float(m.group(1)) if m else 0.0


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("kind", ["cross", "same"])
@pytest.mark.parametrize("client", CLIENTS)
def test_an_early_end_is_the_clients_api_error(
    bridge: Proxy, cutter: Cutter, client: str, kind: str, ending: str
) -> None:
    cutter.ending, cutter.closed_at = ending, None
    since = len(bridge.log_text())
    text, message = READERS[client](bridge, kind)
    assert text == "Hello"
    if ending == "idle":  # the bridge closed the silent upstream's connection (it waits 15 s)
        deadline = time.monotonic() + 10
        while cutter.closed_at is None:
            assert time.monotonic() < deadline, "the idle upstream's connection stayed open"
            time.sleep(0.05)
    cause = CAUSE[ending]
    if ending == "close_delimited":  # no framing: the decoder sees the stream's end missing
        assert "cut" in message or "ended before" in message, message
    else:
        assert cause in message, message
    line = flow_line(bridge, since, f"{client}-{kind}")
    assert "outcome=not_rewritten" in line and "status=200" in line, line
    if ending != "close_delimited":
        assert f"cut={cause}" in line, line
    lines = bridge_lines(bridge, since)  # one line says it all: the flow's
    assert len(lines) == 1 and line in lines[0], lines
    text_log = bridge.log_text()
    for bad in BAD_LOG:
        assert bad not in text_log[since:], text_log[since:]


def test_the_ledger_counts_each_cut_flow(bridge: Proxy, cutter: Cutter) -> None:
    """Each cut flow is one request in the ledger, with the usage the upstream reported before
    the cut (an Anthropic upstream's ``message_start``); nothing more."""
    db = Path(bridge.options["bridge_store"])
    ledger = open_ledger(str(db))
    before = {k.route: t for k, t in ledger.rows().items()}
    cutter.ending = "chunked_close"
    read_anthropic(bridge, "same")
    deadline = time.monotonic() + 10
    while True:
        rows = {k.route: t for k, t in ledger.rows().items()}
        old = before.get("anthropic-same")
        new = rows.get("anthropic-same")
        if new is not None and new.requests == (old.requests if old else 0) + 1:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.05)
    ledger.close()
    got = new.input - (old.input if old else 0), new.output - (old.output if old else 0)
    assert got == (10, 5), got  # message_start's usage, as the upstream reported it


# --------------------------------------------------------------------------- whole answers


def ask_whole(proxy: Proxy, client: str, model: str) -> tuple[int, Any]:
    """A whole (non-streamed) request with the client's SDK (raw httpx for Gemini): the status
    and the error body it got."""
    if client == "gemini":
        url = f"{proxy.base_url}/v1beta/models/{model}:generateContent"
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        got = httpx.post(url, json=body, headers={"x-goog-api-key": "k"}, timeout=20)
        return got.status_code, got.json()
    if client == "anthropic":
        ant = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=20)
        with pytest.raises(anthropic.APIStatusError) as a_raised:
            ant.messages.create(
                model=model, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            )
        return a_raised.value.status_code, a_raised.value.body
    oai = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=20)
    with pytest.raises(openai.APIStatusError) as raised:
        if client == "openai_chat":
            oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
        else:
            oai.responses.create(model=model, input="hi")
    return raised.value.status_code, raised.value.body


@pytest.mark.parametrize("ending", ["chunked_close", "chunked_reset", "short_length", "idle"])
@pytest.mark.parametrize("kind", ["cross", "same"])
@pytest.mark.parametrize("client", CLIENTS)
def test_a_whole_answer_cut_in_its_body_is_the_clients_502(
    bridge: Proxy, cutter: Cutter, client: str, kind: str, ending: str
) -> None:
    """Today mitmproxy's HTML 502 page reached the client (logged ``status=200``); now a 502
    in the client's dialect naming the cause, and a ⚠ line."""
    cutter.ending = ending
    since = len(bridge.log_text())
    status, body = ask_whole(bridge, client, kind)
    assert status == 502, body
    assert isinstance(body, dict), body  # JSON in the client's dialect, not an HTML page
    error = body.get("error", body)
    assert CAUSE[ending] in json.dumps(error), body
    if client == "anthropic":
        assert error["type"] == "api_error", body
    elif client == "openai_chat":
        assert (error["type"], error["code"]) == ("server_error", CAUSE[ending]), body
    line = flow_line(bridge, since, f"{client}-{kind}")
    assert "outcome=not_rewritten" in line and "status=502" in line, line
    assert f"cut={CAUSE[ending]}" in line, line
    lines = bridge_lines(bridge, since)
    assert len(lines) == 1 and line in lines[0], lines


def test_a_cut_is_counted_as_a_cut_not_as_an_untranslatable_answer(
    bridge: Proxy, cutter: Cutter
) -> None:
    """A whole answer and a stream broken off each add one to ``answers cut by the upstream``
    (``cursor_bridge_answers_cut_total``), none to ``answers not translatable``; the whole
    one books nothing in the ledger (the client got a 502, nothing of the answer)."""
    cut = "cursor_bridge_answers_cut_total"
    before = metric(bridge, cut)
    db = Path(bridge.options["bridge_store"])
    ledger = open_ledger(str(db))
    booked = {k.route: t.requests for k, t in ledger.rows().items()}
    cutter.ending = "chunked_reset"
    assert ask_whole(bridge, "openai_chat", "cross")[0] == 502
    read_chat(bridge, "same")
    deadline = time.monotonic() + 10
    while metric(bridge, cut) < before + 2:
        assert time.monotonic() < deadline, metric(bridge, cut)
        time.sleep(0.05)
    assert metric(bridge, cut) == before + 2
    rows = {k.route: t.requests for k, t in ledger.rows().items()}
    ledger.close()
    assert rows.get("openai_chat-cross") == booked.get("openai_chat-cross"), rows


# --------------------------------------------------------------------------- an error stream cut


def error_body(proxy: Proxy, client: str, model: str = "same") -> tuple[int, str]:
    """A streamed request on the same-dialect route with the official SDK, which raises its
    status error (never a connection error): the status and the body it read."""
    if client == "anthropic":
        ant = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0, timeout=20)
        with (
            pytest.raises(anthropic.APIStatusError) as a_raised,
            ant.messages.stream(
                model=model, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            ) as stream,
        ):
            list(stream)
        return a_raised.value.status_code, str(a_raised.value.body)
    oai = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=20)
    with pytest.raises(openai.APIStatusError) as raised:
        list(
            oai.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
    return raised.value.status_code, str(raised.value.body)


def test_a_whole_answer_without_framing_cut_short(bridge: Proxy, cutter: Cutter) -> None:
    """A whole answer without framing whose connection closes halfway: for HTTP its body
    ended there. Same dialect: passed on as it came (status 200, half a JSON body; the line
    says it was not rewritten); another dialect: a 502 in the client's dialect."""
    cutter.ending = "close_delimited"
    url = f"{bridge.base_url}/v1/messages"
    ask = {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    since = len(bridge.log_text())
    same = httpx.post(url, json={**ask, "model": "same"}, headers={"x-api-key": "k"}, timeout=20)
    assert same.status_code == 200 and same.text.startswith('{"id": "msg_'), same.text
    with pytest.raises(ValueError):
        same.json()
    assert "outcome=not_rewritten" in flow_line(bridge, since, "anthropic-same")
    cross = httpx.post(url, json={**ask, "model": "cross"}, headers={"x-api-key": "k"}, timeout=20)
    assert cross.status_code == 502, cross.text
    assert cross.json()["error"]["type"] == "api_error", cross.text


def test_an_error_stream_cut_on_another_dialect_is_the_clients_502(
    bridge: Proxy, cutter: Cutter
) -> None:
    """The same error stream (streamed request) on a translated route is read whole and
    re-shaped: the Anthropic client gets the 502 naming the cause (the whole answers' row)."""
    cutter.ending, cutter.status = "chunked_reset", 503
    since = len(bridge.log_text())
    try:
        status, body = error_body(bridge, "anthropic", "cross")
    finally:
        cutter.status = 200
    assert status == 502 and "upstream_reset" in body and "api_error" in body, body
    line = flow_line(bridge, since, "anthropic-cross")
    assert "status=502 cut=upstream_reset" in line, line


@pytest.mark.parametrize("ending", ["chunked_close", "chunked_reset", "short_length", "idle"])
@pytest.mark.parametrize("client", ["openai_chat", "anthropic"])
def test_an_error_stream_cut_ends_with_the_clients_error_event(
    bridge: Proxy, cutter: Cutter, client: str, ending: str
) -> None:
    """A 503 ``text/event-stream`` answer (a gateway's error stream) broken off inside its
    error event, on a same-dialect route: the status line said error, so the SDK reads the
    body whole and raises its status error for 503; the body ends well-formed, with the
    client's dialect error event naming the cause on its own lines after what came. The line
    says the status the client got (503, not a 502 it never saw), once."""
    cutter.ending, cutter.status = ending, 503
    since = len(bridge.log_text())
    try:
        status, body = error_body(bridge, client)
    finally:
        cutter.status = 200
    assert status == 503, body
    assert body.startswith(ERROR_EVENTS[client][:40].decode()), body
    last = [e for e in body.split("\n\n") if e.strip()][-1]
    data = json.loads(last.split("data: ", 1)[1])
    error = data["error"]
    assert CAUSE[ending] in error["message"], body
    assert error["type"] == ("overloaded_error" if client == "anthropic" else "server_error")
    line = flow_line(bridge, since, f"{client}-same")
    assert "status=503" in line and "outcome=not_rewritten" in line, line
    assert f"cut={CAUSE[ending]}" in line, line
    lines = bridge_lines(bridge, since)
    assert len(lines) == 1 and line in lines[0], lines


# --------------------------------------------------------------------------- nothing delivered


def chat_text(proxy: Proxy, model: str) -> str:
    client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="k", max_retries=0, timeout=20)
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    return "".join(c.delta.content or "" for chunk in stream for c in chunk.choices)


@pytest.mark.parametrize("ending", NOTHING)
def test_headers_then_nothing_falls_back_to_the_next_route(
    bridge: Proxy, cutter: Cutter, ending: str
) -> None:
    """The first route answers 200 and its body ends (closed, reset) before its first byte:
    nothing reached the client, the chain's next route answers; the line names why."""
    cutter.queue.extend([ending, "complete"])
    since = len(bridge.log_text())
    assert chat_text(bridge, "chain") == "Hello"
    line = flow_line(bridge, since, "chain-b")
    assert "outcome=retried" in line and "chain-a" in line, line
    cause = "upstream_reset" if ending == "nothing_reset" else "upstream_cut"
    assert f"its body ended before its first byte ({cause})" in line, line


def test_headers_then_nothing_goes_to_the_pools_next_key(bridge: Proxy, cutter: Cutter) -> None:
    """A key's upstream answers 200 and resets before its body's first byte: that key cools
    down (the default cooldown), not the pool: the next key answers."""
    cutter.queue.extend(["nothing_reset", "complete"])
    before = len(cutter.keys)
    assert chat_text(bridge, "pool") == "Hello"
    used = cutter.keys[before:]
    assert len(used) == 2 and set(used) == set(POOL_KEYS.values()), used
    cutter.queue.append("complete")
    assert chat_text(bridge, "pool") == "Hello"
    assert cutter.keys[-1] == used[1], cutter.keys  # the key that failed cools down


# --------------------------------------------------------------------------- the client hangs up


@pytest.mark.parametrize("kind", ["cross", "same"])
def test_a_client_that_hangs_up_closes_the_upstream_within_a_second(
    bridge: Proxy, cutter: Cutter, kind: str
) -> None:
    """An Anthropic client reads the stream's first text, then closes its connection while the
    upstream streams on: the relay sees mitmproxy's connection close and closes the upstream's
    within one second (issue 42: 0.05 s measured before the relay); the ledger counts the flow
    once, with what the upstream reported (its ``message_start``) and nothing more."""
    db = Path(bridge.options["bridge_store"])
    ledger = open_ledger(str(db))
    route = f"anthropic-{kind}"
    before = next((t for k, t in ledger.rows().items() if k.route == route), None)
    cutter.ending, cutter.closed_at = "trickle", None
    body = {
        "model": kind,
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with (
        httpx.Client(timeout=20) as client,
        client.stream(
            "POST", f"{bridge.base_url}/v1/messages", json=body, headers={"x-api-key": "k"}
        ) as got,
    ):
        seen = b""
        for piece in got.iter_raw():
            seen += piece
            if b"lo" in seen and b"text_delta" in seen:
                break
    hung_up = time.monotonic()  # the client's connection is closed here
    deadline = hung_up + 5
    while cutter.closed_at is None:
        assert time.monotonic() < deadline, "the upstream connection stayed open"
        time.sleep(0.01)
    assert cutter.closed_at - hung_up < 1.0, cutter.closed_at - hung_up
    deadline = time.monotonic() + 10
    while True:
        now = next((t for k, t in ledger.rows().items() if k.route == route), None)
        if now is not None and now.requests == (before.requests if before else 0) + 1:
            break
        assert time.monotonic() < deadline, ledger.rows()
        time.sleep(0.05)
    ledger.close()
    input_, output = (
        now.input - (before.input if before else 0),
        now.output - (before.output if before else 0),
    )
    # Only the Anthropic upstream reported usage before the hang-up (its message_start).
    assert (input_, output) == ((10, 5) if kind == "same" else (0, 0)), (input_, output)
