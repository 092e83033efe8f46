"""The functions' botocore clients (chatstream.aws): the same requests as botocore's own clients send, with the
User-Agent header built once per set of features and no client-side parameter validation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import botocore.session
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ParamValidationError
from botocore.useragent import UserAgentString

from chatstream.aws import CLIENT_CONFIG, create_client
from chatstream.config import AWS_RETRIES

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY = {"pk": {"S": "SESSION#a"}, "sk": {"S": "META"}}


class _Raw:
    """The body of a canned HTTP response, as botocore reads it."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield self._body


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """The headers of every request a client sends; each is answered ``{}`` (200) without leaving the process."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_SDK_UA_APP_ID", "relay")
    return []


def _answering(client: Any, sent: list[dict[str, str]]) -> Any:
    def answer(request: Any, **kwargs: Any) -> AWSResponse:
        sent.append(
            {name: value.decode() if isinstance(value, bytes) else value for name, value in request.headers.items()}
        )
        return AWSResponse(request.url, 200, {"Content-Type": "application/x-amz-json-1.0"}, _Raw(b"{}"))

    client.meta.events.register_last("before-send", answer)
    return client


def test_requests_carry_the_user_agent_botocore_builds(sent: list[dict[str, str]]) -> None:
    # GIVEN one of our clients and botocore's own, alike but for our changes
    ours = _answering(create_client(botocore.session.get_session(), "dynamodb"), sent)
    plain = _answering(botocore.session.get_session().create_client("dynamodb", config=CLIENT_CONFIG), sent)

    # WHEN each makes the same call twice
    for client in (ours, plain):
        client.get_item(TableName="t", Key=KEY)
        client.get_item(TableName="t", Key=KEY)

    # THEN all four requests have the same User-Agent, the function's app id in it
    agents = {headers["User-Agent"] for headers in sent}
    assert len(sent) == 4 and len(agents) == 1
    assert "app/relay" in agents.pop()


def test_the_user_agent_is_built_once_per_set_of_features(
    sent: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN botocore's User-Agent builder, counted
    built: list[str] = []
    build = UserAgentString.to_string

    def counted(self: UserAgentString) -> str:
        built.append("ua")
        return build(self)

    monkeypatch.setattr(UserAgentString, "to_string", counted)
    client = _answering(create_client(botocore.session.get_session(), "dynamodb"), sent)

    # WHEN the client makes three calls of the same features
    for _ in range(3):
        client.get_item(TableName="t", Key=KEY)

    # THEN botocore built the header no more than once per set of features (it builds it twice per call itself)
    assert len(sent) == 3
    assert 1 <= len(built) <= 2


def test_a_config_is_merged_over_the_functions_settings(sent: list[dict[str, str]]) -> None:
    # GIVEN a client built with a read timeout of its own
    client = create_client(botocore.session.get_session(), "lambda", Config(read_timeout=10))

    # THEN it has that timeout and the functions' standard retries
    assert client.meta.config.read_timeout == 10
    assert client.meta.config.retries["mode"] == "standard"


def test_parameters_are_left_to_the_service_to_validate(sent: list[dict[str, str]]) -> None:
    # GIVEN one of our clients and botocore's own
    ours = _answering(create_client(botocore.session.get_session(), "dynamodb"), sent)
    plain = _answering(botocore.session.get_session().create_client("dynamodb", config=AWS_RETRIES), sent)

    # WHEN each is asked for a call without a required parameter
    # THEN botocore's own refuses it; ours sends it (the service answers a ClientError, botocore's error too)
    with pytest.raises(ParamValidationError):
        plain.get_item(TableName="t")
    ours.get_item(TableName="t")
    assert len(sent) == 1
