"""Section 2's shared constants: addresses, limits, the scripted events and their stamps."""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
MAIN_SCRIPT = REPO / "addon" / "main.py"
MITMDUMP = Path(sys.executable).parent / "mitmdump"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CLIENT_KEY = "sk-bench-client/0123456789abcdef"
"""The key the load generator sends as an OpenAI client (``Authorization: Bearer``): on the
gateway's columns with a client keys file, the key listed there (with limits); elsewhere the
upstream takes it as it takes any key."""
X = "\u00d7"
"""The multiplication sign of ratios."""
NONE = "\u2013"
"""An en dash: no figure."""

IO_TIMEOUT = 30.0
"""Any single socket read, write or connect in the upstream and the load generator."""
START_TIMEOUT = 90.0
"""A mitmdump (several start at once on two cores) until it answers."""
MAX_BODY = 64 * 1024 * 1024
"""The largest request body the upstream reads, or response body the load generator keeps."""

STAMP = re.compile(rb"@s=(\d{1,9}),t=(\d{1,20});|@n=(\d{1,9});")
"""An event's stamp (sequence number, send time), or the count of events at the end."""
RECEIVED = re.compile(rb"@r=(\d{1,20});")
TRIGGER_RE = re.compile(rb"<<CALL_[A-Za-z0-9_]{1,64}>>")
CARRY = 48
"""Bytes kept between reads so a stamp split across them is still found (a stamp is < 40)."""

_CHUNK_HEAD = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"bench-model","choices":[{"index":0,"delta":'
)
EVENT = _CHUNK_HEAD + b'{"content":"@s=%d,t=%d; "},"finish_reason":null}]}\n\n'
"""One upstream event; ``%d`` twice: sequence number and send time (monotonic ns)."""
FIRST_EVENT = _CHUNK_HEAD + b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
TEXT_EVENT = _CHUNK_HEAD + b'{"content":%s},"finish_reason":null}]}\n\n'
LAST_EVENTS = (
    _CHUNK_HEAD + b'{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"bench-model","choices":[],"usage":{"prompt_tokens":50,'
    b'"completion_tokens":%d,"total_tokens":%d}}\n\n'
    b"data: [DONE]\n\n"
)
ANSWER = (
    b'{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,'
    b'"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant",'
    b'"content":"@r=%d; Done: the file reads as expected."},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":50,"completion_tokens":9,"total_tokens":59}}'
)
BATCH = 16
"""Unpaced streams: events per write (as many HTTP chunks as ``x-bench-per-chunk`` says)."""
MAX_EVENTS = 10_000_000
"""Per stream, whatever the request asks."""
UPSTREAM_LIFETIME = 4 * 3600.0
"""The scripted upstream exits after this many seconds whatever happens."""
SLOTS = 10
"""Paced streams tick every 1/(pace * SLOTS) s, each stream in one slot: sends are spread."""
LAZY_READ_S = 0.002
"""Unpaced streams: the client reads at most this often per connection (``Conn``)…"""
LAZY_RCVBUF = 4 << 20
"""…and asks the kernel to hold this much for it meanwhile (``SO_RCVBUF``; Linux caps it at
``net.core.rmem_max``)."""


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (nan for none)."""
    if not values:
        return float("nan")
    rank = max(1, min(len(values), -int(-q * len(values) // 1)))
    return values[rank - 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])
