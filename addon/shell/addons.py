"""The bridge's addons, wired together: what ``addon/main.py`` hands to mitmproxy."""

from __future__ import annotations

from dataclasses import dataclass

from addon.report.counters import BridgeState
from addon.shell.answer_redact import AnswerRedaction
from addon.shell.captions import Captions
from addon.shell.catalogue import ModelCatalogue
from addon.shell.client_key_gate import ClientKeysGate
from addon.shell.client_limits import ClientLimits
from addon.shell.flow_line import KeysOutOfFlowLine
from addon.shell.flows import Flows
from addon.shell.kiro_auth import KiroAuth
from addon.shell.ledger_book import UsageCounting
from addon.shell.memory import MemoryTrim
from addon.shell.metrics import Metrics
from addon.shell.outbound.attempts import Fallbacks
from addon.shell.outbound.captioner import Captioner
from addon.shell.outbound.retry import Retry
from addon.shell.outbound.searxng import Searches
from addon.shell.reasoning_store import ReasoningStoreLife
from addon.shell.reporter import Report
from addon.shell.rewrite import RewriteRequest
from addon.shell.settings import BridgeSettings
from addon.shell.store_worker import Prefetch
from addon.shell.stream_attach import StreamAttach
from addon.shell.token_count import CountTokens
from addon.shell.whole_answers import Answers


@dataclass(frozen=True, slots=True)
class Addons:
    state: BridgeState
    settings: BridgeSettings
    retry: Retry
    client_keys: ClientKeysGate
    limits: ClientLimits
    catalogue: ModelCatalogue
    count_tokens: CountTokens
    kiro: KiroAuth
    fallbacks: Fallbacks
    report: Report
    store: ReasoningStoreLife
    request: RewriteRequest
    stream: StreamAttach
    answers: Answers
    redaction: AnswerRedaction
    memory: MemoryTrim
    usage: UsageCounting
    flow_line: KeysOutOfFlowLine
    metrics: Metrics
    prefetch: Prefetch
    captions: Captions

    @property
    def all(self) -> list[object]:
        """In hook order (mitmproxy calls addons in list order): a request that would spend
        a key of the proxy's without a client key is answered before any other acts; a
        route's fallback chain picks the route, then the Kiro token file is read (``request``, async), before the
        request is rewritten; every key of the proxy's is redacted from an answer after all
        else has written it (``responseheaders``: the stream attached; ``response``: the answer
        re-encoded); the report closes a flow (``response``, ``error``) after that and ends
        its record (``Flows.end``: every addon's state for it),
        and says its ``done`` line before the store closes; the usage ledger opens after the
        store (a Redis ledger shares its connection); memory is handed back after the flow is
        over; a key leaves the flow's URL last of all, before mitmdump prints the flow (its
        ``Dumper`` comes after every script's addons). The metrics addon declares
        ``bridge_metrics`` before the settings addon checks the options given early; its
        first-token clock wraps a stream after the redaction did. A store that does I/O is
        read for the request (``prefetch``, async) before the fallbacks pick a route and the
        request is decided (docs/architecture.md#the-store-thread), and before a token count
        is answered (the calibrated estimate's ratios). A text-only route's images
        are captioned (``captions``, async) once the route is picked, before the rewrite."""
        return [
            self.retry,
            self.metrics,
            self.client_keys,
            self.limits,
            self.catalogue,
            self.prefetch,
            self.count_tokens,
            self.fallbacks,
            self.kiro,
            self.captions,
            self.settings,
            self.request,
            self.stream,
            self.answers,
            self.redaction,
            self.metrics.first_token_clock,
            self.report,
            self.store,
            self.usage,
            self.limits.settling,
            self.memory,
            self.flow_line,
        ]


def make_addons() -> Addons:
    state, settings, retry, flows = BridgeState(), BridgeSettings(), Retry(), Flows()
    kiro = KiroAuth(settings, flows=flows)
    store = ReasoningStoreLife()
    usage = UsageCounting(store)
    report = Report(state, flows, settings, usage)
    searches = Searches()
    fallbacks = Fallbacks(settings, report, retry, store, searches=searches)
    client_keys = ClientKeysGate(settings, report)
    metrics = usage.metrics = Metrics(
        state, settings, flows, lambda: store.shared_cooling(fallbacks.cooldowns)
    )
    limits = usage.limits = ClientLimits(
        lambda: client_keys.keys, report, store, metrics, routes=lambda: settings.settings.routes
    )
    prefetch = limits.prefetch = Prefetch(settings, store, flows)
    searches.gate = limits  # each search, whole or live, counts against the flow's client key
    return Addons(
        state,
        settings,
        retry,
        client_keys,
        limits,
        ModelCatalogue(settings, flows, retry),
        CountTokens(settings, state, flows, retry, usage.calibration),
        kiro,
        fallbacks,
        report,
        store,
        RewriteRequest(settings, store, report, kiro, fallbacks),
        StreamAttach(report, loop_retry=True),
        Answers(report, retry, searches),
        AnswerRedaction(settings, lambda: client_keys.keys, kiro.held_tokens),
        MemoryTrim(),
        usage,
        KeysOutOfFlowLine(),
        metrics,
        prefetch,
        Captions(settings, flows, Captioner(retry, store, usage), limits.captioned),
    )
