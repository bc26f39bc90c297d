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
    RawReply,
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

_TOKEN = "e2e0123456789abcdef"
XSRF = {"X-XSRFToken": _TOKEN, "Cookie": f"_mitmproxy_xsrf={_TOKEN}"}


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
        """The one flow that is not in ``after``, once it is over: its answer complete, or
        (a client that hangs up on an error event before the body's end, which the relay may
        still be writing) its error."""
        deadline = time.monotonic() + 10
        while True:
            found = [f for f in self.flows() if f["id"] not in after]
            done = [
                f
                for f in found
                if (f.get("response") or {}).get("timestamp_end")
                or (f.get("error") and f["comment"])
            ]
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
        r = self.http.post(f"/commands/{name}", json={"arguments": []}, headers=XSRF)
        r.raise_for_status()
        return r.json()

    def set_options(self, **values: Any) -> None:
        """Set options the way mitmweb's options dialog does."""
        self.http.put("/options", json=values, headers=XSRF).raise_for_status()

    def raw(self, flow_id: str, part: str) -> bytes:
        """The body as mitmweb stores it (its "download" link)."""
        r = self.http.get(f"/flows/{flow_id}/{part}/content.data")
        r.raise_for_status()
        return r.content


@pytest.fixture(scope="module")
def web() -> Iterator[Web]:
    with ScriptedUpstream() as server:
        port = free_port()
        options = {
            "web_host": HOST,
            "web_port": port,
            "web_open_browser": False,
            "web_password": TOKEN,
            # mitmproxy's default, as in docs/observability.md's command: streamed bodies not stored.
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
    marks["not_rewritten"] = web.flow(before)["marked"]

    assert marks == {
        "repaired": "🔧",
        "loop_guard": "🛑",
        "retried": "🔁",
        "rejected": "⛔",
        "not_rewritten": "⚠",
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
    for part in ("repairs: ", "restores: ", "retries: ", "not rewritten: ", "up "):
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


# --------------------------------------------------------------------------- issue 26


def flow_lines(web: Web, since: int, n: int = 1) -> list[str]:
    """The ``cursor-bridge flow`` lines logged after ``since`` characters of the log, once
    there are ``n`` of them (then a moment more, to see a second line that should not be)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [
            line[line.index("cursor-bridge flow ") :]
            for line in web.proxy.log_text()[since:].splitlines()
            if "cursor-bridge flow " in line
        ]
        if len(lines) >= n:
            time.sleep(0.3)
            return [
                line[line.index("cursor-bridge flow ") :]
                for line in web.proxy.log_text()[since:].splitlines()
                if "cursor-bridge flow " in line
            ]
        assert time.monotonic() < deadline, web.proxy.log_text()[since:]
        time.sleep(0.05)


def columns(view: str, needle: str) -> list[tuple[str, str]]:
    """The timeline's rows holding ``needle``: (upstream column, client column)."""
    rows = []
    for line in view.splitlines():
        if needle in line and "│" in line:
            left, _, right = line.partition("│")
            rows.append((left.strip(), right.strip()))
    return rows


@pytest.mark.parametrize("store", [False, True], ids=["default", "store_streamed_bodies"])
def test_a_stream_shows_its_timeline_without_store_streamed_bodies(
    web: Web, upstream: ScriptedUpstream, store: bool
) -> None:
    """mitmproxy's default keeps no streamed body ("Content is missing."): the bridge stores
    the bytes the client got, so the view's timeline has both sides and the body saved is
    the client's, byte for byte (as mitmproxy's own with ``store_streamed_bodies``)."""
    if store:
        web.set_options(store_streamed_bodies=True)
    try:
        streamed_timeline(web, upstream)
    finally:
        web.set_options(store_streamed_bodies=False)


def streamed_timeline(web: Web, upstream: ScriptedUpstream) -> None:
    upstream.enqueue(SSEReply(as_sse(PARALLEL), chunk_min=1, chunk_max=9, seed=7))
    before = web.ids()
    got = bytearray()
    with httpx.stream(
        "POST",
        f"{web.proxy.base_url}/v1/messages",
        json={
            "model": "m",
            "max_tokens": 100,
            "stream": True,
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "Weather in Edinburgh and AAPL?"}],
        },
        headers={"x-api-key": SECRET, "anthropic-version": "2023-06-01"},
        timeout=15,
    ) as r:
        for chunk in r.iter_raw():
            got += chunk
    flow = web.flow(before)
    assert web.raw(flow["id"], "response") == bytes(got)  # what the client got, exactly
    view = web.view(flow["id"], "response")
    assert view["view_name"] == "cursor-bridge", view
    text = view["text"]
    assert "Content is missing" not in text and "not stored" not in text
    for name in ("GetWeatherArgs", "get_stock_price"):
        ((up, client),) = columns(text, name)
        assert name in up and name in client, text
    ((up, client),) = columns(text, "finish")
    assert "tool_calls" in up and "tool_use" in client


def test_a_long_upstream_text_and_its_arguments_are_shown_whole(
    web: Web, upstream: ScriptedUpstream
) -> None:
    long_text = "The weather in Edinburgh is " + "dreich and grey, " * 8 + "as ever."
    upstream.enqueue(JSONReply(openai_json(long_text)))
    before = web.ids()
    claude(web).messages.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "Weather?"}]
    )
    flow = web.flow(before)
    text = web.view(flow["id"], "response")["text"]
    rows = [line for line in text.splitlines() if "│" in line]
    start = next(i for i, line in enumerate(rows) if "The weather in Edinburgh" in line)
    # The upstream's column goes on over the lines below: the text whole, as on the right.
    left = " ".join(line.partition(" │")[0].strip() for line in rows[start : start + 3])
    right = rows[start].partition("│")[2]
    assert long_text in left, text
    assert long_text in right
    # A whole answer has no framing to speak of.
    assert "(sse)" not in text


def test_the_request_view_says_each_decision_once_and_diffs_without_key_order_noise(
    web: Web, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(JSONReply(openai_json("fine")))
    before = web.ids()
    claude(web).messages.create(
        model="m",
        max_tokens=100,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Weather?"}],
    )
    flow = web.flow(before)
    text = web.view(flow["id"], "request")["text"]
    assert text.count("request anthropic → openai_chat") == 1, text
    assert text.count("flat tools → OpenAI") <= 1
    diff = [
        line
        for line in text.splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    assert not any('"model"' in line or '"messages"' in line for line in diff), text
    assert any('"parameters"' in line for line in diff)
    assert "(sse)" not in text  # a whole answer


def test_retried_requests_show_what_each_attempt_sent(web: Web, upstream: ScriptedUpstream) -> None:
    # A staged retry: the upstream refuses the history's reasoning, the retry drops it.
    refusal = "Missing `reasoning_content` field in the assistant message at message index 1"
    upstream.enqueue(JSONReply({"error": {"message": refusal}}, status=400))
    upstream.enqueue(JSONReply(openai_json("The staged answer.")))
    before = web.ids()
    client = claude(web)
    client.messages.create(
        model="m",
        max_tokens=100,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[
            {"role": "user", "content": "edit it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "c2ln"},
                    {"type": "tool_use", "id": "toolu_1", "name": "edit", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
            },
        ],
        tools=[{"name": "edit", "input_schema": {"type": "object"}}],
    )
    flow = web.flow(before)
    first, retried = upstream.wait_for_requests(2)
    assert first.body != retried.body
    text = web.view(flow["id"], "request")["text"]
    assert "# staged retry 1: sent this body" in text, text
    part = text[text.index("# staged retry 1") :]
    assert "+++ staged retry 1 sent" in part
    assert any(line.startswith("-") for line in part.splitlines()[2:]), part
    assert "bridge.stats" not in text

    stats = web.command("bridge.stats")["value"]
    assert "staged retry 1 retries" not in stats
    assert "(staged retry 1: " in stats

    # A retry for a required tool call: the same body sent again.
    web.set_options(bridge_tool_mode="bracket")
    try:
        call = openai_json('[Calling tool: Read]\nInput: {"path": "a"}')
        upstream.enqueue(JSONReply(openai_json("No tool, sorry.")), JSONReply(call))
        before = web.ids()
        oa = openai.OpenAI(base_url=f"{web.proxy.base_url}/v1", api_key=SECRET, max_retries=0)
        answer = oa.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "read a"}],
            tools=[{"type": "function", "function": {"name": "Read", "parameters": {}}}],
            tool_choice="required",
        )
        assert answer.choices[0].message.tool_calls
        flow = web.flow(before)
        assert flow["marked"] == "🔁"
        text = web.view(flow["id"], "request")["text"]
        assert "# retry for a required tool call: sent the same body again" in text, text
    finally:
        web.set_options(bridge_tool_mode="native")


def test_an_html_page_in_a_200_event_stream_is_a_fallback(
    web: Web, upstream: ScriptedUpstream
) -> None:
    page = b"<html><body><h1>Please sign in</h1></body></html>\n"
    upstream.enqueue(SSEReply(page, chunk_min=5, chunk_max=20))
    before = web.ids()
    since = len(web.proxy.log_text())
    with (
        pytest.raises(anthropic.APIStatusError, match="sign in"),
        claude(web).messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        ) as s,
    ):
        for _ in s:
            pass
    flow = web.flow(before)
    assert flow["marked"] == "⚠", flow
    (line,) = flow_lines(web, since)
    assert "outcome=not_rewritten" in line and "reason=" in line
    # The ⚠ flow's view: its timeline (the upstream's page, the client's error), no traceback.
    text = web.view(flow["id"], "response")["text"]
    assert "Traceback" not in text and "error" in text


def test_a_client_that_hangs_up_after_done_still_gets_its_report_once(
    web: Web, upstream: ScriptedUpstream
) -> None:
    """The official SDKs close as soon as they have read ``[DONE]``; this upstream closes its
    side a second later, so the flow ends as "client disconnected"."""
    upstream.enqueue(SSEReply(as_sse(PARALLEL), chunk_min=20, chunk_max=60, linger=1.5))
    before = web.ids()
    since = len(web.proxy.log_text())
    oa = openai.OpenAI(base_url=f"{web.proxy.base_url}/v1", api_key=SECRET, max_retries=0)
    stream = oa.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "weather?"}], stream=True
    )
    names = [
        tc.function.name
        for chunk in stream
        for c in chunk.choices
        for tc in c.delta.tool_calls or []
        if tc.function and tc.function.name
    ]
    stream.close()
    assert names == ["GetWeatherArgs", "get_stock_price"]
    (line,) = flow_lines(web, since)
    time.sleep(1.6)  # the upstream's end arrives: still one line
    lines = flow_lines(web, since)
    assert lines == [line], lines
    assert "outcome=rewritten" in line and "events_in=" in line, line
    assert "client=openai_chat upstream=openai_chat" in line
    assert "reason=" not in line
    flow = next(f for f in web.flows() if f["id"] not in before)
    assert flow["marked"] == "🔀"
    assert "the client hung up after the answer's end" in flow["comment"]  # the error hook's
    text = web.view(flow["id"], "response")["text"]
    assert len(columns(text, "get_stock_price")) == 1


def test_the_first_comment_line_names_both_dialects_on_a_same_dialect_route(
    web: Web, upstream: ScriptedUpstream
) -> None:
    upstream.enqueue(JSONReply(openai_json("same")))
    before = web.ids()
    oa = openai.OpenAI(base_url=f"{web.proxy.base_url}/v1", api_key=SECRET, max_retries=0)
    oa.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    flow = web.flow(before)
    first = flow["comment"].splitlines()[0]
    assert first.endswith(": 1 request openai_chat → openai_chat"), flow["comment"]


def test_the_view_on_flows_it_did_not_rewrite_is_one_line(
    web: Web, upstream: ScriptedUpstream
) -> None:
    # No route: an embeddings request.
    upstream.enqueue(JSONReply({"data": []}))
    before = web.ids()
    httpx.post(f"{web.proxy.base_url}/v1/embeddings", json={"input": "x"}, timeout=10)
    plain = web.flow(before)
    # Passed through (⚠): a body the bridge cannot read.
    upstream.enqueue(JSONReply({"error": {"message": "bad json"}}, status=400))
    before = web.ids()
    httpx.post(
        f"{web.proxy.base_url}/v1/chat/completions",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json", "authorization": f"Bearer {SECRET}"},
        timeout=10,
    )
    passed = web.flow(before)
    assert passed["marked"] == "⚠"
    # Rejected (⛔): its answer is the bridge's own.
    before = web.ids()
    httpx.post(
        f"{web.proxy.base_url}/v1/messages",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json", "x-api-key": SECRET},
        timeout=10,
    )
    rejected = web.flow(before)
    # ⚠ with a 502 of the bridge's: an answer the client's dialect cannot be given.
    upstream.enqueue(RawReply(b"{not json", headers={"content-type": "application/json"}))
    before = web.ids()
    with pytest.raises(anthropic.InternalServerError):
        claude(web).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    untranslatable = web.flow(before)
    assert untranslatable["marked"] == "⚠"
    shown = {
        "untranslatable response": web.view(untranslatable["id"], "response"),
        "plain request": web.view(plain["id"], "request"),
        "plain response": web.view(plain["id"], "response"),
        "passed request": web.view(passed["id"], "request"),
        "passed response": web.view(passed["id"], "response"),
        "rejected response": web.view(rejected["id"], "response"),
    }
    for what, view in shown.items():
        text = view["text"]
        assert "Traceback" not in text and "Couldn't parse" not in text, (what, text)
        assert text.startswith("# cursor-bridge: ") and text.count("\n") == 1, (what, text)
        assert SECRET not in text
    assert "no route" in shown["plain request"]["text"]
    assert "passed through" in shown["passed request"]["text"]
    assert "answered itself" in shown["rejected response"]["text"]
    assert "no timeline" in shown["untranslatable response"]["text"]
