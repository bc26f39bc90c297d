"""A scripted SearXNG Search API on 127.0.0.1 for tests (docs/tests.md).

It answers ``GET``/``POST`` on ``/search`` as SearXNG's webapp does
(https://docs.searxng.org/dev/search_api.html; searx/webapp.py ``search``, searx/webadapter.py):
an unknown ``format`` is ``html``; a format the instance's ``search.formats`` does not list is
Werkzeug's ``403 Forbidden`` page; no ``q`` is ``400`` (for a non-HTML format, SearXNG's
``index_error``: the format's error body, ``{"error": "No query"}``; html gets the start page);
a ``pageno``, ``safesearch``, ``time_range`` or ``timeout_limit`` its webadapter refuses is
``400`` with ``{"error": "Invalid value \"…\" for parameter …"}``; ``/`` with a ``q`` is a
``308`` to ``/search`` (its index does that), without one the start page;
else ``200`` with SearXNG's JSON (``query``, ``number_of_results``, ``results`` of ``url``,
``title``, ``content``, ``engine``, ``publishedDate`` …, ``answers``, ``suggestions``,
``infoboxes``, ``unresponsive_engines``). ``results`` maps a query to its results (a query not
listed has none); ``formats`` are the enabled ones (SearXNG's default is ``html`` only)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

OUTPUT_FORMATS = ("html", "csv", "json", "rss")
"""SearXNG's formats (``searx.settings_defaults.OUTPUT_FORMATS``); an instance enables some."""
HTML = "text/html; charset=utf-8"
FORBIDDEN = (
    b"<!doctype html>\n<html lang=en>\n<title>403 Forbidden</title>\n<h1>Forbidden</h1>\n"
    b"<p>You don&#39;t have the permission to access the requested resource. It is either "
    b"read-protected or not readable by the server.</p>\n"
)
"""Werkzeug's own 403 page: SearXNG answers ``flask.abort(403)`` with it."""


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
    reply: Callable[[dict[str, str]], tuple[int, str, bytes]] | None = None
    """Answers ``/search`` in place of ``answer`` (a broken or slow backend); it may block
    (bounded) on an event the test sets."""
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
        """Status, content type and body, as SearXNG's ``/search`` answers these parameters."""
        fmt = params.get("format", "html")
        if fmt not in OUTPUT_FORMATS:  # an unknown format is html
            fmt = "html"
        if fmt not in self.formats:
            return 403, HTML, FORBIDDEN
        query = params.get("q", "")
        if not query:
            if fmt == "html":
                return 200, HTML, b"<!doctype html><title>SearXNG</title>"
            return _error(fmt, "No query")
        wrong = _wrong_parameter(params)
        if wrong is not None:
            return _error(fmt, wrong)
        if fmt != "json":  # a results page, a CSV or an RSS feed: not what the bridge reads
            kinds = {"html": HTML, "csv": "text/csv; charset=utf-8", "rss": "application/rss+xml"}
            listed = "\n".join(r["url"] for r in self.results.get(query, []))
            return 200, kinds[fmt], listed.encode()
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


def _wrong_parameter(params: dict[str, str]) -> str | None:
    """SearXNG's ``SearxParameterException`` message for a parameter its webadapter refuses
    (``parse_pageno``, ``parse_safesearch``, ``parse_time_range``, ``parse_timeout``), or None."""
    checks = {
        "pageno": lambda v: v.isdigit() and int(v) >= 1,
        "safesearch": lambda v: v.isdigit() and 0 <= int(v) <= 2,
        "time_range": lambda v: v in ("", "None", "day", "week", "month", "year"),
        "timeout_limit": lambda v: v in ("", "None") or _is_float(v),
    }
    for name, ok in checks.items():
        value = params.get(name)
        if value is not None and not ok(value):
            return (
                f"Empty {name} parameter"
                if value == ""
                else (f'Invalid value "{value}" for parameter {name}')
            )
    return None


def _is_float(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _error(fmt: str, message: str) -> tuple[int, str, bytes]:
    """SearXNG's ``index_error`` with a 400: the format's error body (the page for html)."""
    if fmt == "json":
        return 400, "application/json", json.dumps({"error": message}).encode()
    if fmt == "html":
        return 400, HTML, b"<!doctype html><title>SearXNG</title><p>search error</p>"
    return 400, "text/plain; charset=utf-8", f"error,{message}".encode()


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
            location = None
            if split.path == "/" and params.get("q"):  # SearXNG's index sends a search on
                status, ctype, body = 308, HTML, b""
                location = "/search" + (f"?{split.query}" if split.query else "")
            elif split.path == "/":
                status, ctype, body = 200, HTML, b"<!doctype html><title>SearXNG</title>"
            elif split.path == "/search":
                answer = server.reply or server.answer
                status, ctype, body = answer(params)
            else:
                status, ctype, body = 404, HTML, b"<title>404 Not Found</title>"
            self.send_response(status)
            if location is not None:
                self.send_header("location", location)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

    return Handler
