"""End to end, issue 37: two mitmdump workers on one Redis store (``bridge_store=redis://…``).

A real ``redis-server`` of the test's own (a password required, on a free loopback port) and two
real mitmdump workers in front of the scripted upstreams of ``test_reasoning_store``, which
refuse a turn whose reasoning did not come back exactly as they sent it:

- a conversation whose turns alternate between the workers keeps its Gemini thought signatures
  and Anthropic signed thinking blocks (worker A captures, worker B restores); the same with two
  in-memory workers is the control, refused;
- the ``invoke`` trigger of one conversation is the same on both workers (a worker with its
  own store makes another);
- Redis stopped mid-run: every request is still answered, each worker says so in one warning
  line, and when Redis is back sharing resumes by itself.

The Redis password never reaches a log line or a saved flow. Without ``redis-server`` every test
here skips, saying so.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.clients import QUESTION
from tests.e2e.harness import Proxy, ScriptedUpstream
from tests.e2e.test_reasoning_store import (
    CASES,
    KEY,
    TURNS,
    Gemini,
    claude_code_loop,
    cursor_loop,
    routes,
)
from tests.e2e.test_text_tools import answering, collect, system_text
from tests.redis_server import HOST, RedisServer, redis_server_or_skip

# The anthropic SDK warns that this model retires in 2027; it is here for its thinking default.
pytestmark = pytest.mark.filterwarnings("ignore:The model 'claude-opus-4-5' is deprecated")

PASSWORD = "e2e-redis-pw-7f3a"
TRIGGER = re.compile(r"<<CALL_[A-Za-z0-9]{8}>>")


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with RedisServer(redis_server_or_skip(), extra=("--requirepass", PASSWORD)) as server:
        yield server


def store_url(server: RedisServer) -> str:
    return f"redis://:{PASSWORD}@{HOST}:{server.port}/0"


def alternating(workers: list[Proxy]) -> Callable[[], str]:
    """A base URL per turn: worker A, B, A …"""
    turn = [0]

    def base_url() -> str:
        worker = workers[turn[0] % len(workers)]
        turn[0] += 1
        return worker.base_url

    return base_url


def no_secret_shown(workers: Sequence[Proxy]) -> None:
    """No password or key in the workers' logs, and no traceback (checked while they run:
    mitmdump's own shutdown may print the cancelled connections of keep-alive clients)."""
    for w in workers:
        log = w.log_text()
        assert PASSWORD not in log and KEY not in log and "Traceback" not in log


@pytest.mark.parametrize(
    ("dialect", "client"), [("gemini", "cursor"), ("anthropic", "claude-code")]
)
def test_a_conversation_alternating_between_two_workers_keeps_its_reasoning(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
    dialect: str,
    client: str,
) -> None:
    make, model = CASES[dialect]
    script = make()
    upstream.script = script
    # No sentinel: a Gemini step without its signature would be refused, not papered over.
    extra = 'signature_fallback = "none"\n' if dialect == "gemini" else ""
    saved = [tmp_path / "a.flows", tmp_path / "b.flows"]
    workers = [
        start_proxy(
            bridge_routes=routes(tmp_path, dialect, extra),
            bridge_store=store_url(redis_server),
            save_stream_file=str(path),
        )
        for path in saved
    ]
    loop = cursor_loop if client == "cursor" else claude_code_loop
    assert loop(alternating(workers), model, True) == TURNS[2][2]
    assert script.refused == [] and len(script.bodies) == 3
    for w in workers:
        w.wait_for_log("reasoning store in Redis redis://:***@")
    no_secret_shown(workers)
    for w in workers:
        w.close()  # the saved flows are complete once mitmdump has stopped
    for path in saved:
        flows = path.read_bytes()
        assert b"claude-code" in flows or b"cursor" in flows  # the flows were saved
        assert PASSWORD.encode() not in flows


def test_without_a_shared_store_the_second_worker_cannot_restore(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """The control: two workers with a store each; turn 2 reaches the one that did not see
    turn 1, and Gemini refuses it (the staged retry then answers without the signatures)."""
    script = Gemini(code_assist=False)
    upstream.script = script
    options = {"bridge_routes": routes(tmp_path, "gemini", 'signature_fallback = "none"\n')}
    workers = [start_proxy(**options), start_proxy(**options)]
    cursor_loop(alternating(workers), CASES["gemini"][1], True)
    assert any("missing a thought_signature" in m for m in upstream.violations)
    upstream.violations.clear()  # refused on purpose: this is the control


def test_one_conversation_gets_one_invoke_trigger_on_every_worker(
    start_proxy: Callable[..., Proxy], upstream: ScriptedUpstream, redis_server: RedisServer
) -> None:
    upstream.script = answering("invoke", stream=True)
    shared = {"bridge_tool_mode": "invoke", "bridge_store": store_url(redis_server)}
    workers = [start_proxy(**shared), start_proxy(**shared), start_proxy(bridge_tool_mode="invoke")]
    first = [{"role": "user", "content": "Show me a.py and list the directory."}]
    triggers = []
    for worker in workers:
        calls, _, _, _ = collect(worker, first, stream=True)
        assert [name for _, name, _ in calls] == ["Read", "Shell"]
        found = TRIGGER.search(system_text(upstream.requests[-1]))
        assert found is not None
        triggers.append(found.group(0))
    a, b, alone = triggers
    assert a == b, "the workers on one Redis store must agree on the conversation's trigger"
    assert alone != a, "a worker with a store of its own makes its own trigger"
    no_secret_shown(workers)


def test_redis_stopped_mid_run_every_request_answered_then_sharing_resumes(
    start_proxy: Callable[..., Proxy],
    upstream: ScriptedUpstream,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    script = Gemini(code_assist=False)
    upstream.script = script
    model = CASES["gemini"][1]
    options: dict[str, Any] = {
        "bridge_routes": routes(tmp_path, "gemini", 'signature_fallback = "none"\n'),
        "bridge_store": store_url(redis_server),
    }
    a, b = start_proxy(**options), start_proxy(**options)
    assert cursor_loop(alternating([a, b]), model, True) == TURNS[2][2]

    redis_server.stop()
    # Redis away: a conversation on one worker goes on from that worker's memory.
    for _ in range(2):
        assert cursor_loop(lambda: a.base_url, model, True) == TURNS[2][2]
    assert cursor_loop(lambda: b.base_url, model, False) == TURNS[2][2]
    for w in (a, b):
        w.wait_for_log("values stay in this process's memory until it is back")
        assert w.log_text().count("until it is back") == 1, w.log_text()

    redis_server.start()
    # Each worker shares again at its first store call after its probe found Redis
    # (1 s after the loss, then 2, 4 … s): a first turn on each until both say so.
    deadline = time.monotonic() + 40
    while not all("values shared again" in w.log_text() for w in (a, b)):
        assert time.monotonic() < deadline, "sharing did not resume"
        for w in (a, b):
            cursor_loop_first_turn(w, model)
        time.sleep(0.5)
    assert cursor_loop(alternating([b, a]), model, True) == TURNS[2][2]
    assert script.refused == []
    for w in (a, b):
        assert w.log_text().count("until it is back") == 1
    no_secret_shown([a, b])


def cursor_loop_first_turn(worker: Proxy, model: str) -> None:
    """One first turn (it needs nothing from the store): a store call on that worker."""
    client = openai.OpenAI(base_url=f"{worker.base_url}/v1", api_key=KEY, max_retries=0, timeout=15)
    done = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[
            {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
        ],
    )
    assert done.choices[0].message.tool_calls
