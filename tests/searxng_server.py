"""A scripted SearXNG Search API on 127.0.0.1 for tests (docs/tests.md).

It answers ``GET``/``POST`` on ``/`` and ``/search`` as SearXNG's webapp does
(https://docs.searxng.org/dev/search_api.html; searx/webapp.py ``search``): a ``format`` the
instance's ``search.formats`` does not list is ``403 Forbidden``; no ``q`` is ``400`` (for a
non-HTML format, SearXNG's ``index_error``: the format's error body ``{"error": "No query"}``);
else ``200`` with SearXNG's JSON (``query``, ``number_of_results``, ``results`` of ``url``,
``title``, ``content``, ``engine``, ``publishedDate`` …, ``answers``, ``suggestions``,
``infoboxes``, ``unresponsive_engines``). ``results`` maps a query to its results (a query not
listed has none); ``formats`` are the enabled ones (SearXNG's default is ``html`` only)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class SearxngRequest:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]


@dataclass
class ScriptedSearxng:
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    formats: tuple[str, ...] = ("html", "json")
    requests: list[SearxngRequest] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ScriptedSearxng:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedSearxng:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def answer(self, params: dict[str, str]) -> tuple[int, str, bytes]:
        """Status, content type and body, as SearXNG answers these parameters."""
        fmt = params.get("format", "html")
        if fmt not in self.formats:
            return 403, "text/html; charset=utf-8", b"<!doctype html><title>403 Forbidden</title>"
        query = params.get("q", "")
        if not query:
            if fmt == "html":
                return 200, "text/html; charset=utf-8", b"<!doctype html><title>SearXNG</title>"
            return 400, "application/json", json.dumps({"error": "No query"}).encode()
        found = [
            {
                "template": "default.html",
                "engine": "duckduckgo",
                "engines": ["duckduckgo"],
                "positions": [i + 1],
                "score": 1.0 / (i + 1),
                "category": "general",
                "parsed_url": [*urlsplit(r["url"]), ""],
                "publishedDate": None,
                **r,
            }
            for i, r in enumerate(self.results.get(query, []))
        ]
        body = {
            "query": query,
            "number_of_results": 0,
            "results": found,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [],
            "unresponsive_engines": [],
        }
        return 200, "application/json", json.dumps(body).encode()


def _handler(server: ScriptedSearxng) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _handle(self, method: str) -> None:
            split = urlsplit(self.path)
            raw = split.query
            if method == "POST":
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace")
            params = {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.requests.append(SearxngRequest(method, split.path, params, headers))
            if split.path not in ("/", "/search"):
                status, ctype, body = 404, "text/html", b"<title>404 Not Found</title>"
            else:
                status, ctype, body = server.answer(params)
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

    return Handler
