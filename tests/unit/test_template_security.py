"""Least privilege and hardening of template.yaml, checked on the template SAM actually deploys.

The template is translated offline with samtranslator (as ``sam validate`` does: local code URIs
replaced by S3 placeholders, no managed-policy lookup), so the roles SAM generates from ``Policies``
and ``EventInvokeConfig`` are checked too, not only the hand-written ones.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

from tests.support import REPO_ROOT

TEMPLATE = REPO_ROOT / "template.yaml"
# X-Ray and CloudWatch metrics have no resource-level permissions: "*" is the only resource they take.
RESOURCELESS_ACTIONS = frozenset({"xray:PutTraceSegments", "xray:PutTelemetryRecords", "cloudwatch:PutMetricData"})
# Every function has its own role, written in the template, so SAM attaches no AWS managed policy (their
# AWSLambdaBasicExecutionRole would let a function write to any log group).
ALLOWED_MANAGED_POLICIES: frozenset[str] = frozenset()
PSEUDO = {"AWS::Region": "us-east-1", "AWS::Partition": "aws", "AWS::AccountId": "123456789012"}


class _NoManagedPolicyLookup:
    def load(self) -> dict[str, str]:
        return {}


@pytest.fixture(scope="module")
def source() -> dict[str, Any]:
    return dict(yaml_parse(TEMPLATE.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def translated(source: dict[str, Any]) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        document = copy.deepcopy(source)
        for resource in document["Resources"].values():
            for key in ("CodeUri", "ContentUri"):
                if key in resource.get("Properties", {}):
                    resource["Properties"][key] = "s3://bucket/key"
        return dict(transform(document, PSEUDO, _NoManagedPolicyLookup()))


def _of_type(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in template["Resources"].items() if res["Type"] == type_}


def _statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Statements of a policy document, both branches of an ``Fn::If`` included."""
    raw = document.get("Statement", [])
    out: list[dict[str, Any]] = []
    for statement in raw if isinstance(raw, list) else [raw]:
        if isinstance(statement, dict) and "Fn::If" in statement:
            out.extend(branch for branch in statement["Fn::If"][1:] if isinstance(branch, dict) and "Effect" in branch)
        else:
            out.append(statement)
    return out


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_template_generates_a_role_for_every_function(translated: dict[str, Any]) -> None:
    roles = _of_type(translated, "AWS::IAM::Role")
    assert {"ProxyFunctionRole", "RelayFunctionRole", "ConsumerFunctionRole"} <= set(roles)


def test_no_role_allows_a_wildcard_action(translated: dict[str, Any]) -> None:
    for name, role in _of_type(translated, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for statement in _statements(policy["PolicyDocument"]):
                if statement["Effect"] != "Allow":
                    continue
                for action in _as_list(statement["Action"]):
                    assert action != "*" and not action.endswith(":*") and "*" not in action, (name, action)


def test_no_role_allows_every_resource_except_for_actions_without_resource_permissions(
    translated: dict[str, Any],
) -> None:
    for name, role in _of_type(translated, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for statement in _statements(policy["PolicyDocument"]):
                if statement["Effect"] == "Allow" and "*" in _as_list(statement["Resource"]):
                    assert set(_as_list(statement["Action"])) <= RESOURCELESS_ACTIONS, (name, statement)


def test_only_the_documented_managed_policies_are_attached(translated: dict[str, Any]) -> None:
    for name, role in _of_type(translated, "AWS::IAM::Role").items():
        attached = set(role["Properties"].get("ManagedPolicyArns", []))
        assert attached <= ALLOWED_MANAGED_POLICIES, (name, attached - ALLOWED_MANAGED_POLICIES)


def test_the_stream_the_queues_and_the_table_are_encrypted_at_rest(source: dict[str, Any]) -> None:
    stream = source["Resources"]["TokenStream"]["Properties"]
    assert stream["StreamEncryption"]["EncryptionType"] == "KMS"
    table = source["Resources"]["ChatTable"]["Properties"]
    assert table["SSESpecification"]["SSEEnabled"] is True
    queues = _of_type(source, "AWS::SQS::Queue")
    assert queues
    for name, queue in queues.items():
        properties = queue["Properties"]
        assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties, name


def test_every_queue_refuses_requests_without_tls(source: dict[str, Any]) -> None:
    protected: set[str] = set()
    for policy in _of_type(source, "AWS::SQS::QueuePolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        denies_plain_http = any(
            statement["Effect"] == "Deny"
            and statement["Condition"]["Bool"]["aws:SecureTransport"] in ("false", False)
            and statement["Principal"] == "*"
            for statement in statements
        )
        if denies_plain_http:
            protected.update(queue["Ref"] for queue in policy["Properties"]["Queues"])
    assert protected == set(_of_type(source, "AWS::SQS::Queue"))


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


def test_every_scanner_exception_is_justified_in_the_template(source: dict[str, Any]) -> None:
    for name, resource in source["Resources"].items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert skip["id"].startswith("CKV_") and len(skip.get("comment", "")) >= 30, (name, skip)


def test_cfn_lint_finds_nothing() -> None:
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run([str(cfn_lint), str(TEMPLATE)], capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
