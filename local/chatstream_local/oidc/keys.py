"""The local issuer's signing keys: generated at start, rotated on demand, published as a JWKS.

joserfc signs (it is what authlib, and so most Python OpenID providers, sign with): the relay verifies with PyJWT, so
the local stack and the tests never check a library against its own output.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

if TYPE_CHECKING:
    from collections.abc import Mapping

ALGORITHMS = {"RS256": "RSA", "ES256": "EC"}


class SigningKeys:
    """One current key that signs, and the keys still published beside it (those it replaced, until retired)."""

    def __init__(self, algorithm: str = "RS256") -> None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        self._lock = threading.Lock()
        self._serial = itertools.count(1)
        self._published: dict[str, tuple[str, RSAKey | ECKey]] = {}
        self._current = ""
        self.rotate(algorithm)

    @property
    def current_kid(self) -> str:
        return self._current

    def rotate(self, algorithm: str = "RS256", *, retire_old: bool = False) -> str:
        """A new key signs from now on; the old ones stay published unless ``retire_old``. Its kid."""
        kid = f"local-{next(self._serial)}-{algorithm.lower()}"
        key: RSAKey | ECKey
        if algorithm == "RS256":
            key = RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": algorithm})
        elif algorithm == "ES256":
            key = ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": algorithm})
        else:
            raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        with self._lock:
            if retire_old:
                self._published.clear()
            self._published[kid] = (algorithm, key)
            self._current = kid
        return kid

    def jwks(self) -> dict[str, Any]:
        """The public keys, as the ``jwks_uri`` serves them."""
        with self._lock:
            return {"keys": [key.as_dict(private=False) for _, key in self._published.values()]}

    def sign(
        self, claims: Mapping[str, Any], *, kid: str | None = None, header: Mapping[str, Any] | None = None
    ) -> str:
        """A compact JWS of ``claims`` signed with the current key (or the published key ``kid``)."""
        with self._lock:
            kid = kid or self._current
            algorithm, key = self._published[kid]
        return jwt.encode({"alg": algorithm, "kid": kid, "typ": "at+jwt", **(header or {})}, dict(claims), key)

    def public_pem(self, kid: str | None = None) -> bytes:
        """The public key ``kid`` (default: the current one) in PEM, as an attacker could download it."""
        with self._lock:
            _, key = self._published[kid or self._current]
        return key.as_pem(private=False)
