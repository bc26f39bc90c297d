"""The mitmproxy shell: the only package (with ``addon/main.py``) that imports mitmproxy.

One small addon per feature, each hook applying what ``addon.plan`` decided, wired in hook
order by ``addons.make_addons``; what the bridge holds for one flow is ``flows``. Only here,
so every layer below runs and is tested without a proxy. docs/architecture.md: each module.
"""
