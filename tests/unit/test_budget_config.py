"""Budgets per caller as a deployment sets them: the template's parameters are the relay's defaults, the relay's own
fallbacks are the template's defaults, and the local stack takes them as a deploy does (none unless given)."""

from __future__ import annotations

import json

import pytest

from chatstream.config import Limits, RelayConfig
from chatstream.errors import ConfigError
from chatstream.relay.ratelimit import REFUSED
from chatstream_local.stack import LOCAL_PARAMETER_DEFAULTS, LocalStack, StackSettings
from chatstream_local.template import Template, TemplateError

PARAMETERS = {
    "CallerRequestsPerMinute": "requests_per_minute",
    "CallerTokensPerDay": "tokens_per_day",
    "CallerTurnsAtOnce": "turns_at_once",
}


def relay_environment(template: Template) -> dict[str, str]:
    return {
        key: str(value)
        for key, value in template.function_settings("RelayFunction")["Environment"]["Variables"].items()
    }


def test_the_relay_s_fallbacks_are_the_template_s_defaults() -> None:
    # GIVEN the template's defaults
    template = Template.load()
    defaults = {field: int(template.raw["Parameters"][name]["Default"]) for name, field in PARAMETERS.items()}
    # WHEN the relay reads an environment that sets none of them, and the one the template gives it
    unset = RelayConfig.from_env({"CHAT_TABLE_NAME": "t", "PROXY_FUNCTION_NAME": "p"}).caller_limits
    deployed = RelayConfig.from_env(relay_environment(template)).caller_limits
    # THEN both are the template's defaults, which limit something
    assert unset == deployed == Limits(**defaults)
    assert all(defaults.values())


def test_a_deployment_s_parameters_are_the_relay_s_limits_and_zero_is_no_limit() -> None:
    template = Template.load(
        parameter_overrides={"CallerRequestsPerMinute": "7", "CallerTokensPerDay": "0", "CallerTurnsAtOnce": "2"}
    )
    assert RelayConfig.from_env(relay_environment(template)).caller_limits == Limits(7, 0, 2)


def test_nonsense_is_refused_by_the_template_and_by_the_relay() -> None:
    with pytest.raises(TemplateError, match="CallerTurnsAtOnce"):
        Template.load(parameter_overrides={"CallerTurnsAtOnce": "-1"})
    with pytest.raises(ConfigError, match="CALLER_TOKENS_PER_DAY must be an integer"):
        RelayConfig.from_env({"CHAT_TABLE_NAME": "t", "PROXY_FUNCTION_NAME": "p", "CALLER_TOKENS_PER_DAY": "lots"})


def test_the_local_stack_runs_without_budgets_unless_given_and_takes_them_as_a_deploy_does() -> None:
    # GIVEN a local stack with no overrides, and one given the parameters as `make local ARGS=--parameter-overrides …`
    plain = LocalStack(StackSettings(port=0))
    given = LocalStack(
        StackSettings(port=0, parameter_overrides={"FunctionUrlAuthType": "NONE", "CallerTurnsAtOnce": "3"})
    )
    # THEN the first's relay has no limit, and the second's the one given (the others none, as the first's)
    assert set(LOCAL_PARAMETER_DEFAULTS) == set(PARAMETERS)
    assert RelayConfig.from_env(relay_environment(plain.template)).caller_limits == Limits()
    assert RelayConfig.from_env(relay_environment(given.template)).caller_limits == Limits(turns_at_once=3)


def test_the_alarm_watches_the_most_refused_owner_of_the_line_the_relay_logs() -> None:
    # GIVEN the template's Contributor Insights rule and its alarm, as the source writes them
    resources = Template.load().raw["Resources"]
    body_template, variables = resources["CallerRefusalsRule"]["Properties"]["RuleBody"]["Fn::Sub"]
    rule = json.loads(body_template.replace("${LogGroup}", "relay-logs"))
    # THEN the rule reads the relay's own log group, keyed by the owner its refusal line carries
    assert variables == {"LogGroup": {"Ref": "RelayLogGroup"}}
    assert rule["LogGroupNames"] == ["relay-logs"] and rule["LogFormat"] == "JSON"
    assert rule["Contribution"]["Keys"] == ["$.owner"] and rule["AggregateOn"] == "Count"
    assert rule["Contribution"]["Filters"] == [{"Match": "$.message", "In": [REFUSED]}]
    # AND the alarm reads its most refused owner
    (query,) = resources["CallerRefusedRepeatedlyAlarm"]["Properties"]["Metrics"]
    assert query["Expression"] == {
        "Fn::Sub": "INSIGHT_RULE_METRIC('${CallerRefusalsRule.RuleName}', 'MaxContributorValue')"
    }
