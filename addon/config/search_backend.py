"""A route's ``search`` key: the web search backend the bridge runs a client's search tool on
when the route's upstream cannot run it (docs/tools.md#web-search). Plain values, checked
here; ``addon.config.routes_file`` reads the TOML table into one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

type SearchKind = Literal["searxng"]
"""The backends the bridge speaks, each from its public API docs: SearXNG's Search API
(``GET {url}/search?q=…&format=json``, https://docs.searxng.org/dev/search_api.html)."""

KINDS: tuple[str, ...] = ("searxng",)
MAX_RESULTS = 50
"""The most results one search may give the model."""
MAX_SEARCH_TIMEOUT = 120.0
MAX_PRICE = 100.0
"""US dollars one search may cost at most (``price``): a typo of a per-1,000 price stays
within reason."""


@dataclass(frozen=True, slots=True)
class SearchBackend:
    """Where a route's searches go: ``url`` (the backend's base URL), its ``kind``, at most
    ``max_results`` results per search, ``timeout`` seconds per search, and ``key_env``: an
    environment variable whose value is sent as ``Authorization: Bearer …`` (a SearXNG behind
    a gateway that asks for one; never logged, redacted like every key), and ``price``: US
    dollars per search, counted in a client key's budget (docs/deploy.md#limits-per-client-key;
    default 0)."""

    url: str
    kind: SearchKind = "searxng"
    max_results: int = 5
    timeout: float = 10.0
    key_env: str | None = None
    price: float = 0.0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "url", search_url(self.url).rstrip("/"))
        except ValueError as e:
            raise ValueError(f"search.url: {e}") from None
        if self.kind not in KINDS:
            raise ValueError(f"search.kind: must be one of {', '.join(KINDS)}")
        n = self.max_results
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RESULTS:
            raise ValueError(f"search.max_results: a whole number from 1 to {MAX_RESULTS}")
        t = self.timeout
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= MAX_SEARCH_TIMEOUT:
            raise ValueError(
                f"search.timeout: seconds, more than 0 and at most {MAX_SEARCH_TIMEOUT:g}"
            )
        p = self.price
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= MAX_PRICE:
            raise ValueError(f"search.price: US dollars per search, from 0 to {MAX_PRICE:g}")
        if self.key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.key_env):
            raise ValueError("search.key_env: the name of an environment variable")

    @property
    def endpoint(self) -> str:
        """The URL a search is sent to (SearXNG: ``/search``)."""
        return f"{self.url}/search"


def search_url(v: str) -> str:
    """A backend's base URL: ``http(s)://host[:port][/prefix]``, no query or fragment."""
    if not isinstance(v, str) or not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", v):
        raise ValueError("must be an http:// or https:// base URL (no query)")
    return v
