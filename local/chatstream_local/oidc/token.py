"""``make token SUB=alice``: one line, an access token for the local stack running in the JWT mode.

The stack is found as ``make chat`` finds it (``--url``, else ``CHATSTREAM_PORT``, else port 3000); its relay's
``GET /auth/config`` names the issuer it accepts, and a local issuer (one that offers ``chatstream_mint_endpoint``
in its discovery document) mints the token. ``--issuer URL`` names the issuer instead (no stack asked).
``--lifetime -60`` gives a token that expired a minute ago; ``--audience`` one for another API (refused).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

DEFAULT_PORT = 3000
TIMEOUT_S = 5


class TokenError(Exception):
    """What stopped ``make token``, for a person."""


def _get_json(url: str, data: bytes | None = None) -> Any:
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        detail = err.read().decode("utf-8", errors="replace")[:300]
        raise TokenError(f"{url} answered {err.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as err:
        raise TokenError(
            f'{url} could not be reached ({err}); is `make local ARGS="--auth-type JWT"` running?'
        ) from None
    except ValueError:
        raise TokenError(f"{url} did not answer JSON") from None


def issuer_of(relay_url: str) -> str:
    """The issuer the relay at ``relay_url`` accepts, from its ``GET /auth/config``."""
    config = _get_json(f"{relay_url.rstrip('/')}/auth/config")
    if not isinstance(config, dict) or config.get("auth_type") != "JWT" or not isinstance(config.get("issuer"), str):
        raise TokenError(
            f'the relay at {relay_url} is not in the JWT mode: start it with make local ARGS="--auth-type JWT"'
        )
    return str(config["issuer"])


def mint(issuer: str, subject: str, *, lifetime_s: int | None, audience: str | None, scope: str | None) -> str:
    discovery = _get_json(f"{issuer.rstrip('/')}/.well-known/openid-configuration")
    endpoint = discovery.get("chatstream_mint_endpoint") if isinstance(discovery, dict) else None
    if not isinstance(endpoint, str):
        raise TokenError(f"{issuer} is not the local stack's issuer: it mints no tokens (sign in with it instead)")
    body = {"sub": subject, "lifetime_s": lifetime_s, "audience": audience, "scope": scope}
    answer = _get_json(endpoint, json.dumps({k: v for k, v in body.items() if v is not None}).encode())
    return str(answer["access_token"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make token", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sub", default="alice", help="the user (the token's subject; default alice)")
    parser.add_argument("--lifetime", type=int, help="seconds until it expires (negative: already expired)")
    parser.add_argument("--audience", help="another aud than the relay accepts (to see the refusal)")
    parser.add_argument("--scope", help='the scope claim (default "openid chat")')
    parser.add_argument("--url", help="the local stack's URL (default http://127.0.0.1:$CHATSTREAM_PORT)")
    parser.add_argument("--issuer", help="the local issuer's URL (default: the one the stack's relay accepts)")
    args = parser.parse_args(argv)
    try:
        issuer = args.issuer or issuer_of(
            args.url or f"http://127.0.0.1:{os.environ.get('CHATSTREAM_PORT') or DEFAULT_PORT}"
        )
        token = mint(issuer, args.sub, lifetime_s=args.lifetime, audience=args.audience, scope=args.scope)
    except TokenError as err:
        print(f"make token: {err}", file=sys.stderr)
        return 1
    print(token)
    return 0


if __name__ == "__main__":
    sys.exit(main())
