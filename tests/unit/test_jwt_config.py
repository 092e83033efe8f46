"""AUTH_TYPE=JWT's settings: read at cold start from the relay's environment, as template.yaml sets it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from chatstream.config import JwtSettings, RelayConfig
from chatstream.errors import ConfigError
from chatstream_local.template import Template

if TYPE_CHECKING:
    from collections.abc import Mapping

ISSUER = "https://issuer.example.com/tenant"


def relay_environment(**parameters: str) -> dict[str, str]:
    """The relay's environment as the template sets it for these parameters."""
    template = Template.load(parameter_overrides=parameters)
    return dict(template.function_settings("RelayFunction")["Environment"]["Variables"])


def test_the_template_s_jwt_parameters_are_the_relay_s_settings() -> None:
    # GIVEN a JWT deployment with any issuer
    env = relay_environment(
        FunctionUrlAuthType="JWT",
        JwtIssuer=ISSUER,
        JwtAudiences="api-one,api-two",
        JwtClientIds="page-client",
        JwtRequiredScope="chat",
    )
    # WHEN the relay reads its configuration THEN it has them all
    assert RelayConfig.from_env(env).jwt == JwtSettings(
        issuer=ISSUER, audiences=("api-one", "api-two"), client_ids=("page-client",), required_scope="chat"
    )


def test_with_the_user_pool_the_relay_accepts_its_issuer_and_reads_its_client_from_ssm() -> None:
    env = relay_environment(FunctionUrlAuthType="JWT", CreateUserPool="true")
    settings = RelayConfig.from_env(env).jwt
    assert settings is not None
    assert settings.issuer == "https://cognito-idp.us-east-1.amazonaws.com/chatstream-local-UserPool"
    assert settings.client_ids_parameter == "/chatstream-local/chatstream/user-pool-client-ids"


@pytest.mark.parametrize("auth_type", ["AWS_IAM", "NONE"])
def test_other_auth_types_have_no_jwt_settings(auth_type: str) -> None:
    env = relay_environment(FunctionUrlAuthType=auth_type)
    assert not any(name.startswith("JWT_") for name in env)
    assert RelayConfig.from_env(env).jwt is None


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"JWT_ISSUER": ""}, "JWT_ISSUER is required"),
        ({"JWT_ISSUER": "http://issuer.example.com"}, "JWT_ISSUER must be an https URL"),
        ({"JWT_ISSUER": "https://issuer.example.com/?tenant=1"}, "JWT_ISSUER must be a URL without query"),
        ({"JWT_ISSUER": "https://issuer.example.com/#x"}, "JWT_ISSUER must be a URL without query"),
        ({"JWT_AUDIENCES": "", "JWT_CLIENT_IDS": ""}, "JWT_AUDIENCES"),
        ({"JWT_REQUIRED_SCOPE": 'chat"'}, "JWT_REQUIRED_SCOPE must be one scope"),
        ({"JWT_LEEWAY_S": "61"}, "JWT_LEEWAY_S must be between 0 and 60"),
        ({"AUTH_TYPE": "OIDC"}, "AUTH_TYPE must be AWS_IAM, NONE or JWT"),
    ],
)
def test_a_missing_or_invalid_jwt_setting_fails_the_cold_start_naming_it(
    overrides: Mapping[str, str], named: str
) -> None:
    env = {**relay_environment(FunctionUrlAuthType="JWT", JwtIssuer=ISSUER, JwtAudiences="api"), **overrides}
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        RelayConfig.from_env(env)


def test_the_local_issuer_may_be_plain_http_on_loopback() -> None:
    env = {"JWT_ISSUER": "http://127.0.0.1:41234", "JWT_AUDIENCES": "chatstream-local"}
    assert JwtSettings.from_env(env).issuer == "http://127.0.0.1:41234"
