"""Who owns a session under each auth mode (chatstream/relay/identity.py), and that every mode the relay's
configuration accepts (and the template offers) has one."""

from __future__ import annotations

import pytest

from chatstream.config import AUTH_TYPES, ConfigError, RelayConfig
from chatstream.relay.http import HttpError, Request
from chatstream.relay.identity import ANONYMOUS_OWNER, IDENTITIES, identity_for
from chatstream_local.template import Template

BASE_ENV = {"CHAT_TABLE_NAME": "t", "PROXY_FUNCTION_NAME": "p"}
JWT_ENV = {"JWT_ISSUER": "https://issuer.example.com", "JWT_AUDIENCES": "chatstream"}


def test_every_auth_mode_the_template_offers_is_accepted_and_names_its_callers() -> None:
    # GIVEN the auth modes a deployer may choose
    offered = Template.load().raw["Parameters"]["FunctionUrlAuthType"]["AllowedValues"]
    for mode in offered:
        # THEN the relay's configuration accepts each, and each has an identity
        config = RelayConfig.from_env({**BASE_ENV, **JWT_ENV, "AUTH_TYPE": mode})
        assert identity_for(config.auth_type) is not None
    assert sorted(IDENTITIES) == sorted(offered) == sorted(AUTH_TYPES)
    # AND a mode with no identity is refused by name
    with pytest.raises(ValueError, match="'SAML'"):
        identity_for("SAML")
    with pytest.raises(ConfigError, match="AUTH_TYPE"):
        RelayConfig.from_env({**BASE_ENV, "AUTH_TYPE": "SAML"})


def test_under_jwt_no_request_names_a_caller_until_bearer_tokens_are_checked() -> None:
    # GIVEN AUTH_TYPE=JWT, whose Function URL is public (no IAM identity reaches the relay)
    jwt = identity_for("JWT")
    # WHEN a request comes, with a bearer token or without THEN it is forbidden, as HTTP_API.md says for now
    for headers in ({}, {"authorization": "Bearer a.b.c"}):
        with pytest.raises(HttpError) as refused:
            jwt.owner(Request("GET", "/sessions/s", headers=headers))
        assert (refused.value.status, refused.value.code) == (403, "forbidden")


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
