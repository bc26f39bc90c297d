"""The Kiro IDE's token file, read and refreshed as plain values (the shell does the I/O).

Contract: pure functions over text and JSON; no file, no network, no clock of its own (the
caller passes ``now``). Nothing here puts a token in an exception message or a ``repr``.
``refreshed`` merges a refresh answer into the file's JSON (other fields kept) for the caller
to write back. The file and the refresh exchange: docs/dialects/kiro.md#module-notes."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from addon.model import JSON

REFRESH_MARGIN = 60.0
"""Seconds before ``expiresAt`` from which a token counts as expired."""
SOCIAL_REFRESH_URL = "https://prod.{region}.auth.desktop.kiro.dev/refreshToken"
OIDC_REFRESH_URL = "https://oidc.{region}.amazonaws.com/token"
DEFAULT_REGION = "us-east-1"


class TokenError(ValueError):
    """A token file or refresh answer that cannot be used (the message never holds a token)."""


@dataclass(frozen=True, slots=True)
class KiroToken:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False, default=None)
    expires_at: float | None = None
    """Seconds since the epoch; None: the file does not say (never refreshed for expiry)."""
    profile_arn: str | None = None
    region: str = DEFAULT_REGION
    raw: JSON = field(repr=False, default_factory=dict)
    """The file's JSON, every field, for writing a refreshed token back."""

    def expired(self, now: float, margin: float = REFRESH_MARGIN) -> bool:
        return self.expires_at is not None and now >= self.expires_at - margin

    @property
    def oidc(self) -> bool:
        """An IAM Identity Center login (refreshed at AWS's OIDC endpoint)."""
        return isinstance(self.raw.get("clientId"), str) and isinstance(
            self.raw.get("clientSecret"), str
        )


def parse_token(text: str) -> KiroToken:
    """The token file's text → ``KiroToken``; ``TokenError`` when it is not one."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        raise TokenError("not JSON") from None
    if not isinstance(data, dict):
        raise TokenError("not a JSON object")
    return _token(data)


def _token(data: JSON) -> KiroToken:
    access = data.get("accessToken")
    if not isinstance(access, str) or not access.strip():
        raise TokenError("no accessToken")
    refresh = data.get("refreshToken")
    arn = data.get("profileArn")
    region = data.get("region")
    return KiroToken(
        access.strip(),
        refresh if isinstance(refresh, str) and refresh else None,
        parse_time(data.get("expiresAt")),
        arn if isinstance(arn, str) and arn else None,
        region if isinstance(region, str) and region else DEFAULT_REGION,
        data,
    )


def parse_time(value: Any) -> float | None:
    """``expiresAt``: an ISO 8601 time (``Z`` or an offset), or epoch seconds / milliseconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value) / 1000 if value > 1e11 else float(value)
    if isinstance(value, str) and value:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    return None


def refresh_url(token: KiroToken, route_url: str | None) -> str:
    """Where to refresh: the route's ``refresh_url``, else Kiro's endpoint for the login."""
    if route_url:
        return route_url
    template = OIDC_REFRESH_URL if token.oidc else SOCIAL_REFRESH_URL
    return template.format(region=token.region)


def refresh_body(token: KiroToken) -> JSON:
    if token.refresh_token is None:
        raise TokenError("no refreshToken to refresh with")
    body: JSON = {"refreshToken": token.refresh_token}
    if token.oidc:
        body |= {
            "clientId": token.raw["clientId"],
            "clientSecret": token.raw["clientSecret"],
            "grantType": "refresh_token",
        }
    return body


def refreshed(token: KiroToken, answer: Any, now: float) -> KiroToken:
    """The token after a refresh answered ``answer`` (its JSON); ``TokenError`` if it is not a
    refresh answer. ``expiresIn`` (seconds) or ``expiresAt`` set the new expiry."""
    if not isinstance(answer, dict):
        raise TokenError("the refresh answer is not a JSON object")
    access = answer.get("accessToken")
    if not isinstance(access, str) or not access.strip():
        raise TokenError("the refresh answer holds no accessToken")
    data: JSON = dict(token.raw)
    data["accessToken"] = access.strip()
    for key in ("refreshToken", "profileArn"):
        value = answer.get(key)
        if isinstance(value, str) and value:
            data[key] = value
    expires_in = answer.get("expiresIn")
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        when = datetime.fromtimestamp(now + float(expires_in), UTC)
        data["expiresAt"] = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    elif answer.get("expiresAt") is not None:
        data["expiresAt"] = answer["expiresAt"]
    return _token(data)


def dump_token(token: KiroToken) -> str:
    """The file's new text (indented as the Kiro IDE writes it)."""
    return json.dumps(token.raw, indent=2, ensure_ascii=False) + "\n"
