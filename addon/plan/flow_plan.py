"""``FlowPlan``: what ``decide`` settled for one flow, frozen. The answer side reads it
(``addon.plan.answer``, ``addon.plan.errors``) together with the flow's own changing
state (``AnswerState``); nothing here changes once ``decide`` has returned."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from addon.config.routes import Route
from addon.dialects import Dialect
from addon.dialects.base import Framing
from addon.model import NO_DEFAULTS, AnswerDefaults, Notes, Request
from addon.plan.web_search import WebSearch
from addon.redact import Secrets
from addon.report.outcome import Action
from addon.stores.reasoning import ScopedView, StoreView
from addon.stream.processor import MAX_EVENT_BYTES
from addon.textproto.parser import TextProtocol, TextProtocolParser
from addon.transforms.loop_guard import LoopVerdict
from addon.transforms.repair import ToolSchemas, parse_arguments


@dataclass(frozen=True, slots=True)
class FlowPlan:
    """What ``decide`` settled for one flow; kept until its answer has been rewritten."""

    route: Route
    client: Dialect
    upstream: Dialect
    request_notes: Notes = field(default_factory=Counter)
    """What rewriting the request did (the flow's comment): what the answer adds to the
    flow's notes (``AnswerState.notes``) is the rest."""
    protocol: TextProtocol | None = None
    trigger: str | None = None
    tools: tuple[str, ...] = ()
    parse_text: bool = False
    """Parse the answer's text for tool calls and/or thinking tags."""
    tool_required: bool = False
    hide_thinking: bool = False
    stream: bool = False
    """The client asked for a stream."""
    custom_tools: frozenset[str] = frozenset()
    """Custom (freeform) tools carried as function tools: their calls are unwrapped."""
    upstream_framing: Framing = "sse"
    """How the upstream frames its stream (from the upstream request's query)."""
    client_framing: Framing = "sse"
    """How the client wants its stream framed (from the client's query)."""
    schemas: ToolSchemas = field(default_factory=ToolSchemas)
    """The request's own tool schemas, for argument repair (empty: no repair)."""
    loop: LoopVerdict | None = None
    """The loop guard's finding on this request's history: the answer's calls are judged
    against it (the history's fingerprint and run, as plain values)."""
    loop_fallback: bool = False
    """``bridge_loop_fallback`` on a native route with a verdict: an answer that repeats the
    call is asked again with the invoke text protocol (``answer.ask_again``)."""
    encode_invoke: Callable[[FlowPlan, Notes], tuple[FlowPlan, bytes]] | None = None
    """The loop guard's second request (the invoke protocol), made from this plan: the plan
    that reads its answer and the upstream body; what it does is noted in the notes given."""
    max_event_bytes: int = MAX_EVENT_BYTES
    """The bound of what a stream's rewrite holds (``bridge_max_event_bytes``)."""
    fast_path: bool = True
    """The stream's fast path (``bridge_fast_path``): off, every event goes the general way."""
    host: str = ""
    """The upstream host (part of the reasoning store's scope)."""
    store: StoreView | None = None
    """The process-wide reasoning store (None: off)."""
    sink: ScopedView | None = None
    """The store's view for this flow's scope (upstream, model as sent): restore reads it,
    capture writes it."""
    unified: Request | None = None
    """The unified request as it was encoded for the upstream: the staged retry's start."""
    encode_stage: Callable[[Request], bytes] | None = None
    """Encodes a staged retry's request exactly as the first one was (dialect, path, key)."""
    profile_arn: str | None = None
    """A ``profileArn`` the shell read for a Kiro route (its token file's), when the route
    names none."""
    defaults: AnswerDefaults = NO_DEFAULTS
    """The model the client asked for and when: what its answer says where the upstream's
    says nothing (Kiro sends neither), streamed or whole."""
    rename_answer: bool = False
    """The route's ``model_map`` sent another model's name: the answer names the client's
    (``defaults.model``) instead of the upstream's, streamed or whole."""
    history_ids: frozenset[str] = frozenset()
    """The call ids the client's conversation holds (its calls' and results'): an answer's
    call under one of them reaches the client renamed (``addon.transforms.call_ids``)."""
    client_name: str = ""
    """The name of the client key (``bridge_client_keys``) the request carried; empty when
    none is asked for or none matched: the usage ledger's client label."""
    search: WebSearch | None = None
    """The client's web search tool runs on the bridge (``addon.plan.web_search``): the model
    got a ``web_search`` function tool instead, and its answers are read for calls of it (whole,
or live on the relay's leg: ``WebSearch.live``)."""
    secrets: Secrets = field(default_factory=Secrets, repr=False)
    """The flow's exact credential values: redacted from the error bodies the bridge writes
    (never in ``meta``)."""

    def __post_init__(self) -> None:
        # The client key's name reaches the plan after ``decide`` (every ``replace`` that
        # sets it comes through here): the web search's runner reads it from ``search``.
        search = self.search
        if search is not None and search.client != self.client_name:
            object.__setattr__(self, "search", replace(search, client=self.client_name))

    @property
    def label(self) -> str:
        return f"cursor-bridge [{self.route.name}]"

    @property
    def drops_late_signatures(self) -> bool:
        """A signature-only reasoning part after the answer's content is left out: the
        upstream may send one (``Dialect.late_signatures``) to a client of another dialect."""
        return self.upstream.late_signatures and not self.same_dialect

    @property
    def same_dialect(self) -> bool:
        return self.client.name == self.upstream.name

    @property
    def upstream_streams(self) -> bool:
        """The upstream was asked for a stream: the client asked for one, and any web search
        the bridge runs for it runs live (``WebSearch.live``; else it asks for whole answers,
        ``offer_search``; on Gemini the whole ``generateContent`` answer is JSON, not a
        stream's JSON array)."""
        return self.stream and (self.search is None or self.search.live)

    @property
    def loop_held(self) -> bool:
        """A stream the shell reads whole before the client gets it: the loop guard may ask
        again (``loop_fallback``), and a stream cannot wait for a second request."""
        return self.stream and self.loop_fallback

    def new_parser(self) -> TextProtocolParser:
        """A text-protocol parser for this flow's answer (one per answer read)."""
        return TextProtocolParser(
            self.protocol,
            trigger=self.trigger,
            tools=self.tools,
            readable=_readable_object if self.schemas else None,
            max_call=self.max_event_bytes,
        )

    def meta(self) -> dict[str, Any]:
        """Plain data for ``flow.metadata`` (never a header, never a key)."""
        out: dict[str, Any] = {
            "route": self.route.name,
            "action": Action.REWRITTEN.value,
            "client": self.client.name,
            "upstream": self.upstream.name,
            "stream": self.stream,
            "changes": dict(self.request_notes),
        }
        if self.route.upstream_url is not None:
            out["upstream_url"] = self.route.upstream_url
        if self.protocol:
            out["tool_protocol"] = self.protocol
            if self.trigger:
                out["trigger"] = self.trigger
        return out


def _readable_object(arguments: str) -> bool:
    """Text-protocol arguments that argument repair can read as an object."""
    return isinstance(parse_arguments(arguments).value, dict)
