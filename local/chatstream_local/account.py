"""The AWS account and region of the local stack: every emulated resource belongs to them.

The account is moto's default (``123456789012``), so the ARNs the local Lambda, the template reader and moto
build all agree. The region is the caller's (``AWS_REGION``, then ``AWS_DEFAULT_REGION``), as the SDKs read it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

ACCOUNT_ID = "123456789012"
DEFAULT_REGION = "us-east-1"


def current_region(environ: Mapping[str, str] | None = None) -> str:
    """``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else ``us-east-1``."""
    environ = os.environ if environ is None else environ
    return environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
