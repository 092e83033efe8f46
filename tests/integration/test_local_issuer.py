"""The local OpenID issuer over loopback HTTP, checked by the relay's own verifier fetching from it.

The code flow with PKCE as the page runs it (the form, the redirect, the token request), the refusals a
token endpoint owes a client, minted tokens (expired, another audience), key rotation, ``make token``, and an
issuer that is down or silent (the verifier's real fetch: 503, never a hang).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import socket
import subprocess
import sys
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from chatstream.config import JwtSettings
from chatstream.relay.bearer import BearerVerifier, IssuerKeys, IssuerUnavailable, Reason, TokenRejected
from chatstream_local.oidc.issuer import LocalIssuer
from chatstream_local.oidc.server import IssuerServer
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration

PAGE = "http://127.0.0.1:3999/"


@pytest.fixture(scope="module")
def server() -> Iterator[IssuerServer]:
    with IssuerServer() as running:
        yield running


def verifier_for(server: IssuerServer, clock: list[float] | None = None) -> BearerVerifier:
    settings = JwtSettings.from_env(server.relay_environment())
    if clock is None:
        return BearerVerifier(settings)
    return BearerVerifier(settings, keys=IssuerKeys(settings.issuer, clock=lambda: clock[0]))


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def sign_in(server: IssuerServer, user: str, challenge: str, *, state: str = "s1") -> str:
    """The browser's part: the form, then the name given; the code the redirect carries."""
    params = {
        "response_type": "code",
        "client_id": "chatstream-page",
        "redirect_uri": PAGE,
        "scope": "openid chat",
        "state": state,
        "nonce": "n1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    form = httpx.get(f"{server.url}/authorize", params=params)
    assert form.status_code == 200 and "User name" in form.text
    approved = httpx.post(f"{server.url}/authorize", data={**params, "username": user})
    assert approved.status_code == 303
    location = urlsplit(approved.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == PAGE
    query = parse_qs(location.query)
    assert query["state"] == [state] and query["iss"] == [server.url]
    return query["code"][0]


def token_request(server: IssuerServer, code: str, verifier: str) -> httpx.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": PAGE,
        "client_id": "chatstream-page",
        "code_verifier": verifier,
    }
    return httpx.post(f"{server.url}/token", data=form, headers={"Origin": "http://127.0.0.1:3999"})


def test_the_code_flow_with_pkce_gives_a_token_the_relay_accepts(server: IssuerServer) -> None:
    # GIVEN a user who signs in through the form as the page sends them
    verifier, challenge = pkce()
    code = sign_in(server, "alice", challenge)
    # WHEN the page exchanges the code with its verifier, from its own origin
    answer = token_request(server, code, verifier)
    # THEN it gets tokens, readable by that page (CORS)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Access-Control-Allow-Origin"] == "*"
    tokens = answer.json()
    assert {"access_token", "id_token", "refresh_token"} <= set(tokens)
    # AND the relay's verifier, fetching the issuer's documents itself, accepts the access token as alice's
    assert verifier_for(server).verify(f"Bearer {tokens['access_token']}").owner == f"jwt:{server.url}#alice"
    # AND the refresh token gives a new access token once
    refresh = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": "chatstream-page"}
    renewed = httpx.post(f"{server.url}/token", data=refresh)
    assert renewed.status_code == 200 and renewed.json()["access_token"] != tokens["access_token"]
    assert httpx.post(f"{server.url}/token", data=refresh).json()["error"] == "invalid_grant"


def test_a_wrong_verifier_and_a_used_code_are_refused(server: IssuerServer) -> None:
    verifier, challenge = pkce()
    code = sign_in(server, "bob", challenge)
    # WHEN the code is sent with another verifier THEN it is refused, and the code is spent
    refused = token_request(server, code, pkce()[0])
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_grant")
    assert token_request(server, code, verifier).json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"code_challenge_method": "plain"}, "PKCE is required"),
        ({"code_challenge": ""}, "PKCE is required"),
        ({"redirect_uri": "https://evil.example.com/"}, "redirect_uri"),
    ],
)
def test_an_authorization_request_without_pkce_or_to_another_host_is_refused(
    server: IssuerServer, change: dict[str, str], problem: str
) -> None:
    params = {
        "response_type": "code",
        "client_id": "chatstream-page",
        "redirect_uri": PAGE,
        "code_challenge": pkce()[1],
        "code_challenge_method": "S256",
        **change,
    }
    page = httpx.get(f"{server.url}/authorize", params=params)
    assert page.status_code == 400 and problem in page.text


def test_minted_tokens_expired_or_for_another_audience_are_refused(server: IssuerServer) -> None:
    verifier = verifier_for(server)

    def minted(**body: object) -> str:
        answer = httpx.post(f"{server.url}/mint", json={"sub": "carol", **body})
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    assert verifier.verify(f"Bearer {minted()}").subject == "carol"
    for body, reason in (
        ({"lifetime_s": -120}, Reason.EXPIRED),
        ({"audience": "another-api"}, Reason.WRONG_AUDIENCE),
    ):
        with pytest.raises(TokenRejected) as caught:
            verifier.verify(f"Bearer {minted(**body)}")
        assert caught.value.reason is reason


def test_a_browser_page_cannot_mint_or_rotate(server: IssuerServer) -> None:
    for path in ("/mint", "/rotate"):
        answer = httpx.post(f"{server.url}{path}", json={"sub": "mallory"}, headers={"Origin": "https://evil.example"})
        assert answer.status_code == 403, path


def test_a_rotated_key_is_accepted_after_the_refetch_interval() -> None:
    # GIVEN a verifier that fetched the issuer's keys
    with IssuerServer() as server:
        clock = [0.0]
        verifier = verifier_for(server, clock)
        mint = f"{server.url}/mint"
        verifier.verify(f"Bearer {httpx.post(mint, json={'sub': 'dave'}).json()['access_token']}")
        # WHEN the issuer rotates its key, retiring the old one, and a minute passes
        assert httpx.post(f"{server.url}/rotate", json={"retire_old": True}).status_code == 200
        clock[0] += 60
        # THEN a token signed by the new key is accepted
        token = httpx.post(mint, json={"sub": "dave"}).json()["access_token"]
        assert verifier.verify(f"Bearer {token}").subject == "dave"


def test_make_token_prints_one_line_the_issuer_accepts(server: IssuerServer) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "chatstream_local.oidc.token", "--issuer", server.url, "--sub", "erin"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT / "local")},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert verifier_for(server).verify(f"Bearer {line}").subject == "erin"


def test_make_token_says_when_no_stack_answers() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))  # bound, never listening: nothing answers on it
        port = holder.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "chatstream_local.oidc.token", "--url", f"http://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PYTHONPATH": str(REPO_ROOT / "local")},
            check=False,
        )
    assert result.returncode == 1 and "--auth-type JWT" in result.stderr and result.stdout == ""


def test_an_issuer_that_is_down_or_silent_is_unavailable() -> None:
    # GIVEN an issuer whose port refuses connections (held bound, never listening), and one that accepts them but
    # never answers
    with socket.socket() as down, socket.socket() as silent:
        down.bind(("127.0.0.1", 0))
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections wait in the backlog, unanswered
        for held in (down, silent):
            url = f"http://127.0.0.1:{held.getsockname()[1]}"
            token = LocalIssuer(url).mint("frank")  # its tokens, signed by keys nobody can fetch
            verifier = BearerVerifier(JwtSettings(issuer=url, audiences=("chatstream-local",)))
            # WHEN a token arrives THEN the issuer is unavailable (503), after the fetch's short timeout
            with pytest.raises(IssuerUnavailable):
                verifier.verify(f"Bearer {token}")
