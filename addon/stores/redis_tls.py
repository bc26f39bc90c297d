"""A Redis store's TLS connection (``rediss://``, ``addon.stores.redis_backend``): redis-py's,
whose failed handshake says why.

Contract: loaded only with the ``redis`` package; no mitmproxy, no logging."""

from __future__ import annotations

import socket
import ssl
from typing import cast

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError


class TLSConnection(redis.SSLConnection):
    """redis-py's TLS connection, whose failed handshake says so: against a Redis that does
    not speak TLS redis-py says only "Timeout connecting to server" (the server waits for the
    rest of a command that is a TLS hello) or an SSL error code."""

    def _wrap_socket_with_ssl(self, sock: socket.socket) -> socket.socket:
        try:
            return cast(socket.socket, super()._wrap_socket_with_ssl(sock))  # type: ignore[no-untyped-call]
        except ssl.SSLCertVerificationError as e:
            raise RedisConnectionError(
                f"TLS handshake with {self.host}:{self.port} failed: the server's certificate "
                f"is not trusted ({e.verify_message or e})"
            ) from e
        except (OSError, RedisError) as e:  # a timeout, an SSL error, a reset
            raise RedisConnectionError(
                f"TLS handshake with {self.host}:{self.port} failed: the server may not speak "
                f"TLS ({str(e) or type(e).__name__})"
            ) from e
