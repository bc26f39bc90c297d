"""What the load generator sends: a request body in each client dialect, and the raw
HTTP/1.1 request around it.
"""

from __future__ import annotations

import json
from typing import Any

from benchlib.base import CLIENT_KEY, HOST

LONG_DESCRIPTION = (
    "Reads a file from the local filesystem. The path must be absolute or relative to "
    "the workspace root. Lines are numbered from 1; use offset and limit for long files. "
)
TOOLS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "read_file",
        LONG_DESCRIPTION,
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file to read."},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    (
        "run_terminal_cmd",
        "Runs a shell command in the workspace and returns its output. " * 3,
        {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "is_background": {"type": "boolean"},
                "explanation": {"type": "string"},
            },
            "required": ["command"],
        },
    ),
    (
        "edit_file",
        "Replaces old_string by new_string in a file; old_string must be unique. " * 3,
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
            },
            "required": ["path", "old_string", "new_string"],
        },
    ),
    (
        "grep_search",
        "Searches the workspace with ripgrep; returns matching lines. " * 3,
        {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "include_pattern": {"type": "string"},
                "case_sensitive": {"type": "boolean"},
            },
            "required": ["query"],
        },
    ),
]
SYSTEM = "You are a coding agent working in the user's repository. Be brief and exact."
SMALL_TEXT = "Please read src/main.py and tell me why the tests fail."


def body_for(dialect: str, stream: bool, text: str) -> tuple[str, dict[str, str], bytes]:
    """Path, extra headers and JSON body of a chat request with tools in ``dialect``."""
    headers: dict[str, str]
    doc: dict[str, Any]
    if dialect == "openai":
        path, headers = "/v1/chat/completions", {"authorization": f"Bearer {CLIENT_KEY}"}
        doc = {
            "model": "gpt-4.1",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": text},
            ],
            "tools": [
                {"type": "function", "function": {"name": n, "description": d, "parameters": p}}
                for n, d, p in TOOLS
            ],
            "stream": stream,
        }
        if stream:
            doc["stream_options"] = {"include_usage": True}
    elif dialect == "anthropic":
        path = "/v1/messages"
        headers = {"x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01"}
        doc = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "system": [{"type": "text", "text": SYSTEM}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
            "tools": [{"name": n, "description": d, "input_schema": p} for n, d, p in TOOLS],
            "stream": stream,
        }
    elif dialect == "responses":
        path, headers = "/v1/responses", {"authorization": "Bearer sk-bench"}
        doc = {
            "model": "gpt-5",
            "instructions": SYSTEM,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
            "tools": [
                {"type": "function", "name": n, "description": d, "parameters": p}
                for n, d, p in TOOLS
            ],
            "stream": stream,
        }
    elif dialect == "gemini":
        action = "streamGenerateContent?alt=sse" if stream else "generateContent"
        path = f"/v1beta/models/gemini-2.5-pro:{action}"
        headers = {"x-goog-api-key": "bench-key"}
        doc = {
            "systemInstruction": {"parts": [{"text": SYSTEM}]},
            "contents": [{"role": "user", "parts": [{"text": text}]}],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": n, "description": d, "parameters": p} for n, d, p in TOOLS
                    ]
                }
            ],
        }
    else:
        raise ValueError(dialect)
    return path, headers, json.dumps(doc).encode()


def http_request(
    port: int,
    dialect: str,
    *,
    stream: bool,
    text: str = SMALL_TEXT,
    events: int = 0,
    pace: float = 0.0,
    per_chunk: int = 1,
) -> bytes:
    path, extra, body = body_for(dialect, stream, text)
    # Gemini streams are asked for by the path, and the upstream looks for "stream": true
    # in the body it gets, so the bridge's OpenAI body says it for every streamed route.
    lines = [
        f"POST {path} HTTP/1.1",
        f"host: {HOST}:{port}",
        "content-type: application/json",
        "accept: text/event-stream" if stream else "accept: application/json",
        "user-agent: cursor-bridge-bench/1",
        f"content-length: {len(body)}",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    if stream:
        lines += [f"x-bench-events: {events}", f"x-bench-pace: {pace:g}"]
        lines.append(f"x-bench-per-chunk: {per_chunk}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def long_text(size: int) -> str:
    line = "    return compute(value, other) + offset  # a line of the pasted file\n"
    return (line * (size // len(line) + 1))[:size]
