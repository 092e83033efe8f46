"""chatstream's terminal client: ``python -m chatstream_client.cli`` (``make chat``).

Interactive by default: type a message, watch the reply stream in; the session carries across turns. A line that
ends in a backslash goes on on the next line: the message is both lines, with a line break where the backslash was.
Ctrl-C while a reply streams cancels that turn (the cancel endpoint), even before its first word: in a session it
knows, the client finds the turn in the history (a new session's turn it cannot name, so that one goes on); Ctrl-C
at the prompt, or twice, quits. A dropped connection resumes from the last event id, and keeps trying through an
outage of up to 5 minutes; a busy relay (429, 503) is asked again after a short random wait. Every send of a
message carries the message's Idempotency-Key, so after a failure that may have started the turn (a 500, 502 or 504,
a connection that broke) the message is simply sent again: the relay follows the turn if it started and starts it if
not. It never starts a second turn (docs/HTTP_API.md, "Retries"). A message your budget refused (too many turns
this minute, or at once, or the day's tokens spent) is not sent: the client says so and when to try again, and at a
terminal's prompt the message is typed for you again (press Enter to send it).

``--message TEXT`` is one-shot (``--message -`` reads the message from stdin, all of it): prints the reply and
exits 0, or 1 on an ``error`` event, 2 when the relay answers with an error or cannot be reached. ``--follow
EVENTS_URL [--after ID]`` prints a turn that is already under way (from event id ``ID``, or its start) and exits
the same way: the line the client prints when it lost a reply for good (the relay out of reach for 5 minutes)
names both. ``--url`` points it at a deployed Function URL; ``--iam`` (automatic for ``*.lambda-url.*.on.aws``
hosts unless ``--no-iam``) signs requests with SigV4 using your AWS credentials, for the default ``AWS_IAM`` auth;
``--token TOKEN`` (or ``CHATSTREAM_TOKEN``) sends an access token instead, for a relay in the JWT mode (locally:
``make chat ARGS="--token $(make token SUB=alice)"``).

A reasoning model's reasoning is printed as it streams, before (or between) the reply's words: dimmed (ANSI
faint) on a terminal, and on stderr when stdout is not a terminal, so that a script reading stdout gets exactly
the reply, and no escape codes land in a file. With ``NO_COLOR`` set (no-color.org) or ``TERM=dumb`` the client
writes no escape codes at all: on a terminal the reasoning starts with ``thinking:`` on a line of its own.

A reply that stopped before its end is followed by a line on stderr that says so (``[cancelled]``, ``[stopped at
the token limit]``, or the model's context window): a turn cut while the model reasoned has an empty reply.

A tool call the model made (a turn that declared tools, started through the API; the terminal has no tools of its
own) is printed plainly on a line of its own with the reply, once complete: ``[tool call get_weather {"city":
"Paris"}]``; a reply that stopped to call tools is followed by ``[stopped to call a tool]`` on stderr.

Whatever fails, the client says so in one line on stderr, with what to do about it. Ctrl-C that quits exits 130;
a reader that left (``… | head``) ends it quietly with 141, as SIGPIPE would.
"""

# ruff: noqa: E402 (the imports after the Ctrl-C guard below are meant to come after it)
from __future__ import annotations

import os
import signal
import sys


def _quit_quietly(*_: object) -> None:
    os._exit(130)


if __name__ == "__main__":  # Ctrl-C while the imports below load (~0.2 s) quits quietly, as main() does later
    signal.signal(signal.SIGINT, _quit_quietly)

import argparse
import importlib.util
import re
import shlex
from typing import TYPE_CHECKING, TextIO

import httpx
from botocore.exceptions import BotoCoreError, NoCredentialsError
from httpx_sse import SSEError

from chatstream_client.api import DEFAULT_URL, ApiError, ChatClient, ToolCall, TurnResult
from chatstream_client.auth import TOKEN_ENV, BearerAuth, SigV4Auth, is_function_url
from chatstream_client.retry import REFUSALS

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

EXIT_ERROR_EVENT = 1  # the turn ended with an `error` event
EXIT_FAILED = 2  # the relay answered with an error, or could not be reached
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # as a process SIGPIPE ended (128 + 13), which Python's SIGPIPE handling replaces
DIM, UNDIM = "\x1b[2m", "\x1b[22m"  # ANSI faint on, and back to normal intensity
THINKING = "thinking: "  # what marks the reasoning on a terminal without colour
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_EVENT_ID = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")  # a record's seq, or a piece's (HTTP_API.md, "Pacing")
# A turn that ended before its reply did, said on stderr after it (a reply cut while the model reasoned is empty:
# without it, a blank line and exit 0 would read as a whole reply of nothing). The page says the same.
_CUT_SHORT = {
    "tool_use": "stopped to call a tool",
    "cancelled": "cancelled",
    "max_tokens": "stopped at the token limit",
    "model_context_window_exceeded": "stopped: the conversation filled the model's context window",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chatstream_client.cli",
        description=__doc__.split("\n\n")[0],
        epilog="Interactive unless --message or --follow: type a message, Enter sends it; a line that ends in a "
        "backslash goes on on the next line (one message of several lines). Ctrl-C cancels a reply; at the prompt "
        "it quits. CHATSTREAM_URL sets the default --url. With NO_COLOR set (no-color.org) or TERM=dumb no escape "
        "codes are written: a terminal shows the reasoning after 'thinking:', not dimmed.",
    )
    parser.add_argument("--url", default=os.environ.get("CHATSTREAM_URL", DEFAULT_URL), help="relay URL")
    one_shot = parser.add_mutually_exclusive_group()
    one_shot.add_argument(
        "--message", "-m", help="one-shot: send this message ('-': all of stdin, lines and all), print the reply, exit"
    )
    one_shot.add_argument(
        "--follow", metavar="EVENTS_URL", help="one-shot: print a turn under way (its events URL), exit"
    )
    parser.add_argument("--after", metavar="ID", help="with --follow: from this event id on (default: the start)")
    parser.add_argument("--session", help="continue this session id")
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--temperature", type=float)
    iam = parser.add_mutually_exclusive_group()
    iam.add_argument("--iam", dest="iam", action="store_true", default=None, help="sign requests with SigV4")
    iam.add_argument("--no-iam", dest="iam", action="store_false", help="never sign requests")
    parser.add_argument("--region", help="region for SigV4 (default: from the URL or your AWS config)")
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV) or None,
        help=f"an access token for a relay in the JWT mode, sent as Authorization: Bearer (default: ${TOKEN_ENV})",
    )
    return parser


class Failure(Exception):
    """A failure the user can act on: its message is the one line the client prints."""


def explain(error: Exception, url: str, signed: bool, session: str | None = None) -> str:
    """One line for ``error``: what went wrong talking to ``url``, and what to do about it. ``session``: the
    ``--session`` a one-shot message continued, if any: when it is not found, the advice is to drop the option (the
    relay's names its API field). An interactive run passes none: it goes on in a new session, and says so."""
    if isinstance(error, NoCredentialsError):
        return (
            f"no AWS credentials to sign requests to {url}: configure them (`aws configure`, AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or pass --no-iam if the URL's auth type is NONE"
        )
    if isinstance(error, BotoCoreError):
        return f"cannot sign requests to {url}: {error} (check your AWS configuration and AWS_PROFILE)"
    if isinstance(error, SSEError):
        return f"{url} did not answer with an event stream: is it the relay's URL (the stack's RelayFunctionUrl)?"
    if isinstance(error, httpx.ConnectError):
        parsed = httpx.URL(url)
        if parsed.host in _LOOPBACK_HOSTS:
            on_port = f"CHATSTREAM_PORT={parsed.port} " if parsed.port != httpx.URL(DEFAULT_URL).port else ""
            return f"cannot connect to {url}: is the local stack running? Start it with `{on_port}make local`"
        return f"cannot connect to {url} ({error}): check the URL (the stack's RelayFunctionUrl) and your network"
    if isinstance(error, httpx.TimeoutException):
        return f"{url} did not answer in time: check that the stack is up, then try again"
    if isinstance(error, httpx.TransportError):
        return f"the connection to {url} failed ({type(error).__name__}: {error}): check the URL, then try again"
    if isinstance(error, ApiError):
        return _explain_answer(error, url, signed, session)
    return str(error)


def _explain_answer(error: ApiError, url: str, signed: bool, session: str | None) -> str:
    """One line for an error answer, or for a failure the client gave up on."""
    if error.code == "session_not_found" and session is not None:
        return (
            f"{url} has no session {session!r} of yours (unknown, expired, or another caller's): "
            "drop --session to start a new one"
        )
    if error.code == "resume_failed" and isinstance(error.__cause__, Exception):
        # The turn started, so the URL was right: the network or the stack went away mid-reply.
        cause = error.__cause__
        if isinstance(cause, httpx.ConnectError) and httpx.URL(url).host in _LOOPBACK_HOSTS:
            lost = explain(cause, url, signed)  # the local stack stopped: say how to start it
        else:
            why = f"{type(cause).__name__}: {cause}"
            lost = f"lost the connection to {url} mid-reply, and could not get it back ({why})"
        follow = f"--follow {shlex.quote(error.events_url or '')} --after {shlex.quote(str(error.last_event_id))}"
        return f"{lost}; the reply goes on: pick it up with {follow}"
    if error.status == 401:
        return (
            f"{url} refused the token (401 {error.code}): {error.message}; pass a valid one with --token or "
            f"{TOKEN_ENV} (locally: make token SUB=<user>)"
        )
    if error.status == 403 and error.code == "insufficient_scope":
        return f"{url} refused the token (403 insufficient_scope): {error.message}"
    if error.status == 403:
        if signed:
            return (
                f"{url} refused the signed request (403): your AWS identity needs lambda:InvokeFunctionUrl and "
                "lambda:InvokeFunction on the relay (the stack's RelayInvokePolicyArn grants both), in the URL's "
                "account and region (--region)"
            )
        if error.code == "http_error" and "authorization" not in error.message.lower():
            # Not Lambda's "Forbidden. For troubleshooting Function URL authorization issues…": say what it says
            # (a local stack's Host or Origin check, say)
            return f"{url} refused the request (403): {error.message}"
        return f"{url} refused the request (403): the URL needs signed requests; pass --iam"
    if error.status == 429 and error.code in REFUSALS:
        return f"not sent: {error.message}"  # the caller's budget: the relay says which, and when to try again
    if error.code == "http_error" and error.status == 429:
        return (
            f"{url} is busy (429, Lambda throttled the relay: its reserved concurrency, RelayReservedConcurrency, "
            "or the account's is in use): try again in a moment"
        )
    if error.code == "http_error" and error.status == 413:
        return f"{url} refused the request as too large (413, Lambda's 6 MB limit): send a shorter message"
    return str(error)


def _check_url(url: str) -> None:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise Failure(f"--url must be an http:// or https:// URL, got {url!r}")


# Control characters other than a line break and a tab: C0, DEL and C1. A reply is the model's text, which a prompt
# can steer: written to a terminal as they are, they would drive it (clear the screen, set the title, write the
# clipboard, hide a link's target).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # its control picture: ESC is ␛
    return "\u2421" if code == 0x7F else "\ufffd"  # DEL is ␡; a C1 control, the replacement character


def shown(text: str, stream: TextIO) -> str:
    """``text`` as written to ``stream``: on a terminal its control characters are symbols; elsewhere, exact."""
    return _CONTROL.sub(_visible, text) if stream.isatty() else text


def wants_color(environ: Mapping[str, str]) -> bool:
    """Whether the terminal may be sent ANSI escapes: not with ``NO_COLOR`` set to anything but the empty string
    (https://no-color.org), nor on a ``TERM=dumb`` terminal, which has none."""
    return not environ.get("NO_COLOR") and environ.get("TERM") != "dumb"


class _Printer:
    """A turn as it streams: the reply on ``out``; the reasoning on ``out`` when it is a terminal (dimmed, or with
    ``color`` off after :data:`THINKING` on a line of its own), else on ``err``; a line break wherever the model
    goes from reasoning to its reply. On a terminal, control characters in the text are shown as symbols, never
    obeyed; piped, the text is written exactly. ``label`` (the prompt's ``assistant> ``) starts the turn."""

    def __init__(self, out: TextIO, err: TextIO, color: bool = True, label: str = "") -> None:
        self.out = out
        self.tty = out.isatty()
        self.color = color
        self.reasoning_to = out if self.tty else err
        self.reasoning = False  # the last text printed was reasoning
        self.line_start = True  # the reasoning's stream (where notices go too) is at the start of a line
        self.after_notice = False  # a notice just ended a line of the reply, on the reply's own stream
        if label:
            self._write(out, label)

    def token(self, text: str) -> None:
        self.end_reasoning()
        if text := self._resumed_line(text):
            self._write(self.out, text)

    def thought(self, text: str) -> None:
        if not (text := self._resumed_line(text)):
            return
        if not self.reasoning and self.tty:
            if self.color:
                self.out.write(DIM)
            else:
                self._write(self.out, ("" if self.line_start else "\n") + THINKING)
        self.reasoning = True
        self._write(self.reasoning_to, text)  # piped stdout: stderr, often a terminal

    def tool_call(self, call: ToolCall) -> None:
        """A complete tool call, plainly, on a line of its own with the reply."""
        self.end_reasoning()
        self._write(self.out, f"\n[tool call {call.name} {call.arguments}]\n")

    def end_reasoning(self) -> None:
        if self.reasoning:
            self.reasoning = False
            self.reasoning_to.write(UNDIM if self.tty and self.color else "")
            self._write(self.reasoning_to, "\n")

    def notice(self, text: str) -> None:
        """``text`` on a line of its own, where the reasoning goes (piped, stdout holds the reply alone)."""
        self.end_reasoning()
        self._write(self.reasoning_to, ("" if self.line_start else "\n") + text + "\n")
        self.after_notice = self.tty

    def _resumed_line(self, text: str) -> str:
        """``text`` as it goes on after a notice on the reply's stream: the line the notice ended began with a
        word, so the new one does too (the space between two words is not carried over to the next line)."""
        if self.after_notice:
            text = text.lstrip(" ")
            self.after_notice = not text
        return text

    def _write(self, stream: TextIO, text: str) -> None:
        stream.write(shown(text, stream))
        stream.flush()
        if text and stream is self.reasoning_to:
            self.line_start = text.endswith("\n")


def _stream_turn(
    client: ChatClient, message: str | None, session_id: str | None, args: argparse.Namespace, printer: _Printer
) -> TurnResult:
    """Send ``message`` and print its reply; with ``message`` None, print the turn ``--follow`` names."""
    current: list[TurnResult] = []
    try:
        if message is None:
            return client.follow(
                args.follow,
                args.after,
                on_token=printer.token,
                on_reasoning=printer.thought,
                on_meta=current.append,
                on_tool_call=printer.tool_call,
            )
        return client.chat(
            message,
            session_id,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            on_token=printer.token,
            on_reasoning=printer.thought,
            on_meta=current.append,
            on_tool_call=printer.tool_call,
        )
    except KeyboardInterrupt:
        printer.end_reasoning()
        turn = current[0] if current and current[0].events_url else _turn_started(client, message, session_id)
        if turn is None:
            raise _NotStarted from None
        printer.notice("[cancelling …]")
        try:
            client.cancel(turn.session_id, turn.turn)
        except ApiError as err:
            if err.code != "turn_finished":
                raise
        rest = client.follow(
            turn.events_url,
            after=turn.last_event_id,
            on_token=printer.token,
            on_reasoning=printer.thought,
            on_tool_call=printer.tool_call,
        )
        rest.text, rest.reasoning = turn.text + rest.text, turn.reasoning + rest.reasoning
        return rest
    finally:
        printer.end_reasoning()


class _NotStarted(KeyboardInterrupt):
    """Ctrl-C before the reply began, with no turn found to cancel. Any other Ctrl-C (a second one while the
    client cancels, say) is a plain KeyboardInterrupt, and quits."""


def _turn_started(client: ChatClient, message: str | None, session_id: str | None) -> TurnResult | None:
    """After Ctrl-C before the turn's ``meta``: the turn the message started anyway, from the session's history.
    A new session cannot be looked in (its id never arrived): a turn it started goes on, uncancelled."""
    if message is None or session_id is None:
        return None
    try:
        turn = client.find_turn(session_id, message)
    except (ApiError, httpx.TransportError):
        return None
    return None if turn is None else TurnResult(session_id, turn, f"/sessions/{session_id}/turns/{turn}/events")


def _report_end(result: TurnResult, out: TextIO, err: TextIO) -> int:
    out.write("\n")
    if result.error is not None:
        err.write(shown(f"error: {result.error.get('code')}: {result.error.get('message')}\n", err))
        return EXIT_ERROR_EVENT
    stop_reason = result.done.get("stop_reason") if result.done else None
    if stop_reason in _CUT_SHORT:
        err.write(f"[{_CUT_SHORT[stop_reason]}]\n")
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if signal.getsignal(signal.SIGINT) is _quit_quietly:  # Ctrl-C is KeyboardInterrupt again from here on
        signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.after is not None and args.follow is None:
        parser.error("--after goes with --follow")
    if args.after is not None and not _EVENT_ID.fullmatch(args.after):
        parser.error(f"--after must be an event id the relay sent (a number, or a piece's such as 7.3): {args.after!r}")
    args.color = wants_color(os.environ)
    if args.message == "-":
        args.message = sys.stdin.read().rstrip("\n")
    if args.token and args.iam:
        parser.error("--token and --iam are two auth types: a relay takes one")
    signed = args.iam if args.iam is not None else is_function_url(args.url) and not args.token
    try:
        with _client(args.url, signed, args.region, args.token) as client:
            if args.message is not None or args.follow is not None:
                result = _stream_turn(client, args.message, args.session, args, _Printer(out, err, args.color))
                return _report_end(result, out, err)
            client.health()  # one clear line now, rather than a failure after the first message
            return _interactive(client, args, signed, out, err)
    except Failure as failure:
        err.write(shown(f"error: {failure}\n", err))
        return EXIT_FAILED
    except (ApiError, BotoCoreError, httpx.TransportError) as error:
        session = args.session if args.follow is None else None  # --follow names its session in its URL
        err.write(shown(f"error: {explain(error, args.url, signed, session)}\n", err))
        return EXIT_FAILED
    except KeyboardInterrupt:
        err.write("\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader left (`| head`): stop quietly, as `cat` does
        if out is sys.stdout:  # what is still buffered for it goes nowhere, not to a traceback at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _client(url: str, signed: bool, region: str | None, token: str | None = None) -> ChatClient:
    _check_url(url)
    if token:
        try:
            return ChatClient(url, auth=BearerAuth(token))
        except ValueError as error:
            raise Failure(f"--token: {error}") from None
    return ChatClient(url, auth=SigV4Auth(region) if signed else None)


def _messages(err: TextIO, prompted: bool, drafts: list[str]) -> Iterator[str]:
    """The user's messages from the prompt (shown when ``prompted``), until end of input or Ctrl-C. A line that
    ends in a backslash goes on on the next line: the message holds both, a line break where the backslash was.
    A message put in ``drafts`` (one that was refused) is typed at the next prompt, ready to send again."""
    while True:
        lines: list[str] = []
        draft = drafts.pop() if drafts else ""
        try:
            line = _prompt("you> ", draft) if prompted else input("")
            while line.endswith("\\"):
                lines.append(line[:-1])
                line = input("...> " if prompted else "")
        except (EOFError, KeyboardInterrupt) as end:
            if prompted:
                err.write("\n")
            if isinstance(end, EOFError) and "".join(lines).strip():
                yield "\n".join(lines)  # the input ended where the message was to go on: send what there is
            return
        message = "\n".join([*lines, line])
        if message.strip():
            yield message


def _prompt(text: str, draft: str) -> str:
    """``input(text)``, with ``draft`` (one line) typed in the line already where the terminal's line editing allows
    it (GNU readline or libedit, which Python has on Linux and macOS)."""
    if not draft or importlib.util.find_spec("readline") is None:
        return input(text)
    import readline  # only a prompt with a draft needs it: its import sets up line editing for every input()

    readline.set_startup_hook(lambda: readline.insert_text(draft))
    try:
        return input(text)
    finally:
        readline.set_startup_hook()


def _interactive(client: ChatClient, args: argparse.Namespace, signed: bool, out: TextIO, err: TextIO) -> int:
    session_id = args.session
    # On a terminal, prompts and labels; piped (`printf 'hi\n' | make chat`), stdout holds the replies alone.
    prompted = sys.stdin.isatty() and out.isatty()
    if prompted:
        err.write(f"chatstream at {args.url} — Ctrl-C cancels a reply, Ctrl-C at the prompt quits.\n")
    drafts: list[str] = []  # a refused message, typed again at the next prompt
    for message in _messages(err, prompted, drafts):
        try:
            printer = _Printer(out, err, args.color, label="assistant> " if prompted else "")
            result = _stream_turn(client, message, session_id, args, printer)
        except _NotStarted:  # before the reply began, with no turn to cancel: back to a person's prompt
            if not prompted:
                raise  # piped messages: Ctrl-C quits
            err.write("\n[interrupted]\n")
            continue
        except (ApiError, httpx.TransportError) as error:
            err.write(shown(f"\nerror: {explain(error, args.url, signed)}\n", err))
            # A failed message may still have started the session (a resume that failed, an unknown outcome): keep it.
            session_id = getattr(error, "session_id", None) or session_id
            # A session that can take no more turns, or that is gone (expired, another owner's, a mistyped --session).
            if isinstance(error, ApiError) and error.code in ("turn_limit", "session_not_found"):
                session_id = None
                err.write("[the next message starts a new session]\n")
            if isinstance(error, ApiError) and error.status == 429 and error.code in REFUSALS and prompted:
                if "\n" in message:  # a prompt line holds one line of it
                    err.write("[your message of several lines was not sent: send it again when it may be]\n")
                else:
                    drafts.append(message)
                    err.write("[your message is typed below: press Enter to send it when it may be]\n")
            continue
        session_id = result.session_id or session_id
        _report_end(result, out, err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
