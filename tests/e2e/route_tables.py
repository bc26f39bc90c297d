"""Bridge routes as the e2e tests write them into a routes file (docs/routes.md): a client's
route to an OpenAI chat upstream, and a vision route at the vision upstream's own
``upstream_url``; each with the variable of its upstream key and more keys, a line each."""

from __future__ import annotations


def chat_route(
    name: str, key_env: str, *keys: str, client: str = "anthropic", path: str = ""
) -> str:
    """The route ``name`` of ``client``'s requests at ``path`` (``/<name>/v1/messages`` when not
    given) to an OpenAI chat upstream's ``/v1/chat/completions``, its key in ``key_env``."""
    return _table(
        f'name = "{name}"',
        f'path = "{path or f"/{name}/v1/messages"}"',
        f'client = "{client}"',
        'upstream = "openai_chat"',
        'upstream_path = "/v1/chat/completions"',
        f'api_key_env = "{key_env}"',
        *keys,
    )


def vision_route(name: str, path: str, vision_port: int, key_env: str, *keys: str) -> str:
    """The vision route ``name`` (its requests at ``path``) to the scripted vision upstream on
    ``vision_port`` (``/vis``), its key in ``key_env``."""
    return _table(
        f'name = "{name}"',
        f'path = "{path}"',
        f'upstream_url = "http://127.0.0.1:{vision_port}/vis"',
        f'api_key_env = "{key_env}"',
        *keys,
    )


def _table(*lines: str) -> str:
    return "\n[[routes]]\n" + "".join(f"{line}\n" for line in lines)
