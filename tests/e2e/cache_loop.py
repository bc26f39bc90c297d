"""The 20-turn agent loop of issue 35, per client dialect, against a caching Anthropic upstream.

One mitmdump (reverse mode, ``ROUTES``) sends every client dialect to one scripted Anthropic
upstream that caches prompts as Anthropic does (``CachingAnthropic``). Each dialect's official
client (``openai`` chat completions like Cursor and OpenCode, ``openai`` Responses like
Codex, ``anthropic`` without any ``cache_control`` and with Claude Code's breakpoints, Gemini
over plain HTTP like Gemini CLI) runs the same conversation: a ~6k-token system prompt, ten
tools, then ``turns`` requests where every answer is one tool call and the next request
carries its result. ``LoopResult.share`` is the part of the input of turns ≥ 2 read from the
cache, as the upstream reported it (read / (input + read + written), summed over the turns)::

    from tests.e2e.cache_loop import run_loops
    for dialect, result in run_loops().items():
        print(dialect, f"{result.share:.1%}")

``CacheBench`` keeps the upstream and mitmdump up for several runs. Loopback only; every
request has a timeout and every loop a fixed length.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import anthropic
import httpx
import openai

from tests.anthropic_cache import CacheUsage, PromptCache, ToolCall, content_blocks, estimate_tokens
from tests.e2e.anthropic_cache_upstream import CachingAnthropic
from tests.e2e.clients import assistant_calls, chat_turn, messages_turn
from tests.e2e.harness import MAIN_SCRIPT, Proxy, ScriptedUpstream

MODEL = "claude-opus-4-1"
"""An Anthropic model with the default minimum cacheable length (1024 tokens)."""
TURNS = 20
KEY = "sk-cache-loop-key"
TIMEOUT = 30.0
DIALECTS = ("openai_chat", "openai_responses", "anthropic", "anthropic_breakpoints", "gemini")
"""``anthropic``: no ``cache_control`` at all; ``anthropic_breakpoints``: Claude Code's own
(``CLAUDE_CODE_BREAKPOINTS`` unless ``client_breakpoints`` says otherwise)."""
CLAUDE_CODE_BREAKPOINTS = 3
"""Claude Code 2.1.197's: two system blocks and the last message's last block
(``../shared/fixtures/real/clients/claude-code-2.1.197-default-turn2.request.json``)."""
ROUTES = """
[[routes]]
name = "chat-on-anthropic"
path = "*/chat/completions"
client = "openai_chat"
upstream = "anthropic"

[[routes]]
name = "responses-on-anthropic"
path = "*/responses"
client = "openai_responses"
upstream = "anthropic"

[[routes]]
name = "messages-on-anthropic"
path = "*/v1/messages"
client = "anthropic"
upstream = "anthropic"

[[routes]]
name = "gemini-on-anthropic"
path = "/v1beta/models/*"
client = "gemini"
upstream = "anthropic"
"""

TASK = "Refactor the storage layer so that every module reads its settings from one place."
HEADER = "x-agent-header: cache-loop"
"""Claude Code's first system block is short and unmarked."""
IDENTITY = "You are a coding agent working in the user's repository."


def _system_prompt(tokens: int = 6000) -> str:
    """A deterministic system prompt of about ``tokens`` tokens (as ``estimate_tokens`` counts)."""
    lines: list[str] = []
    n = 0
    while estimate_tokens({"type": "text", "text": "\n".join(lines)}) < tokens:
        n += 1
        lines.append(
            f"Rule {n}: when a change touches module {n % 37}, read it first, keep its public "
            f"names, run its tests, and explain in one sentence why the change is safe."
        )
    return "\n".join(lines)


SYSTEM = _system_prompt()
TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "grep",
    "run_shell",
    "run_tests",
    "git_diff",
    "search_docs",
    "ask_user",
)


def _tool(name: str) -> dict[str, Any]:
    """A tool in neutral form: name, description, JSON schema."""
    return {
        "name": name,
        "description": (
            f"{name.replace('_', ' ').capitalize()}: use it on paths inside the repository "
            "only; prefer small, exact arguments; the result is plain text and may be cut at "
            "200 lines, in which case ask again with an offset."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "A path relative to the repository"},
                "line": {"type": "integer", "description": "A 1-based line number"},
                "text": {"type": "string", "description": "Text to search, write or run"},
            },
            "required": ["path"],
        },
    }


TOOLS = [_tool(n) for n in TOOL_NAMES]


def call_of(turn: int) -> ToolCall:
    """The tool call the model makes on ``turn`` (1-based)."""
    return ToolCall(
        TOOL_NAMES[(turn - 1) % len(TOOL_NAMES)],
        {"path": f"src/module_{turn}.py", "line": turn},
        f"toolu_loop_{turn:02d}",
    )


def result_of(turn: int) -> str:
    """The tool's result on ``turn``: about 400 tokens of file text."""
    return "\n".join(
        f"{i:4d}  def handler_{turn}_{i}(settings): return settings.get('key_{turn}_{i}', {i})"
        for i in range(1, 26)
    )


def answer(body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The upstream's answer: the next turn's tool call (the turn is one more than the
    assistant messages in the body)."""
    messages = body.get("messages") or []
    turn = 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    return content_blocks(None, [call_of(turn)])


# --------------------------------------------------------------------------- results


@dataclass
class LoopResult:
    """What the upstream reported for one dialect's loop."""

    dialect: str
    usages: list[CacheUsage] = field(default_factory=list)
    """Per request the upstream accounted, in order (turn 1 first)."""
    breakpoints: list[int] = field(default_factory=list)
    """Per request the upstream got (refused ones too)."""
    refusals: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        """Cache reads over all input tokens of turns ≥ 2 (0 without such turns)."""
        later = self.usages[1:]
        total = sum(u.total_input_tokens for u in later)
        return sum(u.cache_read_input_tokens for u in later) / total if total else 0.0

    def shares(self) -> list[float]:
        """The read share of each turn."""
        return [u.cache_read_input_tokens / (u.total_input_tokens or 1) for u in self.usages]


# --------------------------------------------------------------------------- clients


def _openai(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy.base_url}/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT
    )


def _chat_loop(proxy: Proxy, turns: int, stream: bool) -> None:
    """Cursor / OpenCode: chat completions with tools; results as ``role: "tool"``."""
    client = _openai(proxy)
    tools = [{"type": "function", "function": t} for t in TOOLS]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]
    for turn in range(1, turns + 1):
        _, _, calls = chat_turn(client, stream, model=MODEL, messages=messages, tools=tools)
        _expect(calls, turn, "name")
        messages.append(assistant_calls(calls))
        messages.append(
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": result_of(turn)}
        )


def _responses_loop(proxy: Proxy, turns: int, stream: bool) -> None:
    """Codex: Responses with function tools; ``function_call`` items and their outputs."""
    client = _openai(proxy)
    tools = [{"type": "function", "strict": False, **t} for t in TOOLS]
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]}
    ]
    for turn in range(1, turns + 1):
        params: dict[str, Any] = {
            "model": MODEL,
            "instructions": SYSTEM,
            "input": items,
            "tools": tools,
            "store": False,
        }
        if stream:
            done = None
            for event in client.responses.create(stream=True, **params):
                if event.type == "response.completed":
                    done = event.response
            assert done is not None, f"turn {turn}: the stream had no response.completed"
        else:
            done = client.responses.create(**params)
        calls = [
            {"call_id": o.call_id, "name": o.name, "arguments": o.arguments}
            for o in done.output
            if o.type == "function_call"
        ]
        _expect(calls, turn, "name")
        items += [{"type": "function_call", **c} for c in calls]
        items.append(
            {
                "type": "function_call_output",
                "call_id": calls[0]["call_id"],
                "output": result_of(turn),
            }
        )


def _anthropic_loop(proxy: Proxy, turns: int, stream: bool, breakpoints: int) -> None:
    """Claude Code: Messages with tools and ``breakpoints`` markers of its own: 0 (none); 2
    (the big system block, the last message's last block); 3 (Claude Code's: also the
    identity system block); 4 (also the last block of the user message before the last)."""
    client = anthropic.Anthropic(
        base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=TIMEOUT
    )
    tools = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in TOOLS
    ]
    marker = {"type": "ephemeral"}
    identity: dict[str, Any] = {"type": "text", "text": IDENTITY}
    system: Any = (
        [
            {"type": "text", "text": HEADER},
            identity | ({"cache_control": marker} if breakpoints >= 3 else {}),
            {"type": "text", "text": SYSTEM, "cache_control": marker},
        ]
        if breakpoints
        else SYSTEM
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
    for turn in range(1, turns + 1):
        sent = messages
        if breakpoints >= 2:
            sent = _mark(sent, -1, marker)
        if breakpoints >= 4 and len(sent) >= 3:
            sent = _mark(sent, -3, marker)
        params: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 1024,
            "system": system,
            "tools": tools,
            "messages": sent,
        }
        message = messages_turn(client, stream, **params)
        calls = [
            {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
            for b in message.content
            if b.type == "tool_use"
        ]
        _expect(calls, turn, "name")
        messages.append({"role": "assistant", "content": calls})
        result = {"type": "tool_result", "tool_use_id": calls[0]["id"], "content": result_of(turn)}
        messages.append({"role": "user", "content": [result]})


def _mark(
    messages: list[dict[str, Any]], index: int, marker: dict[str, str]
) -> list[dict[str, Any]]:
    """``messages`` with ``marker`` on the last block of ``messages[index]`` (a copy)."""
    out = list(messages)
    *blocks, tail = out[index]["content"]
    out[index] = out[index] | {"content": [*blocks, tail | {"cache_control": marker}]}
    return out


def _gemini_loop(proxy: Proxy, turns: int, stream: bool) -> None:
    """Gemini CLI: ``generateContent`` over plain HTTP; ``functionCall`` parts answered by
    ``functionResponse`` parts."""
    verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
    url = f"{proxy.base_url}/v1beta/models/{MODEL}:{verb}"
    headers = {"x-goog-api-key": KEY, "content-type": "application/json"}
    declarations = [
        {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}
        for t in TOOLS
    ]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": TASK}]}]
    with httpx.Client(timeout=TIMEOUT, trust_env=False) as http:
        for turn in range(1, turns + 1):
            body = {
                "systemInstruction": {"parts": [{"text": SYSTEM}]},
                "contents": contents,
                "tools": [{"functionDeclarations": declarations}],
            }
            got = http.post(url, json=body, headers=headers)
            if got.status_code != 200:
                raise AssertionError(
                    f"turn {turn}: gemini client got {got.status_code}: {got.text}"
                )
            parts = [p for chunk in _gemini_chunks(got.text, stream) for p in _parts(chunk)]
            calls = [p["functionCall"] for p in parts if "functionCall" in p]
            _expect(calls, turn, "name")
            contents.append({"role": "model", "parts": [p for p in parts if "functionCall" in p]})
            response = {"name": calls[0]["name"], "response": {"content": result_of(turn)}}
            contents.append({"role": "user", "parts": [{"functionResponse": response}]})


def _gemini_chunks(text: str, stream: bool) -> Iterator[dict[str, Any]]:
    if not stream:
        yield json.loads(text)
        return
    for line in text.splitlines():
        if line.startswith("data:"):
            yield json.loads(line[5:])


def _parts(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    candidates = chunk.get("candidates") or [{}]
    parts: list[dict[str, Any]] = (candidates[0].get("content") or {}).get("parts") or []
    return parts


def _expect(calls: Sequence[Mapping[str, Any]], turn: int, key: str) -> None:
    want = call_of(turn).name
    if len(calls) != 1 or calls[0][key] != want:
        raise AssertionError(f"turn {turn}: expected one call of {want}, the client got {calls}")


# --------------------------------------------------------------------------- the bench


class CacheBench:
    """A caching Anthropic upstream and a mitmdump before it on ``ROUTES``; ``run(dialect)``
    plays one loop on a fresh cache. A context manager."""

    def __init__(
        self,
        options: Mapping[str, object] | None = None,
        cache: PromptCache | None = None,
        script: Path = MAIN_SCRIPT,
    ) -> None:
        self.cached = CachingAnthropic(cache, answer)
        self.upstream = ScriptedUpstream()
        self._dir = tempfile.TemporaryDirectory(prefix="cache-loop-")
        routes = Path(self._dir.name) / "routes.toml"
        routes.write_text(ROUTES)
        self.proxy = Proxy(0, {"bridge_routes": str(routes), **(options or {})}, script=script)

    def __enter__(self) -> CacheBench:
        try:
            self.upstream.start()
            self.proxy.upstream_port = self.upstream.port
            self.proxy.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.proxy.close()
        self.upstream.stop()
        self._dir.cleanup()

    def run(
        self,
        dialect: str,
        turns: int = TURNS,
        stream: bool = True,
        client_breakpoints: int = CLAUDE_CODE_BREAKPOINTS,
    ) -> LoopResult:
        """One loop of ``turns`` requests by the ``dialect`` client (``DIALECTS``)."""
        self.upstream.reset()
        self.upstream.script = self.cached
        self.cached.reset()
        drive(dialect, self.proxy, turns, stream, client_breakpoints)
        served = list(self.cached.served)
        return LoopResult(
            dialect,
            usages=[s.usage for s in served if s.usage is not None],
            breakpoints=[s.breakpoints for s in served],
            refusals=[s.refusal for s in served if s.refusal is not None],
            violations=list(self.upstream.violations),
            errors=list(self.upstream.errors),
        )


def drive(
    dialect: str,
    proxy: Proxy,
    turns: int = TURNS,
    stream: bool = True,
    client_breakpoints: int = CLAUDE_CODE_BREAKPOINTS,
) -> None:
    """Play the loop with ``dialect``'s client through ``proxy`` (``client_breakpoints``: how
    many markers the ``anthropic_breakpoints`` client places, 2 to 4)."""
    if dialect == "openai_chat":
        _chat_loop(proxy, turns, stream)
    elif dialect == "openai_responses":
        _responses_loop(proxy, turns, stream)
    elif dialect in ("anthropic", "anthropic_breakpoints"):
        marks = client_breakpoints if dialect == "anthropic_breakpoints" else 0
        _anthropic_loop(proxy, turns, stream, marks)
    elif dialect == "gemini":
        _gemini_loop(proxy, turns, stream)
    else:
        raise ValueError(f"unknown client dialect {dialect!r}; known: {', '.join(DIALECTS)}")


def run_loops(
    dialects: Sequence[str] = DIALECTS,
    turns: int = TURNS,
    *,
    stream: bool = True,
    options: Mapping[str, object] | None = None,
    script: Path = MAIN_SCRIPT,
) -> dict[str, LoopResult]:
    """Each dialect's loop through one mitmdump (``options``: extra ``bridge_*`` settings;
    ``script``: another checkout's ``addon/main.py``)."""
    with CacheBench(options, script=script) as bench:
        return {d: bench.run(d, turns, stream) for d in dialects}


def main(argv: Sequence[str] | None = None) -> None:
    """``scripts/bench-cache``: the read share per client dialect, as a table."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=TURNS, help="turns per loop (default 20)")
    parser.add_argument("--whole", action="store_true", help="non-streamed answers")
    args = parser.parse_args(argv)
    if not 2 <= args.turns <= 200:
        parser.error("--turns must be between 2 and 200")
    print(f"{'client dialect':24} {'read share (turns >= 2)':>24}  max breakpoints")
    for name, result in run_loops(turns=args.turns, stream=not args.whole).items():
        most = max(result.breakpoints, default=0)
        print(f"{name:24} {result.share:>24.1%}  {most}")


if __name__ == "__main__":
    main()
