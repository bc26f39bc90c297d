"""The real Claude Code (``claude -p``) searches the web through the bridge on an OpenAI chat
upstream, the route naming a SearXNG backend (issue 44 point 1; docs/tools.md#web-search).

The scripted model's main turn calls Claude Code's ``WebSearch`` tool; Claude Code's tool then
sends its own request carrying Anthropic's ``web_search_20250305`` server tool
(``tests/fixtures/claude_code_web_search``), which the bridge answers by offering the model a
``web_search`` function tool, searching the scripted SearXNG Search API and feeding the results
back. Claude Code must read the ``server_tool_use`` / ``web_search_tool_result`` blocks it gets
(the result's URL and title reach its main turn as the tool's result), and its final answer
must quote what only the search result held."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.harness import Proxy, Recorded, Reply, ScriptedUpstream
from tests.real.clients.loop import Call, answer
from tests.real.clients.programs import Program, base_env, run
from tests.real.clients.test_claude_code import KEY, final_result
from tests.searxng_server import ScriptedSearxng

QUERY = "cursor bridge web search"


def _said(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def test_claude_code_shows_a_search_result_from_a_chat_upstream(
    program: Callable[[str], Program], project: Path, token: str
) -> None:
    claude = program("claude-code")
    url = f"https://example.org/{token.lower()}"
    results = {QUERY: [{"url": url, "title": f"Page {token}", "content": f"It says {token}."}]}
    main_turns: list[dict[str, Any]] = []
    searches: list[dict[str, Any]] = []

    def model(rec: Recorded) -> Reply:
        body = rec.json()
        stream = bool(body.get("stream"))
        names = [t["function"]["name"] for t in body.get("tools") or []]
        last = body["messages"][-1]
        if names == ["web_search"]:  # WebSearch's own request, as the bridge sends it
            searches.append(body)
            if last["role"] != "tool":
                return answer(
                    "openai_chat",
                    stream,
                    None,
                    [Call("web_search", {"query": QUERY}, id="call_ws1")],
                )
            found = json.loads(_said(last))
            return answer("openai_chat", stream, f"The page {found[0]['url']} says {token}.")
        main_turns.append(body)
        if last["role"] != "tool":
            return answer(
                "openai_chat", stream, None, [Call("WebSearch", {"query": QUERY}, id="call_main1")]
            )
        return answer("openai_chat", stream, f"The search found {token}.")

    with ScriptedSearxng(results) as searxng, ScriptedUpstream() as upstream:
        upstream.script = model
        routes = project.parent / "routes.toml"
        routes.write_text(
            '[[routes]]\nname = "claude-search"\npath = "*/v1/messages"\nclient = "anthropic"\n'
            f'upstream = "openai_chat"\nsearch = {{url = "{searxng.base_url}"}}\n'
        )
        with Proxy(upstream.port, {"bridge_routes": str(routes)}) as proxy:
            home = project.parent / "home"
            env = base_env(home) | {
                "ANTHROPIC_BASE_URL": proxy.base_url,
                "ANTHROPIC_API_KEY": KEY,
                "CLAUDE_CONFIG_DIR": str(home / ".claude"),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "CLAUDE_CODE_MAX_RETRIES": "2",
            }
            argv = [str(claude.binary), "-p", f"Search the web for {QUERY}.", "--output-format",
                    "stream-json", "--verbose", "--allowedTools", "WebSearch", "--max-turns", "3",
                    "--model", "claude-sonnet-4-6"]  # fmt: skip
            done = run(argv, cwd=project, env=env)
            log = proxy.log_text()
        assert len(searxng.requests) == 1, f"{done.describe()}\n{log[-4000:]}"
    assert token in final_result(done), done.describe()
    assert len(searches) == 2, log[-4000:]  # the search call, then the fed-back results
    assert searches[1].get("tool_choice", "auto") == "auto"
    # The WebSearch tool's result in Claude Code's next turn holds what the blocks carried.
    told = _said(main_turns[-1]["messages"][-1])
    assert url in told and token in told, told
    assert "Traceback" not in log and KEY not in log
