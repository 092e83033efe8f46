"""``sam local invoke`` without Docker: ``python -m chatstream_local.sam.invoke FUNCTION --event FILE``.

What ``make invoke FUNCTION=… EVENT=…`` runs.

Runs one function of ``template.yaml`` on one event through the local Lambda (its Runtime API, the function's
own execution environment), and prints what ``sam local invoke`` prints: the function's log on stderr (Lambda's
``START``/``END``/``REPORT`` lines around the function's own), the response payload on stdout. A function whose
Function URL streams (the relay) is invoked with ``InvokeWithResponseStream`` and its bytes are printed as they
arrive (the HTTP integration prelude, 8 NUL bytes, then the body); the others with ``Invoke``.

Where it runs: on the local stack that listens on ``CHATSTREAM_PORT`` (default 3000; ``make local``), through the
Lambda API on that port, so the function talks to that stack's table, stream, queues and model. It signs its calls
with your own static key (:func:`chatstream_local.iam.own_key`: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, else
the ``AWS_PROFILE`` or default profile's), which a stack started with ``--auth-type AWS_IAM`` requires; without one,
with a local key, which a stack under ``NONE`` accepts. When nothing
listens there it starts a stack of its own on a free port and stops it afterwards. Which code runs: a stack it
starts runs ``.aws-sam/build`` when ``sam build`` (``make build``) wrote the function there, else the source tree,
as ``make local`` does; a running stack runs what it was started with (``make local ARGS=--built`` for the build).
The first lines on stderr say which stack and which code.

Before the invocation the session and turn the event refers to are written to the stack's table in the state the
function expects (:mod:`chatstream_local.sam.samples`), so the sample events answer as for a real conversation.

Exit status: 0 when the function succeeded, 1 when it returned an error (its error document is the payload, as
``sam local invoke`` prints it), 2 for a mistake in the command (an unknown function, a missing or invalid event
file: one line on stderr), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from chatstream.table import ChatTable
from chatstream_local.iam import Principal, own_key
from chatstream_local.sam.samples import referenced_turns, seed
from chatstream_local.stack import (
    DEFAULT_PORT,
    LOCAL_CREDENTIALS,
    LocalStack,
    StackError,
    StackSettings,
)
from chatstream_local.template import REPO_ROOT, Template, TemplateError

# What the Lambda API of a stack under AWS_IAM answers a call no local principal signed (iam.SigV4Verifier.refusal)
_UNSIGNED = frozenset(
    {"MissingAuthenticationTokenException", "UnrecognizedClientException", "InvalidSignatureException"}
)
EXIT_FUNCTION_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A mistake in the command: its message is the one line printed."""


class Invocation:
    """One ``make invoke``: the function, the event, the stack it runs on; :meth:`run` prints the outcome."""

    def __init__(self, function: str, event_path: str | None, *, port: int, build_dir: Path) -> None:
        self.template = Template.load()
        functions = sorted(self.template.resources_of_type("AWS::Serverless::Function"))
        if function not in functions:
            raise UsageError(f"no function {function!r} in template.yaml; its functions: {', '.join(functions)}")
        self.function = function
        self.event_path = event_path
        self.payload = _read_event(event_path)
        self.port = port
        self.build_dir = build_dir.resolve()
        self.name = self.template.physical_name(function)
        config = self.template.properties(function).get("FunctionUrlConfig") or {}
        self.streaming = config.get("InvokeMode") == "RESPONSE_STREAM"

    # ---------------------------------------------------------------------------------- the stack

    def run(self, out: IO[bytes], err: IO[str]) -> int:
        url = f"http://127.0.0.1:{self.port}"
        try:
            description = lambda_client(url, read_timeout=10).get_function(FunctionName=self.name)
        except EndpointConnectionError:
            return self._run_on_own_stack(out, err)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if code == "ResourceNotFoundException":
                message = f"the local stack at {url} has no function {self.name}: restart `make local`"
                raise UsageError(message) from None
            if code in _UNSIGNED:
                raise UsageError(
                    f"the local stack at {url} runs with --auth-type AWS_IAM: its Lambda API takes calls signed by a"
                    f" key of your AWS configuration ({code}); set AWS_PROFILE to a profile with a static key, or"
                    " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                ) from None
            raise UsageError(_not_a_stack(url)) from None
        except BotoCoreError:
            raise UsageError(_not_a_stack(url)) from None
        _note(err, f"{self.function} ({self.name}) on {self._event_name()}, on the local stack at {url}")
        _note(err, f"code: {self._code_line(description)}")
        if self.build_dir.joinpath(self.function).is_dir() and not _location(description).startswith(
            str(self.build_dir)
        ):
            _note(err, f"{_shown(self.build_dir)} is not what that stack runs: `make local ARGS=--built` would run it")
        return self._invoke(lambda_client(url), description, out, err)

    def _run_on_own_stack(self, out: IO[bytes], err: IO[str]) -> int:
        built = self.build_dir.joinpath(self.function).is_dir()
        settings = StackSettings.from_env(code="build" if built else "source", build_dir=self.build_dir)
        settings.port = 0
        _note(err, f"nothing listens on port {self.port}: starting a local stack for this invocation")
        stack = LocalStack(settings, log=lambda component, line: print(f"[{component}] {line}", file=err, flush=True))
        stack.start()
        try:
            client = lambda_client(stack.url)
            description = client.get_function(FunctionName=self.name)
            _note(err, f"{self.function} ({self.name}) on {self._event_name()}, on that stack ({stack.url})")
            _note(err, f"code: {self._code_line(description)}")
            return self._invoke(client, description, out, err)
        finally:
            stack.stop()

    # --------------------------------------------------------------------------------- invocation

    def _invoke(self, client: Any, description: dict[str, Any], out: IO[bytes], err: IO[str]) -> int:
        variables = description["Configuration"].get("Environment", {}).get("Variables", {})
        self._seed(variables, err)
        if self.streaming:
            return self._invoke_streaming(client, out, err)
        response = client.invoke(FunctionName=self.name, Payload=self.payload, LogType="Tail")
        _print_log(response.get("LogResult"), err)
        out.write(response["Payload"].read() + b"\n")
        out.flush()
        if "FunctionError" in response:
            _note(err, f"{self.function} returned an error ({response['FunctionError']}): the payload is its document")
            return EXIT_FUNCTION_ERROR
        return 0

    def _invoke_streaming(self, client: Any, out: IO[bytes], err: IO[str]) -> int:
        response = client.invoke_with_response_stream(FunctionName=self.name, Payload=self.payload, LogType="Tail")
        complete: dict[str, Any] = {}
        last = b"\n"
        for event in response["EventStream"]:
            if "PayloadChunk" in event:
                chunk = event["PayloadChunk"]["Payload"]
                out.write(chunk)
                out.flush()
                last = chunk[-1:] or last
            elif "InvokeComplete" in event:
                complete = event["InvokeComplete"]
        if last != b"\n":
            out.write(b"\n")
            out.flush()
        _print_log(complete.get("LogResult"), err)
        if complete.get("ErrorCode"):
            _note(
                err, f"{self.function} failed mid-stream: {complete['ErrorCode']}: {complete.get('ErrorDetails', '')}"
            )
            return EXIT_FUNCTION_ERROR
        return 0

    def _seed(self, variables: dict[str, str], err: IO[str]) -> None:
        turns = referenced_turns(json.loads(self.payload), variables.get("AUTH_TYPE", "AWS_IAM"))
        if not turns:
            return
        dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=variables["AWS_ENDPOINT_URL_DYNAMODB"],
            region_name=variables.get("AWS_REGION", "us-east-1"),
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        seed(ChatTable(dynamodb, variables["CHAT_TABLE_NAME"]), turns)
        for turn in turns:
            _note(err, f"seeded {turn.describe()}")

    # ------------------------------------------------------------------------------------ output

    def _event_name(self) -> str:
        return self.event_path or "the event {} (no EVENT given)"

    def _code_line(self, description: dict[str, Any]) -> str:
        task_root = _location(description)
        layers = [_path_of(layer["Arn"]) for layer in description["Configuration"].get("Layers", [])]
        where = "sam build's output" if task_root.startswith(str(self.build_dir)) else "the source tree"
        return f"{_shown(Path(task_root))} with layers {', '.join(_shown(Path(p)) for p in layers)} ({where})"


def lambda_client(url: str, read_timeout: float = 900) -> Any:
    """boto3's Lambda client for the local stack's Lambda API at ``url``, signed with your own static key (what a
    stack under ``AWS_IAM`` verifies), else with the functions' local key (enough under ``NONE``)."""
    config = Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=read_timeout)
    key = own_key() or Principal(
        "local", LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"], LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    )
    return boto3.client(
        "lambda",
        endpoint_url=url,
        region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        aws_access_key_id=key.access_key,
        aws_secret_access_key=key.secret_key,
        aws_session_token=key.session_token,
        config=config,
    )


def _not_a_stack(url: str) -> str:
    return f"{url} answers, but not as the local stack's Lambda API: is `make local` what runs there?"


def _read_event(path: str | None) -> bytes:
    if path is None:
        return b"{}"  # as `sam local invoke` without --event
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no event file {path}: give one of events/*.json (EVENT=events/…)")
    raw = file.read_bytes()
    try:
        json.loads(raw)
    except ValueError as error:
        raise UsageError(f"{path} is not JSON ({error}): an event is one JSON document") from None
    return raw


def _location(description: dict[str, Any]) -> str:
    return _path_of(description.get("Code", {}).get("Location", ""))


def _path_of(uri: str) -> str:
    return unquote(urlsplit(uri).path) if uri.startswith("file:") else uri


def _shown(path: Path) -> str:
    """A path relative to the repository when it is inside it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _note(err: IO[str], line: str) -> None:
    print(f"invoke: {line}", file=err, flush=True)


def _print_log(log_result: str | None, err: IO[str]) -> None:
    if log_result:
        err.write(base64.b64decode(log_result).decode("utf-8", "replace"))
        err.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chatstream_local.sam.invoke", description=__doc__.split("\n")[0])
    parser.add_argument("function", nargs="?", help="the function's logical id in template.yaml (e.g. ProxyFunction)")
    parser.add_argument("--event", "-e", help="the event file (JSON), e.g. events/proxy-generate.json")
    parser.add_argument("--port", type=int, help="the local stack's port (default: $CHATSTREAM_PORT or 3000)")
    parser.add_argument("--build-dir", type=Path, default=REPO_ROOT / ".aws-sam" / "build", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if not args.function:
            raise UsageError("name the function: make invoke FUNCTION=ProxyFunction EVENT=events/proxy-generate.json")
        port = args.port if args.port is not None else _port_from_env()
        invocation = Invocation(args.function, args.event, port=port, build_dir=args.build_dir)
        return invocation.run(sys.stdout.buffer, sys.stderr)
    except UsageError as error:
        print(f"invoke: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except (StackError, TemplateError) as error:
        print(f"invoke: the local stack could not start: {error}", file=sys.stderr, flush=True)
        return 1
    except (BotoCoreError, ClientError) as error:
        print(f"invoke: the call to the local stack's Lambda API failed: {error}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _port_from_env() -> int:
    raw = os.environ.get("CHATSTREAM_PORT", str(DEFAULT_PORT))
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"CHATSTREAM_PORT must be a port number, got {raw!r}") from None


if __name__ == "__main__":
    sys.exit(main())
