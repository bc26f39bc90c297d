"""cursor-bridge benchmarks: every figure is a ratio against a baseline measured in the same run.

    scripts/bench                  # everything (several minutes)
    scripts/bench --quick          # a reduced version of everything (under a minute, 2 cores)
    scripts/bench --no-proxy       # only section 1
    scripts/bench --json out.json  # also write the raw numbers
    scripts/bench --gateway        # only section 3: workers behind HAProxy (needs haproxy)
    scripts/bench --baseline main  # each route also as the commit main has it, side by side

Section 1, in process (best of N repetitions; ratio = bridge / baseline):

1. stream: ~1 MB of recorded OpenAI tool-call SSE, fed in random 1-64 byte chunks,
   through the full ``StreamProcessor`` (decode → unified events → encode) vs the
   baseline of only splitting the same bytes into SSE lines.
2. text protocol: ~1 MB of SSE whose text carries thinking tags and ``invoke`` calls,
   through the processor with the text-protocol parser, vs the same line-split baseline.
3. request: a ~1 MB Cursor-style body (flat tools, tool_use / tool_result history)
   through decode → transforms → encode vs the baseline ``json.loads`` + ``json.dumps``.

Section 2, real processes on 127.0.0.1 (ratio = bridge column / bare mitmdump column):

- a scripted upstream (a child process, asyncio) that answers every POST like an
  OpenAI chat-completions server: ``x-bench-events: N`` chat.completion.chunk events,
  each with ``@s=SEQ,t=MONOTONIC_NS;`` (its send time) in its text, unpaced or at
  ``x-bench-pace`` events/s, each event its own HTTP chunk as OpenAI and Anthropic send
  them (``x-bench-per-chunk`` asks for bursts); a non-streamed answer carries ``@r=NS;``, when the whole
  request body had arrived. With an ``invoke`` trigger in the request it ends the
  stream with a call in that protocol.
- proxies, each a mitmdump in reverse mode before it: bare mitmdump (no addon,
  ``stream_large_bodies=1`` so that it streams), a second bare mitmdump measured like the
  others (its ratio to the first is what the machine's noise alone does to a ratio), then
  the bridge on each route: OpenAI →
  OpenAI (a Cursor-style chat request with tools), Anthropic → OpenAI (Claude Code's
  ``/v1/messages``), the ``invoke`` text protocol (a second bridge with
  ``bridge_tool_mode=invoke``), Gemini → OpenAI and Responses → OpenAI. One process per
  column, so CPU and memory are each route's own; every child runs with one hash seed.
- a load generator (this process, asyncio, raw HTTP/1.1) that finds the stamps in what
  reaches the client in each dialect: events/s, added delay (arrival - upstream send
  time, both ``CLOCK_MONOTONIC``), lost and reordered events. CPU of the proxy and the
  upstream comes from ``/proc/PID/stat``, the load generator's from ``getrusage``;
  memory is ``VmRSS``.

Measurements: unpaced streams (1, 10, 50 at once; the client reads each connection at
most every ``LAZY_READ_S``, so that its own system calls leave the CPU to the proxy; a
full run adds 10 streams of 16-event chunks), in short windows with bare mitmdump measured
between every two windows of the other columns, each ratio taken against the bare windows
either side of it (``unpaced_paired``: the machine's changes of speed cancel out); paced
streams (100 events/s each, K at once, starts spread over the first second; after the
grid of K, halfway between each column's last K within the bound and its first past it);
1 MB and 10 MB request bodies (time until the upstream has the whole body, p50); RSS
after many small non-streamed requests. ``--quick`` shortens all of it. Ratios (not seconds) are what to compare
across machines; on a 2-core machine the proxy, the upstream and the load generator
share the cores, which is why their CPU is shown next to each other.

Section 3 (``--gateway``, on its own): the bridge's workers behind HAProxy as
``scripts/gateway`` runs them, against bare mitmdump, HAProxy in front of bare mitmdump and one
bridge worker alone, with the same upstream and load generator (``benchlib.gateway_section``).
"""
