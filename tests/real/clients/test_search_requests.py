"""The real Claude Code, Codex CLI and Gemini CLI search the web (issue 44 point 1;
docs/tools.md#web-search): their recorded search requests (``search_requests``:
``tests/fixtures/<client>_web_search``) are still what they send, and each program, through a
bridge on an OpenAI chat upstream whose route names the scripted SearXNG Search API, reads the
answer the bridge makes of the search and shows what only the search result held.

- **Claude Code**: the main turn's model calls ``WebSearch``; the tool's own request (only the
  ``web_search_20250305`` server tool, ``tool_choice`` naming it) is answered by the bridge with
  ``server_tool_use`` / ``web_search_tool_result`` blocks, which the tool turns into its result.

- **Codex**: the main turn carries its hosted ``web_search`` tool; the bridge offers the model a
  ``web_search`` function beside Codex's tools, runs the search it calls and feeds the results
  back, and answers Codex with a ``web_search_call`` item before the model's message.
- **Gemini CLI**: the main turn's model calls ``google_web_search``; the tool's own request
  (``googleSearch``) is answered by the bridge with the searched answer and its
  ``groundingMetadata``, which the tool turns into its result (the text and its sources): the
  main turn's next request must carry the result's URL and what it said."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import JSONReply, Proxy, Recorded, Reply, ScriptedUpstream
from tests.real.clients.loop import Call, answer
from tests.real.clients.programs import Finished, Program
from tests.real.clients.search_requests import FIXTURES, PROMPT, QUERY, RECORDERS, sanitized
from tests.real.clients.test_claude_code import KEY, claude, final_result
from tests.real.clients.test_codex import agent_messages, codex
from tests.real.clients.test_gemini_cli import assistant_text, gemini
from tests.searxng_server import ScriptedSearxng


def _shape(fixture: dict[str, Any]) -> dict[str, Any]:
    """What a recording is checked by: its method and path, the body's keys, its tools (their
    names or types; a tool without a name whole) and what it asks beside them."""
    body = fixture["body"]
    tools = [t.get("name") or t for t in body.get("tools") or []]
    kept = ("tool_choice", "stream", "generationConfig", "contents", "reasoning", "include")
    return {
        "method": fixture["method"],
        "path": fixture["path"],
        "keys": sorted(body),
        "tools": tools,
        **{k: body[k] for k in kept if k in body},
    }


@pytest.mark.parametrize("name", sorted(RECORDERS))
def test_the_recorded_search_request_is_what_the_program_sends(
    program: Callable[[str], Program], tmp_path: Path, name: str
) -> None:
    found = program(name)
    folder, record = RECORDERS[name]
    committed = FIXTURES / folder / f"{found.name}-{found.version}-web-search.request.json"
    assert committed.is_file(), f"record it: python -m tests.real.clients.search_requests {name}"
    recording = record(found, tmp_path)
    assert recording.done.returncode == 0, recording.done.describe()
    fresh = sanitized(recording.request, tmp_path)
    assert _shape(fresh) == _shape(json.loads(committed.read_text()))


def _said(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


class ChatModel:
    """The chat upstream's model: in the request the bridge offers ``web_search`` (with no
    result yet) it calls it; given the search's result it answers quoting the page; in the
    client's main turn (``main_call``) it calls the client's own search tool, then answers
    from that tool's result."""

    def __init__(self, token: str, main_call: Call | None) -> None:
        self.token = token
        self.main_call = main_call
        self.searches: list[dict[str, Any]] = []
        self.main_turns: list[dict[str, Any]] = []

    def __call__(self, rec: Recorded) -> Reply:
        if rec.method != "POST":  # Claude Code's HEAD / (its connectivity check)
            return JSONReply({})
        body = rec.json()
        stream = bool(body.get("stream"))
        names = [t["function"]["name"] for t in body.get("tools") or []]
        last = body["messages"][-1]
        searching = "web_search" in names and (self.main_call is None or names == ["web_search"])
        if searching:
            self.searches.append(body)
            if last["role"] != "tool":
                call = Call("web_search", {"query": QUERY}, id="call_ws1")
                return answer("openai_chat", stream, None, [call])
            found = json.loads(_said(last))
            return answer("openai_chat", stream, f"The page {found[0]['url']} says {self.token}.")
        self.main_turns.append(body)
        if last["role"] != "tool" and self.main_call is not None:
            return answer("openai_chat", stream, None, [self.main_call])
        return answer("openai_chat", stream, f"The search found {self.token}.")


def _search_through_bridge(
    client: str, path: str, model: ChatModel, run: Callable[[Proxy], Finished], workdir: Path
) -> tuple[Finished, str]:
    url = f"https://example.org/{model.token.lower()}"
    content = f"It says {model.token}."
    results = {QUERY: [{"url": url, "title": f"Page {model.token}", "content": content}]}
    with ScriptedSearxng(results) as searxng, ScriptedUpstream() as upstream:
        upstream.script = model
        routes = workdir / "routes.toml"
        routes.write_text(
            f'[[routes]]\nname = "search"\npath = "{path}"\nclient = "{client}"\n'
            f'upstream = "openai_chat"\nsearch = {{url = "{searxng.base_url}"}}\n'
        )
        with Proxy(upstream.port, {"bridge_routes": str(routes)}) as proxy:
            done = run(proxy)
            log = proxy.log_text()
        context = f"{done.describe()}\n--- mitmdump ---\n{log[-4000:]}"
        assert not upstream.errors and not upstream.violations, context
    assert done.returncode == 0, context
    assert len(searxng.requests) == 1, context
    assert searxng.requests[0].params == {"q": QUERY, "format": "json"}
    assert len(model.searches) == 2, context  # the search call, then the fed-back results
    assert "Traceback" not in log, context
    return done, log


def test_claude_code_shows_a_search_result_from_a_chat_upstream(
    program: Callable[[str], Program], project: Path, token: str
) -> None:
    """Claude Code's WebSearch tool reads the ``server_tool_use`` / ``web_search_tool_result``
    blocks: the result's URL and title reach its main turn as the tool's result."""
    found = program("claude-code")
    model = ChatModel(token, Call("WebSearch", {"query": QUERY}, id="call_main1"))
    done, log = _search_through_bridge(
        "anthropic",
        "*/v1/messages",
        model,
        lambda proxy: claude(found, proxy, project, PROMPT, allowed="WebSearch"),
        project.parent,
    )
    assert token in final_result(done), done.describe()
    assert [t["function"]["name"] for t in model.searches[0]["tools"]] == ["web_search"]
    assert model.searches[0]["tool_choice"] == "required"  # its choice names the only tool
    assert model.searches[1].get("tool_choice", "auto") == "auto"
    told = _said(model.main_turns[-1]["messages"][-1])
    assert token in told and f"https://example.org/{token.lower()}" in told, told
    assert KEY not in log


def test_codex_shows_a_search_result_from_a_chat_upstream(
    program: Callable[[str], Program], project: Path, token: str
) -> None:
    found = program("codex")
    model = ChatModel(token, None)
    done, log = _search_through_bridge(
        "openai_responses",
        "*/v1/responses",
        model,
        lambda proxy: codex(found, proxy, project, PROMPT, 'web_search = "live"\n'),
        project.parent,
    )
    assert token in "\n".join(agent_messages(done)[-1:]), done.describe()
    first = model.searches[0]
    names = [t["function"]["name"] for t in first["tools"]]
    assert "exec_command" in names and names[-1] == "web_search"  # beside Codex's tools
    # Codex read the web_search_call item: its search shows in its --json output.
    items = [json.loads(line).get("item") or {} for line in done.stdout.splitlines()
             if line.startswith('{"type":"item.completed"')]  # fmt: skip
    searched = [i for i in items if i.get("type") == "web_search"]
    assert searched and searched[0].get("query") == QUERY, done.stdout[-3000:]
    assert "sk-real-client-codex-key" not in log


def test_gemini_cli_shows_a_search_result_from_a_chat_upstream(
    program: Callable[[str], Program], project: Path, token: str
) -> None:
    found = program("gemini-cli")
    model = ChatModel(token, Call("google_web_search", {"query": QUERY}, id="call_main1"))
    done, log = _search_through_bridge(
        "gemini",
        "/v1beta/models/*",
        model,
        lambda proxy: gemini(found, proxy, project, PROMPT),
        project.parent,
    )
    assert token in assistant_text(done), done.describe()
    assert [t["function"]["name"] for t in model.searches[0]["tools"]] == ["web_search"]
    # The tool's result in Gemini CLI's next turn holds the answer and its grounded source.
    told = _said(model.main_turns[-1]["messages"][-1])
    url = f"https://example.org/{token.lower()}"
    assert token in told and url in told, told
    assert "real-client-gemini-key" not in log
