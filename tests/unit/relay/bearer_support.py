"""A fake OpenID Connect issuer for the relay's bearer-token tests: its discovery document and JWKS served by a
``fetch`` that counts its calls, on a clock the tests move; tokens signed by the local issuer's keys (joserfc)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chatstream.config import JwtSettings
from chatstream.relay.bearer import IssuerUnavailable

if TYPE_CHECKING:
    from chatstream_local.oidc.keys import SigningKeys

ISSUER = "https://issuer.example.com/tenant"
JWKS_URI = "https://issuer.example.com/tenant/keys"
AUDIENCE = "chatstream-api"
COGNITO_CLIENT = "4k2vexampleclient"
SETTINGS = JwtSettings(issuer=ISSUER, audiences=(AUDIENCE,), client_ids=(COGNITO_CLIENT,))


@dataclass
class FakeIssuer:
    """The issuer's two documents, served by ``fetch``; ``down`` makes every fetch fail."""

    keys: SigningKeys
    now: float = 1000.0
    down: bool = False
    fetched: list[str] = field(default_factory=list)
    discovery: dict[str, Any] = field(default_factory=lambda: {"issuer": ISSUER, "jwks_uri": JWKS_URI})

    def fetch(self, url: str) -> bytes:
        self.fetched.append(url)
        if self.down:
            raise IssuerUnavailable(f"{url} could not be fetched (ConnectTimeoutError)")
        if url == ISSUER + "/.well-known/openid-configuration":
            return json.dumps(self.discovery).encode()
        if url == JWKS_URI:
            return json.dumps(self.keys.jwks()).encode()
        raise AssertionError(f"unexpected fetch of {url}")

    def jwks_fetches(self) -> int:
        return self.fetched.count(JWKS_URI)

    def clock(self) -> float:
        return self.now


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": ISSUER, "sub": "alice", "aud": AUDIENCE, "iat": now, "exp": now + 600, "scope": "openid chat"}
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def bearer(token: str) -> str:
    return f"Bearer {token}"
