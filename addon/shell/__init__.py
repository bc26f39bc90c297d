"""The mitmproxy shell: the only package (with ``addon/main.py``) that imports mitmproxy.

One small addon per feature; each hook asks ``addon.plan`` what to do and applies it. In
hook order (``addons.make_addons``): ``retry``, ``catalogue``, ``count_tokens``,
``kiro_auth``, ``settings``, ``request``, ``stream_attach``, ``answers`` (with
``staged_retry`` and ``loop_guard``), ``report`` (with ``answer_notes``),
``reasoning_store``, ``memory``. A routed flow's state is its ``runs.FlowRun`` (the frozen
plan, the ``AnswerState``, the report). What they share, by what it is for: ``notes`` (log
lines, comments, metadata, redacted), ``options`` (options, the environment, bad values),
``headers``, ``upstream_request`` (a decision set on the flow's request), ``host_filter``
(``allow_hosts`` / ``ignore_hosts``); ``contentview`` is mitmweb's view.
docs/architecture.md has a line on each.
"""
