"""Configuration: environment variables read once, at cold start, into frozen dataclasses.

Each function reads only what it needs (``ProxyConfig.from_env()`` etc.). A missing or
malformed variable raises :class:`~chatstream.errors.ConfigError` naming it, so a misconfigured
deployment fails its cold start with a message instead of failing requests later.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.config import Config

from chatstream.coalescer import MAX_RECORD_CHARS
from chatstream.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

# Variable names: the template sets these, nothing else reads the environment.
CHAT_TABLE_NAME = "CHAT_TABLE_NAME"
TOKEN_STREAM_NAME = "TOKEN_STREAM_NAME"
MODEL_ID = "MODEL_ID"
FLUSH_INTERVAL_MS = "FLUSH_INTERVAL_MS"
FLUSH_MAX_CHARS = "FLUSH_MAX_CHARS"
CANCEL_CHECK_INTERVAL_MS = "CANCEL_CHECK_INTERVAL_MS"
PUT_MAX_ATTEMPTS = "PUT_MAX_ATTEMPTS"
SYSTEM_PROMPT = "SYSTEM_PROMPT"
MODEL_REQUEST_FIELDS = "MODEL_REQUEST_FIELDS"
TTL_DAYS = "TTL_DAYS"
DLQ_URL = "DLQ_URL"
PROXY_FUNCTION_NAME = "PROXY_FUNCTION_NAME"
MAX_TOKENS_LIMIT = "MAX_TOKENS_LIMIT"
POLL_MIN_MS = "POLL_MIN_MS"
POLL_MAX_MS = "POLL_MAX_MS"
START_TIMEOUT_S = "START_TIMEOUT_S"
GAP_TIMEOUT_S = "GAP_TIMEOUT_S"
KEEPALIVE_S = "KEEPALIVE_S"
RECONNECT_MARGIN_S = "RECONNECT_MARGIN_S"
IDLE_RECONNECT_S = "IDLE_RECONNECT_S"
AUTH_TYPE = "AUTH_TYPE"
MAX_TURNS_PER_SESSION = "MAX_TURNS_PER_SESSION"
STALE_TURN_S = "STALE_TURN_S"
PACE_TEXT = "PACE_TEXT"
# Budgets per caller (chatstream.table.budgets): the deployment's defaults, 0 = no limit
CALLER_REQUESTS_PER_MINUTE = "CALLER_REQUESTS_PER_MINUTE"
CALLER_TOKENS_PER_DAY = "CALLER_TOKENS_PER_DAY"
CALLER_TURNS_AT_ONCE = "CALLER_TURNS_AT_ONCE"
# AUTH_TYPE=JWT (chatstream.relay.bearer; HTTP_API.md, "Identity")
JWT_ISSUER = "JWT_ISSUER"
JWT_AUDIENCES = "JWT_AUDIENCES"
JWT_CLIENT_IDS = "JWT_CLIENT_IDS"
JWT_CLIENT_IDS_PARAMETER = "JWT_CLIENT_IDS_PARAMETER"
JWT_REQUIRED_SCOPE = "JWT_REQUIRED_SCOPE"
JWT_PAGE_CLIENT_ID = "JWT_PAGE_CLIENT_ID"
JWT_LEEWAY_S = "JWT_LEEWAY_S"
AUTH_TYPES = ("AWS_IAM", "NONE", "JWT")

# What a variable is when it is unset (locally, in tests; a deployment sets each one the template names). For a
# variable the template sets, the fallback is the template's value (its parameter's Default, or the value the function's
# Environment writes): the template is the truth for what is deployed, and tests/unit/test_config.py holds each
# fallback here to it. Those other modules need are named; the rest are written once, in ``from_env`` below.
TTL_DAYS_DEFAULT = 30  # TtlDays (also ChatTable's, for a table built without a configuration)
FLUSH_INTERVAL_MS_DEFAULT = 300  # FlushIntervalMs (also GenerationSettings')
FLUSH_MAX_CHARS_DEFAULT = 1024  # FlushMaxChars (also GenerationSettings')
CANCEL_CHECK_INTERVAL_MS_DEFAULT = 500  # not in the template (also GenerationSettings')
PUT_MAX_ATTEMPTS_DEFAULT = 8  # not in the template (also TokenStreamWriter's)
MAX_TOKENS_LIMIT_DEFAULT = 4096  # MaxTokensLimit: the proxy's and the relay's

# botocore's client settings for every function: standard retry mode (transport errors, throttling), 3 attempts.
# The adapters retry what they must not lose (unprocessed items, failed records) on top, with their own backoff.
AWS_RETRIES = Config(retries={"mode": "standard", "max_attempts": 3})


class _Env:
    """Typed reads of one environment mapping, with errors that name the variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def required(self, name: str) -> str:
        value = self._environ.get(name, "").strip()
        if not value:
            raise ConfigError(f"environment variable {name} is required but not set")
        return value

    def optional(self, name: str, default: str) -> str:
        value = self._environ.get(name)
        return default if value is None else value

    def integer(self, name: str, default: int, *, minimum: int = 0, maximum: int = 2**31) -> int:
        raw = self._environ.get(name, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError as err:
            raise ConfigError(f"environment variable {name} must be an integer, got {raw!r}") from err
        if not minimum <= value <= maximum:
            raise ConfigError(f"environment variable {name} must be between {minimum} and {maximum}, got {value}")
        return value

    def json_object(self, name: str) -> Mapping[str, Any] | None:
        """A JSON object, or ``None`` when the variable is unset or blank."""
        raw = self._environ.get(name, "").strip()
        if not raw:
            return None
        try:
            value = json.loads(raw)
        except ValueError as err:
            raise ConfigError(f"environment variable {name} must be a JSON object, and is not JSON: {err}") from err
        if not isinstance(value, dict):
            kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
                type(value), "a number"
            )
            raise ConfigError(f"environment variable {name} must be a JSON object, got {kind}")
        return value

    def names(self, name: str) -> tuple[str, ...]:
        """A comma-separated list (``a,b``), blanks dropped; empty when the variable is unset or blank."""
        return tuple(item.strip() for item in self._environ.get(name, "").split(",") if item.strip())

    def boolean(self, name: str, default: bool) -> bool:
        raw = self._environ.get(name, "").strip().lower()
        if not raw:
            return default
        if raw not in ("true", "false"):
            raise ConfigError(f"environment variable {name} must be true or false, got {raw!r}")
        return raw == "true"


@dataclass(frozen=True)
class TableConfig:
    table_name: str
    ttl_days: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TableConfig:
        env = _Env(environ)
        return cls(
            table_name=env.required(CHAT_TABLE_NAME), ttl_days=env.integer(TTL_DAYS, TTL_DAYS_DEFAULT, minimum=1)
        )


@dataclass(frozen=True)
class ProxyConfig:
    table: TableConfig
    stream_name: str
    model_id: str
    flush_interval_ms: int
    flush_max_chars: int
    cancel_check_interval_ms: int
    put_max_attempts: int
    system_prompt: str
    model_request_fields: Mapping[str, Any] | None = None  # ConverseStream's additionalModelRequestFields
    max_tokens_limit: int = MAX_TOKENS_LIMIT_DEFAULT  # maxTokens of a turn that asks for none (the relay's cap too)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ProxyConfig:
        env = _Env(environ)
        return cls(
            table=TableConfig.from_env(environ),
            stream_name=env.required(TOKEN_STREAM_NAME),
            model_id=env.required(MODEL_ID),
            flush_interval_ms=env.integer(FLUSH_INTERVAL_MS, FLUSH_INTERVAL_MS_DEFAULT, minimum=0, maximum=60_000),
            flush_max_chars=env.integer(FLUSH_MAX_CHARS, FLUSH_MAX_CHARS_DEFAULT, minimum=1, maximum=MAX_RECORD_CHARS),
            cancel_check_interval_ms=env.integer(
                CANCEL_CHECK_INTERVAL_MS, CANCEL_CHECK_INTERVAL_MS_DEFAULT, minimum=0, maximum=60_000
            ),
            put_max_attempts=env.integer(PUT_MAX_ATTEMPTS, PUT_MAX_ATTEMPTS_DEFAULT, minimum=1, maximum=100),
            system_prompt=env.optional(SYSTEM_PROMPT, ""),
            model_request_fields=env.json_object(MODEL_REQUEST_FIELDS),
            max_tokens_limit=env.integer(MAX_TOKENS_LIMIT, MAX_TOKENS_LIMIT_DEFAULT, minimum=1, maximum=1_000_000),
        )


@dataclass(frozen=True)
class ConsumerConfig:
    table: TableConfig
    dlq_url: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ConsumerConfig:
        env = _Env(environ)
        return cls(table=TableConfig.from_env(environ), dlq_url=env.required(DLQ_URL))


# ------------------------------------------------------------------------------------- budgets per caller

MAX_LIMIT = 1_000_000_000  # the Caller* parameters' MaxValue


@dataclass(frozen=True)
class Limits:
    """A caller's limits (:mod:`chatstream.table.budgets` enforces them): the deployment's defaults
    (``CallerRequestsPerMinute``, ``CallerTokensPerDay``, ``CallerTurnsAtOnce``), or an owner's own; 0: no limit.
    The field names are :class:`~chatstream.table.budgets.LimitKind`'s values."""

    requests_per_minute: int = 0
    tokens_per_day: int = 0
    turns_at_once: int = 0

    @property
    def any(self) -> bool:
        return bool(self.requests_per_minute or self.tokens_per_day or self.turns_at_once)


@dataclass(frozen=True)
class RelayConfig:
    table: TableConfig
    proxy_function_name: str
    max_tokens_limit: int
    poll_min_ms: int
    poll_max_ms: int
    start_timeout_s: int
    gap_timeout_s: int
    keepalive_s: int
    reconnect_margin_s: int
    idle_reconnect_s: int
    auth_type: str
    max_turns_per_session: int
    stale_turn_s: int
    pace_text: bool  # release text in word-sized pieces over the turn's cadence (chatstream.relay.pace)
    model_id: str = ""  # what /v1 serves (GET /v1/models); empty: no model
    jwt: JwtSettings | None = None  # AUTH_TYPE=JWT's settings; None under the other auth types
    # each caller's limits unless an operator set its own (CallerRequestsPerMinute, CallerTokensPerDay,
    # CallerTurnsAtOnce)
    caller_limits: Limits = Limits()

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RelayConfig:
        env = _Env(environ)
        auth_type = env.optional(AUTH_TYPE, "AWS_IAM")
        if auth_type not in AUTH_TYPES:
            raise ConfigError(f"environment variable {AUTH_TYPE} must be AWS_IAM, NONE or JWT, got {auth_type!r}")
        poll_min = env.integer(POLL_MIN_MS, 20, minimum=1, maximum=10_000)
        poll_max = env.integer(POLL_MAX_MS, 500, minimum=1, maximum=60_000)
        if poll_max < poll_min:
            # Each parameter is within its own range, so CloudFormation deploys it (its rules cannot compare two
            # numbers): failing here would answer 502 to every request. Poll at the one interval instead.
            logging.getLogger(__name__).warning(
                "%s (%d) is below %s (%d): polling every %d ms", POLL_MAX_MS, poll_max, POLL_MIN_MS, poll_min, poll_min
            )
            poll_max = poll_min
        return cls(
            table=TableConfig.from_env(environ),
            proxy_function_name=env.required(PROXY_FUNCTION_NAME),
            max_tokens_limit=env.integer(MAX_TOKENS_LIMIT, MAX_TOKENS_LIMIT_DEFAULT, minimum=1, maximum=1_000_000),
            poll_min_ms=poll_min,
            poll_max_ms=poll_max,
            start_timeout_s=env.integer(START_TIMEOUT_S, 30, minimum=1, maximum=900),
            gap_timeout_s=env.integer(GAP_TIMEOUT_S, 10, minimum=1, maximum=900),
            keepalive_s=env.integer(KEEPALIVE_S, 10, minimum=1, maximum=900),
            reconnect_margin_s=env.integer(RECONNECT_MARGIN_S, 10, minimum=1, maximum=900),
            idle_reconnect_s=env.integer(IDLE_RECONNECT_S, 60, minimum=1, maximum=900),
            auth_type=auth_type,
            max_turns_per_session=env.integer(MAX_TURNS_PER_SESSION, 1000, minimum=1, maximum=999_999),
            stale_turn_s=env.integer(STALE_TURN_S, 1260, minimum=1, maximum=86_400),
            pace_text=env.boolean(PACE_TEXT, True),
            model_id=env.optional(MODEL_ID, "").strip(),
            jwt=JwtSettings.from_env(environ) if auth_type == "JWT" else None,
            caller_limits=Limits(
                requests_per_minute=env.integer(CALLER_REQUESTS_PER_MINUTE, 60, maximum=MAX_LIMIT),
                tokens_per_day=env.integer(CALLER_TOKENS_PER_DAY, 1_000_000, maximum=MAX_LIMIT),
                turns_at_once=env.integer(CALLER_TURNS_AT_ONCE, 5, maximum=MAX_LIMIT),
            ),
        )


# ---------------------------------------------------------------------------------------------- AUTH_TYPE=JWT

MAX_LEEWAY_S = 60
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


@dataclass(frozen=True)
class JwtSettings:
    """What a bearer token must be to be accepted (:mod:`chatstream.relay.bearer`).

    A token is accepted when its issuer is exactly ``issuer`` and either its ``aud`` names one of ``audiences``, or
    it is an access token (``token_use`` ``access``, as Cognito's are: they carry no ``aud``) of one of the accepted
    client ids: ``client_ids``, and those the SSM parameter ``client_ids_parameter`` holds (the Cognito user pool the
    template creates: its client's id cannot be in the relay's environment, as the client's callback URL is the
    relay's Function URL, so the relay reads it when it first needs it).
    """

    issuer: str
    audiences: tuple[str, ...] = ()
    client_ids: tuple[str, ...] = ()
    client_ids_parameter: str = ""
    required_scope: str = ""
    page_client_id: str = ""  # the client the page signs in with; empty: the first accepted client id
    leeway_s: int = 30

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> JwtSettings:
        env = _Env(environ)
        issuer = env.required(JWT_ISSUER)
        problem = issuer_problem(issuer)
        if problem:
            raise ConfigError(f"environment variable {JWT_ISSUER} {problem}, got {issuer!r}")
        settings = cls(
            issuer=issuer,
            audiences=env.names(JWT_AUDIENCES),
            client_ids=env.names(JWT_CLIENT_IDS),
            client_ids_parameter=env.optional(JWT_CLIENT_IDS_PARAMETER, "").strip(),
            required_scope=env.optional(JWT_REQUIRED_SCOPE, "").strip(),
            page_client_id=env.optional(JWT_PAGE_CLIENT_ID, "").strip(),
            leeway_s=env.integer(JWT_LEEWAY_S, 30, minimum=0, maximum=MAX_LEEWAY_S),
        )
        if not (settings.audiences or settings.client_ids or settings.client_ids_parameter):
            raise ConfigError(
                f"AUTH_TYPE JWT accepts no token: set {JWT_AUDIENCES} (the accepted aud values) or {JWT_CLIENT_IDS} "
                f"(the accepted client_id of access tokens without aud, as Cognito's)"
            )
        if not _SCOPE_TOKEN.fullmatch(settings.required_scope or "-"):
            raise ConfigError(
                f"environment variable {JWT_REQUIRED_SCOPE} must be one scope (RFC 6749 3.3: no spaces, quotes or "
                f"backslashes), got {settings.required_scope!r}"
            )
        return settings


def issuer_problem(issuer: str) -> str:
    """What is wrong with an issuer identifier (OpenID Connect Discovery 1.0, 2: an https URL without query or
    fragment; plain http only on this machine's loopback, for the local stack), or ``""``."""
    scheme, _, rest = issuer.partition("://")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    host = host if host.startswith("[") else host.split(":", 1)[0]
    if scheme == "http" and host not in _LOOPBACK_HOSTS:
        return "must be an https URL (http only on 127.0.0.1 or localhost)"
    if scheme not in ("https", "http") or not host:
        return "must be an https URL"
    if "?" in rest or "#" in rest or "@" in rest.split("/", 1)[0] or any(char.isspace() for char in rest):
        return "must be a URL without query, fragment, user or spaces"
    return ""
