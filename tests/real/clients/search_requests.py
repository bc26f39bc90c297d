"""Records the web search requests of the real Claude Code, Codex CLI and Gemini CLI (issue 44
point 1) as each program sends them to a local scripted upstream (no bridge in between), into
``tests/fixtures/<client>_web_search/``:

    .venv/bin/python -m tests.real.clients.search_requests [claude-code] [codex] [gemini-cli]

- **Claude Code**: its ``WebSearch`` tool makes a request of its own carrying Anthropic's
  ``web_search_…`` server tool; the scripted model's main turn calls ``WebSearch``, and the
  tool's request is recorded, answered with a text.
- **Codex CLI**: its hosted ``web_search`` tool rides in the main turn beside its function
  tools; recorded is turn 1 of ``codex exec`` asked to search, with ``web_search = "live"`` in
  its config.toml (its setting for live searches; ``"cached"`` and ``"disabled"`` are the
  others), answered with a text.
- **Gemini CLI**: its ``google_web_search`` tool makes a request of its own (a whole
  ``generateContent`` with the query as the one user turn and ``tools: [{"googleSearch": {}}]``);
  the scripted model's main turn calls the tool, and the tool's request is recorded,
  answered with a text and ``groundingMetadata`` as Gemini grounds an answer.

Each request is written as ``<name>.request.json`` (``{"method", "path", "headers",
"body"}``: the key headers left out, ids zeroed, the temporary folders rewritten to
``/home/user``) with a ``<name>.source.txt`` saying the program, its version, the command, its
config and the date. ``test_search_requests.py`` records them again and checks the committed
ones still match what the programs send.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.harness import (
    JSONReply,
    Recorded,
    Reply,
    ScriptedUpstream,
    SSEReply,
    sse_from_payloads,
)
from tests.real.clients.loop import Call, answer, gemini_chunk
from tests.real.clients.programs import REPO, Finished, Program, locate
from tests.real.clients.test_claude_code import claude
from tests.real.clients.test_codex import codex
from tests.real.clients.test_gemini_cli import gemini

FIXTURES = REPO / "tests" / "fixtures"
QUERY = "mitmproxy addon hooks"
PROMPT = f"Search the web for {QUERY}."
CODEX_CONFIG = 'web_search = "live"\n'
SOURCES = [{"uri": "https://docs.mitmproxy.org/stable/api/events.html", "title": "Event Hooks"}]
KEY_HEADERS = {"authorization", "x-goog-api-key", "x-api-key"}
HEX_ID = re.compile(r"[0-9a-f]{16,}")
"""Claude Code's ``metadata.user_id`` ids (a device id of 64 hex digits)."""
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


@dataclass(frozen=True)
class Recording:
    program: Program
    done: Finished
    request: Recorded
    how: str
    """How it was recorded, for the ``.source.txt``: the command, its config."""


def _grounded(stream: bool) -> Reply:
    """Gemini's answer to a grounded request: a text, ``groundingMetadata`` naming its source."""
    chunk = gemini_chunk(f"Per {SOURCES[0]['uri']}: hooks are events.")
    chunk["candidates"][0]["groundingMetadata"] = {
        "webSearchQueries": [QUERY],
        "groundingChunks": [{"web": source} for source in SOURCES],
    }
    return SSEReply(sse_from_payloads([chunk])) if stream else JSONReply(chunk)


def _recorded(
    program: Program,
    how: str,
    run: Callable[[ScriptedUpstream], Finished],
    is_search: Callable[[Any], bool],
    reply: Callable[[Recorded, Any, bool], Reply],
) -> Recording:
    """``run`` the program against a scripted upstream answering each POST with ``reply(rec,
    body, searching)``; the first request ``is_search`` finds searching is the recording."""
    kept: list[Recorded] = []

    def script(rec: Recorded) -> Reply:
        if rec.method != "POST":  # a connectivity check (HEAD /)
            return JSONReply({})
        body: Any = rec.json()
        searching = is_search(body)
        if searching:
            kept.append(rec)
        return reply(rec, body, searching)

    with ScriptedUpstream() as upstream:
        upstream.script = script
        done = run(upstream)
    assert kept, done.describe()
    return Recording(program, done, kept[0], how)


def record_gemini_cli(program: Program, workdir: Path) -> Recording:
    def reply(rec: Recorded, body: Any, searching: bool) -> Reply:
        stream = ":streamGenerateContent" in rec.path
        if searching:
            return _grounded(stream)
        if any("functionResponse" in p for p in body["contents"][-1]["parts"]):
            return answer("gemini", stream, "Searched.")
        return answer("gemini", stream, None, [Call("google_web_search", {"query": QUERY})])

    how = (
        f"gemini -p {PROMPT!r} --approval-mode yolo --output-format stream-json --model "
        "gemini-2.5-flash, GEMINI_API_KEY=<redacted> GOOGLE_GEMINI_BASE_URL=<the scripted "
        "upstream> (settings.json: auth gemini-api-key, usage statistics, telemetry and "
        "updates off). The scripted model's main turn called google_web_search; its tool's "
        "own request is this one, answered with a text and groundingMetadata."
    )
    return _recorded(
        program,
        how,
        lambda upstream: gemini(program, upstream, _project(workdir), PROMPT),
        lambda body: any("googleSearch" in t for t in body.get("tools") or []),
        reply,
    )


def record_claude_code(program: Program, workdir: Path) -> Recording:
    def reply(rec: Recorded, body: Any, searching: bool) -> Reply:
        stream = bool(body.get("stream"))
        if searching:
            return answer("anthropic", stream, f"Nothing found for {QUERY}.")
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            return answer("anthropic", stream, "Searched.")
        return answer("anthropic", stream, None, [Call("WebSearch", {"query": QUERY}, id="ws1")])

    how = (
        f"claude -p {PROMPT!r} --output-format stream-json --verbose --allowedTools WebSearch "
        "--max-turns 4 --model claude-sonnet-4-6, ANTHROPIC_API_KEY=<redacted> "
        "ANTHROPIC_BASE_URL=<the scripted upstream> (nonessential traffic, telemetry, "
        "updates and error reporting off). The scripted model's main turn called WebSearch; "
        "the tool's own request (carrying the web_search_… server tool) is this one, answered "
        "with a text."
    )
    return _recorded(
        program,
        how,
        lambda upstream: claude(program, upstream, _project(workdir), PROMPT, "WebSearch"),
        lambda body: any(
            str(t.get("type", "")).startswith("web_search_") for t in body.get("tools") or []
        ),
        reply,
    )


def record_codex(program: Program, workdir: Path) -> Recording:
    how = (
        f"codex exec --skip-git-repo-check --json {PROMPT!r}, CODEX_HOME=<home>/.codex "
        'BRIDGE_KEY=<redacted> (config.toml: model = "gpt-5.5", model_provider = "bridge", '
        'approval_policy = "never", sandbox_mode = "danger-full-access", web_search = "live", '
        "analytics off, [model_providers.bridge] base_url = <the scripted upstream>/v1, "
        'wire_api = "responses", env_key = "BRIDGE_KEY", request_max_retries = 0, '
        "stream_max_retries = 0). Turn 1 (the main turn, carrying the hosted web_search tool "
        "beside the function tools), answered with a text."
    )
    return _recorded(
        program,
        how,
        lambda upstream: codex(program, upstream, _project(workdir), PROMPT, CODEX_CONFIG),
        lambda body: any(t.get("type") == "web_search" for t in body.get("tools") or []),
        lambda rec, body, _: answer("openai_responses", bool(body.get("stream")), "Searched."),
    )


RECORDERS: dict[str, tuple[str, Callable[[Program, Path], Recording]]] = {
    "claude-code": ("claude_code_web_search", record_claude_code),
    "codex": ("codex_web_search", record_codex),
    "gemini-cli": ("gemini_cli_web_search", record_gemini_cli),
}
"""Program → its fixture folder and its recorder."""


def _project(workdir: Path) -> Path:
    project = workdir / "project"
    project.mkdir(parents=True, exist_ok=True)
    (workdir / "home").mkdir(exist_ok=True)
    return project


def sanitized(rec: Recorded, workdir: Path) -> dict[str, Any]:
    """The request as a fixture: key headers left out, every uuid (session, thread, turn,
    installation ids) zeroed, ``workdir`` (and its resolved form) rewritten to
    ``/home/user``."""
    headers = {k: v for k, v in rec.header_list if k.lower() not in KEY_HEADERS}
    raw = {"method": rec.method, "path": rec.path, "headers": headers, "body": rec.json()}
    text = json.dumps(raw, ensure_ascii=False)
    for folder in {str(workdir.resolve()), str(workdir)}:
        text = text.replace(folder, "/home/user")
    text = UUID.sub(lambda m: re.sub(r"[0-9a-f]", "0", m.group()), text)
    out: dict[str, Any] = json.loads(text)
    metadata = out["body"].get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        metadata["user_id"] = HEX_ID.sub(lambda m: "0" * len(m.group()), metadata["user_id"])
    return out


def write(name: str, recording: Recording, workdir: Path, folder: Path) -> Path:
    """``<folder>/<program>-<version>-web-search.request.json`` and its ``.source.txt``."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{recording.program.name}-{recording.program.version}-web-search"
    request = folder / f"{stem}.request.json"
    fixture = sanitized(recording.request, workdir)
    request.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
    today = datetime.date.today().isoformat()
    (folder / f"{stem}.source.txt").write_text(
        f"Client: {recording.program.name} {recording.program.version} (npm), run headless by "
        f"tests/real/clients/search_requests.py ({name}) on {today}.\n"
        f"Request: {fixture['method']} {fixture['path']}.\n"
        f"Command: {recording.how}\n"
        "Captured by a local scripted upstream on 127.0.0.1 (no proxy in between) that "
        "answered with scripted, synthetic responses: the request is real client output.\n"
        "Sanitized: key headers left out; every uuid (session, thread, turn, installation ids) zeroed; the temporary "
        "home and project folders rewritten to /home/user. Content-Length is the original.\n"
    )
    return request


def main(names: list[str]) -> None:
    for name in names or sorted(RECORDERS):
        folder, record = RECORDERS[name]
        with tempfile.TemporaryDirectory() as tmp:
            recording = record(locate(name), Path(tmp))
            print(write(name, recording, Path(tmp), FIXTURES / folder))


if __name__ == "__main__":
    main(sys.argv[1:])
