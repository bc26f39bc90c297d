"""The mitmproxy shell: the only package (with ``addon/main.py``) that imports mitmproxy.

One small addon per feature, as mitmproxy's own addons are split; each hook
asks the sans-IO layers what to do (``addon.plan``) and applies it. In hook order
(``addons.make_addons``; ``addon/main.py`` hands that list to mitmproxy): ``retry``,
``catalogue`` (``GET …/models``), ``count_tokens``, ``kiro_auth``, ``settings`` (the
options, read by the others), ``request`` (a routed chat request's decision applied),
``stream_attach`` (a streamed answer behind the plan's processor), ``answers`` (whole
answers, staged retries), ``report`` (what is said about a flow once it is over),
``reasoning_store`` (the store's life) and ``memory``. A routed flow's state is its
``runs.FlowRun``. ``common`` holds what they share (metadata key, comments, logging
through ``addon.redact``); ``host_filter`` applies mitmproxy's ``allow_hosts`` /
``ignore_hosts`` to a request; ``contentview`` is the "cursor-bridge" view in mitmweb.
"""
