"""Who owns a session under each auth mode (chatstream/relay/identity.py), and that every mode the relay's
configuration accepts (and the template offers) has one."""

from __future__ import annotations

import pytest

from chatstream.config import AUTH_TYPES, ConfigError, RelayConfig
from chatstream.relay.bearer import BearerVerifier
from chatstream.relay.http import HttpError, Request
from chatstream.relay.identity import ANONYMOUS_OWNER, IDENTITIES, Bearer, identity_for
from chatstream_local.template import Template

BASE_ENV = {"CHAT_TABLE_NAME": "t", "PROXY_FUNCTION_NAME": "p"}
JWT_ENV = {"JWT_ISSUER": "https://issuer.example.com", "JWT_AUDIENCES": "chatstream"}


def test_every_auth_mode_the_template_offers_is_accepted_and_names_its_callers() -> None:
    # GIVEN the auth modes a deployer may choose
    offered = Template.load().raw["Parameters"]["FunctionUrlAuthType"]["AllowedValues"]
    for mode in offered:
        # THEN the relay's configuration accepts each, and each has an identity
        config = RelayConfig.from_env({**BASE_ENV, **JWT_ENV, "AUTH_TYPE": mode})
        verifier = BearerVerifier(config.jwt) if config.jwt is not None else None
        assert identity_for(config.auth_type, verifier) is not None
    assert sorted(IDENTITIES) == sorted(offered) == sorted(AUTH_TYPES)
    # AND a mode with no identity is refused by name
    with pytest.raises(ValueError, match="'SAML'"):
        identity_for("SAML")
    with pytest.raises(ConfigError, match="AUTH_TYPE"):
        RelayConfig.from_env({**BASE_ENV, "AUTH_TYPE": "SAML"})


def test_under_jwt_the_bearer_token_names_the_caller_and_a_relay_without_a_verifier_does_not_start() -> None:
    # GIVEN AUTH_TYPE=JWT, whose Function URL is public (no IAM identity reaches the relay)
    config = RelayConfig.from_env({**BASE_ENV, **JWT_ENV, "AUTH_TYPE": "JWT"})
    assert config.jwt is not None
    jwt = identity_for("JWT", BearerVerifier(config.jwt))
    assert isinstance(jwt, Bearer)
    # WHEN a request comes without a token, or with a signed IAM caller only THEN it is refused 401, not forbidden
    for iam in ({}, {"userArn": "arn:aws:iam::1:user/x"}):
        with pytest.raises(HttpError) as refused:
            jwt.owner(Request("GET", "/sessions/s", iam=iam))
        assert (refused.value.status, refused.value.code) == (401, "missing_token")
        assert refused.value.headers["WWW-Authenticate"] == 'Bearer realm="chatstream"'
    # AND the mode cannot be chosen without a verifier
    with pytest.raises(ValueError, match="BearerVerifier"):
        identity_for("JWT")


def test_without_auth_every_caller_is_the_anonymous_owner() -> None:
    # GIVEN AUTH_TYPE=NONE WHEN requests with and without an IAM caller arrive THEN both are the anonymous owner
    anonymous = identity_for("NONE")
    assert anonymous.owner(Request("GET", "/")) == ANONYMOUS_OWNER
    assert anonymous.owner(Request("GET", "/", iam={"userArn": "arn:aws:iam::1:user/x"})) == ANONYMOUS_OWNER


def test_under_iam_the_signed_caller_owns_and_a_request_naming_nobody_is_forbidden() -> None:
    # GIVEN AUTH_TYPE=AWS_IAM
    iam = identity_for("AWS_IAM")
    pool = {"identityPoolId": "us-east-1:pool", "identityId": "us-east-1:dana"}
    role = "arn:aws:sts::123456789012:assumed-role/Cognito_Unauth/CognitoIdentityCredentials"
    # WHEN callers of each shape ask THEN the Cognito identity wins over the role session it signs as, then the ARN,
    # then the account and caller ids
    assert iam.owner(Request("GET", "/", iam={"userArn": role, "cognitoIdentity": pool})) == (
        "cognito-identity:us-east-1:pool:us-east-1:dana"
    )
    assert iam.owner(Request("GET", "/", iam={"userArn": role, "accountId": "1", "callerId": "c"})) == role
    assert iam.owner(Request("GET", "/", iam={"accountId": "123456789012", "callerId": "AROA:x"})) == (
        "123456789012:AROA:x"
    )
    # AND a request naming nobody is answered 403 forbidden
    with pytest.raises(HttpError) as refused:
        iam.owner(Request("GET", "/", iam={"userArn": "", "cognitoIdentity": {"identityPoolId": "p"}}))
    assert (refused.value.status, refused.value.code) == (403, "forbidden")
