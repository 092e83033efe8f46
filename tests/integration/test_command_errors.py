"""The commands a user runs (`make chat`, `make redrive`, `make local`, `make invoke`, `make smoke`, `make delete`,
`make limits`) fail in one clear line, with a non-zero exit.

Each runs as its make target runs it: the module in a subprocess, with the Makefile's PYTHONPATH, and an AWS
configuration that is empty (no variables, no files, no instance metadata) where credentials matter.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

import pytest

from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration

DEPLOYED_URL = "https://abc.lambda-url.us-east-1.on.aws"
EMPTY_AWS = {
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def run(
    module: str, *args: str, pythonpath: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` as make runs it, without any AWS_* variable of ours unless given."""
    base = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(
        command,
        cwd=REPO_ROOT,
        env={**base, **EMPTY_AWS, "PYTHONPATH": pythonpath, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {stderr!r}"
    return lines[0]


@pytest.fixture
def unused_port() -> Iterator[int]:
    """A port nothing listens on: held bound, never listening, so connections are refused and no server takes it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("one_shot", [False, True], ids=["interactive", "one-shot"])
def test_chat_with_a_deployed_url_and_no_credentials(one_shot: bool) -> None:
    # WHEN `make chat URL=https://….lambda-url.….on.aws` runs where no AWS credentials are configured
    args = ["--url", DEPLOYED_URL, *(["--message", "hello"] if one_shot else [])]
    result = run("chatstream_client.cli", *args, pythonpath="client", stdin="hello\n")
    # THEN it says, in one line, that credentials are missing and how to configure them
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert "no AWS credentials" in line and "aws configure" in line and "--no-iam" in line


@pytest.mark.parametrize("one_shot", [False, True], ids=["interactive", "one-shot"])
def test_chat_with_no_stack_running(one_shot: bool, unused_port: int) -> None:
    # WHEN `make chat` runs against a local URL nothing listens on
    url = f"http://127.0.0.1:{unused_port}"
    args = ["--url", url, *(["--message", "hello"] if one_shot else [])]
    result = run("chatstream_client.cli", *args, pythonpath="client", stdin="hello\n")
    # THEN it says in one line that the stack is not running and how to start it
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert f"cannot connect to {url}" in line and "make local" in line
    assert result.stdout == ""


def test_local_when_the_port_is_taken(taken_port: int) -> None:
    # WHEN `make local` runs with its port already taken
    result = run(
        "chatstream_local",
        pythonpath="local:layers/chatstream:layers/streaming-runtime",
        env={"CHATSTREAM_PORT": str(taken_port)},
    )
    # THEN it says so in one line, naming the port and the variable that changes it
    line = one_line(result.stderr)
    assert result.returncode == 1
    assert f"port {taken_port}" in line and "CHATSTREAM_PORT" in line


def test_local_with_an_enhanced_fan_out_that_is_not_a_boolean() -> None:
    # WHEN `make local` runs with CHATSTREAM_ENHANCED_FAN_OUT neither true nor false
    result = run(
        "chatstream_local",
        pythonpath="local:layers/chatstream:layers/streaming-runtime",
        env={"CHATSTREAM_ENHANCED_FAN_OUT": "maybe"},
    )
    # THEN it says so in one line, naming the variable and what it takes
    line = one_line(result.stderr)
    assert result.returncode == 1
    assert "CHATSTREAM_ENHANCED_FAN_OUT" in line and "'true' or 'false'" in line and "maybe" in line


OPS_PATH = "ops:layers/chatstream"  # the operator command, and the layer's package it shares with the consumer


def test_redrive_with_no_credentials() -> None:
    # WHEN `make redrive` runs where no AWS credentials are configured
    result = run(
        "chatstream_ops.redrive",
        *("--queue-url", "https://sqs.us-east-1.amazonaws.com/123456789012/dlq", "--table-name", "chat"),
        pythonpath=OPS_PATH,
        env={"AWS_DEFAULT_REGION": "us-east-1"},
    )
    # THEN it says in one line that credentials are missing and how to configure them
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert line.startswith("redrive: no AWS credentials") and "aws configure" in line


def test_redrive_with_no_region() -> None:
    # WHEN the redrive runs with neither a region nor a stack's outputs to find one
    result = run(
        "chatstream_ops.redrive",
        *("--queue-url", "https://sqs.us-east-1.amazonaws.com/123456789012/dlq", "--table-name", "chat"),
        pythonpath=OPS_PATH,
        env={"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"},
    )
    # THEN it says in one line how to give one
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert line.startswith("redrive: no AWS region") and "--region" in line


def test_delete_with_no_credentials() -> None:
    # WHEN `make delete` runs where no AWS credentials are configured
    result = run(
        "chatstream_ops.delete",
        "--stack-name",
        "chatstream",
        pythonpath=OPS_PATH,
        env={"AWS_DEFAULT_REGION": "us-east-1"},
    )
    # THEN it says in one line that credentials are missing and how to configure them, having deleted nothing
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert line.startswith("delete: no AWS credentials") and "aws configure" in line
    assert result.stdout == ""


def test_delete_with_no_region() -> None:
    # WHEN `make delete` runs with credentials but no region (neither the profile's nor --region)
    result = run(
        "chatstream_ops.delete",
        *("--stack-name", "chatstream"),
        pythonpath=OPS_PATH,
        env={"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"},
    )
    # THEN it says in one line how to give one
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert line.startswith("delete: no AWS region") and "--region" in line


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"AWS_DEFAULT_REGION": "us-east-1"}, "limits: no AWS credentials"),
        ({"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}, "limits: no AWS region"),
    ],
    ids=["no credentials", "no region"],
)
def test_limits_without_credentials_or_region(env: dict[str, str], says: str) -> None:
    # WHEN `make limits` runs where its AWS configuration lacks credentials, or a region
    result = run(
        "chatstream_ops.limits",
        *("--stack-name", "chatstream", "--owner", "anonymous", "--turns-at-once", "2"),
        pythonpath=OPS_PATH,
        env=env,
    )
    # THEN it says so in one line, having set nothing
    assert result.returncode == 2 and one_line(result.stderr).startswith(says) and result.stdout == ""


def test_redrive_with_nothing_to_read() -> None:
    # WHEN the redrive runs without a queue, a table or a stack name
    result = run("chatstream_ops.redrive", pythonpath=OPS_PATH, env={"AWS_DEFAULT_REGION": "us-east-1"})
    # THEN it names what to pass, in one line
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert "--queue-url" in line and "STACK=" in line


LOCAL_PATH = "local:layers/chatstream:layers/streaming-runtime"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "invoke: name the function: make invoke FUNCTION=ProxyFunction EVENT=events/proxy-generate.json"),
        (
            ["Nope", "--event", "events/relay-health.json"],
            "invoke: no function 'Nope' in template.yaml; its functions: ConsumerFunction, ProxyFunction, "
            "RelayFunction, TurnReaperFunction",
        ),
        (
            ["RelayFunction", "--event", "events/no-such-event.json"],
            "invoke: no event file events/no-such-event.json: give one of events/*.json (EVENT=events/…)",
        ),
        (["RelayFunction", "--event", "README.md"], "invoke: README.md is not JSON ("),
    ],
    ids=["no function", "unknown function", "missing event file", "event not JSON"],
)
def test_invoke_with_a_mistake_in_the_command(args: list[str], expected: str, unused_port: int) -> None:
    # WHEN `make invoke` names no function, an unknown one, or an event file that is missing or not JSON
    result = run("chatstream_local.sam.invoke", *args, pythonpath=LOCAL_PATH, env={"CHATSTREAM_PORT": str(unused_port)})
    # THEN it says what is wrong in one line, exits 2, and starts nothing (stdout stays empty)
    assert one_line(result.stderr).startswith(expected)
    assert result.returncode == 2 and result.stdout == ""


def test_invoke_when_the_port_is_not_a_local_stack() -> None:
    # GIVEN something else answering HTTP on the port
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        # WHEN `make invoke` runs against it
        result = run(
            "chatstream_local.sam.invoke",
            *("RelayFunction", "--event", "events/relay-health.json"),
            pythonpath=LOCAL_PATH,
            env={"CHATSTREAM_PORT": str(port)},
        )
    finally:
        server.shutdown()
        server.server_close()
    # THEN it says that what answers there is not the local stack, in one line
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert line == (
        f"invoke: http://127.0.0.1:{port} answers, but not as the local stack's Lambda API: "
        "is `make local` what runs there?"
    )


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--url", DEPLOYED_URL], {}, "smoke: no AWS credentials to sign requests to"),
        (
            ["--url", "http://127.0.0.1:1", "--second-profile", "other"],
            {},
            "smoke: --second-profile needs signed requests: the URL's auth must be AWS_IAM (pass --iam)",
        ),
        (
            ["--url", DEPLOYED_URL, "--second-profile", "nobody"],
            {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"},
            "smoke: cannot sign requests to https://abc.lambda-url.us-east-1.on.aws: The config profile (nobody)",
        ),
        (["--url", "ftp://example.com"], {}, "smoke: URL must be an http:// or https:// URL, got 'ftp://example.com'"),
    ],
    ids=["no credentials", "second profile unsigned", "unknown profile", "not a URL"],
)
def test_smoke_with_a_mistake_in_the_command(args: list[str], env: dict[str, str], expected: str) -> None:
    # WHEN `make smoke` cannot sign, is given a profile that does not exist, or a URL that is not one
    result = run("chatstream_client.smoke", *args, pythonpath="client", env=env)
    # THEN it says so in one line, exits 2, and runs no check
    assert one_line(result.stderr).startswith(expected)
    assert result.returncode == 2 and result.stdout == ""


@pytest.mark.parametrize("target", ["chat", "invoke", "smoke"])
def test_make_writes_only_the_commands_own_output_to_stdout(target: str) -> None:
    # WHEN a client command runs through make (its help: no stack needed)
    done = subprocess.run(  # noqa: S603 - make, our Makefile
        ["make", "--no-print-directory", "-C", str(REPO_ROOT), "-o", ".venv/.installed", target, "ARGS=--help"],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # THEN stdout is what the command wrote (README: stdout holds exactly the reply, the payload), not make's echo
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout[:200]


SLOW_IMPORT = """
import sys, time
class SlowHttpx:  # the client's imports take a while: say so, then wait long enough to be interrupted
    def find_spec(self, name, path=None, target=None):
        if name == "httpx":
            sys.stderr.write("importing httpx\\n")
            sys.stderr.flush()
            time.sleep(30)
        return None
sys.meta_path.insert(0, SlowHttpx())
"""


def test_chat_interrupted_while_it_starts(tmp_path: Path) -> None:
    # GIVEN `make chat` still importing its libraries (made slow here, so the moment can be hit)
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORT)
    base = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    process = subprocess.Popen(  # noqa: S603 - this Python, our module
        [sys.executable, "-m", "chatstream_client.cli", "--message", "hi"],
        cwd=REPO_ROOT,
        env={**base, **EMPTY_AWS, "PYTHONPATH": f"client{os.pathsep}{tmp_path}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert process.stderr.readline() == "importing httpx\n"
        # WHEN the user presses Ctrl-C
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    # THEN it quits at once, as it does later on: exit 130, no traceback
    assert process.returncode == 130
    assert stdout == "" and stderr == ""
