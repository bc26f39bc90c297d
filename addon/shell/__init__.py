"""The mitmproxy shell: the only package (with ``addon/main.py``) that imports mitmproxy.

One small addon per feature; each hook asks ``addon.plan`` what to do and applies it, in hook
order (``addons.make_addons``): ``retry``, ``catalogue``, ``count_tokens``, ``fallback`` (with
``relay``), ``kiro_auth``, ``settings``, ``request``, ``stream_attach``, ``answers`` (with
``staged_retry``, ``loop_guard``), ``report`` (with ``answer_notes``; it ends each flow's
record), ``reasoning_store``, ``memory``. What the bridge holds for one flow: ``flows``.
Shared by purpose: ``notes`` (log lines, comments, metadata, redacted), ``options``,
``headers``, ``upstream_request``, ``host_filter``; ``contentview`` is mitmweb's view.
"""
