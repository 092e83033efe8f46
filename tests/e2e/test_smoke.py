"""`make smoke URL=…` as a user runs it, against the local stack: every check passes on a working stack (NONE,
AWS_IAM with a second principal, and JWT with a second user), and a broken deployment (500s, a stopped stack) gives
FAIL lines and exit 1."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

import pytest

from chatstream_local.iam import Principal, Principals
from chatstream_local.stack import LocalStack, StackSettings
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.e2e

CHECKS = [
    "health",
    "chat streams",
    "resume with Last-Event-ID",
    "409 turn_in_progress",
    "cancel",
    "history",
    "409 turn_finished",
    "400 invalid_json",
    "400 invalid_request",
    "404 not_found",
    "404 session_not_found",
    "405 method_not_allowed",
    "413 payload_too_large",
    "/v1 chat completion",
]
ALICE = Principal("smoke-alice", "AKIASMOKEALICE", "alice-secret")
BOB = Principal("smoke-bob", "AKIASMOKEBOB", "bob-secret")


def smoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`make smoke` as make runs it: the module in a subprocess, no AWS configuration unless given."""
    base = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    empty = {
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "chatstream_client.smoke", *args],
        cwd=REPO_ROOT,
        env={**base, **empty, "PYTHONPATH": "client", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def check_lines(stdout: str) -> list[tuple[str, str]]:
    """(PASS|FAIL, check name) of each check line; the last line is the summary."""
    lines = stdout.splitlines()
    assert lines[-1].startswith("smoke: "), stdout
    results = []
    for line in lines[:-1]:
        verdict, rest = line.split(" ", 1)
        results.append((verdict, rest.split(": ", 1)[0]))
    return results


@pytest.fixture
def aws_region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def test_every_check_passes_against_the_local_stack(aws_region: None) -> None:
    # GIVEN the local stack as `make local` runs it (FunctionUrlAuthType NONE)
    with LocalStack(StackSettings(port=0)) as stack:
        # WHEN `make smoke URL=<its URL>` runs
        result = smoke("--url", stack.url)
    # THEN each check prints one PASS line, in order, and the command exits 0
    assert result.returncode == 0, result.stdout + result.stderr
    assert check_lines(result.stdout) == [("PASS", name) for name in CHECKS]
    assert result.stdout.splitlines()[-1] == f"smoke: all {len(CHECKS)} checks passed against {stack.url}"


@pytest.fixture(scope="module")
def iam_stack(start_module_stack: Callable[..., LocalStack]) -> LocalStack:
    """The local stack with FunctionUrlAuthType AWS_IAM, two principals allowed to sign (its model at its own pace, as
    `make local` runs it); the tests that use it share it."""
    overrides = {"FunctionUrlAuthType": "AWS_IAM"}
    return start_module_stack(model_delay_ms=None, parameter_overrides=overrides, principals=Principals([ALICE, BOB]))


def test_under_aws_iam_every_check_passes_and_another_principal_gets_404(iam_stack: LocalStack, tmp_path: Path) -> None:
    # GIVEN an AWS configuration with a profile for each principal, the first one the default
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "".join(
            f"[{p.name}]\naws_access_key_id = {p.access_key}\naws_secret_access_key = {p.secret_key}\n"
            for p in (ALICE, BOB)
        )
    )
    env = {
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_PROFILE": ALICE.name,
        "AWS_DEFAULT_REGION": "us-east-1",
    }

    # WHEN `make smoke URL=… ARGS="--iam --second-profile smoke-bob"` runs
    result = smoke("--url", iam_stack.url, "--iam", "--second-profile", BOB.name, env=env)

    # THEN every check passes, with the two that signing adds: an unsigned request is refused, and the second
    # principal gets 404 on the first one's session
    assert result.returncode == 0, result.stdout + result.stderr
    assert check_lines(result.stdout) == [("PASS", name) for name in [*CHECKS, "403 unsigned", "another principal"]]


def test_under_jwt_every_check_passes_with_a_token_and_another_user_gets_404(aws_region: None) -> None:
    # GIVEN the local stack in the JWT mode, and tokens of two users of its issuer
    with LocalStack(StackSettings(port=0, parameter_overrides={"FunctionUrlAuthType": "JWT"})) as stack:
        assert stack.issuer is not None
        alice, bob = stack.issuer.issuer.mint("alice"), stack.issuer.issuer.mint("bob")
        # WHEN `make smoke URL=… ARGS="--token … --second-token …"` runs (the first token from the environment)
        result = smoke("--url", stack.url, "--second-token", bob, env={"CHATSTREAM_TOKEN": alice})
    # THEN every check passes, with the two a JWT deployment adds: a request without a token (or with a made-up
    # one) is refused 401, and the second user gets 404 on the first one's session
    assert result.returncode == 0, result.stdout + result.stderr
    assert check_lines(result.stdout) == [
        ("PASS", name) for name in [*CHECKS, "401 without a token", "another principal"]
    ]


def test_under_aws_iam_a_key_the_stack_does_not_know_fails_every_check(iam_stack: LocalStack) -> None:
    # WHEN the requests are signed by a key that is no local principal's
    env = {"AWS_ACCESS_KEY_ID": "AKIAUNKNOWN", "AWS_SECRET_ACCESS_KEY": "nope", "AWS_DEFAULT_REGION": "us-east-1"}
    result = smoke("--url", iam_stack.url, "--iam", env=env)
    # THEN the Function URL refuses them (403) and no check but the unsigned one passes
    assert result.returncode == 1
    lines = check_lines(result.stdout)
    assert [name for verdict, name in lines if verdict == "PASS"] == ["403 unsigned"]
    assert "FAIL health: GET /health answered 403" in result.stdout


class _Answers500(http.server.BaseHTTPRequestHandler):
    def _fail(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"Message":"Internal Server Error"}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _fail  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


def test_a_deployment_answering_500_fails_every_check() -> None:
    # GIVEN a URL that answers 500 to everything
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers500)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = smoke("--url", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    # THEN every check is a FAIL line saying what it got, and the exit status is 1
    assert result.returncode == 1
    assert check_lines(result.stdout) == [("FAIL", name) for name in CHECKS]
    assert "FAIL health: GET /health answered 500" in result.stdout
    assert result.stdout.splitlines()[-1].startswith(f"smoke: {len(CHECKS)} of {len(CHECKS)} checks failed")


def test_a_stopped_stack_fails_every_check(aws_region: None) -> None:
    # GIVEN a local stack that was stopped
    stack = LocalStack(StackSettings(port=0)).start()
    url = stack.url
    stack.stop()
    # WHEN `make smoke` runs against its URL
    result = smoke("--url", url)
    # THEN every check fails, saying it cannot connect, and the exit status is 1
    assert result.returncode == 1
    assert check_lines(result.stdout) == [("FAIL", name) for name in CHECKS]
    assert f"FAIL health: cannot connect to {url}" in result.stdout
