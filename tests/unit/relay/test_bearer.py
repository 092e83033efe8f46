"""The bearer-token verifier (AUTH_TYPE=JWT): every refusal, the key cache, and an issuer that is down.

Tokens are signed by the local issuer's keys (joserfc); the verifier checks them with PyJWT. The issuer's discovery
document and JWKS come from a fake fetch that counts its calls, on a clock the tests move.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from chatstream.relay.bearer import (
    MAX_HEADER_CHARS,
    BearerVerifier,
    IssuerKeys,
    IssuerUnavailable,
    ParameterClientIds,
    Reason,
    TokenRejected,
)
from chatstream_local.oidc.keys import SigningKeys
from tests.support import REPO_ROOT
from tests.unit.relay.bearer_support import (
    COGNITO_CLIENT,
    ISSUER,
    JWKS_URI,
    SETTINGS,
    FakeIssuer,
    bearer,
    claims,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream.config import JwtSettings


@pytest.fixture(scope="module")
def signing() -> SigningKeys:
    return SigningKeys("RS256")


@pytest.fixture
def issuer(signing: SigningKeys) -> FakeIssuer:
    return FakeIssuer(signing)


def verifier_for(issuer: FakeIssuer, settings: JwtSettings = SETTINGS) -> BearerVerifier:
    return BearerVerifier(settings, keys=IssuerKeys(settings.issuer, fetch=issuer.fetch, clock=issuer.clock))


@pytest.fixture
def verifier(issuer: FakeIssuer) -> BearerVerifier:
    return verifier_for(issuer)


def refusal(verifier: BearerVerifier, authorization: str | None, query: dict[str, str] | None = None) -> TokenRejected:
    with pytest.raises(TokenRejected) as caught:
        verifier.verify(authorization, query)
    return caught.value


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], payload: dict[str, Any], sign: Callable[[bytes], bytes]) -> str:
    """A token built by hand, as an attacker builds one."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    return f"{signing_input}.{b64(sign(signing_input.encode()))}"


# ------------------------------------------------------------------------------------------------ accepted


def test_a_valid_token_names_its_issuer_and_subject_as_the_owner(
    verifier: BearerVerifier, signing: SigningKeys
) -> None:
    # GIVEN a token from the issuer, for this API's audience
    token = signing.sign(claims(sub="alice"))
    # WHEN verified
    verified = verifier.verify(bearer(token))
    # THEN the owner is the issuer and the subject together
    assert verified.owner == f"jwt:{ISSUER}#alice"
    assert verified.scopes == {"openid", "chat"}


def test_an_es256_token_is_accepted(issuer: FakeIssuer) -> None:
    # GIVEN an issuer that signs with a P-256 key
    issuer.keys = SigningKeys("ES256")
    # WHEN its token is verified THEN it is accepted
    assert verifier_for(issuer).verify(bearer(issuer.keys.sign(claims()))).subject == "alice"


def test_the_scheme_is_case_insensitive(verifier: BearerVerifier, signing: SigningKeys) -> None:
    assert verifier.verify(f"bearer  {signing.sign(claims())} ").subject == "alice"


def test_two_issuers_subjects_are_two_owners(issuer: FakeIssuer, signing: SigningKeys) -> None:
    # GIVEN the same subject at two issuers
    other = replace(SETTINGS, issuer="https://other.example.com")
    issuer.discovery = {"issuer": other.issuer, "jwks_uri": JWKS_URI}
    other_verifier = BearerVerifier(
        other, keys=IssuerKeys(other.issuer, fetch=lambda url: issuer.fetch(_as_main(url)), clock=issuer.clock)
    )
    mine = verifier_for(FakeIssuer(signing)).verify(bearer(signing.sign(claims(sub="bob"))))
    theirs = other_verifier.verify(bearer(signing.sign(claims(sub="bob", iss=other.issuer))))
    # THEN they own different sessions
    assert mine.owner != theirs.owner


def _as_main(url: str) -> str:
    return url.replace("https://other.example.com", ISSUER)


def test_a_cognito_access_token_is_accepted_by_its_client_id(verifier: BearerVerifier, signing: SigningKeys) -> None:
    # GIVEN a Cognito access token: no aud, the client in client_id, token_use access
    token = signing.sign(claims(aud=None, client_id=COGNITO_CLIENT, token_use="access", scope="openid"))
    # WHEN verified THEN accepted, with its client
    assert verifier.verify(bearer(token)).client_id == COGNITO_CLIENT


def test_client_ids_from_their_source_are_read_once_when_first_needed(issuer: FakeIssuer, signing: SigningKeys) -> None:
    # GIVEN client ids the verifier reads from a source (the template's user pool client, in SSM)
    reads: list[int] = []

    def source() -> list[str]:
        reads.append(1)
        return ["pool-client"]

    settings = replace(SETTINGS, client_ids=(), client_ids_parameter="/stack/client-ids")
    verifier = BearerVerifier(
        settings, keys=IssuerKeys(ISSUER, fetch=issuer.fetch, clock=issuer.clock), client_ids=source
    )
    assert reads == []
    token = signing.sign(claims(aud=None, client_id="pool-client", token_use="access"))
    # WHEN two of its tokens are verified THEN both are accepted, the source read once
    verifier.verify(bearer(token))
    verifier.verify(bearer(token))
    assert reads == [1]


# ------------------------------------------------------------------------------------------------ refused


def test_no_header_asks_for_a_token_without_an_error_code(verifier: BearerVerifier) -> None:
    rejected = refusal(verifier, None)
    assert (rejected.reason, rejected.status) == (Reason.MISSING, 401)
    assert rejected.www_authenticate() == 'Bearer realm="chatstream"'


@pytest.mark.parametrize(
    "header", ["Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer not-a-jwt", "Bearer a.b", "Bearer a.b.c d"]
)
def test_a_header_that_is_not_bearer_and_a_jwt_is_malformed(verifier: BearerVerifier, header: str) -> None:
    assert refusal(verifier, header).reason is Reason.MALFORMED


def test_a_jwt_whose_segments_are_not_json_is_malformed(verifier: BearerVerifier) -> None:
    assert refusal(verifier, "Bearer abc.def.ghi").reason is Reason.MALFORMED


def test_alg_none_is_refused(verifier: BearerVerifier, signing: SigningKeys) -> None:
    # GIVEN an unsigned token naming a real key
    token = forged({"alg": "none", "kid": signing.current_kid}, claims(), lambda _: b"")
    # THEN it is refused for its algorithm
    assert refusal(verifier, bearer(token)).reason is Reason.DISALLOWED_ALGORITHM


def test_hs256_signed_with_the_issuers_public_key_is_refused(verifier: BearerVerifier, signing: SigningKeys) -> None:
    # GIVEN the classic confusion: HMAC with the issuer's public key (which anyone can download) as the secret
    secret = signing.public_pem()
    token = forged(
        {"alg": "HS256", "kid": signing.current_kid, "typ": "JWT"},
        claims(),
        lambda data: hmac.new(secret, data, hashlib.sha256).digest(),
    )
    # THEN it is refused, whatever the key
    assert refusal(verifier, bearer(token)).reason is Reason.DISALLOWED_ALGORITHM


def test_a_token_signed_with_another_key_under_a_known_kid_is_refused(
    verifier: BearerVerifier, signing: SigningKeys
) -> None:
    # GIVEN a token signed by an attacker's key, naming the issuer's kid
    attacker = SigningKeys("RS256")
    token = attacker.sign(claims(), header={"kid": signing.current_kid})
    # THEN its signature does not verify
    assert refusal(verifier, bearer(token)).reason is Reason.BAD_SIGNATURE


def test_a_token_without_kid_is_refused(verifier: BearerVerifier, signing: SigningKeys) -> None:
    token = signing.sign(claims())
    header, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    del decoded["kid"]
    token = f"{b64(json.dumps(decoded).encode())}.{payload}.{signature}"
    assert refusal(verifier, bearer(token)).reason is Reason.UNKNOWN_KEY


def test_an_unknown_kid_is_refused_after_one_refetch(verifier: BearerVerifier, issuer: FakeIssuer) -> None:
    # GIVEN keys fetched by a first good token, a minute ago
    verifier.verify(bearer(issuer.keys.sign(claims())))
    issuer.now += 61
    # WHEN a token names a kid the issuer does not publish
    attacker = SigningKeys("RS256")
    token = attacker.sign(claims(), header={"kid": "made-up"})
    # THEN it is refused, after one refetch of the JWKS (the discovery document is not fetched again)
    assert refusal(verifier, bearer(token)).reason is Reason.UNKNOWN_KEY
    assert issuer.jwks_fetches() == 2
    assert issuer.fetched.count(ISSUER + "/.well-known/openid-configuration") == 1


def test_a_flood_of_made_up_kids_fetches_the_keys_once_a_minute(verifier: BearerVerifier, issuer: FakeIssuer) -> None:
    # GIVEN keys fetched a minute ago
    verifier.verify(bearer(issuer.keys.sign(claims())))
    issuer.now += 60
    attacker = SigningKeys("RS256")
    # WHEN 50 tokens name 50 made-up kids within the next minute
    for n in range(50):
        assert refusal(verifier, bearer(attacker.sign(claims(), header={"kid": f"made-up-{n}"}))).reason is (
            Reason.UNKNOWN_KEY
        )
        issuer.now += 1
    # THEN the JWKS was fetched again once (plus the first fetch), and once more a minute after that refetch
    assert issuer.jwks_fetches() == 2
    issuer.now += 10  # 60 s after the refetch
    refusal(verifier, bearer(attacker.sign(claims(), header={"kid": "made-up-again"})))
    assert issuer.jwks_fetches() == 3


def test_a_rotated_key_is_found_by_a_refetch(verifier: BearerVerifier, issuer: FakeIssuer) -> None:
    # GIVEN keys fetched a minute ago, then the issuer rotates its key (the old one retired)
    keys = SigningKeys("RS256")
    issuer.keys = keys
    verifier.verify(bearer(keys.sign(claims())))
    issuer.now += 60
    keys.rotate("RS256", retire_old=True)
    # WHEN a token signed by the new key arrives THEN it is accepted
    assert verifier.verify(bearer(keys.sign(claims(sub="after-rotation")))).subject == "after-rotation"
    assert issuer.jwks_fetches() == 2


def test_keys_are_fetched_again_when_old_and_kept_while_the_issuer_is_down(
    verifier: BearerVerifier, issuer: FakeIssuer
) -> None:
    # GIVEN keys fetched an hour ago, and the issuer now down
    token = bearer(issuer.keys.sign(claims()))
    verifier.verify(token)
    issuer.now += 3600
    issuer.down = True
    # WHEN a token signed by a known key arrives THEN it is accepted with the keys kept (one fetch was tried)
    assert verifier.verify(token).subject == "alice"
    assert issuer.fetched[-1] == JWKS_URI and issuer.jwks_fetches() == 2


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"exp": -120}, Reason.EXPIRED),  # beyond the 30 s leeway
        ({"nbf": 120}, Reason.NOT_YET_VALID),
        ({"iat": 120}, Reason.NOT_YET_VALID),
    ],
)
def test_time_claims_are_checked_with_the_leeway(
    verifier: BearerVerifier, signing: SigningKeys, overrides: dict[str, int], reason: Reason
) -> None:
    now = int(time.time())
    token = signing.sign(claims(**{name: now + delta for name, delta in overrides.items()}))
    assert refusal(verifier, bearer(token)).reason is reason


def test_a_token_within_the_leeway_is_accepted(verifier: BearerVerifier, signing: SigningKeys) -> None:
    now = int(time.time())
    assert verifier.verify(bearer(signing.sign(claims(exp=now - 10, nbf=now + 10)))).subject == "alice"


@pytest.mark.parametrize("missing", ["exp", "sub"])
def test_a_token_without_exp_or_sub_is_malformed(verifier: BearerVerifier, signing: SigningKeys, missing: str) -> None:
    assert refusal(verifier, bearer(signing.sign(claims(**{missing: None})))).reason is Reason.MALFORMED


def test_another_issuers_token_is_refused_before_any_fetch(verifier: BearerVerifier, issuer: FakeIssuer) -> None:
    token = issuer.keys.sign(claims(iss=ISSUER + "/other"))
    assert refusal(verifier, bearer(token)).reason is Reason.WRONG_ISSUER
    assert issuer.fetched == []


@pytest.mark.parametrize("aud", ["another-api", ["another-api", "a-third"], None])
def test_a_token_for_another_audience_is_refused(verifier: BearerVerifier, signing: SigningKeys, aud: Any) -> None:
    assert refusal(verifier, bearer(signing.sign(claims(aud=aud)))).reason is Reason.WRONG_AUDIENCE


def test_an_access_token_of_another_client_is_refused(verifier: BearerVerifier, signing: SigningKeys) -> None:
    token = signing.sign(claims(aud=None, client_id="another-client", token_use="access"))
    assert refusal(verifier, bearer(token)).reason is Reason.WRONG_AUDIENCE


def test_a_cognito_id_token_is_refused_where_an_access_token_is_required(
    issuer: FakeIssuer, signing: SigningKeys
) -> None:
    # GIVEN a relay that accepts the pool client's tokens, by client id and as an audience
    verifier = verifier_for(issuer, replace(SETTINGS, audiences=(COGNITO_CLIENT,)))
    # WHEN a Cognito ID token is sent (its aud is the client id, token_use id)
    token = signing.sign(claims(aud=COGNITO_CLIENT, token_use="id", email="alice@example.com"))
    # THEN it is refused: it is not an access token
    assert refusal(verifier, bearer(token)).reason is Reason.WRONG_TOKEN_USE


def test_a_token_without_the_required_scope_is_forbidden(issuer: FakeIssuer, signing: SigningKeys) -> None:
    # GIVEN a relay that requires the scope chat
    verifier = verifier_for(issuer, replace(SETTINGS, required_scope="chat"))
    assert verifier.verify(bearer(signing.sign(claims(scope="openid chat")))).subject == "alice"
    assert verifier.verify(bearer(signing.sign(claims(scope=None, scp=["chat"])))).subject == "alice"
    # WHEN a token without it is sent
    rejected = refusal(verifier, bearer(signing.sign(claims(scope="openid"))))
    # THEN 403 insufficient_scope, naming the scope
    assert (rejected.reason, rejected.status) == (Reason.INSUFFICIENT_SCOPE, 403)
    assert 'error="insufficient_scope"' in rejected.www_authenticate()
    assert 'scope="chat"' in rejected.www_authenticate()


def test_a_token_in_the_query_string_is_refused(verifier: BearerVerifier, signing: SigningKeys) -> None:
    # GIVEN a valid token, sent in the URL (RFC 6750 2.3), with or without the header
    token = signing.sign(claims())
    for header in (None, bearer(token)):
        rejected = refusal(verifier, header, {"access_token": token})
        # THEN it is refused: URLs are logged
        assert (rejected.reason, rejected.status) == (Reason.TOKEN_IN_QUERY, 400)


def test_a_huge_header_is_refused_unread_even_when_validly_signed(verifier: BearerVerifier, issuer: FakeIssuer) -> None:
    # GIVEN a token the issuer signed, padded past the limit with a claim
    token = issuer.keys.sign(claims(padding="x" * MAX_HEADER_CHARS))
    # THEN it is refused for its size, and nothing was fetched
    assert refusal(verifier, bearer(token)).reason is Reason.TOO_LARGE
    assert refusal(verifier, "Bearer " + "a" * 65536).reason is Reason.TOO_LARGE
    assert issuer.fetched == []


def test_every_refusal_is_an_http_answer_without_the_token(verifier: BearerVerifier, signing: SigningKeys) -> None:
    # GIVEN refusals of several kinds
    token = signing.sign(claims(exp=int(time.time()) - 3600))
    signature = token.rsplit(".", 1)[1]
    for rejected in (
        refusal(verifier, bearer(token)),
        refusal(verifier, bearer(token), {"access_token": token}),
        refusal(verifier, "Token " + token),
    ):
        # WHEN answered THEN the status and challenge say why, and nothing holds the token or its signature
        error = rejected.http_error()
        answer = error.response()
        text = "".join(answer.body) + json.dumps(dict(answer.headers)) + str(rejected)
        assert answer.status_code == rejected.status
        assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="chatstream", error=')
        assert signature not in text and token[:20] not in text


# ------------------------------------------------------------------------------------------------ the issuer


def test_nothing_is_fetched_before_the_first_token(issuer: FakeIssuer) -> None:
    verifier_for(issuer)
    assert issuer.fetched == []


def test_an_issuer_that_is_down_is_unavailable_not_a_refusal(verifier: BearerVerifier, issuer: FakeIssuer) -> None:
    # GIVEN an issuer whose endpoints do not answer
    issuer.down = True
    token = bearer(issuer.keys.sign(claims()))
    # WHEN a token arrives THEN the issuer is unavailable: 503, with Retry-After
    with pytest.raises(IssuerUnavailable) as caught:
        verifier.verify(token)
    answer = caught.value.http_error().response()
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
    assert "issuer_unavailable" in "".join(answer.body)
    # AND for the next seconds, requests are answered at once, with no fetch; then it is tried again
    tried = len(issuer.fetched)
    issuer.now += 4
    with pytest.raises(IssuerUnavailable):
        verifier.verify(token)
    assert len(issuer.fetched) == tried
    issuer.down = False
    issuer.now += 1
    assert verifier.verify(token).subject == "alice"


@pytest.mark.parametrize(
    "discovery",
    [
        {"issuer": "https://impostor.example.com", "jwks_uri": JWKS_URI},
        {"issuer": ISSUER},
        {"issuer": ISSUER, "jwks_uri": "http://issuer.example.com/keys"},
    ],
)
def test_a_discovery_document_that_is_wrong_makes_the_issuer_unavailable(
    verifier: BearerVerifier, issuer: FakeIssuer, discovery: dict[str, Any]
) -> None:
    issuer.discovery = discovery
    with pytest.raises(IssuerUnavailable):
        verifier.verify(bearer(issuer.keys.sign(claims())))


def test_symmetric_and_encryption_keys_in_the_jwks_are_never_used(issuer: FakeIssuer, signing: SigningKeys) -> None:
    # GIVEN a JWKS that also publishes an oct key under a kid, and the signing key marked for encryption
    secret = b"published-by-mistake"
    oct_key = {"kty": "oct", "kid": "shared", "k": b64(secret)}
    enc_key = {**signing.jwks()["keys"][0], "use": "enc", "kid": "enc"}
    issuer.keys = _Published(signing, [oct_key, enc_key])
    verifier = verifier_for(issuer)
    hs = forged(
        {"alg": "HS256", "kid": "shared"}, claims(), lambda data: hmac.new(secret, data, hashlib.sha256).digest()
    )
    # THEN a token naming either is refused
    assert refusal(verifier, bearer(hs)).reason is Reason.DISALLOWED_ALGORITHM
    assert refusal(verifier, bearer(signing.sign(claims(), header={"kid": "enc"}))).reason is Reason.UNKNOWN_KEY


@dataclass
class _Published:
    keys: SigningKeys
    extra: list[dict[str, Any]]

    def jwks(self) -> dict[str, Any]:
        return {"keys": [*self.keys.jwks()["keys"], *self.extra]}


def test_importing_the_verifier_imports_no_crypto_library() -> None:
    # GIVEN a fresh interpreter with the relay's own modules loaded (here botocore may load cryptography through
    # pyOpenSSL, which the layer does not ship) WHEN the verifier's module is imported, and a verifier built
    code = (
        "import sys\n"
        "from chatstream.config import JwtSettings\n"
        "import chatstream.relay.http\n"
        "before = set(sys.modules)\n"
        "from chatstream.relay.bearer import BearerVerifier\n"
        "BearerVerifier(JwtSettings(issuer='https://issuer.example.com', audiences=('a',)))\n"
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('jwt', 'cryptography')))\n"
    )
    env_path = f"{REPO_ROOT / 'layers/chatstream'}"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": env_path}
    )
    # THEN neither PyJWT nor cryptography is loaded: the first token loads them
    assert result.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------ client ids in SSM


@dataclass
class FakeSsm:
    """The SSM client: the parameter's value, or ``failure``; counts its calls."""

    value: str = "pool-client, second-client"
    failure: Exception | None = None
    calls: int = 0

    def get_parameter(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.failure is not None:
            raise self.failure
        return {"Parameter": {"Name": kwargs["Name"], "Type": "String", "Value": self.value}}


def test_client_ids_are_read_from_their_parameter_with_the_client_built_at_the_first_read() -> None:
    # GIVEN the reader of an SSM parameter, its client not built yet
    ssm = FakeSsm()
    built: list[FakeSsm] = []
    read = ParameterClientIds(lambda: built.append(ssm) or ssm, "/stack/chatstream/user-pool-client-ids")  # type: ignore[arg-type, func-returns-value]
    assert built == []
    # WHEN it reads THEN it gets the comma-separated ids, the client built then
    assert read() == ("pool-client", "second-client")
    assert built == [ssm]


def test_a_parameter_that_cannot_be_read_is_unavailable_and_not_asked_again_for_seconds() -> None:
    # GIVEN a parameter SSM refuses to read
    now = [100.0]
    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "GetParameter")
    ssm = FakeSsm(failure=denied)
    read = ParameterClientIds(lambda: ssm, "/stack/ids", clock=lambda: now[0])  # type: ignore[arg-type, return-value]
    # WHEN read THEN the issuer is unavailable, naming the parameter and SSM's error code
    with pytest.raises(IssuerUnavailable, match="/stack/ids.*AccessDeniedException"):
        read()
    # AND for the next seconds no new read is tried; then it is
    now[0] += 4
    with pytest.raises(IssuerUnavailable):
        read()
    assert ssm.calls == 1
    ssm.failure = None
    now[0] += 1
    assert read() == ("pool-client", "second-client") and ssm.calls == 2


def test_the_discovery_document_is_not_fetched_again_for_seconds_after_a_failure(issuer: FakeIssuer) -> None:
    # GIVEN an issuer that is down, asked for its discovery document (GET /auth/config)
    keys = IssuerKeys(ISSUER, fetch=issuer.fetch, clock=issuer.clock)
    issuer.down = True
    with pytest.raises(IssuerUnavailable):
        keys.metadata()
    # WHEN asked again within 5 s THEN it is unavailable at once, no fetch tried
    issuer.now += 4
    with pytest.raises(IssuerUnavailable):
        keys.metadata()
    assert len(issuer.fetched) == 1
    # AND once they passed, the document is fetched again and kept
    issuer.down = False
    issuer.now += 1
    assert keys.metadata()["issuer"] == ISSUER
    assert keys.metadata()["issuer"] == ISSUER
    assert len(issuer.fetched) == 2
