"""Web search the bridge runs for the model (issue 44 point 1; docs/tools.md#web-search),
decided with plain values: which client tool becomes the model's ``web_search`` function tool
(``offer_search``), what a backend is asked and what its answer gives (``searxng_request``,
``read_searxng``: SearXNG's Search API), which searches of an answer run (``to_run``), the
request that feeds their results back to the model (``fed_back``), and the client's answer
with the searches in its own dialect's shape (``shown``). The shell runs the searches
(``addon.shell.outbound.searxng``) and sends the second request (a whole answer:
``addon.shell.whole_answers``; a stream, live: ``addon.shell.outbound.search_leg``); nothing
here logs or makes a call."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from addon.config.search_backend import SearchBackend
from addon.dialects import Dialect
from addon.dialects.searches import SEARCH_TOOL, Found, SearchAsk, Searched, SearchShape, summed
from addon.model import (
    JSON,
    Message,
    Notes,
    Opaque,
    OpaqueTool,
    Request,
    Response,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    new_nonce,
)
from addon.plan.values import load_json, short

MAX_SEARCHES = 5
"""Searches in one answer when the client's tool names no ``max_uses``: a model that keeps
searching gets ``max_uses_exceeded`` after these, and answers with what it found."""

MAX_URL, MAX_TITLE, MAX_SNIPPET = 2048, 300, 2000
"""A result's URL longer than this is left out; its title and snippet are cut to these (a
backend's 10 MB snippet never reaches the model or the client)."""

MAX_ROUNDS = 6
"""Upstream calls one answer makes at most (the first included): each round's searches are
fed back in the next; the last round's answer is the client's whatever it asks."""

_TOOL = Tool(
    SEARCH_TOOL,
    "Search the web. Returns the title, URL and a snippet of each result; cite the URLs you use.",
    {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "The search query."}},
        "required": ["query"],
    },
)


@dataclass(frozen=True, slots=True)
class WebSearch:
    """A flow whose client's search tool the bridge runs (``FlowPlan.search``)."""

    ask: SearchAsk
    backend: SearchBackend
    client: str = ""
    """The client key's name of the flow (``FlowPlan.client_name``): whose limits each search
    counts against (docs/deploy.md#limits-per-client-key)."""
    live: bool = False
    """The client streams and so does the upstream: the relay's leg runs the searches between
    streamed calls and the client's stream goes on live (``addon.stream.second_call``); else
    the upstream is asked for whole answers and the client's stream is written at the end."""
    nonce: str = ""
    """The flow's own: the leg's marker carries it, the stream processor shows no other."""

    @property
    def max_uses(self) -> int:
        return self.ask.max_uses if self.ask.max_uses is not None else MAX_SEARCHES


def offer_search(
    req: Request,
    client: Dialect,
    upstream: Dialect,
    backend: SearchBackend | None,
    notes: Notes,
) -> tuple[Request, WebSearch | None]:
    """The client's search tool replaced by the ``web_search`` function tool, in its place
    (the prompt's bytes stay the same turn after turn), when the upstream cannot run it and the
    route names a backend; without a backend the tool is left out as any tool the upstream
    cannot run, said once in the comment."""
    shape = client.web_search
    if shape is None or not req.tools:
        return req, None
    found = [
        (i, t, ask)
        for i, t in enumerate(req.tools)
        if isinstance(t, OpaqueTool) and not upstream.runs(t) and (ask := shape.ask(t))
    ]
    if not found:
        return req, None
    i, tool, ask = found[0]
    if backend is None:
        notes["web search: no search backend on this route (search = {url = …})"] += 1
        return req, None
    tools = list(req.tools)
    tools[i] = dataclasses.replace(_TOOL, name=ask.name) if ask.name != SEARCH_TOOL else _TOOL
    notes[f"web search: {ask.name} ({tool.type}) run by the bridge ({backend.kind})"] += 1
    # A streaming client's upstream streams too: the relay's leg runs the searches between
    # streamed calls (``live``); a whole answer's calls are whole (docs/tools.md#web-search).
    searched = dataclasses.replace(
        req,
        messages=_without_items(req.messages, client.name, shape.items, notes),
        tools=tuple(tools),
        tool_choice=_forced(req.tool_choice, ask.name, tools),
        stream=req.stream,
        stream_explicit=True,
    )
    nonce = new_nonce() if req.stream else ""
    return searched, WebSearch(ask, backend, live=req.stream, nonce=nonce)


def _forced(
    choice: ToolChoice | None, name: str, tools: Sequence[Tool | OpaqueTool]
) -> ToolChoice | None:
    """A choice naming the search tool where it is the only tool (Claude Code's WebSearch
    request) as ``required``: the same by OpenAI's and Gemini's definitions, and llama-server
    reads ``tool_choice`` only as a string — a named choice object it takes as ``auto`` (its log:
    "Wrong type supplied for parameter 'tool_choice', using default value")."""
    if choice is not None and choice.mode == "tool" and choice.name == name and len(tools) == 1:
        return dataclasses.replace(choice, mode="required", name=None)
    return choice


def _without_items(
    messages: tuple[Message, ...], client: str, items: frozenset[str], notes: Notes
) -> tuple[Message, ...]:
    """The conversation without the search parts the client sent back from earlier answers
    (the upstream cannot read them; the model's own words about the results stay); a message
    left with no part is left out."""
    out: list[Message] = []
    dropped = 0
    for m in messages:
        parts = tuple(
            p
            for p in m.parts
            if not (isinstance(p, Opaque) and p.origin == client and p.data.get("type") in items)
        )
        dropped += len(m.parts) - len(parts)
        if parts or not m.parts:
            out.append(m if len(parts) == len(m.parts) else dataclasses.replace(m, parts=parts))
    if dropped:
        notes[f"web search: {dropped} earlier search item(s) left out"] += 1
    return tuple(out) if dropped else messages


# ---------------------------------------------------------------------- the backend


def searxng_request(backend: SearchBackend, query: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The URL and query parameters of one search (SearXNG's ``GET /search``)."""
    return backend.endpoint, (("q", query), ("format", "json"))


def read_searxng(status: int, body: bytes, ask: SearchAsk, cap: int) -> tuple[Found, ...] | str:
    """A SearXNG answer: its results kept by the client's domain rules, at most ``cap``; a
    refusal or an unreadable body: why, for the log (the model is told ``unavailable``)."""
    if status == 403:
        return "HTTP 403: the instance does not serve format=json (search.formats in settings.yml)"
    if status != 200:
        return f"HTTP {status}: {short(body.decode('utf-8', 'replace'))}"
    try:
        data = load_json(body)
    except (ValueError, RecursionError) as e:
        return f"not JSON ({short(e)})"
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        return "no results list in the answer"
    out: list[Found] = []
    for r in results:
        if len(out) >= cap:
            break
        if not isinstance(r, dict):
            continue
        url, title, content = r.get("url"), r.get("title"), r.get("content")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            continue
        if len(url) > MAX_URL:
            continue
        if not allowed(url, ask) or any(f.url == url for f in out):
            continue
        age = r.get("publishedDate")
        out.append(
            Found(
                url,
                _cut(title, MAX_TITLE) if isinstance(title, str) and title else url,
                _cut(content, MAX_SNIPPET) if isinstance(content, str) else "",
                _cut(age, 64) if isinstance(age, str) and age else None,
            )
        )
    return tuple(out)


def _cut(text: str, most: int) -> str:
    """``text`` at most ``most`` characters, an ellipsis where it was cut."""
    return text if len(text) <= most else text[: most - 1] + "…"


def allowed(url: str, ask: SearchAsk) -> bool:
    """Whether a result's host is one ``allowed_domains`` takes and none it ``blocked_domains``
    names (a domain takes its subdomains)."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")

    def under(domains: tuple[str, ...]) -> bool:
        return any(host == d or host.endswith("." + d) for d in _domains(domains))

    if ask.allowed_domains and not under(ask.allowed_domains):
        return False
    return not under(ask.blocked_domains)


def _domains(domains: tuple[str, ...]) -> list[str]:
    """``https://Example.com/path`` → ``example.com``: the host part of each rule."""
    out = []
    for d in domains:
        d = d.strip().lower()
        host = urlsplit(d if "//" in d else "//" + d).hostname or ""
        out.append(host.removeprefix("www.") if host.startswith("www.") else host)
    return [d for d in out if d]


# ---------------------------------------------------------------------- the answer


def search_calls(search: WebSearch, answer: Response) -> tuple[ToolCall, ...]:
    """The answer's calls of the search tool."""
    return tuple(p for p in answer.parts if isinstance(p, ToolCall) and p.name == search.ask.name)


def query_of(call: ToolCall) -> str | None:
    """The call's query; None when it has none (the model is told ``invalid_tool_input``)."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    query = args.get("query") if isinstance(args, dict) else None
    return query.strip() if isinstance(query, str) and query.strip() else None


def to_run(search: WebSearch, calls: Sequence[ToolCall], done: int) -> list[Searched | str]:
    """Each call: its query to run, or what the model is told instead (``done``: searches
    run before in this answer; past ``max_uses``: ``max_uses_exceeded``)."""
    out: list[Searched | str] = []
    ran = done
    for call in calls:
        query = query_of(call)
        if query is None:
            out.append(Searched(call.id, "", error="invalid_tool_input"))
        elif ran >= search.max_uses:
            out.append(Searched(call.id, query, error="max_uses_exceeded"))
        else:
            out.append(query)
            ran += 1
    return out


@dataclass(frozen=True, slots=True)
class Round:
    """One upstream answer that called the search tool, and what its searches gave."""

    answer: Response
    searched: Sequence[Searched]


def searches_run(rounds: Sequence[Round]) -> int:
    """The searches the backend was asked (not those the model was told it may not make)."""
    return sum(1 for r in rounds for s in r.searched if s.error is None)


@dataclass(frozen=True, slots=True)
class Search[T, A]:
    """A whole answer's step (``addon.plan.whole_steps``): run the model's web searches —
    apply ``told``, run each of ``runs`` that is a query (a ``Searched`` is settled already:
    past ``max_uses``, no query) — then read ``then`` with what they found."""

    told: T
    answer: Response
    """The answer that called the search tool."""
    calls: tuple[ToolCall, ...]
    runs: tuple[Searched | str, ...]
    then: A

    @classmethod
    def of(
        cls, search: WebSearch | None, answer: Response, rounds: Sequence[Round], told: T, then: A
    ) -> Search[T, A]:
        assert search is not None  # a plan that searches
        calls = search_calls(search, answer)
        runs = to_run(search, calls, searches_run(rounds))
        return cls(told, answer, calls, tuple(runs), then)


def fed_back(unified: Request, rounds: Sequence[Round]) -> Request:
    """The request that gives the model its searches' results: the first request, then per
    round the model's text and search calls and a tool result per call. A ``tool_choice``
    that forced the search (Claude Code's WebSearch request names it) held for the first
    call: from now on it is ``auto``, else the model would search until the rounds ran out."""
    messages = list(unified.messages)
    for r in rounds:
        said = tuple(p for p in r.answer.parts if isinstance(p, Text) and p.text)
        ids = {s.call_id for s in r.searched}
        calls = tuple(p for p in r.answer.parts if isinstance(p, ToolCall) and p.id in ids)
        messages.append(Message("assistant", said + calls))
        names = {c.id: c.name for c in calls}
        for s in r.searched:
            result = ToolResult(s.call_id, _result_text(s), names.get(s.call_id))
            messages.append(Message("tool", (result,)))
    choice = unified.tool_choice
    if choice is not None and _forces_search(choice, unified.tools or (), rounds):
        choice = ToolChoice("auto")
    return dataclasses.replace(unified, messages=tuple(messages), tool_choice=choice)


def _forces_search(
    choice: ToolChoice, tools: Sequence[Tool | OpaqueTool], rounds: Sequence[Round]
) -> bool:
    """Whether ``choice`` makes the model call the search tool: it names it, or asks for any
    tool call where the search tool is the only tool."""
    ids = {s.call_id for r in rounds for s in r.searched}
    searched = {
        p.name for r in rounds for p in r.answer.parts if isinstance(p, ToolCall) and p.id in ids
    }
    if choice.mode == "tool":
        return choice.name in searched
    return choice.mode == "required" and all(t.name in searched for t in tools)


def _result_text(s: Searched) -> str:
    if s.error is not None:
        return f"Search failed: {s.error}."
    if not s.results:
        return f"No results for {s.query!r}."
    rows: list[JSON] = [
        {
            "title": f.title,
            "url": f.url,
            "snippet": f.content,
            **({"age": f.page_age} if f.page_age else {}),
        }
        for f in s.results
    ]
    return json.dumps(rows, ensure_ascii=False)


def after(
    shape: SearchShape | None, search: WebSearch | None, answer: Response, rounds: Sequence[Round]
) -> Response | None:
    """None: the answer searches again (fewer than ``MAX_ROUNDS`` upstream calls so far); else
    the client's answer (``shown``)."""
    assert shape is not None and search is not None  # a plan that searches
    if searches_again(search, answer, rounds):
        return None
    return shown(shape, search, answer, rounds)


def searches_again(search: WebSearch, answer: Response, rounds: Sequence[Round]) -> bool:
    """The answer called the search tool and another upstream call may follow (fewer than
    ``MAX_ROUNDS`` so far): its searches run and their results are fed back."""
    return bool(search_calls(search, answer)) and len(rounds) + 1 < MAX_ROUNDS


def shown(
    shape: SearchShape, search: WebSearch, last: Response, rounds: Sequence[Round]
) -> Response:
    """The client's answer: the searches in its dialect's shape, then what the model said
    before them and its last answer (without any search it still asked for: the rounds ran
    out); the usage of every upstream call added up."""
    searched = [s for r in rounds for s in r.searched]
    before = [p for r in rounds for p in r.answer.parts if isinstance(p, Text) and p.text]
    left = search_calls(search, last)
    parts = tuple(p for p in last.parts if p not in left)
    finish = last.finish
    if left and not any(isinstance(p, ToolCall) for p in parts):
        finish = "stop"
    usage = summed([r.answer.usage for r in rounds] + [last.usage])
    answer = dataclasses.replace(
        last, parts=(*before, *parts), usage=usage, finish=finish, finish_raw=None
    )
    return shape.answer(answer, searched)
