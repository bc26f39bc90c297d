"""Through a real mitmweb: the "cursor-bridge" content view, flow marks, the flow log line and
``bridge.stats``, read back through mitmweb's own HTTP API (and, where Debian's chromium is
installed, a headless screenshot of the view)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import (
    HOST,
    MITMWEB,
    JSONReply,
    Proxy,
    ScriptedUpstream,
    SSEReply,
    free_port,
)
from tests.e2e.test_repair_loop import EDIT_SCHEMA, REPAIRED, broken_call_reply, failing_history
from tests.e2e.test_text_tools import openai_json
from tests.realdata import as_sse

PARALLEL = "openai-chat-sse-parallel-2-tool_calls-args-split.openai-python.sse"
TOKEN = "web-token-e2e"
SECRET = "sk-ant-e2e-SECRET-0123456789abcdef"
TOOLS: list[Any] = [
    {
        "name": "GetWeatherArgs",
        "description": "Weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        },
    },
    {
        "name": "get_stock_price",
        "description": "Price of a ticker",
        "input_schema": {"type": "object", "properties": {"ticker": {"type": "string"}}},
    },
]

pytestmark = pytest.mark.e2e


class Web:
    def __init__(self, proxy: Proxy, port: int, upstream: ScriptedUpstream) -> None:
        self.proxy = proxy
        self.upstream = upstream
        self.url = f"http://{HOST}:{port}"
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        )

    def flows(self) -> list[dict[str, Any]]:
        r = self.http.get("/flows")
        r.raise_for_status()
        flows: list[dict[str, Any]] = r.json()
        return flows

    def flow(self, after: set[str]) -> dict[str, Any]:
        """The one flow that is not in ``after``, once its answer is complete."""
        deadline = time.monotonic() + 10
        while True:
            found = [f for f in self.flows() if f["id"] not in after]
            done = [f for f in found if (f.get("response") or {}).get("timestamp_end")]
            if len(found) == 1 and done:
                return done[0]
            assert time.monotonic() < deadline, f"no single new finished flow: {found}"
            time.sleep(0.05)

    def ids(self) -> set[str]:
        return {f["id"] for f in self.flows()}

    def view(self, flow_id: str, part: str) -> dict[str, Any]:
        r = self.http.get(f"/flows/{flow_id}/{part}/content/cursor-bridge.json")
        r.raise_for_status()
        view: dict[str, Any] = r.json()
        return view

    def command(self, name: str) -> Any:
        """Run a mitmproxy command the way mitmweb's command bar does (a POST with the XSRF
        double-submit: the same token as cookie and header)."""
        token = "e2e0123456789abcdef"
        r = self.http.post(
            f"/commands/{name}",
            json={"arguments": []},
            headers={"X-XSRFToken": token, "Cookie": f"_mitmproxy_xsrf={token}"},
        )
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def web() -> Iterator[Web]:
    with ScriptedUpstream() as server:
        port = free_port()
        options = {
            "web_host": HOST,
            "web_port": port,
            "web_open_browser": False,
            "web_password": TOKEN,
            "store_streamed_bodies": True,
            "bridge_debug": True,
            "termlog_verbosity": "debug",
        }
        with Proxy(server.port, options, program=MITMWEB) as proxy:
            w = Web(proxy, port, server)
            yield w
            w.http.close()


@pytest.fixture
def upstream(web: Web) -> ScriptedUpstream:
    web.upstream.reset()
    return web.upstream


def claude(web: Web) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=web.proxy.base_url, api_key=SECRET, max_retries=0, timeout=15
    )


def test_a_streamed_rewrite_shows_decisions_diff_and_timeline(
    web: Web, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(SSEReply(as_sse(PARALLEL), chunk_min=1, chunk_max=9, seed=4))
    before = web.ids()
    with claude(web).messages.stream(
        model="m",
        max_tokens=100,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Weather in Edinburgh and AAPL?"}],
    ) as s:
        message = s.get_final_message()
    assert [b.name for b in message.content if b.type == "tool_use"] == [
        "GetWeatherArgs",
        "get_stock_price",
    ]
    flow = web.flow(before)
    assert flow["marked"] == "🔀"  # rewritten
    assert "request anthropic → openai_chat" in flow["comment"]

    req = web.view(flow["id"], "request")
    assert req["view_name"] == "cursor-bridge"
    text = req["text"]
    assert "route" in text and "anthropic" in text and "openai_chat" in text
    assert "- 1 request anthropic → openai_chat" in text  # a decision, one per line
    diff = [line for line in text.splitlines() if line.startswith(("+", "-"))]
    assert any('"input_schema"' in line for line in diff if line.startswith("-"))
    assert any('"parameters"' in line for line in diff if line.startswith("+"))
    assert SECRET not in text

    resp = web.view(flow["id"], "response")["text"]
    assert "upstream sent" in resp and "client got" in resp
    rows = [line for line in resp.splitlines() if "GetWeatherArgs" in line]
    # One aligned row: the call on both sides of the timeline.
    assert any(line.count("GetWeatherArgs") == 2 for line in rows), resp
    assert "Edinburgh" in resp and "get_stock_price" in resp
    assert SECRET not in resp

    line = web.proxy.wait_for_log("cursor-bridge flow route=")
    flow_line = line.string[line.start() :].splitlines()[0]
    assert "outcome=rewritten" in flow_line and "client=anthropic" in flow_line
    assert "upstream=openai_chat" in flow_line and "mode=stream" in flow_line
    assert "bridge_ms=" in flow_line and "events_in=" in flow_line
    web.proxy.wait_for_log("request: 1 request anthropic → openai_chat")  # bridge_debug details


def test_a_whole_answer_timeline(web: Web, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(JSONReply(openai_json("The weather in Edinburgh is dreich.")))
    before = web.ids()
    message = claude(web).messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "Weather?"}]
    )
    assert message.content[0].type == "text"
    flow = web.flow(before)
    resp = web.view(flow["id"], "response")["text"]
    rows = [line for line in resp.splitlines() if "dreich" in line]
    assert rows and rows[0].count("dreich") == 2, resp  # text joined, on both sides
    assert "finish" in resp and "stop" in resp


def test_marks_tell_the_outcomes_apart(web: Web, upstream: ScriptedUpstream) -> None:
    marks: dict[str, str] = {}

    # repaired: broken arguments fixed to fit the schema
    upstream.enqueue(broken_call_reply(stream=True))
    before = web.ids()
    with claude(web).messages.stream(
        model="m",
        max_tokens=100,
        tools=[{"name": "edit", "input_schema": EDIT_SCHEMA}],
        messages=[{"role": "user", "content": "bump x"}],
    ) as s:
        (use,) = [b for b in s.get_final_message().content if b.type == "tool_use"]
    assert use.input == REPAIRED
    marks["repaired"] = web.flow(before)["marked"]

    # loop guard: after three identical failures the model makes the call a fourth time
    upstream.enqueue(broken_call_reply(stream=False))  # once repaired, the same call
    before = web.ids()
    oa = openai.OpenAI(base_url=f"{web.proxy.base_url}/v1", api_key=SECRET, max_retries=0)
    tools: Any = [{"type": "function", "function": {"name": "edit", "parameters": EDIT_SCHEMA}}]
    oa.chat.completions.create(model="m", messages=failing_history(), tools=tools)
    guarded = web.flow(before)
    marks["loop_guard"] = guarded["marked"]
    view = web.view(guarded["id"], "request")["text"]
    assert "loop guard: edit failed 3 times in a row" in view
    assert "loop guard: edit called a 4th time: replaced" in guarded["comment"]

    # retried: an upstream that refuses the history's reasoning answers the staged retry
    refusal = "Missing `reasoning_content` field in the assistant message at message index 1"
    upstream.enqueue(JSONReply({"error": {"message": refusal}}, status=400))
    upstream.enqueue(JSONReply(openai_json("The staged answer.")))
    before = web.ids()
    done = oa.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "edit it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_r",
                        "type": "function",
                        "function": {"name": "edit", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_r", "content": "done"},
        ],
        tools=tools,
    )
    assert done.choices[0].message.content == "The staged answer."
    retried = web.flow(before)
    marks["retried"] = retried["marked"]
    assert "staged retry 1 answered" in retried["comment"]
    timeline = web.view(retried["id"], "response")["text"]
    assert "The staged answer." in timeline and "staged retry 1" in timeline

    # rejected: a body an Anthropic client sent that the OpenAI upstream cannot take
    before = web.ids()
    r = httpx.post(
        f"{web.proxy.base_url}/v1/messages",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json", "x-api-key": SECRET},
        timeout=10,
    )
    assert r.status_code == 400 and r.json()["type"] == "error"
    marks["rejected"] = web.flow(before)["marked"]

    # passed through after an error: same dialect, a body the bridge cannot read
    upstream.enqueue(JSONReply({"error": {"message": "bad json"}}, status=400))
    before = web.ids()
    r = httpx.post(
        f"{web.proxy.base_url}/v1/chat/completions",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json", "authorization": f"Bearer {SECRET}"},
        timeout=10,
    )
    assert r.status_code == 400
    marks["fallback"] = web.flow(before)["marked"]

    assert marks == {
        "repaired": "🔧",
        "loop_guard": "🛑",
        "retried": "🔁",
        "rejected": "⛔",
        "fallback": "⚠",
    }
    assert SECRET not in web.proxy.log_text()


def test_bridge_stats_command(web: Web, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(JSONReply(openai_json("hi")))
    claude(web).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    )
    result = web.command("bridge.stats")
    text = result["value"]
    assert text.startswith("flows: ") and "rewritten" in text
    for part in ("repairs: ", "restores: ", "retries: ", "fallbacks: ", "up "):
        assert part in text
    web.proxy.wait_for_log("cursor-bridge: flows: ")


def test_screenshot_of_the_view(web: Web, upstream: ScriptedUpstream, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed: no screenshot of the view")
    upstream.enqueue(JSONReply(openai_json("A screenshot, please.")))
    before = web.ids()
    claude(web).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    )
    flow = web.flow(before)
    shot = tmp_path / "view.png"
    url = f"{web.url}/?token={TOKEN}#/flows/{flow['id']}/request"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1400,1000",
            "--virtual-time-budget=5000",
            url,
        ],
        check=True,
        timeout=60,
        capture_output=True,
    )
    assert shot.stat().st_size > 10_000


def test_the_counters_are_logged_at_shutdown(web: Web, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(JSONReply(openai_json("bye")))
    with Proxy(upstream.port) as proxy:
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key=SECRET, max_retries=0)
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        assert proxy.stop() == 0
        log = proxy.log_text()
    assert "cursor-bridge: flows: 1 rewritten; repairs: 0; restores: 0; retries: 0" in log
    assert SECRET not in log


def test_a_key_in_the_query_or_echoed_by_the_upstream_never_reaches_the_view(
    web: Web, upstream: ScriptedUpstream
) -> None:
    """Gemini's ``?key=`` and an upstream error that quotes it: the bridge's view, comment
    and metadata of the flow show neither (mitmweb's own URL column is mitmproxy's)."""
    key = "AIzaSyE2eViewKey0123456789abcdefghijk"
    upstream.enqueue(
        JSONReply({"error": {"message": f"API key not valid: {key}", "code": 400}}, status=400)
    )
    upstream.enqueue(JSONReply(openai_json(f"echo {key}")))
    for status in (400, 200):
        before = web.ids()
        r = httpx.post(
            f"{web.proxy.base_url}/v1beta/models/gemini-2.5-pro:generateContent?key={key}",
            json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            timeout=10,
        )
        assert r.status_code == status
        flow = web.flow(before)
        shown = [flow["comment"], json.dumps(flow.get("metadata", {}))]
        shown.append(web.view(flow["id"], "request")["text"])
        if status == 200:
            shown.append(web.view(flow["id"], "response")["text"])
        for text in shown:
            assert key not in text, text
    assert key not in web.proxy.log_text()
