"""Configuration: environment variables read once, at cold start, into frozen dataclasses.

Each function reads only what it needs (``ProxyConfig.from_env()`` etc.). A missing or
malformed variable raises :class:`~chatstream.errors.ConfigError` naming it, so a misconfigured
deployment fails its cold start with a message instead of failing requests later.
"""

from __future__ import annotations

import json
import logging
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
        return cls(table_name=env.required(CHAT_TABLE_NAME), ttl_days=env.integer(TTL_DAYS, 30, minimum=1))


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
    max_tokens_limit: int = 4096  # maxTokens of a turn that asks for none (MaxTokensLimit, the relay's cap too)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ProxyConfig:
        env = _Env(environ)
        return cls(
            table=TableConfig.from_env(environ),
            stream_name=env.required(TOKEN_STREAM_NAME),
            model_id=env.required(MODEL_ID),
            flush_interval_ms=env.integer(FLUSH_INTERVAL_MS, 300, minimum=0, maximum=60_000),
            flush_max_chars=env.integer(FLUSH_MAX_CHARS, 1024, minimum=1, maximum=MAX_RECORD_CHARS),
            cancel_check_interval_ms=env.integer(CANCEL_CHECK_INTERVAL_MS, 500, minimum=0, maximum=60_000),
            put_max_attempts=env.integer(PUT_MAX_ATTEMPTS, 8, minimum=1, maximum=100),
            system_prompt=env.optional(SYSTEM_PROMPT, ""),
            model_request_fields=env.json_object(MODEL_REQUEST_FIELDS),
            max_tokens_limit=env.integer(MAX_TOKENS_LIMIT, 4096, minimum=1, maximum=1_000_000),
        )


@dataclass(frozen=True)
class ConsumerConfig:
    table: TableConfig
    dlq_url: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ConsumerConfig:
        env = _Env(environ)
        return cls(table=TableConfig.from_env(environ), dlq_url=env.required(DLQ_URL))


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

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> RelayConfig:
        env = _Env(environ)
        auth_type = env.optional(AUTH_TYPE, "AWS_IAM")
        if auth_type not in ("AWS_IAM", "NONE"):
            raise ConfigError(f"environment variable {AUTH_TYPE} must be AWS_IAM or NONE, got {auth_type!r}")
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
            max_tokens_limit=env.integer(MAX_TOKENS_LIMIT, 4096, minimum=1, maximum=1_000_000),
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
        )
