"""GET /auth/config's document (what the page signs in with) and the page's policy under the JWT auth mode."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from chatstream.config import RelayConfig
from chatstream.relay.bearer import BearerVerifier, IssuerKeys, IssuerUnavailable
from chatstream.relay.http import HttpError
from chatstream.relay.page import SITE
from chatstream.relay.signin import auth_config, auth_config_document, page_connect_sources, page_sources

ISSUER = "https://issuer.example.com/tenant"
DISCOVERY = {
    "issuer": ISSUER,
    "jwks_uri": f"{ISSUER}/keys",
    "authorization_endpoint": "https://login.example.com/authorize",
    "token_endpoint": "https://login.example.com/oauth/token",
}
BASE = {"CHAT_TABLE_NAME": "t", "PROXY_FUNCTION_NAME": "p"}


def jwt_config(**settings: str) -> RelayConfig:
    env = {**BASE, "AUTH_TYPE": "JWT", "JWT_ISSUER": ISSUER, "JWT_AUDIENCES": "api", **settings}
    return RelayConfig.from_env(env)


def verifier(config: RelayConfig, discovery: dict[str, object] | None = DISCOVERY) -> BearerVerifier:
    def fetch(url: str) -> bytes:
        if discovery is None:
            raise IssuerUnavailable(f"{url} could not be fetched")
        return json.dumps(discovery).encode()

    assert config.jwt is not None
    return BearerVerifier(config.jwt, keys=IssuerKeys(ISSUER, fetch=fetch))


@pytest.mark.parametrize("auth_type", ["NONE", "AWS_IAM"])
def test_other_auth_types_only_say_so(auth_type: str) -> None:
    config = RelayConfig.from_env({**BASE, "AUTH_TYPE": auth_type})
    assert auth_config_document(config, None) == {"auth_type": auth_type}


def test_the_jwt_mode_names_the_issuer_the_page_client_and_its_endpoints() -> None:
    # GIVEN a relay that accepts tokens for a required scope, and a page client
    config = jwt_config(JWT_REQUIRED_SCOPE="chat", JWT_PAGE_CLIENT_ID="spa")
    # WHEN the page asks THEN it learns where and how to sign in, and nothing secret
    answer = auth_config(config, verifier(config))
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
    assert json.loads("".join(answer.body)) == {
        "auth_type": "JWT",
        "issuer": ISSUER,
        "client_id": "spa",
        "scope": "openid profile email chat",
        "authorization_endpoint": "https://login.example.com/authorize",
        "token_endpoint": "https://login.example.com/oauth/token",
        "end_session_endpoint": None,
    }


def test_the_page_client_defaults_to_the_first_accepted_client_even_one_read_from_ssm() -> None:
    config = jwt_config(JWT_AUDIENCES="", JWT_CLIENT_IDS="", JWT_CLIENT_IDS_PARAMETER="/stack/ids")
    assert config.jwt is not None
    pool = BearerVerifier(config.jwt, keys=verifier(config).keys, client_ids=lambda: ["pool-client"])
    assert auth_config_document(config, pool)["client_id"] == "pool-client"
    assert (
        auth_config_document(
            replace(config, jwt=replace(config.jwt, client_ids=("a", "b"))),
            verifier(replace(config, jwt=replace(config.jwt, client_ids=("a", "b")))),
        )["client_id"]
        == "a"
    )


def test_an_issuer_that_is_down_makes_the_config_unavailable_and_leaves_the_page_its_own_origin() -> None:
    config = jwt_config()
    with pytest.raises(HttpError) as caught:
        auth_config(config, verifier(config, discovery=None))
    assert (caught.value.status, caught.value.code) == (503, "issuer_unavailable")
    assert page_sources(config, verifier(config, discovery=None)) == ()
    assert page_sources(config, verifier(config)) == ("https://login.example.com",)


def test_the_page_may_fetch_from_its_token_endpoint_and_nowhere_else() -> None:
    # GIVEN the token endpoint's origin WHEN the page is served with it THEN connect-src names it beside 'self'
    sources = page_connect_sources(auth_config_document(jwt_config(), verifier(jwt_config())))
    assert sources == ("https://login.example.com",)
    policy = SITE.index(sources).headers["Content-Security-Policy"]
    assert "connect-src 'self' https://login.example.com;" in policy
    # AND without one, the page's policy is as before
    assert "connect-src 'self';" in SITE.index().headers["Content-Security-Policy"]
