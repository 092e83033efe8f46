"""One default, one home: what a function runs with when a variable is unset (config.py's fallbacks, used locally
and in tests) is what the template deploys (its parameters' defaults, the values its functions' Environment
writes); the modules built from a configuration keep no default of their own."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any, cast

import pytest

from chatstream.config import ConsumerConfig, ProxyConfig, RelayConfig, TableConfig
from chatstream.errors import ConfigError
from chatstream.generation import GenerationSettings
from chatstream.kinesis import TokenStreamWriter
from chatstream.relay.follow import FollowSettings
from chatstream.table import ChatTable
from chatstream_client.api import READ_TIMEOUT_S
from tests.support import REPO_ROOT

if TYPE_CHECKING:
    from chatstream_local.template import Template

ConfigClass = type[ProxyConfig] | type[RelayConfig] | type[ConsumerConfig] | type[TableConfig]

# Each function's configuration, and the variables the template sets for it that config.py has a fallback for.
FALLBACKS: dict[str, tuple[ConfigClass, set[str]]] = {
    "ProxyFunction": (
        ProxyConfig,
        {"TTL_DAYS", "MAX_TOKENS_LIMIT", "FLUSH_INTERVAL_MS", "FLUSH_MAX_CHARS", "MODEL_REQUEST_FIELDS"},
    ),
    "RelayFunction": (
        RelayConfig,
        {
            "TTL_DAYS",
            "AUTH_TYPE",
            "MAX_TOKENS_LIMIT",
            "POLL_MIN_MS",
            "POLL_MAX_MS",
            "RECONNECT_MARGIN_S",
            "IDLE_RECONNECT_S",
            "STALE_TURN_S",
            "MAX_TURNS_PER_SESSION",
        },
    ),
    "ConsumerFunction": (ConsumerConfig, {"TTL_DAYS"}),
    "TurnReaperFunction": (TableConfig, {"TTL_DAYS"}),
}
# Unset, the relay serves no model on /v1 (GET /v1/models is empty): a meaning of its own, not a fallback.
NOT_FALLBACKS = {"RelayFunction": {"MODEL_ID"}}


def deployed_environment(template: Template, function: str) -> dict[str, str]:
    """The function's variables as the template deploys them, every parameter at its default."""
    return dict(template.function_settings(function)["Environment"]["Variables"])


def without_fallbacks(config_class: ConfigClass, environment: dict[str, str], keep: set[str]) -> dict[str, str]:
    """``environment`` without each variable the configuration can do without (all but the required ones)."""
    left = dict(environment)
    for name in sorted(set(environment) - keep):
        without = {key: value for key, value in left.items() if key != name}
        try:
            config_class.from_env(without)
        except ConfigError:
            continue  # required: no fallback
        left = without
    return left


def fallback_config(template: Template, function: str) -> Any:
    config_class, _ = FALLBACKS[function]
    deployed = deployed_environment(template, function)
    return config_class.from_env(without_fallbacks(config_class, deployed, NOT_FALLBACKS.get(function, set())))


@pytest.mark.parametrize("function", sorted(FALLBACKS))
def test_a_function_with_its_variables_unset_is_configured_as_the_template_deploys_it(
    template: Template, function: str
) -> None:
    config_class, fallbacks = FALLBACKS[function]
    # GIVEN the function's environment as the template deploys it, and the same with every variable unset that the
    # function can do without (the variables above among them)
    deployed = deployed_environment(template, function)
    unset = without_fallbacks(config_class, deployed, NOT_FALLBACKS.get(function, set()))
    assert fallbacks <= set(deployed) - set(unset)
    # WHEN each is read THEN the function is configured alike: every fallback is the template's value
    assert config_class.from_env(unset) == config_class.from_env(deployed)


def test_the_proxys_parts_built_without_a_configuration_take_its_fallbacks(template: Template) -> None:
    # GIVEN the proxy's configuration with its variables unset (the template's values, as above)
    config = fallback_config(template, "ProxyFunction")
    # WHEN its generation settings, stream writer and table are built without one
    settings = GenerationSettings(model_id="m")
    writer = TokenStreamWriter(cast("Any", None), "stream")
    table = ChatTable(cast("Any", None), "table")
    # THEN each takes the configuration's values: no default of their own
    assert (settings.flush_interval_ms, settings.flush_max_chars, settings.cancel_check_interval_ms) == (
        config.flush_interval_ms,
        config.flush_max_chars,
        config.cancel_check_interval_ms,
    )
    assert writer.max_attempts == config.put_max_attempts
    assert table.ttl_days == config.table.ttl_days


def test_a_followers_settings_are_the_relays_configuration_and_nothing_else(template: Template) -> None:
    # GIVEN the relay's configuration as the template deploys it
    config = RelayConfig.from_env(deployed_environment(template, "RelayFunction"))
    # WHEN a follower's settings are made from it
    settings = FollowSettings.from_config(config)
    # THEN they are its values, in seconds (the stale-turn timeout among them: STALE_TURN_S, 1260 s as deployed)
    assert (settings.poll_min_s * 1000, settings.poll_max_s * 1000) == (config.poll_min_ms, config.poll_max_ms)
    assert (settings.start_timeout_s, settings.gap_timeout_s, settings.keepalive_s) == (
        config.start_timeout_s,
        config.gap_timeout_s,
        config.keepalive_s,
    )
    assert (settings.reconnect_margin_s, settings.idle_reconnect_s, settings.stale_turn_s, settings.pace) == (
        config.reconnect_margin_s,
        config.idle_reconnect_s,
        config.stale_turn_s,
        config.pace_text,
    )
    # AND the settings hold a default only for what the configuration does not set
    assert {field.name for field in fields(FollowSettings) if field.default is not MISSING} == {
        "status_check_s",
        "page_size",
    }


def test_the_clients_idle_limit_is_three_of_the_relays_keep_alive_periods(template: Template) -> None:
    # GIVEN the relay's keep-alive period (KEEPALIVE_S, its fallback: the template sets none)
    keepalive_s = fallback_config(template, "RelayFunction").keepalive_s
    # THEN the client (its own package, which cannot import the relay's) resumes a stream silent for three of them;
    # the page's limit is held to the client's in tests/unit/client/test_client_retry.py
    assert 3 * keepalive_s == READ_TIMEOUT_S


def test_the_deploy_guides_parameter_table_gives_the_templates_defaults(template: Template) -> None:
    # GIVEN docs/DEPLOY.md's table of every parameter (a row names one or more, and their defaults in the same order,
    # or one that is each one's)
    guide = (REPO_ROOT / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    section = guide.split("\n## Every parameter\n", 1)[1]
    (table,) = [block for block in section.split("\n\n") if block.startswith("| parameter | default |")]
    documented: dict[str, str] = {}
    for row in table.splitlines()[2:]:
        names_cell, defaults_cell = row.split(" | ")[:2]
        names = re.findall(r"`(\w+)`", names_cell)
        defaults = defaults_cell.split(", ") if len(names) > 1 else [defaults_cell]
        defaults = defaults * len(names) if len(defaults) == 1 else defaults
        assert len(defaults) == len(names), row
        for name, value in zip(names, defaults, strict=True):
            value = re.sub(r" \(.*\)$", "", value).strip("`")  # "0 (unreserved)": 0
            documented[name] = "" if value == "empty" else value
    # THEN it lists every parameter, each with the template's default
    parameters = template.raw["Parameters"]
    assert documented == {name: str(parameter.get("Default", "")) for name, parameter in parameters.items()}
