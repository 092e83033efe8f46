"""The relay under ``AUTH_TYPE=JWT`` (chatstream/relay/identity.py's ``Bearer``): every route but the public ones names
its caller from a bearer token before its handler reads or writes anything, refusals come in each API's error shape
with RFC 6750's challenge, two users never see each other's sessions, and a stream outlives its token.

Tokens are signed by the local issuer's keys (joserfc); the relay's verifier fetches the fake issuer's documents."""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest

from chatstream.relay.bearer import BearerVerifier, IssuerKeys
from chatstream.relay.http import Request
from chatstream.relay.openai.responses import response_id
from chatstream.relay.service import ROUTES, RelayService
from chatstream_local.oidc.keys import SigningKeys
from tests.unit.relay.bearer_support import AUDIENCE, ISSUER, JWKS_URI, FakeIssuer, bearer, claims
from tests.unit.relay.relay_support import FAST, FakeClock, read_stream, relay_config, write_turn

if TYPE_CHECKING:
    from chatstream.relay.http import Response
    from chatstream.table import ChatTable

# The routes that answer whoever asks: nothing else may run its handler without a caller.
PUBLIC = {
    ("GET", "/health"),
    ("GET", "/openapi.json"),
    ("GET", "/"),
    ("GET", "/static/{name}"),
    ("GET", "/static/vendor/{name}"),
    ("GET", "/auth/config"),
}
SESSION = "0123456789abcdef0123456789abcdef"
TOKEN_ENDPOINT = "https://login.example.com/oauth2/token"
DISCOVERY = {
    "issuer": ISSUER,
    "jwks_uri": JWKS_URI,
    "authorization_endpoint": "https://login.example.com/oauth2/authorize",
    "token_endpoint": TOKEN_ENDPOINT,
}


class Untouchable:
    """A table or Lambda client that fails the test when anything of it is used."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a request without a caller reached {name}")


class AcceptingLambda:
    """The Lambda client: every asynchronous invoke accepted."""

    def __init__(self) -> None:
        self.invokes = 0

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.invokes += 1
        return {"StatusCode": 202}


@pytest.fixture(scope="module")
def signing() -> SigningKeys:
    return SigningKeys("RS256")


@pytest.fixture
def issuer(signing: SigningKeys) -> FakeIssuer:
    return FakeIssuer(signing, discovery=dict(DISCOVERY))


def jwt_service(table: Any, issuer: FakeIssuer, clock: FakeClock | None = None, **env: str) -> RelayService:
    config = relay_config(
        "t",
        AUTH_TYPE="JWT",
        JWT_ISSUER=ISSUER,
        JWT_AUDIENCES=AUDIENCE,
        JWT_PAGE_CLIENT_ID="spa",
        MODEL_ID="us.amazon.nova-lite-v1:0",
        **env,
    )
    assert config.jwt is not None
    verifier = BearerVerifier(config.jwt, keys=IssuerKeys(ISSUER, fetch=issuer.fetch, clock=issuer.clock))
    proxy = Untouchable() if isinstance(table, Untouchable) else AcceptingLambda()
    return RelayService(
        table,
        proxy,
        config,
        clock=(clock or FakeClock()).as_clock(),
        settings=FAST,
        verifier=verifier,  # type: ignore[arg-type]
    )


@pytest.fixture
def service(chat_table: ChatTable, issuer: FakeIssuer) -> RelayService:
    return jwt_service(chat_table, issuer)


def token_of(issuer: FakeIssuer, sub: str = "alice", **overrides: Any) -> str:
    return issuer.keys.sign(claims(sub=sub, **overrides))


def ask(
    service: RelayService,
    method: str,
    path: str,
    token: str | None = None,
    *,
    body: Any = None,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> Response:
    sent = dict(headers or {})
    if token is not None:
        sent["authorization"] = bearer(token)
    data = None if body is None else json.dumps(body).encode()
    return service.handle(Request(method, path, headers=sent, query=query or {}, body=data))


def answer_of(response: Response) -> Any:
    return json.loads("".join(response.body))


def filled(template: str) -> str:
    """A path the template matches, with ids of the right shape (a handler that ran would read the table)."""
    values = {
        "session_id": SESSION,
        "turn": "1",
        "response_id": response_id(SESSION, 1),
        "model": "chatstream",
        "name": "app.js",
    }
    return "/".join(values[p[1:-1]] if p.startswith("{") else p for p in template.split("/"))


BODIES = {
    "/chat": {"message": "hi"},
    "/v1/responses": {"model": "chatstream", "input": "hi"},
    "/v1/chat/completions": {"model": "chatstream", "messages": [{"role": "user", "content": "hi"}]},
}


# ------------------------------------------------------------------------------------------------ every route


def test_the_public_routes_are_exactly_health_the_page_the_documents_and_the_sign_in_configuration() -> None:
    assert {(route.method, route.template) for route in ROUTES.routes if route.public} == PUBLIC


def test_no_route_but_the_public_ones_runs_without_an_accepted_token(issuer: FakeIssuer) -> None:
    # GIVEN a relay in the JWT mode whose table and Lambda client fail the test when touched
    service = jwt_service(Untouchable(), issuer)
    refused_tokens = {
        "no token": None,
        "expired": token_of(issuer, exp=int(time.time()) - 3600),
        "another audience": token_of(issuer, aud="another-api"),
        "another issuer's": token_of(issuer, iss="https://impostor.example.com"),
    }
    for route in ROUTES.routes:
        if (route.method, route.template) in PUBLIC:
            continue
        for case, token in refused_tokens.items():
            # WHEN any other route is asked, with a body it would accept, and no token the relay accepts
            path = filled(route.template)
            response = ask(service, route.method, path, token, body=BODIES.get(route.template))
            # THEN it is refused 401 with the challenge, before its handler touched anything
            assert response.status_code == 401, (route.method, route.template, case, answer_of(response))
            assert response.headers["WWW-Authenticate"].startswith('Bearer realm="chatstream"'), route.template
            code = answer_of(response)["error"]["code"]
            assert code == ("missing_token" if token is None else "invalid_token"), (route.template, case)
    # AND HEAD, answered wherever GET is, is refused the same way
    assert ask(service, "HEAD", f"/sessions/{SESSION}").status_code == 401


def test_the_public_routes_answer_without_a_token_and_touch_no_table(issuer: FakeIssuer) -> None:
    # GIVEN a relay in the JWT mode whose table and Lambda client fail the test when touched
    service = jwt_service(Untouchable(), issuer)
    for method, template in sorted(PUBLIC):
        path = filled(template).replace("vendor/app.js", "vendor/oauth4webapi.js")
        # WHEN each public route is asked without a token THEN it answers
        assert ask(service, method, path).status_code == 200, template


def test_an_unknown_path_is_not_found_whoever_asks(service: RelayService) -> None:
    # An unknown path reads nothing: 404, as in every mode, rather than a challenge
    assert ask(service, "GET", "/nothing/here").status_code == 404
    assert ask(service, "DELETE", "/chat").status_code == 405


# ------------------------------------------------------------------------------------------------ refusals


def test_a_native_refusal_is_the_native_error_with_the_challenge(service: RelayService, issuer: FakeIssuer) -> None:
    # WHEN history is asked without a token, then with an expired one
    missing = ask(service, "GET", f"/sessions/{SESSION}")
    expired = ask(service, "GET", f"/sessions/{SESSION}", token_of(issuer, exp=int(time.time()) - 3600))
    # THEN 401 in the native shape: no error code in the challenge without a token; with one, invalid_token and why
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == 'Bearer realm="chatstream"'
    assert answer_of(missing)["error"]["code"] == "missing_token"
    assert expired.status_code == 401
    assert expired.headers["WWW-Authenticate"] == (
        'Bearer realm="chatstream", error="invalid_token", error_description="the token has expired; sign in again"'
    )
    assert answer_of(expired) == {"error": {"code": "invalid_token", "message": "the token has expired; sign in again"}}


def test_a_v1_refusal_is_openais_error_with_the_challenge(service: RelayService, issuer: FakeIssuer) -> None:
    # WHEN an OpenAI SDK sends a token for another API as its api_key
    response = ask(
        service,
        "POST",
        "/v1/chat/completions",
        token_of(issuer, aud="another-api"),
        body=BODIES["/v1/chat/completions"],
    )
    # THEN 401 in OpenAI's shape (the SDKs raise AuthenticationError), with the challenge
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
    assert answer_of(response) == {
        "error": {
            "message": "the token is not meant for this API (aud or client_id)",
            "type": "authentication_error",
            "param": None,
            "code": "invalid_token",
        }
    }


@pytest.mark.parametrize(
    ("case", "status", "code", "says"),
    [
        ("alg none", 401, "invalid_token", "not signed with RS256 or ES256"),
        ("another key", 401, "invalid_token", "signature does not verify"),
        ("not yet valid", 401, "invalid_token", "not valid yet"),
        ("huge header", 401, "invalid_token", "longer than"),
        ("token in the query", 400, "invalid_request", "token in the URL"),
        ("missing scope", 403, "insufficient_scope", "lacks the scope chat"),
    ],
)
def test_each_refusal_says_why_without_the_token(
    chat_table: ChatTable, issuer: FakeIssuer, case: str, status: int, code: str, says: str
) -> None:
    # GIVEN a relay that requires the scope chat, and a request with a token refused for one reason
    service = jwt_service(chat_table, issuer, JWT_REQUIRED_SCOPE="chat")
    good = token_of(issuer)
    header, query = bearer(good), {}
    if case == "alg none":
        unsigned = token_of(issuer).rsplit(".", 1)[0].split(".")
        head = base64.urlsafe_b64encode(json.dumps({"alg": "none", "kid": issuer.keys.current_kid}).encode())
        header = f"Bearer {head.rstrip(b'=').decode()}.{unsigned[1]}."
    elif case == "another key":
        header = bearer(SigningKeys("RS256").sign(claims(), header={"kid": issuer.keys.current_kid}))
    elif case == "not yet valid":
        header = bearer(token_of(issuer, nbf=int(time.time()) + 600))
    elif case == "huge header":
        header = "Bearer " + "a" * 65536
    elif case == "token in the query":
        query = {"access_token": good}
    elif case == "missing scope":
        header = bearer(token_of(issuer, scope="openid"))
    # WHEN it asks for a session's history
    response = ask(service, "GET", f"/sessions/{SESSION}", headers={"authorization": header}, query=query)
    # THEN the status and code say which refusal, the message why, and nothing echoes the token
    answer = answer_of(response)
    assert (response.status_code, answer["error"]["code"]) == (status, code)
    assert says in answer["error"]["message"]
    assert f'error="{code}"' in response.headers["WWW-Authenticate"]
    shown = json.dumps(answer) + json.dumps(dict(response.headers))
    assert good.rsplit(".", 1)[1] not in shown and header[7:40] not in shown


def test_a_required_scope_is_asked_for_in_the_challenge(chat_table: ChatTable, issuer: FakeIssuer) -> None:
    service = jwt_service(chat_table, issuer, JWT_REQUIRED_SCOPE="chat")
    response = ask(service, "GET", f"/sessions/{SESSION}", token_of(issuer, scope="openid"))
    assert response.status_code == 403 and 'scope="chat"' in response.headers["WWW-Authenticate"]


def test_an_issuer_that_is_down_answers_503_in_each_apis_shape(service: RelayService, issuer: FakeIssuer) -> None:
    # GIVEN an issuer whose keys cannot be fetched
    token = token_of(issuer)
    issuer.down = True
    # WHEN a native and a /v1 request arrive with a token
    native = ask(service, "GET", f"/sessions/{SESSION}", token)
    v1 = ask(service, "GET", "/v1/models", token)
    # THEN both are 503 issuer_unavailable with Retry-After: the token may be good, the client tries again later
    for response in (native, v1):
        assert response.status_code == 503 and response.headers["Retry-After"] == "5"
        assert answer_of(response)["error"]["code"] == "issuer_unavailable"
    assert answer_of(v1)["error"]["type"] == "server_error"


# ------------------------------------------------------------------------------------------------ owners


def chat_of(service: RelayService, token: str, message: str = "hello") -> tuple[str, Response]:
    response = ask(service, "POST", "/chat", token, body={"message": message})
    assert response.status_code == 200, answer_of(response)
    meta = read_stream([next(iter(response.body))]).events[0].json()
    return str(meta["session_id"]), response


def test_two_users_never_see_each_others_sessions(
    service: RelayService, issuer: FakeIssuer, chat_table: ChatTable
) -> None:
    # GIVEN alice's session, its turn complete
    alice, bob = token_of(issuer, "alice"), token_of(issuer, "bob")
    session_id, _ = chat_of(service, alice)
    write_turn(chat_table, session_id, 1, ["You", " said:", " hello"])
    # WHEN bob asks for it on every route that names it, natively and through /v1
    previous = {"model": "chatstream", "input": "hi", "previous_response_id": response_id(session_id, 1)}
    for method, path, body, status, code in (
        ("GET", f"/sessions/{session_id}", None, 404, "session_not_found"),
        ("GET", f"/sessions/{session_id}/turns/1/events", None, 404, "session_not_found"),
        ("POST", f"/sessions/{session_id}/turns/1/cancel", None, 404, "session_not_found"),
        ("POST", "/chat", {"message": "mine now", "session_id": session_id}, 404, "session_not_found"),
        ("GET", f"/v1/responses/{response_id(session_id, 1)}", None, 404, "not_found"),
        ("POST", f"/v1/responses/{response_id(session_id, 1)}/cancel", None, 404, "not_found"),
        ("POST", "/v1/responses", previous, 404, "not_found"),
    ):
        response = ask(service, method, path, bob, body=body)
        # THEN it does not exist for him: the answer of a session that does not exist
        assert (response.status_code, answer_of(response)["error"]["code"]) == (status, code), path
    # AND alice reads it, her reply whole
    history = answer_of(ask(service, "GET", f"/sessions/{session_id}", alice))
    assert [turn["assistant"] for turn in history["turns"]] == ["You said: hello"]
    # AND the session's owner is the token's issuer and subject together
    assert chat_table.get_session(session_id).owner == f"jwt:{ISSUER}#alice"  # type: ignore[union-attr]


def test_a_stream_outlives_its_token_which_is_checked_again_on_resume(
    chat_table: ChatTable, issuer: FakeIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN alice's chat, started with a token the relay accepted
    clock = FakeClock()
    service = jwt_service(chat_table, issuer, clock)
    assert service.verifier is not None
    verified: list[str] = []
    verify = service.verifier.verify
    monkeypatch.setattr(service.verifier, "verify", lambda *args: verified.append("once") or verify(*args))
    token = token_of(issuer, exp=int(time.time()) + 120)
    session_id, response = chat_of(service, token)
    # WHEN the reply arrives after the token's verification, the issuer meanwhile unreachable
    issuer.down = True
    clock.at(1.0, lambda: write_turn(chat_table, session_id, 1, ["You", " said:", " hello"]))
    stream = read_stream(response.body)
    # THEN the stream runs to its end, its token checked once, when it started
    assert stream.text == "You said: hello" and stream.kinds[-1] == "done"
    assert verified == ["once"]
    # AND a resume is checked again: refused with an expired token, followed with a fresh one
    issuer.down = False
    resume = f"/sessions/{session_id}/turns/1/events"
    expired = ask(service, "GET", resume, token_of(issuer, exp=int(time.time()) - 3600), headers={"last-event-id": "2"})
    assert expired.status_code == 401
    resumed = ask(service, "GET", resume, token_of(issuer), headers={"last-event-id": "2"})
    assert read_stream(resumed.body).text == " hello"


def test_the_owner_is_logged_and_the_token_never(
    service: RelayService, issuer: FakeIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a token refused and one accepted
    caplog.set_level(logging.DEBUG)
    refused = token_of(issuer, aud="another-api")
    accepted = token_of(issuer, "carol")
    refusal = ask(service, "GET", "/v1/models", refused)
    answer = ask(service, "GET", "/v1/models", accepted)
    # THEN the accepted request names its owner for the log line, the refused one nobody
    assert (refusal.owner, answer.owner) == ("", f"jwt:{ISSUER}#carol")
    # AND the log says why the refused one was refused, and holds neither token nor any part of one
    assert any(getattr(record, "reason", None) == "wrong_audience" for record in caplog.records)
    logged = caplog.text + json.dumps([record.__dict__ for record in caplog.records], default=str)
    for token in (refused, accepted):
        for part in token.split("."):
            assert part not in logged


# ------------------------------------------------------------------------------------------------ sign-in


def test_the_sign_in_configuration_and_the_page_name_the_issuer(service: RelayService) -> None:
    # WHEN the page asks how to sign in, and for itself
    config = ask(service, "GET", "/auth/config")
    head = ask(service, "HEAD", "/auth/config")
    page = ask(service, "GET", "/")
    # THEN it learns the issuer, its client and endpoints; HEAD answers the same without a body
    assert config.status_code == 200
    document = answer_of(config)
    assert (document["auth_type"], document["issuer"], document["client_id"]) == ("JWT", ISSUER, "spa")
    assert document["token_endpoint"] == TOKEN_ENDPOINT
    assert head.status_code == 200 and list(head.body) == []
    # AND the page may fetch from the token endpoint's origin, and nowhere else beyond its own
    assert "connect-src 'self' https://login.example.com;" in page.headers["Content-Security-Policy"]


def test_an_issuer_that_is_down_leaves_the_page_served_and_its_configuration_unavailable(
    service: RelayService, issuer: FakeIssuer
) -> None:
    issuer.down = True
    config = ask(service, "GET", "/auth/config")
    assert config.status_code == 503 and answer_of(config)["error"]["code"] == "issuer_unavailable"
    page = ask(service, "GET", "/")
    assert page.status_code == 200 and "connect-src 'self';" in page.headers["Content-Security-Policy"]


@pytest.mark.parametrize("auth_type", ["NONE", "AWS_IAM"])
def test_other_modes_tell_the_page_not_to_sign_in(chat_table: ChatTable, auth_type: str) -> None:
    service = RelayService(chat_table, None, relay_config("t", AUTH_TYPE=auth_type), settings=FAST)  # type: ignore[arg-type]
    assert answer_of(service.handle(Request("GET", "/auth/config"))) == {"auth_type": auth_type}
