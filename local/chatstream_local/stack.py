"""The local stack: the whole pipeline on one machine, configured from template.yaml.

One supervisor process starts, in order: moto in server mode (Kinesis, DynamoDB, SQS; a child
process), the stream, table and queues that template.yaml declares (from their own properties),
the local Bedrock model (or real Bedrock with ``CHATSTREAM_BEDROCK=aws``), the local Lambda
Runtime API with every function of the template (relay on the streaming runtime layer through
its exec wrapper; proxy and consumer on awslambdaric), the Lambda Invoke endpoint the relay calls
the proxy through, the event source mapping emulator feeding the consumer (polling each shard, or pushed records
as with enhanced fan-out: whichever the template's ``EnhancedFanOut`` chooses, overridden by
``CHATSTREAM_ENHANCED_FAN_OUT``), and the relay's
Function URL on ``127.0.0.1:$CHATSTREAM_PORT`` (default 3000). Each function's environment is the
template's, with the local endpoints substituted through botocore's standard
``AWS_ENDPOINT_URL_<SERVICE>`` variables, so nothing is configured twice.

This module holds the order of that start, readiness, and the stop (the Function URL first, moto last). What each
part is made of lives with the part: the functions' specs (:mod:`chatstream_local.lambda_.template_functions`), their
asynchronous failure destinations (:mod:`chatstream_local.lambda_.destinations`), the event source mappings
(:mod:`chatstream_local.event_sources`).

The Function URL answers no page of another origin unless the ``CorsAllowOrigins`` parameter is given (then CORS is
the template's), and every local endpoint answers only requests to its loopback address
(:mod:`chatstream_local.loopback`).
The Function URL's port also serves the Lambda API (``Invoke``, ``InvokeWithResponseStream``, ``GetFunction``)
under its own paths (:mod:`chatstream_local.edge`): what ``make invoke`` calls. Each function runs its source tree
(``CodeUri``, the layers' ``ContentUri``), or with ``code="build"`` what ``sam build`` wrote to ``.aws-sam/build``.
With ``FunctionUrlAuthType=AWS_IAM`` the Function URL, and the Lambda API on its port, verify SigV4 signatures against
the principals of your AWS configuration (:mod:`chatstream_local.iam`). With ``FunctionUrlAuthType=JWT`` the stack
also starts a local OpenID Connect issuer (:mod:`chatstream_local.oidc`, before the functions: the relay is pointed
at it through its ``JWT_*`` variables) unless a ``JwtIssuer`` is given, and stops it after them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from chatstream_local.account import current_region
from chatstream_local.bedrock.endpoint import LocalModelServer
from chatstream_local.botocore_models import layer_models
from chatstream_local.edge import LambdaApiRoute
from chatstream_local.event_sources.kinesis import EventSourceMapping, ReadMode
from chatstream_local.event_sources.sqs import SqsEventSource
from chatstream_local.iam import Principal, Principals, SigV4Verifier
from chatstream_local.lambda_.cors import FunctionUrlCors
from chatstream_local.lambda_.destinations import AsyncFailureDestinations
from chatstream_local.lambda_.function_url import FunctionUrlServer
from chatstream_local.lambda_.invoke import InvokeEndpoint
from chatstream_local.lambda_.service import LocalLambda
from chatstream_local.lambda_.template_functions import BUILD_DIR, CodeSource, FunctionSpecError, TemplateFunctions
from chatstream_local.oidc.server import IssuerServer
from chatstream_local.process import die_with_parent
from chatstream_local.resources import create_queue, create_stream, create_table
from chatstream_local.template import REPO_ROOT, Template

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

DEFAULT_PORT = 3000
ENHANCED_FAN_OUT_ENV = "CHATSTREAM_ENHANCED_FAN_OUT"  # template.yaml's EnhancedFanOut for this stack: true or false
# With enhanced fan-out, how long after its put a record reaches the consumer (milliseconds; default 0, at once).
FAN_OUT_LATENCY_ENV = "CHATSTREAM_LOCAL_FANOUT_LATENCY_MS"
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_SESSION_TOKEN": "local"}
AUTH_TYPES = ("NONE", "AWS_IAM", "JWT")
RELAY = "RelayFunction"


READ_MODE_LINES = {
    ReadMode.POLLING: "each shard polled once a second while empty, as Lambda does (EnhancedFanOut=false)",
    ReadMode.ENHANCED_FAN_OUT: "records pushed as they are put, as enhanced fan-out does (EnhancedFanOut=true)",
}


# Under the overrides a stack is given: a local stack runs without budgets per caller unless told (everyone is one
# caller under NONE, and the tests, the benchmark and make chaos start more turns at once than a caller may);
# `--parameter-overrides CallerTurnsAtOnce=2 …` sets them as a deploy does.
LOCAL_PARAMETER_DEFAULTS = {"CallerRequestsPerMinute": "0", "CallerTokensPerDay": "0", "CallerTurnsAtOnce": "0"}


class StackError(RuntimeError):
    """The stack cannot start: a port is taken, a dependency is missing, a component failed. One clear line."""


@dataclass
class StackSettings:
    port: int = DEFAULT_PORT
    bedrock: str = "local"  # or "aws": the proxy calls real Bedrock with the caller's credentials
    model_delay_ms: int | None = None
    verbose: bool = False
    region: str = "us-east-1"
    parameter_overrides: dict[str, str] = field(default_factory=lambda: {"FunctionUrlAuthType": "NONE"})
    function_overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    identity_resolver: Any = None
    count_calls: bool = False  # moto counts each function's calls (chatstream_local.moto.callcount; the benchmark's)
    code: CodeSource = "source"  # or "build": the functions and layers `sam build` wrote to build_dir
    build_dir: Path = BUILD_DIR
    principals: Principals | None = None  # AWS_IAM: who may sign (default: the keys of your AWS configuration)
    # The share of asynchronous invocations delivered twice, as Lambda may (InvokeEndpoint); the seed repeats the draws.
    duplicate_events: float = 0.0
    duplicate_seed: int | None = None
    # With enhanced fan-out, a record reaches the consumer this long after its put: 0, at once (the default), or
    # Kinesis's "typically an average of 70 ms" (the benchmark's), so what waits for the consumer waits as on AWS.
    fan_out_latency_ms: int = 0

    @classmethod
    def from_env(cls, environ: dict[str, str] | os._Environ[str] = os.environ, **kwargs: Any) -> StackSettings:
        raw_port = environ.get("CHATSTREAM_PORT", str(DEFAULT_PORT))
        try:
            port = int(raw_port)
        except ValueError:
            raise StackError(f"CHATSTREAM_PORT must be a port number, got {raw_port!r}") from None
        if not 0 <= port <= 65535:
            raise StackError(f"CHATSTREAM_PORT must be a port number, got {raw_port!r}")
        bedrock = environ.get("CHATSTREAM_BEDROCK", "local").strip().lower() or "local"
        if bedrock not in ("local", "aws"):
            raise StackError(f"CHATSTREAM_BEDROCK must be 'local' or 'aws', got {bedrock!r}")
        region = current_region(environ)
        fan_out = environ.get(ENHANCED_FAN_OUT_ENV, "").strip().lower()
        if fan_out:
            if fan_out not in ("true", "false"):
                raise StackError(f"{ENHANCED_FAN_OUT_ENV} must be 'true' or 'false', got {fan_out!r}")
            overrides = kwargs.pop("parameter_overrides", None) or cls().parameter_overrides
            kwargs["parameter_overrides"] = {**overrides, "EnhancedFanOut": fan_out}
        raw_latency = environ.get(FAN_OUT_LATENCY_ENV, "").strip()
        if raw_latency:
            if not raw_latency.isdigit() or int(raw_latency) > 10_000:
                raise StackError(f"{FAN_OUT_LATENCY_ENV} must be milliseconds, 0 to 10000: got {raw_latency!r}")
            kwargs.setdefault("fan_out_latency_ms", int(raw_latency))
        return cls(port=port, bedrock=bedrock, region=region, **kwargs)

    @property
    def auth_type(self) -> str:
        return self.parameter_overrides.get("FunctionUrlAuthType", "AWS_IAM")


def _listener(port: int = 0) -> socket.socket:
    """A socket listening on ``port`` of 127.0.0.1 (0: a free one), for a server that starts later: the port is held
    from the moment it is chosen (a port chosen, closed and bound again later could be taken in between). Raises
    :class:`StackError` when the port is in use."""
    sock = socket.socket()
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server's: TIME_WAIT is no conflict
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError:
        sock.close()
        message = f"port {port} on 127.0.0.1 is in use: stop what listens there, or pick another with CHATSTREAM_PORT"
        raise StackError(message) from None
    return sock


def check_port_free(port: int) -> None:
    """Raise :class:`StackError` when ``port`` on 127.0.0.1 cannot be bound (0, a free port, always can)."""
    if port:
        _listener(port).close()


class LocalStack:
    """Start with :meth:`start` (blocks until a chat would succeed), stop with :meth:`stop`."""

    def __init__(self, settings: StackSettings, log: Callable[[str, str], None] | None = None) -> None:
        self.settings = settings
        self._log = log or (lambda _component, _line: None)
        self.template = Template.load(
            region=settings.region, parameter_overrides={**LOCAL_PARAMETER_DEFAULTS, **settings.parameter_overrides}
        )
        self.functions = TemplateFunctions(self.template, code=settings.code, build_dir=settings.build_dir)
        self._moto: subprocess.Popen[bytes] | None = None
        self._moto_url = ""
        self._model: LocalModelServer | None = None
        self.local_lambda: LocalLambda | None = None
        self.invoke_endpoint: InvokeEndpoint | None = None
        self.esm: EventSourceMapping | None = None
        self.reaper_source: SqsEventSource | None = None
        self.function_url: FunctionUrlServer | None = None
        self.issuer: IssuerServer | None = None  # FunctionUrlAuthType=JWT without a JwtIssuer of the user's
        self._url_listener: socket.socket | None = None
        self._stopped = threading.Event()
        # The stack's own key: it signs the readiness check under AWS_IAM. Its secret is this stack's alone: a key
        # everyone knows would let anyone sign for the Lambda API, and so name any caller in a made-up event.
        key_id = f"LOCAL{secrets.token_hex(8).upper()}"
        self.principal = Principal("chatstream-local-stack", key_id, secrets.token_hex(20))

    # ----------------------------------------------------------------------------- names

    @property
    def url(self) -> str:
        assert self.function_url is not None, "the stack is not started"
        return self.function_url.url

    @property
    def moto_url(self) -> str:
        return self._moto_url

    @property
    def model(self) -> LocalModelServer | None:
        return self._model

    @property
    def issuer_url(self) -> str | None:
        """The local OpenID Connect issuer's URL (its ``iss``), when the stack runs one."""
        return self.issuer.url if self.issuer is not None else None

    def name(self, logical_id: str) -> str:
        return self.template.physical_name(logical_id)

    def client(self, service: str) -> Any:
        """A boto3 client for the local AWS emulator."""
        make_client: Any = boto3.client
        return make_client(
            service,
            endpoint_url=self._moto_url,
            region_name=self.settings.region,
            aws_access_key_id="local",
            aws_secret_access_key="local",
            aws_session_token="local",
        )

    # ----------------------------------------------------------------------------- start

    def start(self) -> LocalStack:
        # The URL's port is held from here: the stack's own servers, which take free ports, cannot take it
        self._url_listener = _listener(self.settings.port)
        try:
            self._start_moto()
            self._create_resources()
            self._start_model()
            self._start_issuer()
            self._start_functions()
            self._start_event_sources()
            self._start_url()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_moto(self) -> None:
        listener = _listener()  # passed to moto's process, which serves it
        port = int(listener.getsockname()[1])
        self._moto_url = f"http://127.0.0.1:{port}"
        python_path = os.pathsep.join(filter(None, [str(REPO_ROOT / "local"), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, **LOCAL_CREDENTIALS, "AWS_DEFAULT_REGION": self.settings.region, "PYTHONPATH": python_path}
        with listener:  # closed here once moto's process holds it
            self._moto = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "chatstream_local.moto.server",
                    *("-H", "127.0.0.1", "-p", str(port), "--fd", str(listener.fileno())),
                    *(["--count-calls"] if self.settings.count_calls else []),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                process_group=0,  # the stack's session: see lambda_.function_spec.FUNCTION_NICE
                preexec_fn=die_with_parent,  # started from the supervisor's main thread
                pass_fds=(listener.fileno(),),
            )
        threading.Thread(target=self._pump, args=("moto", self._moto), daemon=True).start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._moto.poll() is not None:
                raise StackError("moto server exited at start; run `make local ARGS=--verbose` for its output")
            try:
                with urllib.request.urlopen(f"{self._moto_url}/moto-api/", timeout=1):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise StackError("moto server did not answer within 30 s")

    def _pump(self, component: str, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if self.settings.verbose:
                self._log(component, line)

    def _create_resources(self) -> None:
        create_stream(self.client("kinesis"), self.template, "TokenStream")
        create_table(self.client("dynamodb"), self.template, "ChatTable")
        sqs = self.client("sqs")
        for logical_id in self.template.resources_of_type("AWS::SQS::Queue"):
            self.template.ref_overrides[logical_id] = create_queue(sqs, self.template, logical_id)

    def _start_model(self) -> None:
        if self.settings.bedrock == "aws":
            self._log(
                "stack",
                f"CHATSTREAM_BEDROCK=aws: the proxy calls Amazon Bedrock in {self.settings.region} with your AWS"
                " credentials (AWS_DEFAULT_REGION chooses the region; your profile's is not read)",
            )
            return
        self._model = LocalModelServer(delay_ms=self.settings.model_delay_ms)
        self._model.start()

    def _start_issuer(self) -> None:
        """``FunctionUrlAuthType=JWT``: a local issuer whose tokens the relay accepts, unless the user named an issuer
        of their own (``JwtIssuer``, with ``JwtAudiences`` or ``JwtClientIds``)."""
        if self.settings.auth_type != "JWT" or "JwtIssuer" in self.settings.parameter_overrides:
            return
        self.issuer = IssuerServer().start()
        self._log("stack", f"FunctionUrlAuthType=JWT: a local OpenID Connect issuer at {self.issuer.url}")

    def _endpoints(self, invoke_url: str) -> dict[str, str]:
        """The variables that point a function at the local services, as botocore's ``AWS_ENDPOINT_URL_<SERVICE>``."""
        env = {
            "AWS_ENDPOINT_URL_KINESIS": self._moto_url,
            "AWS_ENDPOINT_URL_DYNAMODB": self._moto_url,
            "AWS_ENDPOINT_URL_SQS": self._moto_url,
            "AWS_ENDPOINT_URL_LAMBDA": invoke_url,
            "AWS_REGION": self.settings.region,
            "AWS_DEFAULT_REGION": self.settings.region,
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_DISABLED": "true",
            # The botocore models the layer ships: only the operations the functions call (botocore_models.py).
            "AWS_DATA_PATH": str(layer_models()),
        }
        if self._model is not None:
            env["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] = self._model.url
            env.update(LOCAL_CREDENTIALS)
        return env

    def _start_functions(self) -> None:
        listener = _listener()  # the functions are given its URL before the endpoint serves it
        try:
            endpoints = self._endpoints(f"http://127.0.0.1:{listener.getsockname()[1]}")
            try:
                local = {RELAY: self.issuer.relay_environment()} if self.issuer is not None else {}
                specs = self.functions.specs(endpoints, self.settings.function_overrides, local=local)
            except FunctionSpecError as err:
                raise StackError(str(err)) from None
            self.local_lambda = LocalLambda(specs, log_sink=self._function_log).start()
            on_failure = AsyncFailureDestinations.from_template(
                self.template, sqs=self.client("sqs"), log=lambda line: self._log("stack", line)
            )
            self.invoke_endpoint = InvokeEndpoint(
                self.local_lambda,
                listener=listener,
                on_failure=on_failure,
                duplicate_events=self.settings.duplicate_events,
                rng=random.Random(self.settings.duplicate_seed),
            ).start()
        except BaseException:
            listener.close()
            raise
        if self.settings.duplicate_events:
            chance = f"{self.settings.duplicate_events:g}"
            self._log("stack", f"each asynchronous invocation delivered twice with probability {chance}, as Lambda may")

    def _start_event_sources(self) -> None:
        self.esm = EventSourceMapping.from_template(
            self.template,
            function_logical_id="ConsumerFunction",
            kinesis=self.client("kinesis"),
            sqs=self.client("sqs"),
            invoke=lambda payload: self._invoke_consumer(payload),
            push_latency_s=self.settings.fan_out_latency_ms / 1000,
        )
        self._log("stack", f"Kinesis to the consumer: {READ_MODE_LINES[self.esm.read_mode]}")
        if self.esm.read_mode is ReadMode.ENHANCED_FAN_OUT and self.settings.fan_out_latency_ms:
            self._log("stack", f"records reach the consumer {self.settings.fan_out_latency_ms} ms after their put")
        self.esm.start()
        self.reaper_source = SqsEventSource.from_template(
            self.template,
            function_logical_id="TurnReaperFunction",
            sqs=self.client("sqs"),
            invoke=lambda payload: self.local_lambda.invoke(self.name("TurnReaperFunction"), payload),  # type: ignore[union-attr]
        ).start()

    def _invoke_consumer(self, payload: bytes) -> Any:
        assert self.local_lambda is not None
        return self.local_lambda.invoke(self.name("ConsumerFunction"), payload)

    def _function_log(self, label: str, line: str) -> None:
        if self.settings.verbose or _is_problem(line):
            self._log(self.template.short_name(label), line)

    def _start_url(self) -> None:
        assert self.invoke_endpoint is not None
        relay = self.name(RELAY)
        url_config = self.template.properties(RELAY)["FunctionUrlConfig"]
        verifier = self._authenticator()  # AWS_IAM: the Lambda API on the URL's port takes signed requests only, too
        self.function_url = FunctionUrlServer(
            self.local_lambda,  # type: ignore[arg-type]
            relay,
            listener=self._url_listener,
            invoke_mode=url_config.get("InvokeMode", "BUFFERED"),
            identity_resolver=self.settings.identity_resolver,
            authenticate=verifier,
            cors=FunctionUrlCors.from_config(url_config.get("Cors")) if self._cors_asked else None,
            same_origin_only=True,  # a page of another origin only as CorsAllowOrigins allows it (LOCAL_STACK.md)
            lambda_api=LambdaApiRoute(self.invoke_endpoint.url, verifier),
            on_error=lambda recorded: self._log("url", recorded.describe(self.template.short_name(relay))),
        ).start()

    @property
    def _cors_asked(self) -> bool:
        """Whether the user gave ``CorsAllowOrigins``: only then do other origins' pages reach the Function URL, as
        the template's CORS allows them. Its default ``*`` would let any page the user opens drive the stack (and,
        with ``CHATSTREAM_BEDROCK=aws``, spend their Bedrock account) and read its replies."""
        return "CorsAllowOrigins" in self.settings.parameter_overrides

    def _authenticator(self) -> SigV4Verifier | None:
        """``AuthType: AWS_IAM`` verifies SigV4 (unless a test's ``identity_resolver`` stands in for it)."""
        # NONE, AWS_IAM or JWT (whose URL is public: the relay checks tokens): the template checks overrides
        auth_type = self.template.parameter("FunctionUrlAuthType")
        if auth_type != "AWS_IAM" or self.settings.identity_resolver is not None:
            return None
        principals = self.settings.principals or Principals.from_aws_config()
        return SigV4Verifier(Principals([self.principal, *principals]), self.settings.region)

    def _health_request(self) -> urllib.request.Request:
        """``GET /health`` on the Function URL, signed with the stack's own key when the URL verifies SigV4."""
        url = f"{self.url}/health"
        assert self.function_url is not None
        if self.function_url.authenticate is None:
            return urllib.request.Request(url)
        signed = AWSRequest(method="GET", url=url)
        key = self.principal
        credentials = Credentials(key.access_key, key.secret_key, key.session_token)
        SigV4Auth(credentials, "lambda", self.settings.region).add_auth(signed)
        return urllib.request.Request(url, headers=dict(signed.headers.items()))

    def _wait_ready(self) -> None:
        """Ready when the relay answers through its URL and the proxy and consumer have started."""
        deadline = time.monotonic() + 60
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self._health_request(), timeout=10) as response:
                    if response.status == 200:
                        break
                    last = f"status {response.status}"
            except (urllib.error.URLError, OSError) as err:
                last = str(err)
            time.sleep(0.1)
        else:
            raise StackError(f"the relay did not become healthy within 60 s ({last})")
        assert self.local_lambda is not None
        # Warm one consumer environment (an empty batch is a no-op), so the first chat pays one cold start less.
        self.local_lambda.invoke(self.name("ConsumerFunction"), b'{"Records": []}')

    # ------------------------------------------------------------------------------ stop

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        components = (
            self.function_url,
            self.esm,
            self.reaper_source,
            self.invoke_endpoint,
            self.local_lambda,
            self._model,
            self.issuer,
        )
        for component in components:
            if component is not None:
                with contextlib.suppress(Exception):
                    component.stop()
        if self.function_url is None and self._url_listener is not None:
            self._url_listener.close()  # start failed before the Function URL took it
        if self._moto is not None and self._moto.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._moto.pid, signal.SIGTERM)
            try:
                self._moto.wait(timeout=2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._moto.pid, signal.SIGKILL)
                self._moto.wait(timeout=2)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _is_problem(line: str) -> bool:
    """Quiet mode shows warnings, errors and tracebacks only, and Lambda's report of an init that failed."""
    if line.startswith("INIT_REPORT"):
        return "Status: success" not in line
    if line.startswith("{"):
        with contextlib.suppress(ValueError):
            level = str(json.loads(line).get("level", "")).upper()
            return level in ("WARNING", "ERROR", "CRITICAL")
    return any(word in line for word in ("Traceback", "Error", "ERROR", "WARNING", "Exception"))
