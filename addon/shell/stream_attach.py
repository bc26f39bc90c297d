"""The stream attach addon: a 2xx streamed answer gets the plan's ``StreamProcessor``
behind ``flow.response.stream``; a routed answer the bridge cannot rewrite still streams.

The one failure policy of a stream (``stream_callable``): a bug of ours never eats the
user's stream. The same dialect passes the rest through raw; another dialect ends the
client's stream with an error in its own dialect. One log line says which."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from mitmproxy import http

from addon.plan import short
from addon.plan.answer import Attach, attach_kind, error_stream, stream_headers, stream_processor
from addon.report.counters import KeptBytes
from addon.report.outcome import Action, FlowReport
from addon.shell.flows import KEEP_STREAM_BYTES, FlowRun
from addon.shell.headers import replace_headers
from addon.shell.notes import META_KEY, log, log_internal_error
from addon.shell.reporter import Report, stores_streamed_bodies
from addon.stream.decompress import UnsupportedEncoding
from addon.stream.processor import StreamProcessor


class StreamAttach:
    name = "cursor_bridge_stream"

    def __init__(self, report: Report, loop_retry: bool) -> None:
        self.report = report
        self.flows = report.flows
        self._loop_retry = loop_retry
        """A retry addon is there: a stream the loop guard may ask again is read whole."""

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        started = time.perf_counter_ns()
        run = self.flows.run(flow.id)
        try:
            self._attach(flow, run)
        except Exception as e:
            plan = run.plan if run is not None else None
            log_internal_error(plan.label if plan else "cursor-bridge", e)
            self.report.not_rewritten(run, f"internal error ({type(e).__name__})")
            if flow.response is not None and (plan is None or plan.same_dialect):
                # Same dialect: the answer is passed on as it comes (a stream still streams).
                if run is not None:
                    run.plan = None
                if (
                    flow.response.headers.get("content-type", "")
                    .lower()
                    .startswith("text/event-stream")
                ):
                    flow.response.stream = True
            # Another dialect: buffered; ``response`` turns it into the client's dialect or
            # into an error in it.
        if run is not None:
            run.report.spent_ns += time.perf_counter_ns() - started

    def _attach(self, flow: http.HTTPFlow, run: FlowRun | None) -> None:
        """What the plan says of the answer's head (``attach_kind``), applied: the flow's
        plain values read once and handed on (the flow itself goes nowhere), in one pass:
        the plan's decisions, then the headers, then the stream's reader."""
        plan = run.plan if run is not None else None
        resp = flow.response
        if resp is None:
            return
        meta = flow.metadata.get(META_KEY)
        passed = isinstance(meta, dict) and meta.get("action") == Action.PASSTHROUGH
        status, ctype = resp.status_code, resp.headers.get("content-type", "")
        encoding = resp.headers.get("content-encoding")
        http1 = flow.request.http_version.startswith("HTTP/1")
        record = self.flows.get(flow.id)
        cut = (lambda: record.cut) if record is not None else None
        kind = attach_kind(plan, status, ctype, passed=passed, loop_retry=self._loop_retry)
        if kind is Attach.RAW:
            resp.stream = True  # passed on untouched: it still streams, never buffered
            return
        if kind is Attach.ERROR_STREAM and plan is not None:
            resp.stream = error_stream(plan, cut)  # the client reads this error itself
            return
        if kind is not Attach.REWRITE or run is None or plan is None:
            return
        drop, put = stream_headers(plan, encoding, http1)
        keep = self.report.keep_originals
        try:
            processor = stream_processor(
                plan,
                run.answer,
                encoding,
                keep_original=KEEP_STREAM_BYTES if keep else 0,
                status=status,
                content_type=ctype or None,
            )
        except UnsupportedEncoding as e:
            log.warning("%s: stream passed through unchanged: %s", plan.label, short(e))
            run.report.comments.append(f"{plan.label}: stream not rewritten ({short(e)})")
            self.report.not_rewritten(run, f"stream not rewritten ({short(e)})")
            resp.stream = True  # still stream it: SSE must never be buffered
            run.plan = None
            return
        replace_headers(resp.headers, drop, put)
        read = stream_callable(processor, plan.label, run.report, cut=cut)
        if keep and not stores_streamed_bodies():
            # What the client gets, for the content view when mitmproxy keeps no streamed body.
            kept = run.client_bytes = KeptBytes(KEEP_STREAM_BYTES)
            read = keeping(read, kept)
        resp.stream = read


def keeping(
    read: Callable[[bytes], Sequence[bytes]], kept: KeptBytes
) -> Callable[[bytes], Sequence[bytes]]:
    """``read`` whose output is also kept in ``kept`` (the first bytes the client gets)."""

    def keep(data: bytes) -> Sequence[bytes]:
        out = read(data)
        if out and kept.whole:
            kept.extend(out)
        return out

    return keep


def stream_callable(
    processor: StreamProcessor,
    label: str,
    report: FlowReport | None = None,
    clock: Callable[[], int] = time.perf_counter_ns,
    cut: Callable[[], str | None] | None = None,
) -> Callable[[bytes], Sequence[bytes]]:
    """The ``flow.response.stream`` callable: ``b""`` ends the body, anything else is fed.

    It is the processor's reader (``StreamProcessor.reader``): the common read in one flat
    function, the others through ``general`` here, which keeps a failure of ours from eating
    the stream and logs why the processor gave up (once, at the first read after it did). The
    time reads take goes to the flow's report, sampled after a stream's first reads. At the
    body's end, ``cut`` names how the upstream broke it off, if it did (the relay ended the
    body cleanly): the processor's ``upstream_cut`` writes the client's ending."""
    reported = False
    feed = processor.feed_general

    def finish() -> list[bytes]:
        cause = cut() if cut is not None else None
        return processor.upstream_cut(cause) if cause else processor.finish()

    def general(data: bytes) -> list[bytes]:
        nonlocal reported
        out: list[bytes]
        try:
            out = feed(data) if data else finish()
        except Exception as e:
            out = failed(data, e)
        if processor.error and not reported:
            reported = True
            if processor.cut:  # the flow's line names the cut (``Report.close``)
                return out
            how = (
                "stream passed through from here on"
                if processor.passthrough
                else "stream ended with an error for the client"
            )
            log.warning("%s: %s: %s", label, how, short(processor.error))
        return out

    def spent(ns: int) -> None:
        assert report is not None
        report.spent_ns += ns

    def failed(data: bytes, e: Exception) -> list[bytes]:
        """A bug in the processor itself: never eat the user's stream, never hand a client
        another dialect's bytes. One log line says so."""
        nonlocal reported
        reported = True
        same = processor.same_dialect
        log.error(
            "%s: stream rewrite failed (%s: %s); %s",
            label,
            type(e).__name__,
            short(e),
            "passing the rest through" if same else "ending the client's stream with an error",
        )
        try:
            out = processor.abort(f"internal error {type(e).__name__}")
        except Exception:  # nothing more can be done for this stream
            out = []
        if processor.passthrough:
            # The failed chunk as the client can read it (decompressed: the answer's
            # content-encoding header is gone).
            chunk = processor.last_chunk if data else b""
            return [chunk] if chunk else []
        return out

    return processor.reader(general, clock, spent if report is not None else None, failed)
