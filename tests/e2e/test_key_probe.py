"""End to end: a key's probe (issue 40, point 1). A 401 / 403 of a key of a pool that the table
of key errors does not name (``{"error":"unauthorized"}``) is answered or revoked on what a GET
that needs the key says; the recheck of a revoked key after ``bridge_key_recheck`` is that
probe, not a client's request.

Two mitmdump workers on one real redis-server; a route with two keys of one scripted
upstream whose chat answers key B's requests with the ambiguous 401, and whose probe endpoint
(``key_probe = "/api/v1/key"``) answers as OpenRouter's ``GET /api/v1/key`` does: 401
``{"error":{"message":"No auth credentials found","code":401}}`` without a key, 401 "User not
found." for a key it does not know, 200 with the key's ``data`` for one it knows — or, as a
model list many gateways serve, 200 without any key.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import openai
import pytest

from tests.e2e import test_key_revocation
from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream
from tests.e2e.keyed import WorkerPairs, Workers, wait_for
from tests.e2e.test_key_revocation import (
    KEYS,
    ask,
    key_of,
    left_out_lines,
    routes_text,
)
from tests.real.clients.loop import answer, check_request

A, B = KEYS
pairs = test_key_revocation.pairs
"""The fixture: workers on one redis-server with the pool's keys, before one upstream."""
PROBE = "/api/v1/key"
RECHECK = 3
"""``bridge_key_recheck`` of the recheck test: the test waits for the probe, never a time."""
AMBIGUOUS = {"error": "unauthorized"}
NO_KEY = {"error": {"message": "No auth credentials found", "code": 401}}
UNKNOWN_KEY = {"error": {"message": "User not found.", "code": 401}}


@dataclass
class Upstream:
    """The chat refuses the keys of ``chat_refuses`` with the ambiguous 401 and answers the
    others; ``GET PROBE`` refuses a request without a key (unless ``open_probe``) and the keys
    of ``probe_refuses``. Keeps every chat request's key and every probe's (None: no key)."""

    server: ScriptedUpstream
    chat_refuses: set[str] = field(default_factory=set)
    probe_refuses: set[str] = field(default_factory=set)
    open_probe: bool = False
    chats: list[tuple[str | None, float]] = field(default_factory=list)
    probes: list[tuple[str | None, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, rec: Recorded) -> Reply:
        key = key_of(rec)
        with self.lock:
            if rec.method == "GET":
                assert rec.path == PROBE and rec.body == b""
                self.probes.append((key, time.monotonic()))
                return self._probe(key)
            self.chats.append((key, time.monotonic()))
            refused = key is None or key in self.chat_refuses
        if refused:
            return JSONReply(AMBIGUOUS, status=401)
        request = rec.json()
        check_request("openai_chat", request)
        return answer("openai_chat", bool(request.get("stream")), f"hello with {key}")

    def _probe(self, key: str | None) -> Reply:
        if key is None:
            return JSONReply({"data": []}) if self.open_probe else JSONReply(NO_KEY, status=401)
        if key in self.probe_refuses:
            return JSONReply(UNKNOWN_KEY, status=401)
        data = {"label": "sk-or-v1-abc...xyz", "usage": 0, "limit": None, "is_free_tier": False}
        return JSONReply({"data": data})

    def chat_keys(self) -> list[str | None]:
        with self.lock:
            return [k for k, _ in self.chats]

    def probe_keys(self) -> list[str | None]:
        with self.lock:
            return [k for k, _ in self.probes]


@pytest.fixture
def workers(pairs: WorkerPairs) -> Callable[..., Workers[Upstream]]:
    """``make(**options)``: two workers on one redis-server before an ``Upstream``."""

    def make(**options: object) -> Workers[Upstream]:
        text = routes_text(pairs.server) + f'key_probe = "{PROBE}"\n'
        return pairs.start(Upstream(pairs.server), text, **options)

    return make


def first_to_b(proxy: Proxy, up: Upstream, prefix: str, tries: int = 40) -> tuple[str, object]:
    """An opening whose conversation asks key B first, and what the client got: the answer's
    text, or the ``APIStatusError`` it raised."""
    for n in range(tries):
        before = len(up.chat_keys())
        opening = f"{prefix} {n}"
        try:
            got: object = ask(proxy, opening)
        except openai.APIStatusError as e:
            got = e
        if up.chat_keys()[before] == B:
            return opening, got
    raise AssertionError(f"no conversation of {tries} asked key B first")


def test_an_ambiguous_401_whose_probe_refuses_the_key_revokes_it_and_the_next_key_answers(
    workers: Callable[..., Workers[Upstream]],
) -> None:
    w = workers()
    w.up.chat_refuses.add(B)
    w.up.probe_refuses.add(B)
    _, got = first_to_b(w.one, w.up, "probe refuses")
    assert got == f"hello with {A}"  # the client's request went on to key A
    assert w.up.probe_keys() == [None, B]  # without a key (refused), then with key B
    (line,) = left_out_lines(w.one.log_text())
    assert line.startswith(
        f"key {B} refused (HTTP 401 and its probe GET {PROBE} refused the key): left out for "
        "3600 s by every worker, then probed with GET /api/v1/key (bridge_key_recheck)"
    )
    entries = w.cooldown_entries()
    assert f"cursor-bridge:cool:revoked:pool#{B}" in entries
    assert f"cursor-bridge:cool:pool#{B}" in entries
    # The other worker leaves key B out: every conversation is answered by key A, no probe.
    chats, probes = len(w.up.chats), len(w.up.probes)
    for n in range(6):
        assert ask(w.two, f"other worker {n}", stream=n % 2 == 1) == f"hello with {A}"
    assert w.up.chat_keys()[chats:] == [A] * 6 and len(w.up.probes) == probes
    flow = re.findall(r"cursor-bridge flow route=pool .*", w.one.log_text())
    assert any(
        f"pool#{B} (HTTP 401 and its probe GET {PROBE} refused the key, revoked" in f for f in flow
    )
    w.clean()


def test_an_ambiguous_401_whose_probe_accepts_the_key_is_answered_and_nothing_is_revoked(
    workers: Callable[..., Workers[Upstream]],
) -> None:
    w = workers()
    w.up.chat_refuses.add(B)  # the key is fine: the probe takes it
    opening, got = first_to_b(w.one, w.up, "probe accepts")
    assert isinstance(got, openai.APIStatusError) and got.status_code == 401
    assert w.up.probe_keys() == [None, B]
    assert w.cooldown_entries() == [f"cursor-bridge:cool:probed:pool#{B}"]
    # The same conversation on the other worker: answered at once, the probe's word shared.
    with pytest.raises(openai.APIStatusError) as again:
        ask(w.two, opening)
    assert again.value.status_code == 401
    assert w.up.probe_keys() == [None, B] and w.up.chat_keys()[-1] == B
    log = w.log()
    assert not left_out_lines(log)
    said = f"(its probe GET {PROBE} accepted the key): answered, no key left out"
    assert f"key {B} answered HTTP 401, not known to be the key's fault {said}" in log
    assert f"(its probe GET {PROBE} was asked a moment ago): answered" in w.two.log_text()
    w.clean()


def test_a_probe_url_that_needs_no_key_proves_nothing_and_revokes_nothing(
    workers: Callable[..., Workers[Upstream]],
) -> None:
    w = workers()
    w.up.open_probe = True  # a model list served without a key
    w.up.chat_refuses.add(B)
    w.up.probe_refuses.add(B)  # what it would say to the key does not count
    _, got = first_to_b(w.one, w.up, "open probe")
    assert isinstance(got, openai.APIStatusError) and got.status_code == 401
    assert w.up.probe_keys() == [None]  # the key itself was never sent to it
    assert w.cooldown_entries() == [f"cursor-bridge:cool:probed:pool#{B}"]
    assert not left_out_lines(w.log())
    assert f"(its probe GET {PROBE} proves nothing): answered, no key left out" in w.log()
    w.clean()


def test_the_recheck_is_the_probe_a_key_comes_back_without_a_clients_request_spent(
    workers: Callable[..., Workers[Upstream]],
) -> None:
    w = workers(bridge_key_recheck=RECHECK)
    w.up.chat_refuses.add(B)
    w.up.probe_refuses.add(B)
    _, got = first_to_b(w.one, w.up, "recheck")
    assert got == f"hello with {A}"
    revoked_at = w.up.probes[-1][1]
    # The recheck probe refuses it again: still out, and no client's request goes to it.
    wait_for(lambda: "still refused by its probe" in w.one.log_text())
    assert f"key {B} still refused by its probe GET {PROBE}: left out for {RECHECK} s more" in (
        w.one.log_text()
    )
    for n in range(4):
        assert ask(w.two, f"while out {n}") == f"hello with {A}"
    # The key is renewed upstream: the next recheck probe takes it, and it is back.
    w.up.chat_refuses.clear()
    w.up.probe_refuses.clear()
    wait_for(lambda: "accepted by its probe" in w.one.log_text())
    assert f"key {B} accepted by its probe GET {PROBE}: back in the pool" in w.one.log_text()
    assert w.cooldown_entries() == []
    with w.up.lock:
        b_probes = [t for k, t in w.up.probes if k == B]
        b_chats = [t for k, t in w.up.chats if k == B]
    # Every recheck came after bridge_key_recheck, and was a probe: from the revocation to
    # its return no chat request carried key B.
    assert len(b_probes) >= 3 and all(t - revoked_at >= RECHECK - 0.2 for t in b_probes[1:])
    assert len(b_chats) == 1 and b_chats[0] < revoked_at
    _, got = first_to_b(w.two, w.up, "back")
    assert got == f"hello with {B}"
    assert len(left_out_lines(w.log())) == 1
    w.clean()
