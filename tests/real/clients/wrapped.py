"""Kiro and Gemini Code Assist as the upstream of a real client's tool loop (``ToolLoop``).

``KiroLoop`` stands in for ``generateAssistantResponse``: a Bearer token, Kiro's refusals
(``tests.kiro_rules``: answered ``400 Improperly formed request``, as Kiro does) and answers
in AWS event-stream frames (``tests.eventstream_frames``), always: Kiro has no whole answer.
``CodeAssistLoop`` stands in for ``/v1internal:streamGenerateContent?alt=sse`` and
``:generateContent``: a Bearer token, the body wrapped with the route's project, Gemini's
own checks on the inner request, answers wrapped as ``{"response": …, "traceId": …}``
(``../shared/fixtures/real/gemini-codeassist-v1internal-stream-log-response-wrapper…``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests import eventstream_frames as ef
from tests.e2e.harness import JSONReply, Recorded, Reply, SSEReply, sse_from_payloads
from tests.kiro_rules import IMPROPER, kiro_refusal
from tests.real.clients.loop import (
    UPSTREAMS,
    Call,
    Round,
    ToolLoop,
    check_request,
    gemini_chunk,
    tool_results,
)

KIRO_ARN = "arn:aws:codewhisperer:us-east-1:123456789012:profile/REALCLIENTS"
PROJECT = "real-clients-project"


def _bearer(rec: Recorded) -> bool:
    value = rec.headers.get("authorization") or ""
    return value.startswith("Bearer ") and len(value) > len("Bearer ")


@dataclass
class KiroLoop(ToolLoop):
    route_extra: ClassVar[str] = f'profile_arn = "{KIRO_ARN}"\n'
    refusals: list[str] = field(default_factory=list)
    """Why requests were refused (``kiro_refusal``)."""

    def refusal(self, rec: Recorded) -> Reply | None:
        assert rec.path == "/generateAssistantResponse", rec.path
        assert _bearer(rec), "Kiro: no Bearer token"
        assert "x-api-key" not in rec.headers
        body = rec.json()
        assert body.get("profileArn") == KIRO_ARN, body.get("profileArn")
        why = kiro_refusal(body)
        if why is None:
            return None
        self.refusals.append(why)
        return JSONReply(IMPROPER, status=400)

    def streamed(self, rec: Recorded, body: Any) -> bool:
        return True  # Kiro always streams; the bridge reads it whole for a whole client

    def tool_names(self, body: Any) -> set[Any]:
        current = body["conversationState"]["currentMessage"]["userInputMessage"]
        tools = (current.get("userInputMessageContext") or {}).get("tools") or ()
        return {t["toolSpecification"]["name"] for t in tools}

    def reply(self, stream: bool, text: str | None, calls: Sequence[Call]) -> Reply:
        events = [("messageMetadataEvent", {"conversationId": "c", "utteranceId": "u"})]
        events += ef.text_events(text, 3) if text else []
        for call in calls:
            events += ef.tool_events(call.id, call.name, json.dumps(call.arguments), 3)
        frames = ef.stream([*events, *ef.usage_events()])
        return SSEReply(
            frames, chunk_min=1, chunk_max=23, seed=len(self.turns), headers=_KIRO_HEADERS
        )

    def results(self, rec: Recorded) -> list[tuple[str, str]]:
        state = rec.json()["conversationState"]
        out = []
        for entry in [*(state.get("history") or ()), state["currentMessage"]]:
            context = (entry.get("userInputMessage") or {}).get("userInputMessageContext") or {}
            for result in context.get("toolResults") or ():
                out.append((result["toolUseId"], json.dumps(result.get("content"))))
        return out

    def result_id(self, call: Call) -> str:
        return call.id


_KIRO_HEADERS = {"content-type": ef.CONTENT_TYPE}
_CODE_ASSIST_PATH = re.compile(r"/v1internal:(streamGenerateContent\?alt=sse|generateContent)")


class CodeAssistLoop(ToolLoop):
    route_extra: ClassVar[str] = f'project = "{PROJECT}"\n'

    def refusal(self, rec: Recorded) -> Reply | None:
        assert _CODE_ASSIST_PATH.fullmatch(rec.path), rec.path
        assert _bearer(rec), "Code Assist: no Bearer token"
        assert "x-goog-api-key" not in rec.headers and "x-api-key" not in rec.headers
        envelope = rec.json()
        assert envelope.get("project") == PROJECT, (
            f"Code Assist: project {envelope.get('project')!r}"
        )
        assert isinstance(envelope.get("model"), str), envelope.get("model")
        check_request("gemini", envelope["request"])
        return None

    def body(self, rec: Recorded) -> Any:
        return rec.json()["request"]

    def streamed(self, rec: Recorded, body: Any) -> bool:
        return ":streamGenerateContent" in rec.path

    def reply(self, stream: bool, text: str | None, calls: Sequence[Call]) -> Reply:
        wrapped = {"response": gemini_chunk(text, calls), "traceId": "real-clients-trace"}
        return SSEReply(sse_from_payloads([wrapped])) if stream else JSONReply(wrapped)

    def results(self, rec: Recorded) -> list[tuple[str, str]]:
        return tool_results("gemini", self.body(rec))

    def result_id(self, call: Call) -> str:
        return call.name


WRAPPED: dict[str, type[ToolLoop]] = {"kiro": KiroLoop, "gemini_code_assist": CodeAssistLoop}
"""The loop for each upstream the clients reach only through the bridge."""

WHOLE_UPSTREAMS = [*UPSTREAMS, "gemini_code_assist"]
"""The upstreams that can answer whole (Kiro always answers in event-stream frames)."""


def loop_for(
    upstream: str, rounds: Sequence[Round], *, whole: bool = False, cut_streams: bool = False
) -> ToolLoop:
    """The loop of ``upstream``: a ``ToolLoop``, or its Kiro or Code Assist subclass."""
    return WRAPPED.get(upstream, ToolLoop)(upstream, rounds, whole=whole, cut_streams=cut_streams)
