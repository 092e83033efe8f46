"""The terminal client, interactive, as a person uses it: type, watch, Ctrl-C to cancel, keep the session."""

from __future__ import annotations

import contextlib
import os
import pty
import selectors
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from chatstream_client.api import ChatClient
from chatstream_client.cli import DIM, UNDIM
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Callable

    from chatstream_local.stack import LocalStack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(start_module_stack: Callable[..., LocalStack]) -> LocalStack:
    """The local stack as `make local` starts it, for the tests that need nothing else of it (one session each)."""
    return start_module_stack()


class Terminal:
    """The CLI in a subprocess on a pseudo-terminal (stdin and stdout; stderr a pipe): type lines, read what it
    printed so far (the terminal echoes what is typed)."""

    def __init__(self, url: str) -> None:
        env = {**os.environ, "PYTHONPATH": "client:local:layers/chatstream:layers/streaming-runtime"}
        self.leader, follower = pty.openpty()
        self.process = subprocess.Popen(  # noqa: S603 - this interpreter, our client
            [sys.executable, "-u", "-m", "chatstream_client.cli", "--url", url],
            cwd=REPO_ROOT,
            env=env,
            stdin=follower,
            stdout=follower,
            stderr=subprocess.PIPE,
        )
        os.close(follower)
        self.out = b""
        self.err = b""
        self._selector = selectors.DefaultSelector()
        assert self.process.stderr is not None
        os.set_blocking(self.process.stderr.fileno(), False)
        self._selector.register(self.process.stderr, selectors.EVENT_READ)
        self._selector.register(self.leader, selectors.EVENT_READ)

    def type(self, line: str) -> None:
        os.write(self.leader, line.encode() + b"\n")

    def wait_for(self, text: str, where: str = "out", timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in (self.out if where == "out" else self.err).decode(errors="replace"):
            assert time.monotonic() < deadline, f"{text!r} never appeared; out={self.out[-300:]!r} err={self.err!r}"
            for key, _ in self._selector.select(timeout=0.1):
                if key.fileobj == self.leader:
                    with contextlib.suppress(OSError):  # the terminal closes when the client exits
                        self.out += os.read(self.leader, 4096)
                elif chunk := key.fileobj.read():  # type: ignore[union-attr]
                    self.err += chunk

    def close(self) -> int:
        os.write(self.leader, b"\x04")  # Ctrl-D at the prompt: end of input
        status = self.process.wait(timeout=30)
        self._selector.close()
        os.close(self.leader)
        return status


def test_interactive_chat_with_ctrl_c_cancel(start_stack: Callable[..., LocalStack]) -> None:
    # GIVEN the local stack with a model slow enough to interrupt, and the CLI at its prompt
    stack = start_stack(model_delay_ms=10)
    terminal = Terminal(stack.url)
    terminal.wait_for("Ctrl-C cancels", where="err")
    # WHEN the user asks for a long reply and presses Ctrl-C once words appear
    terminal.type("/long 3000")
    terminal.wait_for(" w3")
    terminal.process.send_signal(signal.SIGINT)
    # THEN the turn is cancelled, and the prompt comes back
    terminal.wait_for("[cancelled]", where="err")
    # WHEN the user sends another message THEN it is answered in the same session
    terminal.type("hello there")
    terminal.wait_for("You said: hello there")
    assert terminal.close() == 0
    session_id = _session_of(stack)
    with ChatClient(stack.url) as client:
        turns = client.history(session_id)["turns"]
    assert [(t["turn"], t["status"]) for t in turns] == [(1, "cancelled"), (2, "complete")]
    assert turns[0]["assistant"] and terminal.out.decode().count("assistant> ") == 2


def _session_of(stack: LocalStack) -> str:
    """The only session in the stack's table."""
    items = stack.client("dynamodb").scan(TableName=stack.name("ChatTable"))["Items"]
    sessions = {item["pk"]["S"][2:] for item in items if item["sk"]["S"] == "SESSION"}
    assert len(sessions) == 1
    return sessions.pop()


def _cli(url: str, *args: str, stdout: int) -> subprocess.Popen[bytes]:
    # A terminal with colour, whatever the environment the tests run in (NO_COLOR, a CI's TERM=dumb)
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(PYTHONPATH="client:local:layers/chatstream:layers/streaming-runtime", TERM="xterm")
    command = [sys.executable, "-u", "-m", "chatstream_client.cli", "--url", url, *args]
    return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE)


def test_piped_messages_get_the_replies_alone_on_stdout(stack: LocalStack) -> None:
    # GIVEN the local stack WHEN the interactive client reads two messages from a pipe and writes to one
    env = {**os.environ, "PYTHONPATH": "client:local:layers/chatstream:layers/streaming-runtime"}
    done = subprocess.run(  # noqa: S603 - this interpreter, our client
        [sys.executable, "-m", "chatstream_client.cli", "--url", stack.url],
        cwd=REPO_ROOT,
        env=env,
        input="hello\n/think 2 again\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # THEN stdout is the replies, one a line, with no prompt or label; the reasoning went to stderr
    assert done.returncode == 0, done.stderr
    assert done.stdout == "You said: hello\nYou said: again\n"
    assert "you>" not in done.stderr and "r1 r2" in done.stderr


def test_reasoning_is_dimmed_on_a_terminal_and_kept_off_a_piped_stdout(stack: LocalStack) -> None:
    # GIVEN the local stack
    # WHEN the one-shot client asks for reasoning with its stdout on a terminal (a pseudo-terminal)
    leader, follower = pty.openpty()
    process = _cli(stack.url, "--message", "/think 3 hello", stdout=follower)
    os.close(follower)
    seen = b""
    with contextlib.suppress(OSError):  # the terminal closes when the client exits
        while chunk := os.read(leader, 4096):
            seen += chunk
    os.close(leader)
    assert process.wait(timeout=30) == 0
    # THEN the reasoning shows first, dimmed, then on its own line the reply, not dimmed
    assert seen.decode() == f"{DIM}r1 r2 r3{UNDIM}\r\nYou said: hello\r\n"
    # WHEN stdout is a pipe instead
    piped = _cli(stack.url, "--message", "/think 3 hello", stdout=subprocess.PIPE)
    out, err = piped.communicate(timeout=30)
    # THEN stdout is exactly the reply, and the reasoning went to stderr, with no escape codes anywhere
    assert piped.returncode == 0
    assert (out.decode(), err.decode()) == ("You said: hello\n", "r1 r2 r3\n")
