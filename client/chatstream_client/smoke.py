"""A check of a deployed (or local) relay: ``python -m chatstream_client.smoke --url URL`` (``make smoke URL=…``).

Runs what a user does against the relay's Function URL and prints one line per check, ``PASS <check>: <what was
seen>`` or ``FAIL <check>: <what was wrong>``, then a summary line; the exit status is 0 when every check passed,
1 when one failed, 2 when the command itself is wrong (no credentials to sign with, an unknown profile).

The checks, in order (HTTP_API.md says what each answer must be):

1. ``health``: ``GET /health`` is ``200 {"status":"ok"}``;
2. ``chat streams``: ``POST /chat`` answers an event stream: ``meta`` first, ``token`` events whose ids rise and
   complete records 1, 2, … in order, one ``done``;
3. ``resume with Last-Event-ID``: the turn's ``events_url`` with ``Last-Event-ID: <a token's id>`` (a piece inside
   a record when the reply has one, else the first token's) replays exactly the later events;
4. ``409 turn_in_progress``: while a long second turn generates, another ``POST /chat`` in the session is refused;
5. ``cancel``: cancelling that turn answers ``202`` and its stream ends with ``done`` ``cancelled``;
6. ``history``: ``GET /sessions/{id}`` holds both turns, the first with the streamed text, the second cancelled;
7. ``409 turn_finished``: cancelling the finished first turn is refused;
8. one bad request per error family: ``400 invalid_json``, ``400 invalid_request``, ``404 not_found``,
   ``404 session_not_found``, ``405 method_not_allowed`` (with ``Allow``), ``413 payload_too_large``;
8a. ``/v1 chat completion``: ``POST /v1/chat/completions`` (OpenAI's API, model ``chatstream``) answers a
   ``chat.completion`` with text, and the native ``GET /sessions/{id}`` of its ``X-Chatstream-Session-Id`` holds it;
9. with signed requests: ``403 unsigned``: the Function URL refuses a request without a signature;
10. with ``--second-profile NAME``: ``another principal``: that profile's identity gets ``404`` for the first
    one's session (history, events, cancel);
11. with ``--token`` (a relay in the JWT mode): ``401 without a token``: a request without one is refused with
    ``WWW-Authenticate: Bearer``, and one with a made-up token with ``error="invalid_token"``;
12. with ``--second-token``: ``another principal``: that user gets ``404`` for the first one's session.

Requests are signed with SigV4 (:class:`~chatstream_client.auth.SigV4Auth`, your default credentials or
``AWS_PROFILE``) when ``--iam`` is given or the URL is a Function URL (``*.lambda-url.<region>.on.aws``); the
second principal signs with ``--second-profile``. With ``--token`` (or ``CHATSTREAM_TOKEN``) every request carries
that access token instead (:class:`~chatstream_client.auth.BearerAuth`), and ``--second-token`` another user's.
A deployment pays for two short replies and the start of a long one
(cancelled as soon as it has started; at most 1,000 output tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import httpx
from botocore.exceptions import BotoCoreError, NoCredentialsError
from httpx_sse import EventSource, SSEError

from chatstream_client.api import DEFAULT_URL, event_position, ids_in_order
from chatstream_client.auth import TOKEN_ENV, BearerAuth, SigV4Auth, is_function_url
from chatstream_client.cli import explain

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from httpx_sse import ServerSentEvent

EXIT_FAILED = 1
EXIT_USAGE = 2
CHAT_MESSAGE = "Count from 1 to 20, separated by spaces, and write nothing else."
# Long enough for a model to still be writing when the 409 and the cancel arrive, even after a second relay
# environment's cold start: the local model echoes it word by word (600 words, 12 s at 20 ms a word), a real one
# continues the list. It is cancelled as soon as it starts; max_tokens bounds what a deployment could pay for.
LONG_MESSAGE = "Continue this list up to 3000, one number per line, and write nothing else: " + ", ".join(
    str(n) for n in range(1, 601)
)
LONG_MAX_TOKENS = 1000
HISTORY_SETTLE_S = 15.0


class CheckFailed(Exception):
    """A check saw something other than what HTTP_API.md promises; the message says what."""


class _NeedsSigning(CheckFailed):
    """The relay refused an unsigned request as an AWS_IAM URL does: no other check can pass."""


@dataclass
class Check:
    name: str
    passed: bool
    detail: str

    @property
    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}"


@dataclass
class Turn:
    """What a check saw of one streamed turn."""

    session_id: str = ""
    turn: int = 0
    events_url: str = ""
    ids: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(self.texts)


class Smoke:
    """The checks against one URL; :meth:`run` yields each :class:`Check` as it ends."""

    def __init__(
        self,
        url: str,
        *,
        auth: httpx.Auth | None = None,
        second_auth: httpx.Auth | None = None,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.bearer = isinstance(auth, BearerAuth)
        self.signed = auth is not None and not self.bearer
        self._sleep = sleep
        timeouts = httpx.Timeout(timeout, read=60.0)
        self.http = httpx.Client(base_url=self.url, auth=auth, timeout=timeouts, follow_redirects=False)
        self.unsigned = httpx.Client(base_url=self.url, timeout=timeouts, follow_redirects=False)
        self.second = httpx.Client(base_url=self.url, auth=second_auth, timeout=timeouts) if second_auth else None
        self.first: Turn | None = None
        self.long: Turn | None = None
        self._long_events: Iterator[ServerSentEvent] | None = None
        self._long_response: httpx.Response | None = None

    def close(self) -> None:
        if self._long_response is not None:
            self._long_response.close()
        for client in (self.http, self.unsigned, self.second):
            if client is not None:
                client.close()

    def checks(self) -> list[tuple[str, Callable[[], str]]]:
        planned: list[tuple[str, Callable[[], str]]] = [
            ("health", self.health),
            ("chat streams", self.chat),
            ("resume with Last-Event-ID", self.resume),
            ("409 turn_in_progress", self.turn_in_progress),
            ("cancel", self.cancel),
            ("history", self.history),
            ("409 turn_finished", self.cancel_finished),
            ("400 invalid_json", self.invalid_json),
            ("400 invalid_request", self.invalid_request),
            ("404 not_found", self.not_found),
            ("404 session_not_found", self.session_not_found),
            ("405 method_not_allowed", self.method_not_allowed),
            ("413 payload_too_large", self.payload_too_large),
            ("/v1 chat completion", self.openai_chat_completion),
        ]
        if self.signed:
            planned.append(("403 unsigned", self.unsigned_refused))
        if self.bearer:
            planned.append(("401 without a token", self.token_refused))
        if self.second is not None:
            planned.append(("another principal", self.another_principal))
        return planned

    def run(self) -> Iterator[Check]:
        for name, check in self.checks():
            try:
                yield Check(name, True, check())
            except _NeedsSigning as failure:
                yield Check(name, False, str(failure))
                return  # every other check would fail alike
            except CheckFailed as failure:
                yield Check(name, False, str(failure))
            except (httpx.HTTPError, SSEError, ValueError) as error:
                yield Check(name, False, explain(error, self.url, self.signed))

    # -------------------------------------------------------------------------------- the checks

    def health(self) -> str:
        response = self.http.get("/health")
        if response.status_code == 403 and not self.signed and "authorization" in response.text.lower():
            raise _NeedsSigning(
                "GET /health answered 403: the URL's auth is AWS_IAM, so requests must be signed: pass --iam "
                "(make smoke ARGS=--iam)"
            )
        _expect_status(response, 200)
        if response.json() != {"status": "ok"}:
            raise CheckFailed(f"GET /health answered {response.text[:200]!r}, not {{'status': 'ok'}}")
        return 'GET /health → 200 {"status":"ok"}'

    def chat(self) -> str:
        with self.http.stream("POST", "/chat", json={"message": CHAT_MESSAGE}, headers=_SSE) as response:
            _expect_stream(response)
            turn = _read_turn(EventSource(response).iter_sse(), expect_meta=True)
        self.first = turn
        if turn.error is not None or turn.done is None:
            raise CheckFailed(f"the stream ended with {turn.error or 'no done event'} after {len(turn.ids)} tokens")
        if not turn.ids or not ids_in_order(turn.ids):
            raise CheckFailed(f"token ids {turn.ids} do not complete records 1, 2, … in order")
        reason = turn.done.get("stop_reason")
        return f"meta, {len(turn.ids)} token events (ids {turn.ids[0]}-{turn.ids[-1]}), done ({reason}): " + _quoted(
            turn.text
        )

    def resume(self) -> str:
        first = self._needs_first()
        after = next((i for i in first.ids[:-1] if "." in i), first.ids[0])  # inside a record, if a piece is
        headers = {**_SSE, "Last-Event-ID": after}
        with self.http.stream("GET", first.events_url, headers=headers) as response:
            _expect_stream(response)
            replay = _read_turn(EventSource(response).iter_sse(), expect_meta=False)
        expected = [i for i in first.ids if event_position(i) > event_position(after)]
        expected_text = "".join(
            t for i, t in zip(first.ids, first.texts, strict=True) if event_position(i) > event_position(after)
        )
        if replay.ids != expected or replay.text != expected_text or replay.done is None:
            raise CheckFailed(
                f"after id {after} the replay had ids {replay.ids} and done={replay.done is not None}, "
                f"expected ids {expected} and done"
            )
        return f"GET {first.events_url} with Last-Event-ID: {after} replayed ids {expected} and done"

    def turn_in_progress(self) -> str:
        first = self._needs_first()
        body = {"message": LONG_MESSAGE, "session_id": first.session_id, "max_tokens": LONG_MAX_TOKENS}
        request = self.http.build_request("POST", "/chat", json=body, headers=_SSE)
        response = self.http.send(request, stream=True)
        self._long_response = response
        _expect_stream(response)
        self._long_events = EventSource(response).iter_sse()
        meta = next((event for event in self._long_events if event.data), None)
        if meta is None or meta.event != "meta":
            raise CheckFailed("the second turn's stream did not start with meta")
        data = json.loads(meta.data)
        self.long = Turn(data["session_id"], int(data["turn"]), data["events_url"])
        again = self.http.post("/chat", json={"message": "and another", "session_id": first.session_id})
        _expect_error(again, 409, "turn_in_progress")
        return f"POST /chat while turn {self.long.turn} generates → 409 turn_in_progress"

    def cancel(self) -> str:
        long = self.long
        if long is None or self._long_events is None:
            raise CheckFailed("not run: the 409 turn_in_progress check did not start the long turn")
        response = self.http.post(f"/sessions/{long.session_id}/turns/{long.turn}/cancel")
        if response.status_code == 409 and _code(response) == "turn_finished":
            raise CheckFailed("the long turn ended before the cancel reached it (a very fast model?)")
        _expect_status(response, 202)
        if response.json().get("status") != "cancelling":
            raise CheckFailed(f"cancel answered {response.text[:200]!r}, not status cancelling")
        rest = _read_turn(self._long_events, expect_meta=False)
        if self._long_response is not None:
            self._long_response.close()
            self._long_response = None
        long.ids, long.texts, long.done, long.error = rest.ids, rest.texts, rest.done, rest.error
        reason = (rest.done or {}).get("stop_reason")
        if reason != "cancelled":
            raise CheckFailed(f"the cancelled turn's stream ended with {rest.done or rest.error}, not cancelled")
        return f"POST …/turns/{long.turn}/cancel → 202 cancelling; the stream ended done (cancelled)"

    def history(self) -> str:
        first = self._needs_first()
        deadline = time.monotonic() + HISTORY_SETTLE_S
        while True:
            response = self.http.get(f"/sessions/{first.session_id}")
            _expect_status(response, 200)
            turns = response.json().get("turns", [])
            if all(turn.get("status") != "in_progress" for turn in turns) or time.monotonic() > deadline:
                break
            self._sleep(0.2)  # the consumer records a turn's end just after its stream's done
        statuses = [(turn.get("turn"), turn.get("status")) for turn in turns]
        if not turns or turns[0].get("assistant") != first.text or turns[0].get("status") != "complete":
            raise CheckFailed(f"turn 1 is {turns[:1]!r}, expected complete with the streamed text")
        if self.long is not None and (len(turns) < 2 or turns[1].get("status") != "cancelled"):
            raise CheckFailed(f"the turns are {statuses}, expected turn 2 cancelled")
        return f"GET /sessions/{first.session_id} → 200, turns {statuses}, turn 1's text as streamed"

    def cancel_finished(self) -> str:
        first = self._needs_first()
        response = self.http.post(f"/sessions/{first.session_id}/turns/{first.turn}/cancel")
        _expect_error(response, 409, "turn_finished")
        return f"POST …/turns/{first.turn}/cancel of the finished turn → 409 turn_finished"

    def invalid_json(self) -> str:
        response = self.http.post("/chat", content=b'{"message": ', headers={"content-type": "application/json"})
        _expect_error(response, 400, "invalid_json")
        return "POST /chat with a truncated body → 400 invalid_json"

    def invalid_request(self) -> str:
        _expect_error(self.http.post("/chat", json={"message": ""}), 400, "invalid_request")
        return 'POST /chat {"message": ""} → 400 invalid_request'

    def not_found(self) -> str:
        _expect_error(self.http.get("/no-such-route"), 404, "not_found")
        return "GET /no-such-route → 404 not_found"

    def session_not_found(self) -> str:
        session_id = secrets.token_hex(16)
        _expect_error(self.http.get(f"/sessions/{session_id}"), 404, "session_not_found")
        return "GET /sessions/<a random id> → 404 session_not_found"

    def method_not_allowed(self) -> str:
        response = self.http.get("/chat")
        _expect_error(response, 405, "method_not_allowed")
        if "POST" not in response.headers.get("allow", ""):
            raise CheckFailed(f"405 without Allow: POST (Allow: {response.headers.get('allow')!r})")
        return "GET /chat → 405 method_not_allowed, Allow: POST"

    def payload_too_large(self) -> str:
        body = json.dumps({"message": "x" * (257 * 1024)}).encode()
        response = self.http.post("/chat", content=body, headers={"content-type": "application/json"})
        _expect_error(response, 413, "payload_too_large")
        return f"POST /chat with {len(body)} bytes → 413 payload_too_large"

    def unsigned_refused(self) -> str:
        response = self.unsigned.get("/health")
        if response.status_code != 403:
            raise CheckFailed(f"an unsigned GET /health answered {response.status_code}, not 403")
        return "GET /health without a signature → 403 (the Function URL's AWS_IAM auth)"

    def token_refused(self) -> str:
        path = f"/sessions/{secrets.token_hex(16)}"
        missing = self.unsigned.get(path)
        _expect_status(missing, 401)
        if not missing.headers.get("www-authenticate", "").startswith("Bearer"):
            raise CheckFailed(f"401 without WWW-Authenticate: Bearer ({missing.headers.get('www-authenticate')!r})")
        made_up = self.unsigned.get(path, headers={"Authorization": f"Bearer {_MADE_UP_TOKEN}"})
        _expect_status(made_up, 401)
        if 'error="invalid_token"' not in made_up.headers.get("www-authenticate", ""):
            raise CheckFailed(f"a made-up token's 401 says {made_up.headers.get('www-authenticate')!r}")
        return 'GET /sessions/<id> without a token → 401 Bearer; with a made-up one → 401 error="invalid_token"'

    def another_principal(self) -> str:
        first = self._needs_first()
        assert self.second is not None
        attempts = {
            "history": self.second.get(f"/sessions/{first.session_id}"),
            "events": self.second.get(first.events_url, headers=_SSE),
            "cancel": self.second.post(f"/sessions/{first.session_id}/turns/{first.turn}/cancel"),
        }
        for what, response in attempts.items():
            if response.status_code != 404 or _code(response) not in ("session_not_found", "turn_not_found"):
                raise CheckFailed(f"{what} as the second principal answered {_describe(response)}")
        return "history, events and cancel of the first principal's session → 404 for the second"

    def openai_chat_completion(self) -> str:
        body = {"model": "chatstream", "messages": [{"role": "user", "content": CHAT_MESSAGE}], "max_tokens": 200}
        response = self.http.post("/v1/chat/completions", json=body)
        _expect_status(response, 200)
        completion = response.json()
        text = completion["choices"][0]["message"]["content"] if completion.get("choices") else None
        if completion.get("object") != "chat.completion" or not text:
            raise CheckFailed(f"POST /v1/chat/completions answered {response.text[:200]!r}, not a chat.completion")
        session_id = response.headers.get("x-chatstream-session-id", "")
        turns = self.http.get(f"/sessions/{session_id}")
        _expect_status(turns, 200)
        if [turn["assistant"] for turn in turns.json()["turns"]] != [text]:
            raise CheckFailed(f"GET /sessions/{session_id} does not hold the completion's text")
        return f"POST /v1/chat/completions → 200 chat.completion {_quoted(text)}, in session {session_id}"

    def _needs_first(self) -> Turn:
        if self.first is None or not self.first.ids:
            raise CheckFailed("not run: the chat streams check did not produce a turn")
        return self.first


_SSE = {"Accept": "text/event-stream"}
# A well-formed JWT no issuer signed ({"alg":"RS256","kid":"made-up"}.{"sub":"nobody"}.): a relay refuses it as invalid
_MADE_UP_TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6Im1hZGUtdXAifQ.eyJzdWIiOiJub2JvZHkifQ.bm90LWEtc2lnbmF0dXJl"


def _read_turn(events: Iterator[ServerSentEvent], *, expect_meta: bool) -> Turn:
    """Read a turn's events up to its ``done`` or ``error`` (``meta`` first when ``expect_meta``)."""
    turn = Turn()
    seen = 0
    for event in events:
        if not event.data:  # a `retry:` field alone (httpx-sse passes it on as an empty message)
            continue
        seen += 1
        data = json.loads(event.data)
        if expect_meta and seen == 1 and event.event != "meta":
            raise CheckFailed(f"the stream started with {event.event!r}, not meta")
        if event.event == "meta":
            turn.session_id, turn.turn, turn.events_url = data["session_id"], int(data["turn"]), data["events_url"]
        elif event.event == "token":
            turn.ids.append(event.id)
            turn.texts.append(data["text"])
        elif event.event == "done":
            turn.done = data
            return turn
        elif event.event == "error":
            turn.error = data
            return turn
        elif event.event == "reconnect":
            raise CheckFailed(f"the stream asked to reconnect ({data}) within one short reply")
    return turn


def _expect_stream(response: httpx.Response) -> None:
    if response.status_code != 200:
        response.read()
        raise CheckFailed(f"{response.request.method} {response.request.url.path} answered {_describe(response)}")
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        raise CheckFailed(f"the answer is {response.headers.get('content-type')!r}, not text/event-stream")


def _expect_status(response: httpx.Response, status: int) -> None:
    if response.status_code != status:
        raise CheckFailed(f"{response.request.method} {response.request.url.path} answered {_describe(response)}")


def _expect_error(response: httpx.Response, status: int, code: str) -> None:
    if response.status_code != status or _code(response) != code:
        raise CheckFailed(f"expected {status} {code}, got {_describe(response)}")


def _code(response: httpx.Response) -> str | None:
    try:
        error = response.json().get("error", {})
    except ValueError:
        return None
    return str(error.get("code")) if isinstance(error, dict) else None


def _describe(response: httpx.Response) -> str:
    return f"{response.status_code} {response.text[:200]}"


def _quoted(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


# ---------------------------------------------------------------------------------------------- command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chatstream_client.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("CHATSTREAM_URL", DEFAULT_URL), help="the relay's URL")
    iam = parser.add_mutually_exclusive_group()
    iam.add_argument("--iam", dest="iam", action="store_true", default=None, help="sign requests with SigV4")
    iam.add_argument("--no-iam", dest="iam", action="store_false", help="never sign requests")
    parser.add_argument("--region", help="region for SigV4 (default: from the URL or your AWS config)")
    parser.add_argument("--second-profile", help="an AWS profile of another principal: it must get 404 for the session")
    parser.add_argument(
        "--token", default=os.environ.get(TOKEN_ENV) or None, help=f"an access token (JWT mode; default ${TOKEN_ENV})"
    )
    parser.add_argument("--second-token", help="another user's access token: it must get 404 for the session")
    return parser


class UsageError(Exception):
    """The command cannot run as given; the message is the one line printed."""


def _auths(args: argparse.Namespace) -> tuple[httpx.Auth | None, httpx.Auth | None]:
    try:
        parsed = httpx.URL(args.url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"URL must be an http:// or https:// URL, got {args.url!r}")
    if args.token or args.second_token:
        if args.iam or args.second_profile:
            raise UsageError("--token and --iam (or --second-profile) are two auth types: a relay takes one")
        if not args.token:
            raise UsageError("--second-token goes with --token")
        try:
            return BearerAuth(args.token), BearerAuth(args.second_token) if args.second_token else None
        except ValueError as error:
            raise UsageError(f"--token: {error}") from None
    signed = args.iam if args.iam is not None else is_function_url(args.url)
    if args.second_profile and not signed:
        raise UsageError("--second-profile needs signed requests: the URL's auth must be AWS_IAM (pass --iam)")
    if not signed:
        return None, None
    try:
        auth = SigV4Auth(args.region)
        second = SigV4Auth(args.region, profile=args.second_profile) if args.second_profile else None
    except NoCredentialsError as error:
        raise UsageError(explain(error, args.url, True)) from None
    except BotoCoreError as error:
        raise UsageError(f"cannot sign requests to {args.url}: {error}") from None
    return auth, second


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = _parser().parse_args(argv)
    try:
        auth, second = _auths(args)
    except UsageError as error:
        err.write(f"smoke: {error}\n")
        return EXIT_USAGE
    smoke = Smoke(args.url, auth=auth, second_auth=second)
    failed = total = 0
    try:
        for check in smoke.run():
            total += 1
            failed += not check.passed
            out.write(check.line + "\n")
            out.flush()
    except KeyboardInterrupt:
        err.write("\n")
        return 130
    finally:
        smoke.close()
    verdict = f"all {total} checks passed" if not failed else f"{failed} of {total} checks failed"
    out.write(f"smoke: {verdict} against {args.url}\n")
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
