"""`make local` as a user runs it: a subprocess on its own port, driven with curl, httpx + SSE, and the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import httpx
import pytest

from chatstream_client.api import ChatClient
from chatstream_local.bedrock.model import plan_reply
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.e2e
READY = "chatstream local stack ready at "


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc), however it detached its session."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class RunningStack:
    def __init__(self, process: subprocess.Popen[str], url: str, output: list[str]) -> None:
        self.process = process
        self.url = url
        self.output = output

    def line(self, prefix: str, timeout_s: float = 30) -> str:
        """The first line of the stack's output that starts with ``prefix``, once it has printed it (the lines after
        the ready line come a moment later)."""
        deadline = time.monotonic() + timeout_s
        while not (lines := [line for line in self.output if line.startswith(prefix)]):
            assert time.monotonic() < deadline, self.output
            time.sleep(0.1)
        return lines[0]


def start_make_local(args: str = "") -> RunningStack:
    """`make local` on a free port, with a fast model (``args``: its ``ARGS``); waits for the ready line.
    ``-o .venv/.installed``: the stack runs from the venv the suite runs in, never reinstalled (a clone's requirements
    files can be newer than the stamp, and installing needs the network)."""
    # Port 0: the stack binds a free port itself and names it in the ready line. A port chosen here and bound there
    # later could be taken in between (by an execution environment of the module's stack, say).
    env = {**os.environ, "CHATSTREAM_PORT": "0", "CHATSTREAM_LOCAL_MODEL_DELAY_MS": "5"}
    process = subprocess.Popen(
        ["make", "-s", "-o", ".venv/.installed", "local", *([f"ARGS={args}"] if args else [])],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line.rstrip())
            if line.startswith(READY):
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(timeout=120):
        kill_tree(process)
        pytest.fail("make local printed no ready line:\n" + "\n".join(output[-30:]))
    url = next(line for line in output if line.startswith(READY))[len(READY) :]
    return RunningStack(process, url, output)


def kill_tree(process: subprocess.Popen[str]) -> None:
    """SIGKILL ``process`` and every process below it, if it is still running."""
    if process.poll() is not None:
        return
    tree = descendants(process.pid)
    os.killpg(process.pid, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


@pytest.fixture(scope="module")
def make_local() -> Iterator[RunningStack]:
    """One `make local` for the module's tests, which use sessions of their own."""
    stack = start_make_local()
    yield stack
    kill_tree(stack.process)


def curl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """curl with ``args``; ``stdin`` is what it reads from ``@-`` (a body too large for an argument)."""
    return subprocess.run(["curl", "-sS", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False)


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_ready_line_uses_the_requested_port(make_local: RunningStack) -> None:
    assert make_local.url.startswith("http://127.0.0.1:")
    assert httpx.get(f"{make_local.url}/health").json() == {"status": "ok"}


def test_the_readme_curl_line_streams_a_reply(make_local: RunningStack) -> None:
    # WHEN the README's curl line is run THEN the reply streams as HTTP_API.md shows
    result = curl("-N", f"{make_local.url}/chat", "-d", '{"message":"hello"}')
    events = sse_events(result.stdout)
    assert result.stdout.startswith("retry: 1000\n")
    assert events[0][0] == "meta" and events[-1] == ("done", events[-1][1])
    assert "".join(data["text"] for name, data in events if name == "token") == "You said: hello"
    assert events[-1][1]["stop_reason"] == "end_turn"


def test_tokens_arrive_while_the_model_is_still_generating(make_local: RunningStack) -> None:
    # GIVEN curl streaming a long reply
    process = subprocess.Popen(
        ["curl", "-sN", f"{make_local.url}/chat", "-d", '{"message":"/long 5000"}'],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    meta = None
    try:
        for line in process.stdout:
            if line.startswith("data: ") and "session_id" in line:
                meta = json.loads(line[6:])
            if line.startswith("event: token"):
                break
        # WHEN the first token has arrived THEN the turn is still generating: tokens are not held to the end
        assert meta is not None
        history = httpx.get(f"{make_local.url}/sessions/{meta['session_id']}").json()
        assert history["turns"][0]["status"] == "in_progress"
        httpx.post(f"{make_local.url}/sessions/{meta['session_id']}/turns/1/cancel")
    finally:
        rest = process.communicate(timeout=60)[0]
    assert "event: done" in rest and '"stop_reason":"cancelled"' in rest


def test_multi_turn_resume_cancel_and_errors_with_the_python_client(make_local: RunningStack) -> None:
    with ChatClient(make_local.url) as client:
        first = client.chat("hello")
        second = client.chat("/long 50", first.session_id)
        assert (first.text, second.text, second.turn) == ("You said: hello", plan_reply("/long 50").text, 2)
        history = client.history(first.session_id)["turns"]
        assert [t["assistant"] for t in history] == [first.text, second.text]
        # AND a resume from a piece inside a record (an id <seq>.<offset>) carries on exactly after it
        middle = next(i for i in range(len(second.ids) // 2, len(second.ids)) if "." in second.ids[i - 1])
        resumed = client.follow(second.events_url, after=second.ids[middle - 1])
        assert resumed.ids == second.ids[middle:] and resumed.text == "".join(second.chunks[middle:])
        errored = client.chat("/error-after 2", first.session_id)
        assert errored.text == "w1 w2" and errored.error is not None
        throttled = client.chat("/throttle", first.session_id)
        assert throttled.error is not None and throttled.error["code"] == "throttled"
        # AND every stream came whole: no event twice, no resume the client had to make by itself
        results = (first, second, resumed, errored, throttled)
        assert all(r.clean for r in results), [(r.repeated_ids, r.incidents) for r in results]


def test_twenty_concurrent_chats_are_each_exact(make_local: RunningStack) -> None:
    def chat(index: int) -> bool:
        # Twenty relays and generations start at once: on a busy machine a reply's first byte can take longer than
        # the client's default 30 s
        with ChatClient(make_local.url, read_timeout=120) as client:
            message = f"/long {20 + index * 7}"
            result = client.chat(message)
            return result.text == plan_reply(message).text and result.done is not None and result.clean

    with ThreadPoolExecutor(max_workers=20) as pool:
        assert all(pool.map(chat, range(20)))


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/chat", "{not json", 400, "invalid_json"),
        ("POST", "/chat", "[1, 2]", 400, "invalid_json"),
        ("POST", "/chat", "{}", 400, "invalid_request"),
        ("POST", "/chat", '{"message": ""}', 400, "invalid_request"),
        ("POST", "/chat", json.dumps({"message": "x" * 32_001}), 400, "invalid_request"),
        ("POST", "/chat", '{"message": "hi", "max_tokens": 0}', 400, "invalid_request"),
        ("POST", "/chat", '{"message": "hi", "temperature": 1.5}', 400, "invalid_request"),
        ("POST", "/chat", json.dumps({"message": "x" * 270_000}), 413, "payload_too_large"),
        ("GET", "/nope", None, 404, "not_found"),
        ("GET", "/sessions/0123456789abcdef0123456789abcdef", None, 404, "session_not_found"),
        ("GET", "/chat", None, 405, "method_not_allowed"),
    ],
)
def test_error_rows(make_local: RunningStack, method: str, path: str, body: str | None, status: int, code: str) -> None:
    args = ["-X", method, f"{make_local.url}{path}", "-w", "\n%{http_code}"]
    if body is not None:
        args += ["--data-binary", "@-"]  # from stdin: a body over the body limit is too large for an argument
    result = curl(*args, stdin=body)
    payload, _, http_code = result.stdout.rpartition("\n")
    assert int(http_code) == status
    assert json.loads(payload)["error"]["code"] == code


def test_turn_and_cancel_errors(make_local: RunningStack) -> None:
    with ChatClient(make_local.url) as client:
        done = client.chat("hello")
    missing = httpx.get(f"{make_local.url}/sessions/{done.session_id}/turns/9/events")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "turn_not_found")
    finished = httpx.post(f"{make_local.url}/sessions/{done.session_id}/turns/1/cancel")
    assert (finished.status_code, finished.json()["error"]["code"]) == (409, "turn_finished")
    not_allowed = httpx.delete(f"{make_local.url}/chat")
    assert not_allowed.status_code == 405 and "POST" in not_allowed.headers["allow"]


def test_curl_head_gets_what_get_would_without_the_body(make_local: RunningStack) -> None:
    # GIVEN a finished turn
    with ChatClient(make_local.url) as client:
        done = client.chat("hello")
    events = f"/sessions/{done.session_id}/turns/1/events"
    for path, status, content_type in [
        ("/", 200, "text/html"),
        ("/health", 200, "application/json"),
        (events, 200, "text/event-stream"),
        ("/chat", 405, "application/json"),
    ]:
        # WHEN curl asks for the path's headers only (curl -I sends HEAD)
        result = curl("-I", f"{make_local.url}{path}")
        # THEN GET's status line and content type, with no body (curl would wait for one, then time out)
        lines = result.stdout.splitlines()
        assert result.returncode == 0 and int(lines[0].split()[1]) == status, (path, result.stdout, result.stderr)
        headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if ": " in line)}
        assert headers["content-type"].startswith(content_type), (path, headers)
        if status == 405:
            assert headers["allow"] == "POST"


def test_the_local_aws_services_answer_tools_but_no_browser_page(make_local: RunningStack) -> None:
    # GIVEN moto's URL, region and chat table, as the stack prints them at start
    line = make_local.line("local AWS services at ")
    printed = re.search(r"at (http://127\.0\.0\.1:(\d+)) \(region (\S+)\).* ChatTable (\S+),", line)
    assert printed is not None
    moto_url, port, region, table = printed.groups()
    scope = (
        f"AWS4-HMAC-SHA256 Credential=local/20250101/{region}/dynamodb/aws4_request, SignedHeaders=host, Signature=0"
    )
    scan = {
        "X-Amz-Target": "DynamoDB_20120810.Scan",
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": scope,
    }
    body = json.dumps({"TableName": table})
    # WHEN a page elsewhere scans the table (its browser's preflight, then the request), or by DNS rebinding
    page = {"Origin": "https://evil.example"}
    preflight = httpx.options(moto_url, headers={**page, "Access-Control-Request-Method": "POST"})
    from_page = httpx.post(moto_url, headers={**scan, **page}, content=body)
    rebound = httpx.post(moto_url, headers={**scan, "Host": f"rebind.attacker.example:{port}"}, content=body)
    # THEN each is refused, and no answer carries a CORS header that would let the page read it
    for response in (preflight, from_page, rebound):
        assert response.status_code == 403 and "Items" not in response.text
        assert not any(name.lower().startswith("access-control-") for name in response.headers)
    # AND a tool (botocore: no Origin, moto's own address as the Host) still reads the table
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=moto_url,
        region_name=region,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    assert "Items" in dynamodb.scan(TableName=table)


def run_cli(url: str, message: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": "client:local:layers/chatstream:layers/streaming-runtime"}
    command = [sys.executable, "-m", "chatstream_client.cli", "--url", url, "--message", message]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_cli_one_shot(make_local: RunningStack) -> None:
    ok = run_cli(make_local.url, "hello cli")
    assert (ok.returncode, ok.stdout.strip()) == (0, "You said: hello cli")
    failed = run_cli(make_local.url, "/error-after 1")
    assert failed.returncode == 1 and failed.stdout.strip() == "w1" and "model_stream_error" in failed.stderr


def test_sigterm_stops_everything_within_five_seconds() -> None:
    # GIVEN a `make local` of its own (the module's stack stays up for the other tests, whatever their order) and
    # its running tree (make, the stack, moto, every execution environment)
    stack = start_make_local()
    try:
        tree = descendants(stack.process.pid) | {stack.process.pid}
        assert len(tree) >= 4
        # WHEN make is sent SIGTERM
        stack.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(pid) for pid in tree):
            time.sleep(0.1)
        stack.process.wait(timeout=5)
        # THEN no process of the tree is left and the port is free again
        assert [pid for pid in tree if alive(pid)] == []
        port = int(stack.url.rsplit(":", 1)[1])
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    finally:
        kill_tree(stack.process)


@pytest.mark.parametrize("round_", range(4))  # a signal lands inside the shutdown's first steps about half the time
def test_a_burst_of_signals_still_stops_everything_within_five_seconds(round_: int) -> None:
    # GIVEN the stack running in the foreground, as `make local` execs it
    env = {**os.environ, "PYTHONPATH": "local:layers/chatstream:layers/streaming-runtime"}
    command = [sys.executable, "-m", "chatstream_local", "--port", "0"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().decode().startswith(READY)
        tree = descendants(process.pid) | {process.pid}
        # WHEN a shell sends it thousands of SIGTERMs, as fast as it can (each may arrive while the last is handled)
        subprocess.run(["bash", "-c", f"for i in $(seq 5000); do kill -TERM {process.pid}; done"], check=False)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(pid) for pid in tree):
            time.sleep(0.1)
        # THEN it and every process it started are gone within the contract's 5 seconds
        assert [pid for pid in tree if alive(pid)] == []
    finally:
        if process.poll() is None:
            for pid in descendants(process.pid) | {process.pid}:
                os.kill(pid, signal.SIGKILL)
            process.wait()
