"""The loop guard's second request (``bridge_loop_fallback``): an answer that repeats a call the
history shows failing is asked again with the tools as ``invoke`` text (``addon.plan.answer``),
through ``Retry``; that answer, judged again, is the client's, else the first with the call
replaced by the guard's message. Asked again, not only replaced, so that the client still gets
the model's next step.
"""

from __future__ import annotations

from mitmproxy import http

from addon.model import UnsupportedShape
from addon.plan import FlowPlan, short
from addon.plan.answer import ask_again, client_answer
from addon.shell.flows import FlowRun
from addon.shell.notes import append_comment, log
from addon.shell.outbound.retry import Retry


async def second_answer(
    retry: Retry, flow: http.HTTPFlow, run: FlowRun, plan: FlowPlan
) -> tuple[bytes, str, bytes] | None:
    """``(client body, its content type, the upstream's answer)`` of the second request, or
    None: the first answer stands. Once asked, ``run.plan`` is the plan of the second
    request (the invoke protocol's)."""
    asked = ask_again(plan, run.answer)
    if asked is None:
        log.warning("%s: loop guard: the invoke request could not be written", plan.label)
        append_comment(flow, "loop guard: could not ask again (invoke request not written)")
        return None
    plan, body = asked
    run.plan = plan
    answer = await retry.send(flow, plan.label, body)
    if answer is None:
        return None
    if not 200 <= answer.status < 300:
        log.warning("%s: loop guard: asked again, got HTTP %d", plan.label, answer.status)
        append_comment(flow, f"loop guard: asked again, got HTTP {answer.status}")
        return None
    try:
        client, ctype = client_answer(plan, run.answer, answer.content, answer.content_type)
    except (ValueError, UnsupportedShape, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else short(e)
        log.warning("%s: loop guard: the second answer could not be read: %s", plan.label, why)
        append_comment(flow, f"loop guard: the second answer could not be read ({why})")
        return None
    append_comment(flow, "loop guard: asked again with the invoke text protocol → answered")
    return client, ctype, answer.content
