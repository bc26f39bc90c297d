"""The mitmproxy shell: the only package (with ``addon/main.py``) that imports mitmproxy.

One small addon per feature, as mitmproxy's own addons are split; each hook asks the
sans-IO layers what to do (``addon.plan``) and applies it. ``addons.make_addons`` builds
them and lists them in hook order (``addon/main.py`` hands that list to mitmproxy).
``common`` holds what they share (metadata key, comments, logging through
``addon.redact``); ``host_filter`` applies mitmproxy's ``allow_hosts`` / ``ignore_hosts``
to a request; ``contentview`` is the "cursor-bridge" view in mitmweb.
"""
