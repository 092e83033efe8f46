"""`make local ARGS="--auth-type JWT"` as a user runs it: the relay checks bearer tokens of the local OpenID issuer the
stack starts, `make token` mints them, curl carries them; two users never see each other's sessions."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from typing import TYPE_CHECKING

import pytest

from tests.e2e.test_make_local import RunningStack, curl, kill_tree, sse_events, start_make_local
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e
ISSUER_LINE = "local OpenID issuer at "


@pytest.fixture(scope="module")
def jwt_local() -> Iterator[RunningStack]:
    stack = start_make_local("--auth-type JWT")
    yield stack
    kill_tree(stack.process)


def issuer_of(stack: RunningStack) -> str:
    """The issuer the stack prints on the line after its ready line."""
    return stack.line(ISSUER_LINE)[len(ISSUER_LINE) :].split(" ", 1)[0]


def make_token(stack: RunningStack, sub: str, *settings: str) -> str:
    """`make token SUB=<sub> URL=<stack>` (and LIFETIME=…, AUDIENCE=…), as a user runs it: its one line."""
    run = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "token", f"SUB={sub}", f"URL={stack.url}", *settings],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 1 and lines[0].count(".") == 2, run.stdout
    return lines[0]


def status_and_code(result: subprocess.CompletedProcess[str]) -> tuple[int, str]:
    payload, _, http_code = result.stdout.rpartition("\n")
    return int(http_code), json.loads(payload)["error"]["code"]


def test_the_stack_prints_its_issuer_and_the_relay_accepts_its_tokens_only(jwt_local: RunningStack) -> None:
    # GIVEN the issuer the stack printed, as the relay's sign-in configuration names it
    issuer = issuer_of(jwt_local)
    assert issuer.startswith("http://127.0.0.1:") and issuer != jwt_local.url
    config = json.loads(curl(f"{jwt_local.url}/auth/config").stdout)
    assert (config["auth_type"], config["issuer"]) == ("JWT", issuer)
    # WHEN curl chats with a token from `make token`
    token = make_token(jwt_local, "alice")
    result = curl("-N", f"{jwt_local.url}/chat", "-H", f"Authorization: Bearer {token}", "-d", '{"message":"hello"}')
    # THEN the reply streams as in every mode
    events = sse_events(result.stdout)
    assert events[0][0] == "meta" and events[-1][0] == "done"
    assert "".join(data["text"] for name, data in events if name == "token") == "You said: hello"
    # AND without a token, with an expired one, or with one for another API, curl is refused 401 before anything runs
    chat = [f"{jwt_local.url}/chat", "-d", '{"message":"hello"}', "-w", "\n%{http_code}"]
    assert status_and_code(curl(*chat)) == (401, "missing_token")
    for setting in ("LIFETIME=-120", "AUDIENCE=another-api"):
        refused = make_token(jwt_local, "alice", setting)
        assert status_and_code(curl(*chat, "-H", f"Authorization: Bearer {refused}")) == (401, "invalid_token")
    challenge = curl("-si", f"{jwt_local.url}/v1/models", "-H", "Authorization: Bearer not.a.token").stdout
    assert 'WWW-Authenticate: Bearer realm="chatstream", error="invalid_token"' in challenge
    # AND the public routes answer whoever asks
    assert json.loads(curl(f"{jwt_local.url}/health").stdout) == {"status": "ok"}


def test_two_users_never_see_each_others_sessions(jwt_local: RunningStack) -> None:
    # GIVEN alice's session
    alice, bob = make_token(jwt_local, "alice"), make_token(jwt_local, "bob")
    chat = curl("-N", f"{jwt_local.url}/chat", "-H", f"Authorization: Bearer {alice}", "-d", '{"message":"mine"}')
    session_id = sse_events(chat.stdout)[0][1]["session_id"]
    # WHEN bob asks for it, natively and through /v1 THEN it does not exist for him
    for path, code in (
        (f"/sessions/{session_id}", "session_not_found"),
        (f"/v1/responses/resp_{session_id}_1", "not_found"),
    ):
        asked = curl(f"{jwt_local.url}{path}", "-H", f"Authorization: Bearer {bob}", "-w", "\n%{http_code}")
        assert status_and_code(asked) == (404, code), path
    # AND alice reads it
    history = json.loads(curl(f"{jwt_local.url}/sessions/{session_id}", "-H", f"Authorization: Bearer {alice}").stdout)
    assert [turn["assistant"] for turn in history["turns"]] == ["You said: mine"]


def test_sigterm_stops_the_issuer_too() -> None:
    # GIVEN a `make local --auth-type JWT` of its own, its issuer answering
    stack = start_make_local("--auth-type JWT")
    try:
        issuer = issuer_of(stack)
        assert json.loads(curl(f"{issuer}/.well-known/openid-configuration").stdout)["issuer"] == issuer
        # WHEN make is sent SIGTERM
        stack.process.send_signal(signal.SIGTERM)
        stack.process.wait(timeout=10)
        # THEN the issuer's port is free again, as the Function URL's is
        for url in (issuer, stack.url):
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    finally:
        kill_tree(stack.process)
