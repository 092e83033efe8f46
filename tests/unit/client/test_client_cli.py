"""What the terminal client says when something fails: one line that says what to do."""

from __future__ import annotations

import io
import re

import httpx
import pytest
from botocore.exceptions import NoCredentialsError
from httpx_sse import SSEError

from chatstream_client.api import ApiError, ChatClient, TurnResult
from chatstream_client.cli import DIM, EXIT_FAILED, THINKING, UNDIM, _Printer, explain, main, wants_color

LOCAL = "http://127.0.0.1:3000"
DEPLOYED = "https://abc.lambda-url.us-east-1.on.aws"


# Lambda's answer to an unsigned request to an AWS_IAM Function URL, and the local stack's to a foreign Host
LAMBDA_403 = (
    '{"Message":"Forbidden. For troubleshooting Function URL authorization issues, see: '
    'https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html"}'
)
LOCAL_HOST_403 = '{"Message": "Forbidden. Host \'127.0.0.1:18480\' is not this local endpoint\'s address: call http://127.0.0.1:3000"}'


@pytest.mark.parametrize(
    ("error", "url", "signed", "says"),
    [
        (NoCredentialsError(), DEPLOYED, True, "no AWS credentials"),
        (httpx.ConnectError("refused"), LOCAL, False, "Start it with `make local`"),
        (
            httpx.ConnectError("refused"),
            "http://127.0.0.1:3999",
            False,
            "Start it with `CHATSTREAM_PORT=3999 make local`",
        ),
        (httpx.ConnectError("Name or service not known"), DEPLOYED, True, "check the URL"),
        (httpx.ReadTimeout("timed out"), DEPLOYED, True, "did not answer in time"),
        (SSEError("not an event stream"), LOCAL, False, "RelayFunctionUrl"),
        (ApiError(403, "http_error", '{"Message":"Forbidden"}'), DEPLOYED, True, "InvokeFunctionUrl and lambda:Invo"),
        (ApiError(403, "http_error", LAMBDA_403), DEPLOYED, False, "the URL needs signed requests; pass --iam"),
        (ApiError(403, "http_error", LOCAL_HOST_403), LOCAL, False, "is not this local endpoint's address"),
        (ApiError(400, "invalid_request", "message must not be empty"), LOCAL, False, "message must not be empty"),
        (ApiError(429, "http_error", '{"Message":"Rate Exceeded."}'), DEPLOYED, True, "try again in a moment"),
        (ApiError(413, "http_error", '{"Message":"Request must be smaller"}'), LOCAL, False, "send a shorter"),
        (ApiError(401, "invalid_token", "the token has expired; sign in again"), LOCAL, False, "make token SUB="),
        (ApiError(403, "insufficient_scope", "the token lacks the scope chat"), LOCAL, False, "lacks the scope chat"),
    ],
)
def test_each_failure_is_explained_in_one_line(error: Exception, url: str, signed: bool, says: str) -> None:
    line = explain(error, url, signed)
    assert says in line and "\n" not in line


def test_a_failure_without_an_http_answer_names_no_status() -> None:
    # GIVEN a failure the client gave up on before any answer (status 0) WHEN it is explained THEN no "0" shows
    error = ApiError(0, "turn_outcome_unknown", "the connection broke before the stream started")
    assert explain(error, LOCAL, False) == "turn_outcome_unknown: the connection broke before the stream started"
    # AND an answer's status still does
    assert str(ApiError(409, "turn_in_progress", "busy")) == "409 turn_in_progress: busy"


def test_a_resume_that_failed_is_explained_by_its_cause_and_names_the_turn() -> None:
    # GIVEN a resume whose connection could not be made, mid-turn
    events_url = "/sessions/s/turns/2/events"
    error = ApiError(0, "resume_failed", "ConnectError", result=TurnResult("s", 2, events_url, last_event_id="7"))
    error.__cause__ = httpx.ConnectError("refused")
    # WHEN it is explained THEN the line says what to do about the connection, and where the reply goes on
    line = explain(error, LOCAL, False)
    assert "make local" in line and f"--follow {events_url} --after 7" in line and "\n" not in line


def test_a_reply_lost_to_an_outage_names_no_url_to_check_and_how_to_pick_it_up() -> None:
    # GIVEN a turn that started, whose resumes then failed to reach a deployed relay for 5 minutes
    events_url = "/sessions/s/turns/2/events"
    message = f"ReadError: reset resuming {events_url} after id 8.24, for 300 s"
    error = ApiError(0, "resume_failed", message, result=TurnResult("s", 2, events_url, last_event_id="8.24"))
    error.__cause__ = httpx.ReadError("reset")
    # WHEN it is explained
    line = explain(error, DEPLOYED, True)
    # THEN it does not send the user to check a URL that worked, and says which options pick the reply up
    assert "check the URL" not in line and "\n" not in line
    assert "lost the connection" in line and f"--follow {events_url} --after 8.24" in line


def test_a_url_that_is_not_http_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN the client is given something that is not an http(s) URL
    status = main(["--url", "127.0.0.1:3000", "--message", "hi", "--no-iam"])
    # THEN it says so in one line and exits 2
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "--url must be an http:// or https:// URL" in err


def test_an_unknown_session_option_is_explained_as_the_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a relay that knows no session "nosuch" (the client reads a session's history before its first message)
    def history(*args: object) -> dict[str, object]:
        raise ApiError(404, "session_not_found", "no session 'nosuch'")

    monkeypatch.setattr(ChatClient, "history", history)
    # WHEN the client is told to continue it
    status = main(["--url", LOCAL, "--session", "nosuch", "--message", "hi", "--no-iam"])
    # THEN it fails in one line that names the session and tells the user to drop --session, not an API field
    err = capsys.readouterr().err
    assert status == EXIT_FAILED and err.count("\n") == 1
    assert "'nosuch'" in err and "drop --session" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_control_characters_in_a_reply_never_drive_the_terminal(tty: bool) -> None:
    # GIVEN a reply that carries terminal escapes (a title, a screen clear, a clipboard write, a hidden link)
    reply = "x \x1b]0;PWNED\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \x9b31m\ttab\nline\r"
    out, err = (_Terminal() if tty else io.StringIO()), io.StringIO()
    printer = _Printer(out, err)
    # WHEN it is printed, as the reply and as reasoning
    printer.thought(reply)
    printer.token(reply)
    printer.end_reasoning()
    # THEN on a terminal no control character but a line break and a tab reaches it: each is shown as a symbol
    if tty:
        written = out.getvalue().replace(DIM, "").replace(UNDIM, "")
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", written)
        assert "x \u241b]0;PWNED\u2407 \u241b[2J" in written and "\ufffd31m\ttab\nline\u240d" in written
    # AND piped, the text is written exactly (stdout holds the reply, stderr the reasoning)
    else:
        assert (out.getvalue(), err.getvalue()) == (reply, reply + "\n")


def test_reasoning_sent_to_a_terminals_stderr_while_stdout_is_piped_never_drives_it() -> None:
    # GIVEN stdout piped and stderr a terminal WHEN reasoning with escapes is printed (it goes to stderr)
    out, err = io.StringIO(), _Terminal()
    printer = _Printer(out, err)
    printer.thought("\x1b]0;PWNED\x07 \x1b[2J")
    printer.end_reasoning()
    # THEN the terminal is shown symbols, not the escapes
    assert err.getvalue() == "\u241b]0;PWNED\u2407 \u241b[2J\n" and out.getvalue() == ""


@pytest.mark.parametrize("tty", [True, False])
def test_a_notice_after_reasoning_or_reply_starts_its_own_line_without_a_blank_one(tty: bool) -> None:
    # GIVEN reasoning, then (on a second printer) a reply, each cut off mid-line
    out, err = (_Terminal() if tty else io.StringIO()), io.StringIO()
    printer = _Printer(out, err)
    printer.thought("thinking about")
    # WHEN a notice (the CLI's "[cancelling …]") is printed
    printer.notice("[cancelling …]")
    # THEN it follows the reasoning on the next line, with no blank line between (on stderr when stdout is piped)
    shown_to = out if tty else err
    assert shown_to.getvalue().replace(DIM, "").replace(UNDIM, "") == "thinking about\n[cancelling …]\n"
    replied, notices = (_Terminal() if tty else io.StringIO()), io.StringIO()
    printer = _Printer(replied, notices)
    printer.token("You said")
    printer.notice("[cancelling …]")
    # AND after a reply cut mid-line, on a terminal the notice breaks the line; piped, stdout keeps the reply alone
    if tty:
        assert replied.getvalue() == "You said\n[cancelling …]\n"
    else:
        assert (replied.getvalue(), notices.getvalue()) == ("You said", "[cancelling …]\n")


@pytest.mark.parametrize(
    ("environ", "color"),
    [
        ({"TERM": "xterm-256color"}, True),
        ({"TERM": "xterm-256color", "NO_COLOR": ""}, True),  # no-color.org: an empty NO_COLOR is not set
        ({"TERM": "xterm-256color", "NO_COLOR": "1"}, False),
        ({"TERM": "xterm-256color", "NO_COLOR": "false"}, False),  # any value at all
        ({"TERM": "dumb"}, False),
    ],
)
def test_no_color_and_a_dumb_terminal_turn_escape_codes_off(environ: dict[str, str], color: bool) -> None:
    assert wants_color(environ) is color


def test_reasoning_on_a_terminal_without_color_is_marked_in_plain_text() -> None:
    # GIVEN a terminal that must get no escape codes
    out = _Terminal()
    printer = _Printer(out, io.StringIO(), color=False)
    # WHEN a reply comes, then reasoning mid-line, then the rest of the reply
    printer.token("Sure.")
    printer.thought("r1 r2")
    printer.token("Done")
    # THEN the reasoning is on a line of its own after a plain-text mark, and no escape code was written
    assert out.getvalue() == f"Sure.\n{THINKING}r1 r2\nDone" and "\x1b" not in out.getvalue()


def test_a_notice_after_the_label_starts_its_own_line_and_the_reply_goes_on_without_a_stray_space() -> None:
    # GIVEN a terminal turn that starts with the prompt's label
    out = _Terminal()
    printer = _Printer(out, io.StringIO(), label="assistant> ")
    # WHEN a notice comes before any text, then the reply's words, a second notice mid-reply, and the rest
    printer.notice("[cancelling …]")
    printer.token("w1")
    printer.token(" w2")
    printer.notice("[cancelling …]")
    printer.token(" ")
    printer.token(" w3")
    # THEN each notice is on a line of its own, and each line of the reply starts with a word
    assert out.getvalue() == "assistant> \n[cancelling …]\nw1 w2\n[cancelling …]\nw3"


def test_a_token_is_the_clients_auth_and_never_beside_iam(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatstream_client.auth import BearerAuth
    from chatstream_client.cli import _client, _parser

    # GIVEN CHATSTREAM_TOKEN set WHEN the client is built THEN every request carries it
    monkeypatch.setenv("CHATSTREAM_TOKEN", "a.b.c")
    args = _parser().parse_args(["--url", DEPLOYED])
    assert args.token == "a.b.c"
    with _client(args.url, False, None, args.token) as client:
        assert isinstance(client._http.auth, BearerAuth)
    # AND a token beside --iam is a usage error
    with pytest.raises(SystemExit):
        main(["--url", LOCAL, "--iam", "--message", "hi"], out=io.StringIO(), err=io.StringIO())
