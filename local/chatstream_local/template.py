"""template.yaml as the single source of configuration for the local stack and the tests.

Reads the SAM template (with its short-form intrinsics), resolves the intrinsics the local
stack needs (``Ref``, ``Fn::Sub``, ``Fn::GetAtt``, ``Fn::If``/``Fn::Equals``, ``Fn::Join``) against
parameter defaults (or overrides) and local physical names, and exposes what other modules need:
resource properties, each function's merged Globals + own settings, and the event source
mapping settings. Nothing here repeats a value that the template holds.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse

from chatstream_local.account import ACCOUNT_ID

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
_SUB_VARIABLE = re.compile(r"\$\{([^}!]+)\}")
_CONSUMER_CREATED = 1700000000  # a stream consumer's ARN ends with its creation time (epoch seconds); any fixed one


_DOCUMENTS: dict[tuple[Path, str], dict[str, Any]] = {}


def _document(path: Path) -> dict[str, Any]:
    """The template at ``path``, parsed once for each text it has had: parsing it is 70 ms of pure-Python YAML, which
    every stack, test and benchmark run that loads it paid again (hundreds of times in the unit tests). Each caller
    gets a copy of its own to change."""
    text = path.read_text(encoding="utf-8")
    key = (path, text)
    if key not in _DOCUMENTS:
        _DOCUMENTS[key] = yaml_parse(text)
    return copy.deepcopy(_DOCUMENTS[key])


class TemplateError(ValueError):
    """The template lacks something the local stack needs, uses an intrinsic it cannot resolve, or a parameter
    override is one CloudFormation would refuse."""


def _parameter_problem(declared: Any, value: str) -> str | None:
    """Why CloudFormation would refuse ``value`` for a parameter declared as ``declared`` (None: it would not)."""
    if not isinstance(declared, dict):
        return "template.yaml declares no such parameter"
    allowed = declared.get("AllowedValues")
    if allowed is not None and value not in [str(option) for option in allowed]:
        return f"not one of {', '.join(str(option) for option in allowed)}"
    if declared.get("Type") == "Number":
        try:
            number = float(value)
        except ValueError:
            return "not a number"
        if "MinValue" in declared and number < float(declared["MinValue"]):
            return f"below its MinValue {declared['MinValue']}"
        if "MaxValue" in declared and number > float(declared["MaxValue"]):
            return f"above its MaxValue {declared['MaxValue']}"
    if "MinLength" in declared and len(value) < int(declared["MinLength"]):
        return f"shorter than its MinLength {declared['MinLength']}"
    if "MaxLength" in declared and len(value) > int(declared["MaxLength"]):
        return f"longer than its MaxLength {declared['MaxLength']}"
    pattern = declared.get("AllowedPattern")
    if pattern is not None and re.fullmatch(str(pattern), value) is None:
        return f"does not match its AllowedPattern {pattern}"
    return None


@dataclass
class Template:
    """A parsed template with a resolver for one local deployment (region, names, parameters)."""

    raw: dict[str, Any]
    region: str = "us-east-1"
    stack_name: str = "chatstream-local"
    parameter_overrides: dict[str, str] = field(default_factory=dict)
    physical_names: dict[str, str] = field(default_factory=dict)
    ref_overrides: dict[str, str] = field(default_factory=dict)  # e.g. a queue's real URL in the emulator

    def __post_init__(self) -> None:
        for name, value in self.parameter_overrides.items():
            problem = _parameter_problem(self.raw.get("Parameters", {}).get(name), str(value))
            if problem:
                raise TemplateError(f"parameter {name}={value!r}: {problem}")

    @classmethod
    def load(cls, path: Path = TEMPLATE_PATH, **kwargs: Any) -> Template:
        return cls(raw=_document(path), **kwargs)

    # ---------------------------------------------------------------------------- lookups

    def resource(self, logical_id: str) -> dict[str, Any]:
        try:
            resource: dict[str, Any] = self.raw["Resources"][logical_id]
        except KeyError as err:
            raise TemplateError(f"template.yaml has no resource {logical_id}") from err
        return resource

    def properties(self, logical_id: str) -> dict[str, Any]:
        """The resource's properties with every intrinsic resolved."""
        resolved = self.resolve(self.resource(logical_id).get("Properties", {}))
        assert isinstance(resolved, dict)
        return resolved

    def resources_of_type(self, resource_type: str) -> list[str]:
        return [name for name, res in self.raw["Resources"].items() if res.get("Type") == resource_type]

    def parameter(self, name: str) -> str:
        if name in self.parameter_overrides:
            return self.parameter_overrides[name]
        try:
            return str(self.raw["Parameters"][name]["Default"])
        except KeyError as err:
            raise TemplateError(f"parameter {name} has no default and no override") from err

    def physical_name(self, logical_id: str) -> str:
        """The local name of a resource (what ``Ref`` gives): overridable, else stack-logicalid."""
        return self.physical_names.get(logical_id, f"{self.stack_name}-{logical_id}")

    def short_name(self, name: str) -> str:
        """A local name (or a label made of one, ``…-RelayFunction#3``) without the stack's prefix, for logs."""
        return name.replace(f"{self.stack_name}-", "")

    def arn(self, logical_id: str) -> str:
        kind = self.resource(logical_id)["Type"]
        name = self.physical_name(logical_id)
        service = {
            "AWS::Kinesis::Stream": f"arn:aws:kinesis:{self.region}:{ACCOUNT_ID}:stream/{name}",
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{self.region}:{ACCOUNT_ID}:table/{name}",
            "AWS::SQS::Queue": f"arn:aws:sqs:{self.region}:{ACCOUNT_ID}:{name}",
            "AWS::Serverless::Function": f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{name}",
            "AWS::SNS::Topic": f"arn:aws:sns:{self.region}:{ACCOUNT_ID}:{name}",
            # a layer's one local version (Ref gives a layer version's ARN, as CloudFormation's does)
            "AWS::Serverless::LayerVersion": f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:layer:{name}:1",
        }.get(kind)
        if service is None:
            return f"arn:aws:local:{self.region}:{ACCOUNT_ID}:{name}"
        return service

    def function_settings(self, logical_id: str) -> dict[str, Any]:
        """A function's properties merged over ``Globals.Function`` as SAM does (maps merged, lists added)."""
        merged: dict[str, Any] = dict(self.resolve(self.raw.get("Globals", {}).get("Function", {})))
        own = self.properties(logical_id)
        env = dict(merged.get("Environment", {}).get("Variables", {}))
        env.update(own.get("Environment", {}).get("Variables", {}))
        layers = [*merged.get("Layers", []), *own.get("Layers", [])]  # SAM: Globals lists are additive
        merged.update(own)
        merged["Layers"] = layers
        merged["Environment"] = {"Variables": {key: str(value) for key, value in env.items()}}
        return merged

    # ------------------------------------------------------------------------- intrinsics

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [value for value in (self.resolve(item) for item in node) if value is not _NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            handler = _INTRINSICS.get(key)
            if handler is not None:
                return handler(self, arg)
        out = {}
        for key, value in node.items():
            resolved = self.resolve(value)
            if resolved is not _NO_VALUE:
                out[key] = resolved
        return out

    def _ref(self, name: str) -> Any:
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::Partition": "aws",
            "AWS::StackName": self.stack_name,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name in pseudo:
            return pseudo[name]
        if name in self.raw.get("Parameters", {}):
            return self.parameter(name)
        if name in self.ref_overrides:
            return self.ref_overrides[name]
        if name in self.raw.get("Resources", {}):
            kind = self.raw["Resources"][name]["Type"]
            if kind == "AWS::SQS::Queue":
                return f"http://sqs.{self.region}.localhost/{ACCOUNT_ID}/{self.physical_name(name)}"
            if kind in ("AWS::SNS::Topic", "AWS::Serverless::LayerVersion"):
                return self.arn(name)
            return self.physical_name(name)
        raise TemplateError(f"cannot resolve Ref {name}")

    def _get_att(self, arg: Any) -> str:
        logical_id, attribute = arg.split(".", 1) if isinstance(arg, str) else arg
        if attribute == "Arn":
            return self.arn(logical_id)
        if attribute == "QueueName":
            return self.physical_name(logical_id)
        if attribute == "ConsumerARN":  # AWS::Kinesis::StreamConsumer: <stream ARN>/consumer/<name>:<created>
            properties = self.properties(logical_id)
            return f"{properties['StreamARN']}/consumer/{properties['ConsumerName']}:{_CONSUMER_CREATED}"
        raise TemplateError(f"cannot resolve Fn::GetAtt {logical_id}.{attribute}")

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name:
                return self._get_att(name)
            return str(self._ref(name))

        return _SUB_VARIABLE.sub(replace, text)

    def condition(self, name: str) -> bool:
        try:
            return bool(self.resolve(self.raw["Conditions"][name]))
        except KeyError as err:
            raise TemplateError(f"template.yaml has no condition {name}") from err

    def _if(self, arg: Any) -> Any:
        name, if_true, if_false = arg
        return self.resolve(if_true if self.condition(name) else if_false)


class _NoValue:
    def __repr__(self) -> str:
        return "AWS::NoValue"


_NO_VALUE = _NoValue()

_INTRINSICS: dict[str, Any] = {
    "Ref": Template._ref,
    "Fn::GetAtt": Template._get_att,
    "Fn::Sub": Template._sub,
    "Fn::If": Template._if,
    "Fn::Equals": lambda self, arg: str(self.resolve(arg[0])) == str(self.resolve(arg[1])),
    "Fn::Not": lambda self, arg: not self.resolve(arg[0]),
    "Fn::And": lambda self, arg: all(self.resolve(item) for item in arg),
    "Fn::Or": lambda self, arg: any(self.resolve(item) for item in arg),
    "Condition": lambda self, arg: self.condition(arg),
    "Fn::Join": lambda self, arg: str(arg[0]).join(str(item) for item in self.resolve(arg[1])),
    "Fn::Select": lambda self, arg: self.resolve(arg[1])[int(self.resolve(arg[0]))],
    "Fn::Split": lambda self, arg: str(self.resolve(arg[1])).split(str(arg[0])),
}
