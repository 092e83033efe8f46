"""What a mapping's template settings ask for that the emulator does not do, said once when the stack starts.

The template is the user's to edit; a setting the local mapping would silently ignore (a ``FilterCriteria``, a
batching window, ``Enabled: false``) would make the local stack prove something other than what deploys. Each
mapping names what it emulates; any other property, unless it has the value that changes nothing, is logged as a
warning naming it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

logger = logging.getLogger(__name__)

# Properties whose value here changes nothing Lambda does: the emulator may ignore them at these values.
NEUTRAL: Mapping[str, str] = {
    "Enabled": "true",
    "MaximumBatchingWindowInSeconds": "0",
    "ParallelizationFactor": "1",
    "TumblingWindowInSeconds": "0",
}


def unemulated(properties: Mapping[str, Any], emulated: Collection[str]) -> list[str]:
    """The properties of a SAM event, as ``Name=value``, that the emulator neither does nor may ignore."""
    return [
        f"{name}={value!r}" if not isinstance(value, (dict, list)) else name
        for name, value in properties.items()
        if name not in emulated and NEUTRAL.get(name) != str(value).lower()
    ]


def warn_unemulated(mapping: str, properties: Mapping[str, Any], emulated: Collection[str]) -> list[str]:
    """Log one warning if ``properties`` ask for anything the emulator does not do; what it named."""
    names = unemulated(properties, emulated)
    if names:
        logger.warning(
            "%s: not emulated locally, the local stack runs as if they were not set: %s "
            '(docs/LOCAL_STACK.md, "The event source mappings")',
            mapping,
            ", ".join(names),
        )
    return names
