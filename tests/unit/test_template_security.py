"""Least privilege and hardening of template.yaml, checked on what CloudFormation actually creates.

The template is translated offline with samtranslator (as ``sam validate`` does: local code URIs replaced
by S3 placeholders, no managed-policy lookup), once for each combination of the parameters that decide
which resources exist (:data:`DEPLOYMENTS`). Each translation is then deployed on paper: its conditions are
evaluated with those parameters (by the local stack's template reader), resources and outputs whose
condition is false are left out, and every ``Fn::If`` is resolved to its branch. So the roles SAM generates,
the permissions it does (or does not) add, and the conditioned resources written by hand are all checked
as one deployment would have them.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

from chatstream_local.template import Template
from tests.support import REPO_ROOT

TEMPLATE = REPO_ROOT / "template.yaml"
# X-Ray and CloudWatch metrics have no resource-level permissions: "*" is the only resource they take.
RESOURCELESS_ACTIONS = frozenset({"xray:PutTraceSegments", "xray:PutTelemetryRecords", "cloudwatch:PutMetricData"})
# Every function has its own role, written in the template, so SAM attaches no AWS managed policy (their
# AWSLambdaBasicExecutionRole would let a function write to any log group).
ALLOWED_MANAGED_POLICIES: frozenset[str] = frozenset()
PSEUDO = {"AWS::Region": "us-east-1", "AWS::Partition": "aws", "AWS::AccountId": "123456789012"}
PSEUDO_REFS = frozenset({*PSEUDO, "AWS::StackName", "AWS::StackId", "AWS::URLSuffix", "AWS::NoValue"})

# The parameters that change which resources exist, and every value of each that matters.
DECIDING_PARAMETERS: dict[str, tuple[str, ...]] = {
    "FunctionUrlAuthType": ("AWS_IAM", "NONE", "JWT"),
    "CreateUserPool": ("false", "true"),
    "EnhancedFanOut": ("false", "true"),
    "AlarmEmail": ("", "ops@example.com"),
    "CreateDashboard": ("true", "false"),
}
# Beside them in every deployment: what a JWT deployment without the user pool must name (the template's Rules).
JWT_ISSUER = "https://issuer.example.com/tenant"
FIXED_PARAMETERS = {"JwtIssuer": JWT_ISSUER, "JwtAudiences": "chatstream-api"}


def _broken_rules(parameters: dict[str, str]) -> list[str]:
    """The template's Rules these parameters break, as CloudFormation evaluates them before it creates anything."""
    template = Template.load(parameter_overrides=parameters)
    return [
        name
        for name, rule in template.raw.get("Rules", {}).items()
        if template.resolve(rule.get("RuleCondition", True))
        and not all(template.resolve(assertion["Assert"]) for assertion in rule["Assertions"])
    ]


# Every combination of their values that CloudFormation would deploy (a user pool is for the JWT mode only).
DEPLOYMENTS = [
    parameters
    for values in itertools.product(*DECIDING_PARAMETERS.values())
    if not _broken_rules(parameters := {**FIXED_PARAMETERS, **dict(zip(DECIDING_PARAMETERS, values, strict=True))})
]
# What the alarms watch, whatever the parameters: (namespace, metric, the resource of its dimension).
WATCHED = {
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "ConsumerDLQ"),
    ("AWS/SQS", "NumberOfMessagesSent", "ConsumerDLQ"),  # each new arrival, while the one above stays in ALARM
    ("AWS/Lambda", "IteratorAge", "ConsumerFunction"),
    ("AWS/Lambda", "Errors", "ConsumerFunction"),
    ("AWS/Lambda", "Throttles", "ProxyFunction"),
    ("AWS/Lambda", "AsyncEventsDropped", "ProxyFunction"),
    ("AWS/Lambda", "DestinationDeliveryFailures", "ProxyFunction"),
    ("AWS/SQS", "ApproximateAgeOfOldestMessage", "ProxyFailureQueue"),
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "ProxyFailureDLQ"),
    ("AWS/Lambda", "Errors", "TurnReaperFunction"),
    ("AWS/Lambda", "Errors", "RelayFunction"),
    ("Chatstream", "ModelAccessErrors", "chatstream-proxy"),  # every generation fails on the deployment's setup
    ("Chatstream", "UnrecognizedMessages", "chatstream-reaper"),  # a failure record naming no turn
    ("Chatstream", "ServiceFailures", "chatstream-proxy"),  # most replies end in error (throttled, model errors)
    ("Chatstream", "InternalErrors", "chatstream-relay"),  # the relay answers 500 itself, its invocations succeed
    ("Chatstream", "GenerationErrors", "chatstream-proxy"),  # nearly every reply fails, a request's errors included
    ("AWS/Lambda", "Throttles", "RelayFunction"),  # clients get 429
    ("AWS/Lambda", "Throttles", "ConsumerFunction"),  # a throttled consumer reports no IteratorAge
    ("AWS/DynamoDB", "ReadThrottleEvents", "ChatTable"),  # capacity: the table (a batch's throttled items count)
    ("AWS/DynamoDB", "WriteThrottleEvents", "ChatTable"),
    ("AWS/Kinesis", "WriteProvisionedThroughputExceeded", "TokenStream"),  # capacity: the stream
    ("AWS/Kinesis", "ReadProvisionedThroughputExceeded", "TokenStream"),
}
# An alarm's severity: critical - users' replies fail or stall now; high - replies fail for some, or data waits for an
# operator; warning - a trend or a leftover to look into. Each names it, and its runbook entry, in its description.
SEVERITIES = ("critical", "high", "warning")
_RUNBOOK = re.compile(r"Severity: (\w+)\. Runbook: docs/OPERATIONS\.md#([a-z0-9-]+)$")
# What the dashboard must show (the operator's view): (namespace, metric) of each part.
DASHBOARD_METRICS = {
    ("Chatstream", "TimeToFirstToken"),  # time to first token, the model's
    ("Chatstream", "ClientTimeToFirstToken"),  # … and a client's
    ("Chatstream", "Deltas"),  # tokens per second, and replies ended
    ("AWS/Lambda", "Invocations"),  # turns started
    ("Chatstream", "GenerationErrors"),  # turns ended in error
    ("Chatstream", "TurnsReaped"),
    ("AWS/Lambda", "Errors"),
    ("AWS/Lambda", "Throttles"),
    ("AWS/Lambda", "IteratorAge"),
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),  # dead-letter queue depths
    ("AWS/Lambda", "ConcurrentExecutions"),  # relay concurrency
    ("AWS/Bedrock", "InvocationThrottles"),
    ("AWS/Kinesis", "WriteProvisionedThroughputExceeded"),
    ("AWS/DynamoDB", "WriteThrottleEvents"),
    ("Chatstream", "Refusals"),  # turns callers' budgets refused
}
# Lambda's metrics of an invocation, stamped with the time it started (a failure at the end of a long one lands back).
STAMPED_AT_START = {"Errors", "AsyncEventsDropped", "DestinationDeliveryFailures"}
# What deleting (or replacing) the stack does to what holds data: only the conversations are kept.
DELETION_POLICIES = {
    "AWS::DynamoDB::Table": "Retain",
    "AWS::Kinesis::Stream": "Delete",
    "AWS::SQS::Queue": "Delete",
    "AWS::Logs::LogGroup": "Delete",
    # The users' accounts (CreateUserPool): a new stack's pool is a new issuer, whose users are new owners anyway.
    "AWS::Cognito::UserPool": "Delete",
}
_SUB_NAME = re.compile(r"\$\{([^}!]+)\}")


class _NoManagedPolicyLookup:
    def load(self) -> dict[str, str]:
        return {}


class _NoValue:
    """``Ref AWS::NoValue``: the property or list item is left out."""


_NO_VALUE = _NoValue()


@dataclass(frozen=True)
class Deployment:
    """The resources and outputs one deployment with ``parameters`` creates (conditions applied)."""

    parameters: dict[str, str]
    parameter_names: frozenset[str]
    resources: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, Any]]

    def of_type(self, type_: str) -> dict[str, dict[str, Any]]:
        return {name: res for name, res in self.resources.items() if res["Type"] == type_}

    def properties(self, logical_id: str) -> dict[str, Any]:
        properties: dict[str, Any] = self.resources[logical_id]["Properties"]
        return properties


def _translate(source: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    document = copy.deepcopy(source)
    for resource in document["Resources"].values():
        for key in ("CodeUri", "ContentUri"):
            if key in resource.get("Properties", {}):
                resource["Properties"][key] = "s3://bucket/key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        return dict(transform(document, {**PSEUDO, **parameters}, _NoManagedPolicyLookup()))


def _select(node: Any, holds: Any) -> Any:
    """``node`` with each ``Fn::If`` replaced by the branch its condition picks and ``AWS::NoValue`` left out."""
    if isinstance(node, list):
        return [value for value in (_select(item, holds) for item in node) if value is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if node == {"Ref": "AWS::NoValue"}:
        return _NO_VALUE
    if set(node) == {"Fn::If"}:
        condition, if_true, if_false = node["Fn::If"]
        return _select(if_true if holds(condition) else if_false, holds)
    selected = {key: _select(value, holds) for key, value in node.items()}
    return {key: value for key, value in selected.items() if value is not _NO_VALUE}


def _deploy(translated: dict[str, Any], parameters: dict[str, str]) -> Deployment:
    conditions = Template(raw=translated, parameter_overrides=parameters)

    def created(section: str) -> dict[str, dict[str, Any]]:
        return {
            name: _select(item, conditions.condition)
            for name, item in translated.get(section, {}).items()
            if "Condition" not in item or conditions.condition(item["Condition"])
        }

    return Deployment(parameters, frozenset(translated["Parameters"]), created("Resources"), created("Outputs"))


@pytest.fixture(scope="module")
def source() -> dict[str, Any]:
    return dict(yaml_parse(TEMPLATE.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def deployments(source: dict[str, Any]) -> list[Deployment]:
    return [_deploy(_translate(source, parameters), parameters) for parameters in DEPLOYMENTS]


@pytest.fixture(scope="module", params=range(len(DEPLOYMENTS)), ids=[str(p) for p in DEPLOYMENTS])
def deployment(request: pytest.FixtureRequest, deployments: list[Deployment]) -> Deployment:
    return deployments[request.param]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _references(node: Any) -> set[str]:
    """The logical ids and parameters that ``Ref``, ``Fn::GetAtt`` and ``Fn::Sub`` in ``node`` name."""
    if isinstance(node, list):
        return set().union(*(_references(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found: set[str] = set()
    for key, value in node.items():
        if key == "Ref" and isinstance(value, str):
            found.add(value)
        elif key == "Fn::GetAtt":
            found.add((value.split(".", 1) if isinstance(value, str) else value)[0])
        elif key == "Fn::Sub":
            text, variables = (value, {}) if isinstance(value, str) else (value[0], value[1])
            found.update(name.split(".", 1)[0] for name in _SUB_NAME.findall(text) if name not in variables)
            found |= _references(variables)
        else:
            found |= _references(value)
    return found


def _target(dimension_value: Any) -> str:
    """The logical id an alarm's dimension points at (``Ref X`` or ``Fn::GetAtt [X, attribute]``), or its value as
    written (a chatstream metric's ``service``)."""
    if isinstance(dimension_value, str):
        return dimension_value
    if "Ref" in dimension_value:
        return str(dimension_value["Ref"])
    return str(_as_list(dimension_value["Fn::GetAtt"])[0].split(".")[0])


# ------------------------------------------------------------------------------------ the matrix


def test_the_deployments_cover_both_values_of_every_condition_that_decides_a_resource(
    source: dict[str, Any],
) -> None:
    # GIVEN the conditions that decide whether a resource or an output exists
    deciding = {
        item["Condition"]
        for section in ("Resources", "Outputs")
        for item in source[section].values()
        if "Condition" in item
    }
    assert deciding, "the template has conditioned resources"
    # WHEN each is evaluated with the parameters of every deployment checked here
    for name in deciding:
        values = {Template(raw=source, parameter_overrides=p).condition(name) for p in DEPLOYMENTS}
        # THEN both of its values are checked (a new condition needs its parameter in DECIDING_PARAMETERS)
        assert values == {True, False}, name


def test_every_reference_names_something_the_deployment_creates(deployment: Deployment) -> None:
    # GIVEN what one deployment creates WHEN every Ref, GetAtt, Sub and DependsOn is followed
    known = set(deployment.resources) | deployment.parameter_names | PSEUDO_REFS
    for name, resource in deployment.resources.items():
        named = _references(resource.get("Properties", {})) | set(_as_list(resource.get("DependsOn", [])))
        # THEN each names a resource of the same deployment, or a parameter (no dangling conditioned resource)
        assert named <= known, (name, named - known)
    for name, output in deployment.outputs.items():
        assert _references(output) <= known, (name, _references(output) - known)


# ------------------------------------------------------------------------- the Function URL


def test_the_function_url_checks_iam_or_leaves_the_check_to_the_relay(deployment: Deployment) -> None:
    # GIVEN the Function URL WHEN deployed with each auth type THEN only AWS_IAM is Lambda's to check; NONE and JWT
    # (which Lambda cannot check on a URL) make it public
    (url,) = deployment.of_type("AWS::Lambda::Url").values()
    expected = "AWS_IAM" if deployment.parameters["FunctionUrlAuthType"] == "AWS_IAM" else "NONE"
    assert url["Properties"]["AuthType"] == expected
    assert url["Properties"]["TargetFunctionArn"] == {"Ref": "RelayFunction"}


def test_the_relay_is_public_exactly_when_the_auth_type_is_none_or_jwt(deployment: Deployment) -> None:
    # GIVEN the resource-policy statements on functions that this deployment creates
    grants = {
        (
            p["Properties"]["Action"],
            p["Properties"]["Principal"],
            p["Properties"].get("FunctionUrlAuthType"),
            p["Properties"].get("InvokedViaFunctionUrl"),
            p["Properties"]["FunctionName"]["Ref"],
        )
        for p in deployment.of_type("AWS::Lambda::Permission").values()
    }
    if deployment.parameters["FunctionUrlAuthType"] in ("NONE", "JWT"):
        # THEN a public URL gets both statements Lambda requires of one since October 2025, on the relay only
        assert grants == {
            ("lambda:InvokeFunctionUrl", "*", "NONE", None, "RelayFunction"),
            ("lambda:InvokeFunction", "*", None, True, "RelayFunction"),
        }
    else:
        # THEN with AWS_IAM nothing is granted to everyone: callers need the identity policy
        assert grants == set()


def test_callers_get_a_policy_with_exactly_the_two_actions_on_the_relay(deployment: Deployment) -> None:
    # GIVEN the managed policy for callers of an AWS_IAM URL, present with either auth type
    (name,) = deployment.of_type("AWS::IAM::ManagedPolicy")
    statements = deployment.properties(name)["PolicyDocument"]["Statement"]
    # THEN it allows InvokeFunctionUrl (for AWS_IAM URLs) and InvokeFunction (through a Function URL only)
    # on the relay, nothing else, and its ARN is an output
    assert [(s["Effect"], s["Action"], s["Resource"], s["Condition"]) for s in statements] == [
        (
            "Allow",
            "lambda:InvokeFunctionUrl",
            {"Fn::GetAtt": ["RelayFunction", "Arn"]},
            {"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}},
        ),
        (
            "Allow",
            "lambda:InvokeFunction",
            {"Fn::GetAtt": ["RelayFunction", "Arn"]},
            {"Bool": {"lambda:InvokedViaFunctionUrl": "true"}},
        ),
    ]
    assert deployment.outputs["RelayInvokePolicyArn"]["Value"] == {"Ref": name}


# ------------------------------------------------------------------------------ JWT and the user pool

USER_POOL_RESOURCES = {
    "AWS::Cognito::UserPool",
    "AWS::Cognito::UserPoolClient",
    "AWS::Cognito::UserPoolDomain",
    "AWS::Cognito::ManagedLoginBranding",
    "AWS::SSM::Parameter",
}


def _relay_environment(deployment: Deployment) -> dict[str, Any]:
    variables: dict[str, Any] = deployment.properties("RelayFunction")["Environment"]["Variables"]
    return variables


def test_the_rules_refuse_a_user_pool_without_jwt_and_jwt_without_an_issuer() -> None:
    # GIVEN parameters CloudFormation must refuse before it creates anything
    assert _broken_rules({"FunctionUrlAuthType": "NONE", "CreateUserPool": "true"}) == ["UserPoolSignsInForJwt"]
    assert _broken_rules({"FunctionUrlAuthType": "JWT"}) == ["JwtNamesItsIssuer"]
    assert _broken_rules({"FunctionUrlAuthType": "JWT", "JwtIssuer": JWT_ISSUER}) == ["JwtNamesItsIssuer"]
    # THEN what it takes: an issuer and an audience or client, or the pool
    assert _broken_rules({"FunctionUrlAuthType": "JWT", "JwtIssuer": JWT_ISSUER, "JwtClientIds": "abc"}) == []
    assert _broken_rules({"FunctionUrlAuthType": "JWT", "CreateUserPool": "true"}) == []
    # AND the deployments checked here are every auth type, and JWT with and without the pool
    combinations = {(p["FunctionUrlAuthType"], p["CreateUserPool"]) for p in DEPLOYMENTS}
    assert combinations == {("AWS_IAM", "false"), ("NONE", "false"), ("JWT", "false"), ("JWT", "true")}


def test_the_relay_checks_tokens_exactly_in_the_jwt_mode(deployment: Deployment) -> None:
    # GIVEN the relay's environment in this deployment
    env = _relay_environment(deployment)
    jwt_settings = {name: value for name, value in env.items() if name.startswith("JWT_")}
    auth_type, pool = deployment.parameters["FunctionUrlAuthType"], deployment.parameters["CreateUserPool"]
    assert env["AUTH_TYPE"] == {"Ref": "FunctionUrlAuthType"}
    if auth_type != "JWT":
        # THEN outside the JWT mode it gets no JWT setting
        assert jwt_settings == {}
    elif pool == "false":
        # THEN with any issuer, the deployer's parameters
        assert jwt_settings == {
            "JWT_ISSUER": {"Ref": "JwtIssuer"},
            "JWT_AUDIENCES": {"Ref": "JwtAudiences"},
            "JWT_CLIENT_IDS": {"Ref": "JwtClientIds"},
            "JWT_REQUIRED_SCOPE": {"Ref": "JwtRequiredScope"},
            "JWT_PAGE_CLIENT_ID": {"Ref": "JwtPageClientId"},
        }
    else:
        # THEN with the pool, its issuer, and its client's id from the SSM parameter the stack writes
        assert jwt_settings["JWT_ISSUER"] == {"Fn::Sub": "https://cognito-idp.${AWS::Region}.amazonaws.com/${UserPool}"}
        parameter = deployment.properties("UserPoolClientIdsParameter")
        assert jwt_settings["JWT_CLIENT_IDS_PARAMETER"] == parameter["Name"]
        assert parameter["Value"] == {"Ref": "UserPoolClient"}


def test_the_user_pool_exists_exactly_when_asked_and_its_client_is_a_public_pkce_client(
    deployment: Deployment,
) -> None:
    created = {res["Type"] for res in deployment.resources.values()} & USER_POOL_RESOURCES
    pool_outputs = {name for name in deployment.outputs if name.startswith("UserPool")}
    if deployment.parameters["CreateUserPool"] == "false":
        assert created == set() and pool_outputs == set()
        return
    assert created == USER_POOL_RESOURCES
    assert pool_outputs == {"UserPoolId", "UserPoolClientId", "UserPoolDomainUrl"}
    # THEN the page's client has no secret, does the authorization code flow only, and returns to the page
    client = deployment.properties("UserPoolClient")
    assert client["GenerateSecret"] is False
    assert client["AllowedOAuthFlows"] == ["code"]
    assert client["CallbackURLs"] == [{"Fn::GetAtt": ["RelayFunctionUrl", "FunctionUrl"]}]
    # AND only an administrator creates users (each spends the account's Bedrock budget)
    assert deployment.properties("UserPool")["AdminCreateUserConfig"] == {"AllowAdminCreateUserOnly": True}


def test_the_relay_may_read_the_client_ids_parameter_and_no_other(deployment: Deployment) -> None:
    statements = [
        statement
        for policy in deployment.properties("RelayFunctionRole")["Policies"]
        for statement in policy["PolicyDocument"]["Statement"]
        if "ssm" in str(statement["Action"])
    ]
    if deployment.parameters["CreateUserPool"] == "false":
        assert statements == []
        return
    (statement,) = statements
    assert statement["Action"] == "ssm:GetParameter"
    name = deployment.properties("UserPoolClientIdsParameter")["Name"]["Fn::Sub"]
    assert statement["Resource"]["Fn::Sub"].endswith(":parameter" + name)


def _dependencies(deployment: Deployment) -> dict[str, set[str]]:
    return {
        name: (_references(res.get("Properties", {})) | set(_as_list(res.get("DependsOn", []))))
        & set(deployment.resources)
        for name, res in deployment.resources.items()
    }


def test_no_deployment_has_a_dependency_cycle(deployment: Deployment) -> None:
    # GIVEN which resource each resource names (the user pool client's callback is the relay's URL, and the relay's
    # settings name the pool) WHEN they are ordered as CloudFormation orders them THEN every one finds its place
    remaining = _dependencies(deployment)
    while remaining:
        ready = {name for name, needs in remaining.items() if not needs & set(remaining)}
        assert ready, f"a dependency cycle among {sorted(remaining)}"
        remaining = {name: needs for name, needs in remaining.items() if name not in ready}


# ------------------------------------------------------------------------------ enhanced fan-out


def test_the_consumer_reads_through_enhanced_fan_out_exactly_when_chosen(deployment: Deployment) -> None:
    # GIVEN the consumer's event source mapping and role in this deployment
    mappings = deployment.of_type("AWS::Lambda::EventSourceMapping").values()
    (mapping,) = [m for m in mappings if m["Properties"]["FunctionName"] == {"Ref": CONSUMER_ALIAS}]
    actions = {
        action
        for policy in deployment.properties("ConsumerFunctionRole")["Policies"]
        for statement in policy["PolicyDocument"]["Statement"]
        for action in _as_list(statement["Action"])
    }
    if deployment.parameters["EnhancedFanOut"] == "true":
        # THEN the mapping reads the stream consumer, which exists, and the role may subscribe to it
        assert mapping["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["TokenStreamConsumer", "ConsumerARN"]}
        assert "TokenStreamConsumer" in deployment.resources
        assert {"kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer"} <= actions
    else:
        # THEN the mapping polls the stream itself; no stream consumer and no subscription right
        assert mapping["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["TokenStream", "Arn"]}
        assert "TokenStreamConsumer" not in deployment.resources
        assert "kinesis:SubscribeToShard" not in actions


CONSUMER_ALIAS = "ConsumerFunctionAliaslive"  # the alias SAM creates for AutoPublishAlias: live


def test_only_the_consumer_can_use_snapstart_and_its_mapping_invokes_its_published_version(
    source: dict[str, Any], deployment: Deployment
) -> None:
    # GIVEN the functions as written
    functions = {name: r["Properties"] for name, r in source["Resources"].items() if r["Type"].endswith("::Function")}
    # THEN SnapStart is the ConsumerSnapStart parameter's choice on the consumer, off by default, and on no other
    # function (the relay's streaming runtime has no snapshot handshake; the proxy is invoked unqualified)
    assert functions["ConsumerFunction"]["SnapStart"] == {
        "ApplyOn": {"Fn::If": ["UseConsumerSnapStart", "PublishedVersions", "None"]}
    }
    assert source["Conditions"]["UseConsumerSnapStart"] == {"Fn::Equals": [{"Ref": "ConsumerSnapStart"}, "true"]}
    assert source["Parameters"]["ConsumerSnapStart"]["Default"] == "false"
    assert [name for name, props in functions.items() if "SnapStart" in props] == ["ConsumerFunction"]
    # AND SnapStart applies to published versions only, so the stream's mapping invokes the alias of the latest one
    assert functions["ConsumerFunction"]["AutoPublishAlias"] == "live"
    mappings = deployment.of_type("AWS::Lambda::EventSourceMapping").values()
    stream_mappings = [m for m in mappings if "StartingPosition" in m["Properties"]]
    assert [m["Properties"]["FunctionName"] for m in stream_mappings] == [{"Ref": CONSUMER_ALIAS}]
    assert deployment.properties(CONSUMER_ALIAS)["FunctionName"] == {"Ref": "ConsumerFunction"}


def test_a_turn_is_stale_only_after_its_generation_could_have_ended(source: dict[str, Any]) -> None:
    # GIVEN the proxy's asynchronous event, which may wait MaximumEventAgeInSeconds before it runs, then run Timeout
    proxy = source["Resources"]["ProxyFunction"]["Properties"]
    longest_s = proxy["EventInvokeConfig"]["MaximumEventAgeInSeconds"] + proxy["Timeout"]
    # THEN the relay takes a turn over as stale only after that (else two generations could write one session)
    stale_s = int(source["Resources"]["RelayFunction"]["Properties"]["Environment"]["Variables"]["STALE_TURN_S"])
    assert stale_s > longest_s


def _read_through_conditions(node: Any, conditions: dict[str, Any]) -> set[str]:
    """What ``node`` references (:func:`_references`), and the parameters of the conditions its ``Fn::If`` test."""
    found = _references(node)
    pending = [
        value[0] for value in _nodes(node) if isinstance(value, list) and len(value) == 3 and value[0] in conditions
    ]
    for condition in pending:
        found |= _references(conditions[condition])
    return found


def _nodes(node: Any) -> list[Any]:
    """Every ``Fn::If`` argument list in ``node``."""
    if isinstance(node, list):
        return [found for item in node for found in _nodes(item)]
    if not isinstance(node, dict):
        return []
    return [found for key, value in node.items() for found in ([value] if key == "Fn::If" else []) + _nodes(value)]


def test_every_deploy_that_changes_the_consumer_publishes_the_version_its_mapping_invokes(
    source: dict[str, Any],
) -> None:
    # GIVEN the consumer as SAM translates it: its mapping invokes the alias of its latest published version, and SAM
    # publishes one when the function's code or properties as written change, not when a parameter's value or the
    # layer's content does (aws/serverless-application-model#1640)
    translated = _translate(source, DEPLOYMENTS[0])
    resources, conditions = translated["Resources"], source["Conditions"]
    function = resources["ConsumerFunction"]["Properties"]
    (version,) = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Version"]
    # WHEN the parameters and layers its configuration reads are listed
    read = {
        name
        for name in _read_through_conditions(
            {k: function[k] for k in ("Environment", "Layers", "SnapStart")}, conditions
        )
        if name in source["Parameters"] or resources.get(name, {}).get("Type") == "AWS::Lambda::LayerVersion"
    }
    # THEN the version's description names each (a new description replaces the version: a new one is published),
    # and nothing else: a description that changes while the configuration does not would ask Lambda to publish an
    # unchanged function, which it refuses, failing the deploy
    assert read >= {"LogLevel", "TtlDays", "TraceAwsCalls", "ConsumerSnapStart"} and any("Layer" in n for n in read)
    described = {
        name
        for name in _references(version["Properties"]["Description"])
        if name in source["Parameters"] or resources.get(name, {}).get("Type") == "AWS::Lambda::LayerVersion"
    }
    assert described == read, "a deploy would keep the old version, or fail to publish an unchanged one"
    # AND no property edit that changes no configuration (Tags) publishes either (aws/serverless-application-model#3281)
    assert "AutoPublishAliasAllProperties" not in source["Resources"]["ConsumerFunction"]["Properties"]


# ---------------------------------------------------------------------------------------- alarms


def _watched_metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics an alarm reads: its one metric, or each metric of its metric math."""
    properties = alarm["Properties"]
    if "Metrics" in properties:
        return [query["MetricStat"]["Metric"] for query in properties["Metrics"] if "MetricStat" in query]
    return [properties]


def test_every_failure_that_would_be_silent_has_an_alarm(deployment: Deployment) -> None:
    watched = {
        (metric["Namespace"], metric["MetricName"], _target(metric["Dimensions"][0]["Value"]))
        for alarm in deployment.of_type("AWS::CloudWatch::Alarm").values()
        for metric in _watched_metrics(alarm)
    }
    assert watched >= WATCHED, WATCHED - watched


def test_an_alarm_on_an_invocation_metric_looks_back_past_the_function_timeout(deployment: Deployment) -> None:
    # GIVEN the functions' timeouts, and the alarms on Lambda's metrics of an invocation ("The timestamp on a metric
    # reflects when the function was invoked ... if your function has a 10-minute timeout, look more than 10 minutes
    # in the past", the Lambda developer guide, monitoring-metrics)
    functions = deployment.of_type("AWS::Lambda::Function")
    checked = set()
    for name, alarm in deployment.of_type("AWS::CloudWatch::Alarm").items():
        properties = alarm["Properties"]
        if properties.get("Namespace") != "AWS/Lambda" or properties["MetricName"] not in STAMPED_AT_START:
            continue
        timeout = functions[_target(properties["Dimensions"][0]["Value"])]["Properties"]["Timeout"]
        # THEN its window covers an invocation that started a whole timeout ago, and one datapoint in it alarms
        periods = properties["EvaluationPeriods"]
        assert properties["Period"] * periods >= timeout + 60, name
        assert properties.get("DatapointsToAlarm", periods) == 1, name
        checked.add(name)
    # AND the relay's and the proxy's (15-minute functions) are among them
    assert {"RelayErrorsAlarm", "ProxyAsyncEventsDroppedAlarm"} <= checked


def test_an_alarm_on_a_chatstream_metric_watches_the_service_that_emits_it(deployment: Deployment) -> None:
    # GIVEN the functions' service names (Powertools' dimension of their metrics)
    services = {
        variables.get("POWERTOOLS_SERVICE_NAME")
        for resource in deployment.of_type("AWS::Lambda::Function").values()
        for variables in [resource["Properties"].get("Environment", {}).get("Variables", {})]
    }
    # THEN every alarm on the Chatstream namespace names one of them (a typo would watch a metric nobody emits)
    checked = set()
    for name, alarm in deployment.of_type("AWS::CloudWatch::Alarm").items():
        for metric in _watched_metrics(alarm):
            if metric["Namespace"] == "Chatstream":
                (dimension,) = metric["Dimensions"]
                assert dimension["Name"] == "service" and dimension["Value"] in services, name
                checked.add(name)
    # AND there are such alarms to check (a namespace spelt otherwise would leave none, and this test would hold)
    assert checked


def test_alarms_notify_the_topic_exactly_when_an_email_is_set(deployment: Deployment) -> None:
    alarms = deployment.of_type("AWS::CloudWatch::Alarm")
    if deployment.parameters["AlarmEmail"]:
        # THEN the topic, its e-mail subscription and its output exist, and every alarm notifies it both ways
        assert deployment.properties("AlarmEmailSubscription")["Endpoint"] == {"Ref": "AlarmEmail"}
        assert deployment.outputs["AlarmTopicArn"]["Value"] == {"Ref": "AlarmTopic"}
        for name, alarm in alarms.items():
            actions = (alarm["Properties"].get("AlarmActions"), alarm["Properties"].get("OKActions"))
            assert actions == ([{"Ref": "AlarmTopic"}], [{"Ref": "AlarmTopic"}]), name
    else:
        # THEN no topic, no subscription, no output, and the alarms have no actions (they still alarm)
        assert not deployment.of_type("AWS::SNS::Topic") and not deployment.of_type("AWS::SNS::Subscription")
        assert "AlarmTopicArn" not in deployment.outputs
        for name, alarm in alarms.items():
            assert "AlarmActions" not in alarm["Properties"] and "OKActions" not in alarm["Properties"], name


def test_every_alarm_names_its_severity_and_its_runbook_entry(deployment: Deployment) -> None:
    # GIVEN the operations guide's runbook, one heading per alarm
    operations = (REPO_ROOT / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    for name, alarm in deployment.of_type("AWS::CloudWatch::Alarm").items():
        # THEN the alarm's description ends with its severity and the anchor of its entry
        description = " ".join(alarm["Properties"]["AlarmDescription"].split())
        found = _RUNBOOK.search(description)
        assert found, (name, description)
        severity, anchor = found.groups()
        assert severity in SEVERITIES and anchor == name.lower(), name
        # AND that entry exists, with the same severity
        entry = re.search(rf"^### {name}\n\n\*\*Severity: (\w+)\.\*\*", operations, re.MULTILINE)
        assert entry and entry.group(1) == severity, name
        assert len(alarm["Properties"]["AlarmDescription"]) <= 1024, name  # CloudWatch's limit


def _dashboard(deployment: Deployment) -> tuple[dict[str, Any], set[str]]:
    """The dashboard's body with each ``${...}`` of its ``Fn::Sub`` replaced by ``<name>``, and those names."""
    (dashboard,) = deployment.of_type("AWS::CloudWatch::Dashboard").values()
    text = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    named = set(_SUB_NAME.findall(text))
    return json.loads(_SUB_NAME.sub(lambda match: f"<{match.group(1)}>", text)), named


def test_the_dashboard_exists_exactly_when_asked(deployment: Deployment) -> None:
    dashboards = deployment.of_type("AWS::CloudWatch::Dashboard")
    asked = deployment.parameters["CreateDashboard"] == "true"
    assert len(dashboards) == int(asked)
    assert ("DashboardUrl" in deployment.outputs) == asked


WITH_DASHBOARD = [index for index, parameters in enumerate(DEPLOYMENTS) if parameters["CreateDashboard"] == "true"]


@pytest.fixture(scope="module", params=WITH_DASHBOARD, ids=[str(DEPLOYMENTS[index]) for index in WITH_DASHBOARD])
def dashboard_deployment(request: pytest.FixtureRequest, deployments: list[Deployment]) -> Deployment:
    """Each deployment that has a dashboard (the others are held to having none above)."""
    return deployments[request.param]


def test_the_dashboard_shows_the_operators_view_of_this_stack(dashboard_deployment: Deployment) -> None:
    deployment = dashboard_deployment
    # GIVEN the dashboard's widgets, as CloudWatch reads them
    body, named = _dashboard(deployment)
    known = set(deployment.resources) | deployment.parameter_names | PSEUDO_REFS
    # THEN everything it names is this deployment's: its resources (or an attribute of one), parameters, pseudo names
    assert {name.split(".")[0] for name in named} <= known, named
    services = {
        resource["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
        for resource in deployment.of_type("AWS::Lambda::Function").values()
    }
    shown: set[tuple[str, str]] = set()
    for widget in body["widgets"]:
        for metric in widget["properties"].get("metrics", []):
            if isinstance(metric[0], dict):
                continue  # an expression over the widget's other metrics
            namespace, name, *dimensions = (part for part in metric if not isinstance(part, dict))
            shown.add((namespace, name))
            pairs = dict(zip(dimensions[::2], dimensions[1::2], strict=True))
            # AND each metric is of this stack: a chatstream metric of a function's service, a resource's by its name
            if namespace == "Chatstream":
                assert pairs["service"] in services, metric
            elif namespace != "AWS/Bedrock":
                assert all(value.startswith("<") for value in pairs.values()), metric
            else:
                assert pairs == {"ModelId": "<ModelId>"}, metric  # the model the proxy calls
    # AND it shows every part of the operator's view
    assert shown >= DASHBOARD_METRICS, DASHBOARD_METRICS - shown
    # AND its alarm widget shows every alarm of the deployment
    (alarms,) = [w["properties"]["alarms"] for w in body["widgets"] if w["type"] == "alarm"]
    assert set(alarms) == {f"<{name}.Arn>" for name in deployment.of_type("AWS::CloudWatch::Alarm")}


# ------------------------------------------------------------------------------- least privilege


def test_the_template_generates_a_role_for_every_function(deployment: Deployment) -> None:
    roles = deployment.of_type("AWS::IAM::Role")
    assert {"ProxyFunctionRole", "RelayFunctionRole", "ConsumerFunctionRole", "TurnReaperFunctionRole"} <= set(roles)


def _allowing(deployment: Deployment) -> list[tuple[str, dict[str, Any]]]:
    """Every Allow statement of the deployment's roles and managed policies."""
    documents = [
        (name, policy["PolicyDocument"])
        for name, role in deployment.of_type("AWS::IAM::Role").items()
        for policy in role["Properties"].get("Policies", [])
    ]
    documents += [
        (name, res["Properties"]["PolicyDocument"])
        for name, res in deployment.of_type("AWS::IAM::ManagedPolicy").items()
    ]
    return [
        (name, statement)
        for name, document in documents
        for statement in _as_list(document["Statement"])
        if statement["Effect"] == "Allow"
    ]


def test_no_policy_allows_a_wildcard_action(deployment: Deployment) -> None:
    for name, statement in _allowing(deployment):
        for action in _as_list(statement["Action"]):
            assert "*" not in action, (name, action)


def test_no_policy_allows_every_resource_except_for_actions_without_resource_permissions(
    deployment: Deployment,
) -> None:
    for name, statement in _allowing(deployment):
        if "*" in _as_list(statement["Resource"]):
            assert set(_as_list(statement["Action"])) <= RESOURCELESS_ACTIONS, (name, statement)


def test_only_the_documented_managed_policies_are_attached(deployment: Deployment) -> None:
    for name, role in deployment.of_type("AWS::IAM::Role").items():
        attached = set(role["Properties"].get("ManagedPolicyArns", []))
        assert attached <= ALLOWED_MANAGED_POLICIES, (name, attached - ALLOWED_MANAGED_POLICIES)


# ---------------------------------------------------------------------------- data and queues


def test_the_stream_the_queues_and_the_table_are_encrypted_at_rest(source: dict[str, Any]) -> None:
    stream = source["Resources"]["TokenStream"]["Properties"]
    assert stream["StreamEncryption"]["EncryptionType"] == "KMS"
    table = source["Resources"]["ChatTable"]["Properties"]
    assert table["SSESpecification"]["SSEEnabled"] is True
    queues = _source_of_type(source, "AWS::SQS::Queue")
    assert queues
    for name, queue in queues.items():
        properties = queue["Properties"]
        assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties, name


def _source_of_type(source: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in source["Resources"].items() if res["Type"] == type_}


def test_every_queue_refuses_requests_without_tls(source: dict[str, Any]) -> None:
    protected: set[str] = set()
    for policy in _source_of_type(source, "AWS::SQS::QueuePolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        denies_plain_http = any(
            statement["Effect"] == "Deny"
            and statement["Condition"]["Bool"]["aws:SecureTransport"] in ("false", False)
            and statement["Principal"] == "*"
            for statement in statements
        )
        if denies_plain_http:
            protected.update(queue["Ref"] for queue in policy["Properties"]["Queues"])
    assert protected == set(_source_of_type(source, "AWS::SQS::Queue"))


def test_failed_generations_redrive_to_their_own_dead_letter_queue(source: dict[str, Any]) -> None:
    resources = source["Resources"]
    queue = resources["ProxyFailureQueue"]["Properties"]
    dlq = resources["ProxyFailureDLQ"]["Properties"]
    # THEN the queue the reaper reads moves what keeps failing to ProxyFailureDLQ, which no other queue uses
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["ProxyFailureDLQ", "Arn"]}
    assert 1 <= queue["RedrivePolicy"]["maxReceiveCount"] <= 10
    redriving = [name for name, res in resources.items() if "RedrivePolicy" in res.get("Properties", {})]
    assert redriving == ["ProxyFailureQueue"]
    # AND a message is not visible again while the reaper may still work on it (six times its timeout)
    assert queue["VisibilityTimeout"] >= 6 * resources["TurnReaperFunction"]["Properties"]["Timeout"]
    # AND the dead-letter queue keeps a message at least as long (its age counts from the first enqueue)
    assert dlq["MessageRetentionPeriod"] >= queue["MessageRetentionPeriod"]


def test_only_the_table_outlives_the_stack_and_it_is_protected(source: dict[str, Any]) -> None:
    # GIVEN every resource that holds data
    for name, resource in source["Resources"].items():
        expected = DELETION_POLICIES.get(resource["Type"])
        if expected is None:
            continue
        # THEN what deleting or replacing it does is stated, not left to the default
        assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == (expected, expected), name
    # AND the conversations cannot be deleted by accident, by the stack or by anyone
    assert source["Resources"]["ChatTable"]["Properties"]["DeletionProtectionEnabled"] is True


# -------------------------------------------------------------------------------- parameters


def test_the_relay_and_the_proxy_can_be_capped_by_parameters(source: dict[str, Any]) -> None:
    for function, parameter in (
        ("RelayFunction", "RelayReservedConcurrency"),
        ("ProxyFunction", "ProxyReservedConcurrency"),
    ):
        reserved = source["Resources"][function]["Properties"]["ReservedConcurrentExecutions"]
        condition, when_set, _unset = reserved["Fn::If"]
        assert when_set == {"Ref": parameter}
        assert source["Parameters"][parameter]["MinValue"] == 0
        assert condition in source["Conditions"]
    relay_env = source["Resources"]["RelayFunction"]["Properties"]["Environment"]["Variables"]
    assert relay_env["MAX_TURNS_PER_SESSION"] == {"Ref": "MaxTurnsPerSession"}
    assert relay_env["MAX_TOKENS_LIMIT"] == {"Ref": "MaxTokensLimit"}


def test_the_auth_type_parameter_warns_what_a_public_url_needs(source: dict[str, Any]) -> None:
    # THEN a deployer choosing NONE reads, where they choose it, to narrow CORS and to cap the relay
    description = " ".join(source["Parameters"]["FunctionUrlAuthType"]["Description"].split())
    assert "CorsAllowOrigins" in description and "RelayReservedConcurrency" in description


# ---------------------------------------------------------------------------------- scanners


def test_every_scanner_exception_is_justified_in_the_template(source: dict[str, Any]) -> None:
    for name, resource in source["Resources"].items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert skip["id"].startswith("CKV_") and len(skip.get("comment", "")) >= 30, (name, skip)


def test_cfn_lint_finds_nothing() -> None:
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run([str(cfn_lint), str(TEMPLATE)], capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# -------------------------------------------------------------------------------------- docs


def test_the_docs_name_every_output_and_every_alarm(source: dict[str, Any]) -> None:
    # GIVEN the deploy guide's table of the stack's outputs, and the operations guide
    guide = (REPO_ROOT / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    outputs_table = guide.split("\n## The stack's outputs\n", 1)[1].split("\n## ", 1)[0]
    operations = (REPO_ROOT / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    # THEN a deployer reads of every output, and an operator of every alarm, what it means
    rows = [line for line in outputs_table.splitlines() if line.startswith("| `")]
    named_outputs = {name for row in rows for name in re.findall(r"`(\w+)`", row.split(" | ")[0])}
    assert named_outputs == set(source["Outputs"])
    alarms = set(_source_of_type(source, "AWS::CloudWatch::Alarm"))
    assert {name for name in alarms if f"| `{name}` |" in operations} == alarms


def test_every_function_is_traced_by_lambda_and_its_aws_calls_only_with_trace_aws_calls(source: dict[str, Any]) -> None:
    # GIVEN the template's functions
    globals_ = source["Globals"]["Function"]
    # THEN Lambda's active tracing records every invocation, whatever the parameters
    assert globals_["Tracing"] == "Active"
    functions = {name: r["Properties"] for name, r in source["Resources"].items() if r["Type"].endswith("::Function")}
    assert all("Tracing" not in props for props in functions.values())
    # AND a subsegment per AWS call (the X-Ray SDK, through Powertools' Tracer) only when TraceAwsCalls is true,
    # off by default, through Powertools' own switch, which no function overrides
    assert source["Parameters"]["TraceAwsCalls"]["Default"] == "false"
    assert source["Conditions"]["TracesAwsCalls"] == {"Fn::Equals": [{"Ref": "TraceAwsCalls"}, "true"]}
    assert globals_["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == {
        "Fn::If": ["TracesAwsCalls", "false", "true"]
    }
    for props in functions.values():
        assert "POWERTOOLS_TRACE_DISABLED" not in props.get("Environment", {}).get("Variables", {})
