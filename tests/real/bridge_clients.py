"""The four client dialects the bridge takes, each driven as its real client sends it (issue 28).

One driver per client: Cursor (OpenAI chat with flat ``input_schema`` tools and Anthropic-style
blocks in its history), Claude Code (the anthropic SDK), Codex CLI (the openai SDK's Responses
API) and Gemini CLI (plain HTTP in Gemini's shapes: the project has no Google SDK). Each sends
a text prompt, the weather tool conversation that makes SmolLM2 call (two earlier calls with
their results, no text between, a call required: tests/fixtures/llama_cpp/README.md) and the
call's result back, streamed or whole, and returns what its SDK parsed. Glossary: *turn 1*
asks for the call, *turn 2* sends its result; a *failure* is the status and JSON body of an
error answer as the client received it (``refused``: a prompt the request must fail on).
``bridge_to`` starts the bridge in front of a llama-server with every client routed to one
upstream dialect.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import anthropic
import httpx
import openai

from tests.e2e.harness import Proxy
from tests.real.llama_cpp import LlamaServer

TIMEOUT = 60.0
MAX_TOKENS = 24
TOOL_TOKENS = 64
KEY = "sk-real-bridge-key"
# Past llama-server's --ctx-size (4096 in tests/real/llama_cpp.py): ~5000 tokens.
FILLER = "word " * 5000
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER_DESCRIPTION = "Current weather of a city"
HISTORY = [("Weather in Paris?", "Paris", "18 C"), ("And in Rome?", "Rome", "18 C")]
ASK = "And in Berlin?"
RESULT = "21 C and sunny"


@dataclass(frozen=True)
class Call:
    """A tool call as the client parsed it; ``echo`` is what the client sends back in turn 2."""

    name: str
    arguments: dict[str, Any]
    echo: Any


@dataclass(frozen=True)
class Failure:
    status: int
    body: Any


class Client(Protocol):
    name: str

    def text(self, stream: bool, model: str = ...) -> str: ...
    def call(self, stream: bool) -> Call: ...
    def after_call(self, stream: bool, call: Call) -> str: ...
    def refused(self, stream: bool, prompt: str, model: str = ...) -> Failure: ...
    def bad_json(self) -> Failure: ...


CLAUDE_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error"}
GOOGLE_STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED"}


def assert_client_error(client: str, failure: Failure, status: int, says: str = "") -> None:
    """``failure`` has ``status`` and the client's own error shape; its message contains ``says``."""
    body: Any = failure.body
    assert failure.status == status, failure
    assert isinstance(body, dict), failure
    if client == "claude":
        assert body.get("type") == "error", body
        assert body["error"]["type"] == CLAUDE_ERROR_TYPES[status], body
    elif client == "gemini":
        assert body["error"]["code"] == status, body
        assert body["error"]["status"] == GOOGLE_STATUSES[status], body
    else:
        assert isinstance(body["error"]["type"], str), body
    message = body["error"]["message"]
    assert isinstance(message, str) and says in message.lower(), body


def _raw(base: str, path: str, body: bytes, headers: dict[str, str]) -> Failure:
    r = httpx.post(f"{base}{path}", content=body, headers=headers, timeout=TIMEOUT)
    try:
        data: Any = r.json()
    except ValueError:
        data = r.text
    return Failure(r.status_code, data)


def _json_args(text: str) -> dict[str, Any]:
    value = json.loads(text)
    assert isinstance(value, dict), text
    return value


# --------------------------------------------------------------------------- Cursor


CURSOR_TOOLS: list[Any] = [
    {"name": "get_weather", "description": WEATHER_DESCRIPTION, "input_schema": WEATHER_SCHEMA}
]


def _block_history() -> list[Any]:
    """The two earlier calls with their results, no text between, then the question."""
    messages: list[Any] = []
    results: list[Any] = []
    for i, (question, city, result) in enumerate(HISTORY):
        messages.append({"role": "user", "content": [*results, {"type": "text", "text": question}]})
        use = {
            "type": "tool_use",
            "id": f"toolu_{i}",
            "name": "get_weather",
            "input": {"city": city},
        }
        messages.append({"role": "assistant", "content": [use]})
        results = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": result}]
    messages.append({"role": "user", "content": [*results, {"type": "text", "text": ASK}]})
    return messages


def _cursor_history() -> list[Any]:
    """The two earlier calls as Cursor sends them: Anthropic-style blocks in chat messages."""
    return [{"role": "system", "content": "You are a coding agent."}, *_block_history()]


class Cursor:
    """OpenAI chat completions as Cursor sends them, parsed by the openai SDK."""

    name = "cursor"
    path = "/v1/chat/completions"

    def __init__(self, base_url: str, key: str = KEY) -> None:
        self.base = base_url
        self.key = key
        self.sdk = openai.OpenAI(
            base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=TIMEOUT
        )

    def _create(self, stream: bool, **params: Any) -> tuple[str, list[Call]]:
        params = {"model": "claude-sonnet-4.6", "temperature": 0, **params}
        if not stream:
            done = self.sdk.chat.completions.create(**params)
            message = done.choices[0].message
            assert done.choices[0].finish_reason is not None
            calls = [
                Call(c.function.name, _json_args(c.function.arguments), c)
                for c in message.tool_calls or []
                if c.type == "function"
            ]
            return message.content or "", calls
        text, finish, slots = "", None, dict[int, dict[str, str]]()
        chunks = self.sdk.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        for chunk in chunks:
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                text += choice.delta.content or ""
                for d in choice.delta.tool_calls or []:
                    slot = slots.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] += d.id or ""
                    if d.function is not None:
                        slot["name"] += d.function.name or ""
                        slot["arguments"] += d.function.arguments or ""
        assert finish is not None, "the stream ended without a finish_reason"
        return text, [Call(s["name"], _json_args(s["arguments"]), s) for s in slots.values()]

    def text(self, stream: bool, model: str = "claude-sonnet-4.6") -> str:
        content: Any = [{"type": "text", "text": "Say hello."}]
        messages: Any = [{"role": "user", "content": content}]
        return self._create(stream, model=model, messages=messages, max_tokens=MAX_TOKENS)[0]

    def _tools(self, messages: list[Any], choice: Any, stream: bool) -> tuple[str, list[Call]]:
        return self._create(
            stream,
            messages=cast(Any, messages),
            tools=cast(Any, CURSOR_TOOLS),
            tool_choice=choice,
            max_tokens=TOOL_TOKENS,
        )

    def call(self, stream: bool) -> Call:
        _, calls = self._tools(_cursor_history(), "required", stream)
        assert calls, "no tool call in the answer"
        return calls[0]

    def after_call(self, stream: bool, call: Call) -> str:
        echo = call.echo
        call_id = echo["id"] if isinstance(echo, dict) else echo.id
        use = {"type": "tool_use", "id": call_id, "name": call.name, "input": call.arguments}
        result = {"type": "tool_result", "tool_use_id": call_id, "content": RESULT}
        messages = [
            *_cursor_history(),
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ]
        text, calls = self._tools(messages, {"type": "auto"}, stream)
        return text or calls[0].name

    def refused(self, stream: bool, prompt: str, model: str = "claude-sonnet-4.6") -> Failure:
        messages: Any = [{"role": "user", "content": prompt}]
        try:
            self._create(stream, model=model, messages=messages, max_tokens=8)
        except openai.APIStatusError as e:
            return Failure(e.status_code, e.response.json())
        raise AssertionError("the request was answered")

    def bad_json(self) -> Failure:
        headers = {"authorization": f"Bearer {self.key}", "content-type": "application/json"}
        return _raw(self.base, self.path, b'{"model": "m", "messages": [', headers)


# --------------------------------------------------------------------------- Claude Code


CLAUDE_TOOLS = CURSOR_TOOLS  # Cursor's flat tools are Anthropic's
CLAUDE_SYSTEM: Any = [
    {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
]


class ClaudeCode:
    """Anthropic messages as Claude Code sends them, parsed by the anthropic SDK."""

    name = "claude"
    path = "/v1/messages"

    def __init__(self, base_url: str, key: str = KEY) -> None:
        self.base = base_url
        self.key = key
        self.sdk = anthropic.Anthropic(
            base_url=base_url, api_key=key, max_retries=0, timeout=TIMEOUT
        )

    def _message(self, stream: bool, **params: Any) -> anthropic.types.Message:
        params = {
            "model": "claude-sonnet-4-6",
            "system": CLAUDE_SYSTEM,
            "metadata": {"user_id": "user-real"},
            "extra_body": {"temperature": 0},  # this SDK version has no argument for it
            **params,
        }
        if stream:
            with self.sdk.messages.stream(**params) as s:
                message = s.get_final_message()
        else:
            message = self.sdk.messages.create(**params)
        assert message.stop_reason is not None
        return message

    def text(self, stream: bool, model: str = "claude-sonnet-4-6") -> str:
        messages = [{"role": "user", "content": "Say hello."}]
        message = self._message(stream, model=model, messages=messages, max_tokens=MAX_TOKENS)
        return "".join(b.text for b in message.content if b.type == "text")

    def call(self, stream: bool) -> Call:
        message = self._message(
            stream,
            messages=_block_history(),
            tools=CLAUDE_TOOLS,
            tool_choice={"type": "any"},
            max_tokens=TOOL_TOKENS,
        )
        uses = [b for b in message.content if b.type == "tool_use"]
        assert uses, f"no tool_use block in {message.content}"
        assert message.stop_reason == "tool_use"
        return Call(uses[0].name, cast(dict[str, Any], uses[0].input), uses[0])

    def after_call(self, stream: bool, call: Call) -> str:
        use = call.echo
        result = {"type": "tool_result", "tool_use_id": use.id, "content": RESULT}
        messages = [
            *_block_history(),
            {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
            {"role": "user", "content": [result]},
        ]
        message = self._message(
            stream, messages=messages, tools=CLAUDE_TOOLS, max_tokens=TOOL_TOKENS
        )
        texts = [b.text for b in message.content if b.type == "text"]
        names = [b.name for b in message.content if b.type == "tool_use"]
        return "".join(texts) or names[0]

    def refused(self, stream: bool, prompt: str, model: str = "claude-sonnet-4-6") -> Failure:
        messages = [{"role": "user", "content": prompt}]
        try:
            self._message(stream, model=model, messages=messages, max_tokens=8)
        except anthropic.APIStatusError as e:
            return Failure(e.status_code, e.response.json())
        raise AssertionError("the request was answered")

    def bad_json(self) -> Failure:
        headers = {
            "x-api-key": self.key,
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        }
        return _raw(self.base, self.path, b'{"model": "m", "messages": [', headers)


# --------------------------------------------------------------------------- Codex CLI


CODEX_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": WEATHER_DESCRIPTION,
        "parameters": WEATHER_SCHEMA,
        "strict": False,
    }
]


def _user_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _codex_history() -> list[Any]:
    items: list[Any] = []
    for i, (question, city, result) in enumerate(HISTORY):
        items.append(_user_item(question))
        args = json.dumps({"city": city})
        items.append(
            {
                "type": "function_call",
                "call_id": f"call_{i}",
                "name": "get_weather",
                "arguments": args,
            }
        )
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": result})
    items.append(_user_item(ASK))
    return items


class Codex:
    """The Responses API as Codex CLI sends it, parsed by the openai SDK."""

    name = "codex"
    path = "/v1/responses"

    def __init__(self, base_url: str, key: str = KEY) -> None:
        self.base = base_url
        self.key = key
        self.sdk = openai.OpenAI(
            base_url=f"{base_url}/v1", api_key=key, max_retries=0, timeout=TIMEOUT
        )

    def _response(self, stream: bool, **params: Any) -> Any:
        params = {
            "model": "gpt-5.5",
            "instructions": "You are Codex, a coding agent.",
            "store": False,
            "parallel_tool_calls": True,
            "prompt_cache_key": "real-bridge",
            "temperature": 0,
            **params,
        }
        if stream:
            with self.sdk.responses.stream(**params) as s:
                response = s.get_final_response()
        else:
            response = self.sdk.responses.create(**params)
        assert response.status in ("completed", "incomplete"), response.status
        return response

    def text(self, stream: bool, model: str = "gpt-5.5") -> str:
        response = self._response(
            stream, model=model, input=[_user_item("Say hello.")], max_output_tokens=MAX_TOKENS
        )
        return cast(str, response.output_text)

    def call(self, stream: bool) -> Call:
        response = self._response(
            stream,
            input=_codex_history(),
            tools=CODEX_TOOLS,
            tool_choice="required",
            max_output_tokens=TOOL_TOKENS,
        )
        calls = [o for o in response.output if o.type == "function_call"]
        assert calls, f"no function_call item in {response.output}"
        return Call(calls[0].name, _json_args(calls[0].arguments), calls[0])

    def after_call(self, stream: bool, call: Call) -> str:
        item = call.echo
        echoed = {
            "type": "function_call",
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
        }
        output = {"type": "function_call_output", "call_id": item.call_id, "output": RESULT}
        response = self._response(
            stream,
            input=[*_codex_history(), echoed, output],
            tools=CODEX_TOOLS,
            tool_choice="auto",
            max_output_tokens=TOOL_TOKENS,
        )
        names = [o.name for o in response.output if o.type == "function_call"]
        return cast(str, response.output_text) or names[0]

    def refused(self, stream: bool, prompt: str, model: str = "gpt-5.5") -> Failure:
        try:
            self._response(stream, model=model, input=[_user_item(prompt)], max_output_tokens=16)
        except openai.APIStatusError as e:
            return Failure(e.status_code, e.response.json())
        raise AssertionError("the request was answered")

    def bad_json(self) -> Failure:
        headers = {"authorization": f"Bearer {self.key}", "content-type": "application/json"}
        return _raw(self.base, self.path, b'{"model": "m", "input": [', headers)


# --------------------------------------------------------------------------- Gemini CLI


GEMINI_TOOLS: list[Any] = [
    {
        "functionDeclarations": [
            {
                "name": "get_weather",
                "description": WEATHER_DESCRIPTION,
                "parametersJsonSchema": WEATHER_SCHEMA,
            }
        ]
    }
]


def _gemini_history() -> list[Any]:
    contents: list[Any] = []
    results: list[Any] = []
    for question, city, result in HISTORY:
        contents.append({"role": "user", "parts": [*results, {"text": question}]})
        call = {"functionCall": {"name": "get_weather", "args": {"city": city}}}
        contents.append({"role": "model", "parts": [call]})
        results = [{"functionResponse": {"name": "get_weather", "response": {"output": result}}}]
    contents.append({"role": "user", "parts": [*results, {"text": ASK}]})
    return contents


class GeminiCli:
    """Gemini's generateContent as Gemini CLI sends it (plain HTTP; ``?alt=sse`` streams)."""

    name = "gemini"

    def __init__(self, base_url: str, key: str = KEY) -> None:
        self.base = base_url
        self.key = key
        self.headers = {"x-goog-api-key": key, "content-type": "application/json"}

    def path(self, stream: bool, model: str = "gemini-2.5-pro") -> str:
        if stream:
            return f"/v1beta/models/{model}:streamGenerateContent?alt=sse"
        return f"/v1beta/models/{model}:generateContent"

    def _post(self, stream: bool, body: Any, model: str = "gemini-2.5-pro") -> httpx.Response:
        return httpx.post(
            f"{self.base}{self.path(stream, model)}",
            json=body,
            headers=self.headers,
            timeout=TIMEOUT,
        )

    def _parts(self, stream: bool, body: Any, model: str = "gemini-2.5-pro") -> list[Any]:
        r = self._post(stream, body, model)
        assert r.status_code == 200, (r.status_code, r.text)
        if not stream:
            answers = [r.json()]
        else:
            assert r.headers["content-type"].startswith("text/event-stream")
            answers = [
                json.loads(line.removeprefix("data:"))
                for line in r.text.splitlines()
                if line.startswith("data:")
            ]
        parts: list[Any] = []
        finish = None
        for answer in answers:
            assert "error" not in answer, answer
            for candidate in answer.get("candidates", []):
                finish = candidate.get("finishReason") or finish
                parts += candidate.get("content", {}).get("parts", [])
        assert finish is not None, f"no finishReason in {answers}"
        return parts

    def _config(self, tokens: int) -> dict[str, Any]:
        return {"generationConfig": {"temperature": 0, "maxOutputTokens": tokens}}

    def text(self, stream: bool, model: str = "gemini-2.5-pro") -> str:
        body = {
            "contents": [{"role": "user", "parts": [{"text": "Say hello."}]}],
            "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
            **self._config(MAX_TOKENS),
        }
        return "".join(p.get("text", "") for p in self._parts(stream, body, model))

    def call(self, stream: bool) -> Call:
        body = {
            "contents": _gemini_history(),
            "tools": GEMINI_TOOLS,
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
            **self._config(TOOL_TOKENS),
        }
        calls = [p for p in self._parts(stream, body) if "functionCall" in p]
        assert calls, "no functionCall part in the answer"
        fc = calls[0]["functionCall"]
        return Call(fc["name"], fc.get("args", {}), calls[0])

    def after_call(self, stream: bool, call: Call) -> str:
        response = {"functionResponse": {"name": call.name, "response": {"output": RESULT}}}
        if "id" in call.echo["functionCall"]:
            response["functionResponse"]["id"] = call.echo["functionCall"]["id"]
        body = {
            "contents": [
                *_gemini_history(),
                {"role": "model", "parts": [call.echo]},
                {"role": "user", "parts": [response]},
            ],
            "tools": GEMINI_TOOLS,
            **self._config(TOOL_TOKENS),
        }
        parts = self._parts(stream, body)
        text = "".join(p.get("text", "") for p in parts)
        names = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
        return text or names[0]

    def refused(self, stream: bool, prompt: str, model: str = "gemini-2.5-pro") -> Failure:
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}], **self._config(8)}
        r = self._post(stream, body, model)
        try:
            return Failure(r.status_code, r.json())
        except ValueError:
            return Failure(r.status_code, r.text)

    def bad_json(self) -> Failure:
        return _raw(self.base, self.path(False), b'{"contents": [', self.headers)


CLIENTS: dict[str, type[Cursor] | type[ClaudeCode] | type[Codex] | type[GeminiCli]] = {
    c.name: c for c in (Cursor, ClaudeCode, Codex, GeminiCli)
}


# --------------------------------------------------------------------------- the bridge


UPSTREAMS = ("openai_chat", "anthropic", "openai_responses")
"""The upstream dialects llama-server speaks."""
CLIENT_ROUTES = (
    ("cursor", "*/chat/completions", "openai_chat"),
    ("claude", "*/v1/messages", "anthropic"),
    ("codex", "*/responses", "openai_responses"),
    ("gemini", "*/models/*:*enerateContent", "gemini"),
)


def routes(upstream: str) -> str:
    """Every client dialect to ``upstream``; its path is the upstream dialect's own."""
    return "".join(
        f'[[routes]]\nname = "{name}-to-{upstream}"\npath = "{path}"\n'
        f'client = "{client}"\nupstream = "{upstream}"\n\n'
        for name, path, client in CLIENT_ROUTES
    )


@contextlib.contextmanager
def bridge_to(server: LlamaServer, upstream: str, tmp: Path) -> Iterator[Proxy]:
    """A mitmdump with the addon before ``server``, every client routed to ``upstream``."""
    path = tmp / f"{upstream}.toml"
    path.write_text(routes(upstream))
    with Proxy(server.port, {"bridge_routes": str(path)}) as proxy:
        yield proxy
        log = proxy.log_text()  # before the stop: mitmdump may log its own on SIGTERM
    assert "Traceback" not in log, log
