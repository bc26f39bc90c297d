"""A streaming client's web search, live (issue 44 point 1; docs/tools.md#web-search): the relay's
leg relays the upstream's stream as it comes and hears it as it passes
(``addon.stream.second_call.Heard``); when the model called the bridge's search tool, at the
body's end the searches run (``Searches``), ONE marker event carrying them under the flow's
nonce goes on the body, and the next upstream call — the request with the results fed back
(``addon.plan.web_search.fed_back``), streamed — is relayed on the same body, up to
``MAX_ROUNDS`` calls. The stream processor (``addon.stream.second_call.SearchCalls``) makes one
answer of it for the client. A next call that fails ends the body as cut
(``search_call_failed``): the client's stream ends with its dialect's error event."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mitmproxy import http

from addon.dialects.searches import Searched
from addon.plan import FlowPlan
from addon.plan.fallback import NoAnswer
from addon.plan.web_search import Round, Search, fed_back, searches_again
from addon.shell.notes import log
from addon.shell.outbound.relay import BodyCut, Relayed
from addon.shell.outbound.retry import Retry
from addon.shell.outbound.searxng import Searches
from addon.stream.decompress import make_decompressor
from addon.stream.second_call import Heard, marker

if TYPE_CHECKING:
    from addon.shell.flows import Attempt
    from addon.shell.outbound.http1 import Opened

type Streamed = Callable[[Opened], Relayed]
"""An answer opened, as the leg relays any (``attempts._streamed``)."""

FAILED = "search_call_failed"
"""The cut's cause when the call with the searches' results fails (``cut_message``)."""


def live(plan: FlowPlan, status: int, headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether an answer's body is relayed with its searches run live: a plan whose search
    runs live, a 2xx event stream."""
    search = plan.search
    if search is None or not search.live or not 200 <= status < 300:
        return False
    ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"")
    return ctype.lower().startswith(b"text/event-stream")


@dataclass(slots=True)
class _Current:
    """The upstream answer whose body is relayed now: let go once its body ended, or when the
    relay is done (once: a connection kept alive goes back to its pool once)."""

    answer: Relayed
    closed: Relayed | None = None

    async def close(self) -> None:
        if self.closed is not self.answer:
            self.closed = self.answer
            await self.answer.close()


class SearchLeg:
    """Runs a live search flow's rounds on the relay's leg."""

    def __init__(self, retry: Retry, searches: Searches) -> None:
        self.retry = retry
        self.searches = searches

    def relayed(
        self,
        flow: http.HTTPFlow,
        attempt: Attempt,
        first: Relayed,
        timeout: float,
        streamed: Streamed,
    ) -> Relayed:
        """``first``, the answer to ``attempt``; a plan whose search runs live: relayed with
        its rounds — the body decoded (no ``Content-Encoding``), one chunk per upstream read,
        the next calls' after their markers (each sent within ``timeout``)."""
        if not live(attempt.plan, first.status, first.headers):
            return first
        current = _Current(first)
        body = self._rounds(flow, attempt, current, timeout, streamed)
        headers = [(k, v) for k, v in first.headers if k.lower() != b"content-encoding"]
        return Relayed(first.status, first.reason, headers, body, current.close, None, first.cut)

    async def _rounds(
        self,
        flow: http.HTTPFlow,
        attempt: Attempt,
        current: _Current,
        timeout: float,
        streamed: Streamed,
    ) -> AsyncIterator[bytes]:
        plan = attempt.plan
        search = plan.search
        assert search is not None and plan.unified is not None and plan.encode_stage is not None
        rounds: list[Round] = []
        while True:
            heard = Heard(plan.upstream.stream_decoder(), plan.upstream.name)
            async for piece in _decoded(current.answer):
                heard.feed(piece)
                yield piece
            await current.close()
            answer = heard.answer()
            if answer is None or not searches_again(search, answer, rounds):
                return
            step: Search[None, None] = Search.of(search, answer, rounds, None, None)
            found: list[Searched] = []
            for call, run in zip(step.calls, step.runs, strict=True):
                if isinstance(run, str):
                    run = await self.searches.run(plan.label, search, call.id, run, plan.secrets)
                found.append(run)
            rounds.append(Round(answer, tuple(found)))
            yield marker(search.nonce, found)
            sent = attempt.request.copy()
            sent.content = plan.encode_stage(fed_back(plan.unified, rounds))
            got = await self.retry.open(flow, sent, timeout)
            if isinstance(got, NoAnswer):
                why = got.detail or got.reason.value
                log.warning("%s: web search: the call with the results failed: %s", plan.label, why)
                raise BodyCut(FAILED)
            current.answer = streamed(got)
            if not live(plan, got.status_code, current.answer.headers):
                log.warning(
                    "%s: web search: the call with the results got HTTP %d",
                    plan.label,
                    got.status_code,
                )
                raise BodyCut(FAILED)


async def _decoded(answer: Relayed) -> AsyncIterator[bytes]:
    """The body's pieces without their ``Content-Encoding`` (the bridge asks for none)."""
    coding = next((v for k, v in answer.headers if k.lower() == b"content-encoding"), None)
    undo = make_decompressor(coding.decode("latin-1") if coding else None)
    async for piece in answer.body:
        yield undo.feed(piece) if undo is not None else piece
    if undo is not None:
        yield undo.finish()
