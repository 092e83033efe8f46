"""chatstream's terminal client: ``python -m chatstream_local.cli`` (``make chat``).

Interactive by default: type a message, watch the reply stream in; the session carries across
turns. Ctrl-C while a reply streams cancels that turn (the cancel endpoint); Ctrl-C at the
prompt, or twice, quits. A dropped connection resumes from the last event id.

``--message TEXT`` is one-shot: prints the reply and exits 0, or 1 on an ``error`` event, 2 on
an HTTP error. ``--url`` points it at a deployed Function URL; ``--iam`` (automatic for
``*.lambda-url.*.on.aws`` hosts unless ``--no-iam``) signs requests with SigV4 using your AWS
credentials, for the default ``AWS_IAM`` auth.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from chatstream_local.client import DEFAULT_URL, ApiError, ChatClient, SigV4Auth, TurnResult, is_function_url

if TYPE_CHECKING:
    import httpx


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chatstream_local.cli", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("CHATSTREAM_URL", DEFAULT_URL), help="relay URL")
    parser.add_argument("--message", "-m", help="one-shot: send this message, print the reply, exit")
    parser.add_argument("--session", help="continue this session id")
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--temperature", type=float)
    iam = parser.add_mutually_exclusive_group()
    iam.add_argument("--iam", dest="iam", action="store_true", default=None, help="sign requests with SigV4")
    iam.add_argument("--no-iam", dest="iam", action="store_false", help="never sign requests")
    parser.add_argument("--region", help="region for SigV4 (default: from the URL or your AWS config)")
    return parser


def _stream_turn(
    client: ChatClient, message: str, session_id: str | None, args: argparse.Namespace, out: TextIO
) -> TurnResult:
    def write(text: str) -> None:
        out.write(text)
        out.flush()

    current: list[TurnResult] = []
    try:
        return client.chat(
            message,
            session_id,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            on_token=write,
            on_meta=current.append,
        )
    except KeyboardInterrupt:
        if not current or not current[0].events_url:
            raise
        turn = current[0]
        out.write("\n[cancelling …]\n")
        try:
            client.cancel(turn.session_id, turn.turn)
        except ApiError as err:
            if err.code != "turn_finished":
                raise
        rest = client.follow(turn.events_url, after=turn.last_event_id, on_token=write)
        rest.session_id, rest.turn = turn.session_id, turn.turn
        rest.text = turn.text + rest.text
        return rest


def _report_end(result: TurnResult, out: TextIO, err: TextIO) -> int:
    out.write("\n")
    if result.error is not None:
        err.write(f"error: {result.error.get('code')}: {result.error.get('message')}\n")
        return 1
    if result.done and result.done.get("stop_reason") == "cancelled":
        err.write("[cancelled]\n")
    return 0


def main(argv: list[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    args = _parser().parse_args(argv)
    use_iam = args.iam if args.iam is not None else is_function_url(args.url)
    auth: httpx.Auth | None = SigV4Auth(args.region) if use_iam else None
    with ChatClient(args.url, auth=auth) as client:
        if args.message is not None:
            try:
                result = _stream_turn(client, args.message, args.session, args, out)
            except ApiError as error:
                err.write(f"error: {error}\n")
                return 2
            return _report_end(result, out, err)
        return _interactive(client, args, out, err)


def _interactive(client: ChatClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session_id = args.session
    err.write(f"chatstream at {args.url} — Ctrl-C cancels a reply, Ctrl-C at the prompt quits.\n")
    while True:
        try:
            message = input("you> ")
        except (EOFError, KeyboardInterrupt):
            err.write("\n")
            return 0
        if not message.strip():
            continue
        out.write("assistant> ")
        try:
            result = _stream_turn(client, message, session_id, args, out)
        except KeyboardInterrupt:
            err.write("\n")
            return 130
        except ApiError as error:
            err.write(f"\nerror: {error}\n")
            continue
        session_id = result.session_id or session_id
        _report_end(result, out, err)


if __name__ == "__main__":
    sys.exit(main())
