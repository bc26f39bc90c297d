"""The mitmproxy shell: the only package (with ``addon/main.py``) that imports mitmproxy.

One small addon per feature, as mitmproxy's own addons are split; each hook
asks the sans-IO layers what to do (``addon.plan``) and applies it:

- ``rewrite.Rewrite``: the chat routes (request, stream and whole answer, errors);
- ``retry.Retry``: asks the upstream again when the rewrite says so;
- ``catalogue.ModelCatalogue``: ``GET …/models`` with the configured models;
- ``count_tokens.CountTokens``: Anthropic ``count_tokens`` when the upstream has none;
- ``contentview.BridgeContentview``: the "cursor-bridge" view in mitmweb.
"""
