"""What ships to Lambda is what the tests ran with."""

from __future__ import annotations

import re

from tests.support import REPO_ROOT


def _pins(path: str) -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / path).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def test_layer_pins_match_the_development_lock() -> None:
    # GIVEN the layer's requirements and the dev lock WHEN compared THEN every layer pin is the tested version
    layer, dev = _pins("layers/chatstream/requirements.txt"), _pins("requirements/dev.txt")
    assert layer, "the layer pins its dependencies"
    mismatched = {name: (version, dev.get(name)) for name, version in layer.items() if dev.get(name) != version}
    assert mismatched == {}
