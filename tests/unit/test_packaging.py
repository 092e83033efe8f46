"""What ships to Lambda is what the tests ran with."""

from __future__ import annotations

import re

import pytest

from chatstream_local.template import Template
from tests.support import REPO_ROOT


def _pins(path: str) -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / path).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


@pytest.mark.parametrize("layer", ["chatstream", "streaming-runtime"])
def test_layer_pins_match_the_development_lock(layer: str) -> None:
    # GIVEN a layer's requirements and the dev lock WHEN compared THEN every layer pin is the tested version
    pins, dev = _pins(f"layers/{layer}/requirements.txt"), _pins("requirements/dev.txt")
    assert pins, "the layer pins its dependencies"
    mismatched = {name: (version, dev.get(name)) for name, version in pins.items() if dev.get(name) != version}
    assert mismatched == {}


LAYER_NAME = re.compile(r"^[a-zA-Z0-9-_]{1,140}$")  # Lambda's LayerName, a name rather than an ARN
LONGEST_STACK_NAME = "s" * 128


def test_layers_are_built_for_the_functions_architecture() -> None:
    # GIVEN the functions' architecture (Globals)
    template = Template.load()
    (architecture,) = template.raw["Globals"]["Function"]["Architectures"]
    layers = template.resources_of_type("AWS::Serverless::LayerVersion")
    assert layers
    for logical_id in layers:
        resource = template.resource(logical_id)
        # THEN sam build builds each layer for it, and each layer declares it
        assert resource["Metadata"]["BuildArchitecture"] == architecture, logical_id
        assert resource["Properties"]["CompatibleArchitectures"] == [architecture], logical_id


def test_two_stacks_in_one_account_get_their_own_layer_names() -> None:
    for logical_id in Template.load().resources_of_type("AWS::Serverless::LayerVersion"):
        # WHEN the layer's name is resolved for two stacks, and for the longest stack name CloudFormation allows
        names = [
            Template.load(stack_name=stack).properties(logical_id)["LayerName"]
            for stack in ("chatstream", "chatstream-staging", LONGEST_STACK_NAME)
        ]
        # THEN each stack has its own name, a valid layer name in every case
        assert len(set(names)) == len(names), names
        assert all(LAYER_NAME.match(name) for name in names), names
