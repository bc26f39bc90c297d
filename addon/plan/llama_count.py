"""``count_tokens = "llama"``: a llama.cpp server counts (docs/dialects/anthropic.md#count_tokens).
The bridge asks the server itself, at its root (the chat path less ``/chat/completions`` and
its ``/v1``): ``POST /apply-template`` with the conversation and tools as OpenAI chat messages
(the prompt the server's chat template makes of them), then ``POST /tokenize`` of that prompt
with its special tokens (what the server counts when it answers the chat request); the count
is the number of tokens. Any failure: the estimate answers, said in the flow comment and in
one log line.

Contract: plain values, no I/O. ``llama_request`` decides the calls (``CountLlama``);
``llama_count`` makes them, one after the other, through the ``Send`` the shell hands it
(``addon.shell.token_count``: ``Retry.attempt_via``) and says what the client gets
(``LlamaCounted``)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from addon.config.routes import Route
from addon.dialects import DIALECTS, OPENAI_CHAT, Dialect
from addon.dialects.base import Target, endpoint_base
from addon.model import ClientError, Request, UnsupportedShape
from addon.plan.token_counter import Counted
from addon.plan.values import dump, load_json
from addon.plan.wire_request import RouteKey, credentials, secret_values
from addon.redact import Secrets
from addon.transforms.client_noise import noise_for, strip_client_noise

TIMEOUT: Final = 15.0
"""Seconds each of the two calls may take at most (the route's ``timeout`` when shorter)."""
TEMPLATE: Final = "/apply-template"
TOKENIZE: Final = "/tokenize"
_CHAT: Final = "/chat/completions"
_VERSION: Final = re.compile(r"/v\d+[a-z]*\d*$")


@dataclass(frozen=True, slots=True)
class CountLlama:
    """Ask the llama.cpp server at ``root`` (of ``origin``, else where the client sent the
    request) to count; ``fallback``: the estimate that answers when it cannot."""

    fallback: Counted
    route: str
    root: str
    """The server's root path on its origin (``""``, or a prefix such as ``/llama``)."""
    origin: tuple[Literal["http", "https"], str, int] | None
    headers: tuple[tuple[str, str], ...]
    """What each call carries: the route's key (or the client's, moved as for the chat
    request) and the content type."""
    template: bytes
    """The ``/apply-template`` body: ``{"messages": …, "tools": …}``."""
    timeout: float
    secrets: Secrets

    def call(self, addressed: tuple[str, str, int], endpoint: str, body: bytes) -> LlamaCall:
        """``endpoint``'s call: to the route's ``upstream_url`` origin, else to the scheme,
        host and port the client ``addressed``."""
        scheme, host, port = self.origin if self.origin is not None else addressed
        host = f"[{host}]" if ":" in host else host
        url = f"{scheme}://{host}:{port}{self.root}{endpoint}"
        return LlamaCall(url, self.headers, body, self.timeout)


@dataclass(frozen=True, slots=True)
class LlamaCall:
    """One ``POST`` to the server, for the shell to send."""

    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    timeout: float


type Reply = tuple[int | None, bytes, str]
"""A call's answer: its status and body, or None, no body and why none came."""
type Send = Callable[[LlamaCall], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class LlamaCounted:
    """What the client gets: its ``input_tokens``, the flow comment, and a log line when the
    server did not count (the estimate answered)."""

    body: bytes
    comment: str
    estimated: bool
    log: str | None = None


def llama_request(
    route: Route,
    client: Dialect,
    chat_path: str,
    req: Request | None,
    headers: Mapping[str, str],
    env: Mapping[str, str],
    withhold: bool,
    fallback: Counted,
) -> CountLlama | None:
    """The two calls for ``req`` (decoded, its tools the upstream cannot run left out); None:
    no conversation to template (the estimate answers at once)."""
    if req is None:
        return None
    target = route.target
    if noise_for(
        route.upstream, target.host if target is not None else "", route.strip_client_noise
    ):
        req = strip_client_noise(req, Counter())  # as the chat request leaves it out
    chat = DIALECTS[OPENAI_CHAT]
    try:
        body = chat.encode_request(req, Counter())
    except (ClientError, UnsupportedShape, ValueError, TypeError, KeyError):
        return None
    template = {"messages": body.get("messages", [])}
    if body.get("tools"):
        template["tools"] = body["tools"]
    env_key = (env.get(route.key_env) or None) if route.key_env else None  # a pool's first
    route_key = RouteKey(env_key) if env_key is not None else None
    set_headers, _ = credentials(client, chat, headers, route_key, Counter(), withhold=withhold)
    return CountLlama(
        fallback,
        route.name,
        _root(route, client, chat_path),
        (target.scheme, target.host, target.port) if target is not None else None,
        (*set_headers, ("content-type", "application/json")),
        dump(template),
        min(route.timeout, TIMEOUT),
        secret_values(headers, (), env_key),
    )


def _root(route: Route, client: Dialect, chat_path: str) -> str:
    """The server's root: the chat request's path (the route's ``upstream_path``, else the
    client's path less its endpoint) less ``/chat/completions`` and the API version, after
    the ``upstream_url``'s prefix."""
    if route.upstream_path is not None:
        path = route.upstream_path.partition("?")[0].rstrip("/")
        base = path.removesuffix(_CHAT)
    else:
        base = endpoint_base(Target(chat_path, (), client.path, same_dialect=False))
    prefix = route.target.prefix if route.target is not None else ""
    return _VERSION.sub("", (prefix + base).rstrip("/"))


async def llama_count(
    sent: CountLlama, send: Send, addressed: tuple[str, str, int]
) -> LlamaCounted:
    """The server's count (``/apply-template``, then ``/tokenize`` of its prompt), asked with
    ``send``; else the estimate and why."""
    status, content, why = await send(sent.call(addressed, TEMPLATE, sent.template))
    prompt = read_prompt(status, content)
    if prompt is None:
        return llama_counted(sent, why_not(TEMPLATE, status, why))
    status, content, why = await send(sent.call(addressed, TOKENIZE, tokenize_body(prompt)))
    tokens = read_count(status, content)
    return llama_counted(sent, tokens if tokens is not None else why_not(TOKENIZE, status, why))


def tokenize_body(prompt: str) -> bytes:
    """The ``/tokenize`` call for a templated prompt: its special tokens parsed as such and the
    ones the server adds (BOS) added, as the server tokenizes a chat request's prompt."""
    # ASCII JSON of one string: the standard library's is strict here.
    text = json.dumps({"content": prompt, "add_special": True, "parse_special": True})
    return text.encode("ascii")


def read_prompt(status: int | None, content: bytes) -> str | None:
    """The prompt of an ``/apply-template`` answer; None: not one."""
    body = _json(status, content)
    prompt = body.get("prompt") if isinstance(body, dict) else None
    return prompt if isinstance(prompt, str) else None


def read_count(status: int | None, content: bytes) -> int | None:
    """The number of tokens of a ``/tokenize`` answer; None: not one."""
    body = _json(status, content)
    tokens = body.get("tokens") if isinstance(body, dict) else None
    return len(tokens) if isinstance(tokens, list) else None


def _json(status: int | None, content: bytes) -> object:
    if status is None or not 200 <= status < 300:
        return None
    try:
        return load_json(content)
    except (ValueError, RecursionError):
        return None


def why_not(endpoint: str, status: int | None, detail: str) -> str:
    """Why a call gave no count, in a few words (never its URL or key)."""
    if status is None:
        return f"{endpoint}: {detail}"
    if 200 <= status < 300:
        return (
            f"{endpoint}: HTTP {status} without a {'prompt' if endpoint == TEMPLATE else 'count'}"
        )
    return f"{endpoint}: HTTP {status}"


def llama_counted(sent: CountLlama, count: int | str) -> LlamaCounted:
    """The server's ``count``, else (why it gave none) the estimate."""
    if isinstance(count, int):
        return LlamaCounted(
            _input_tokens(count),
            f"cursor-bridge: count_tokens from the llama.cpp server's /tokenize ({count})",
            estimated=False,
        )
    est = sent.fallback
    why = sent.secrets(count)
    return LlamaCounted(
        _input_tokens(est.tokens),
        f"cursor-bridge: count_tokens estimated ({est.said}; the llama.cpp server did not "
        f"count: {why})",
        estimated=True,
        log=f"cursor-bridge [{sent.route}]: count_tokens estimated, the llama.cpp server did "
        f"not count: {why}",
    )


def _input_tokens(count: int) -> bytes:
    """The client's answer: Anthropic's ``{"input_tokens": N}``."""
    return b'{"input_tokens":%d}' % count
