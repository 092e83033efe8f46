"""The page's sign-in module (static/auth.js, with the vendored oauth4webapi) against the local issuer, in Node.

No browser: tests/integration/js/page_signin.mjs gives auth.js a storage, a location and a fetch, fakes the relay
(``GET /auth/config``, and an API that refuses an expired token once) and signs in through the real issuer: a
signed-out page sends no token, the authorization request has PKCE, the code comes back and is exchanged, the
page returns to its conversation, a 401 renews the token and sends the request again, and a sign-out forgets it.
The browser test of the wired relay is another.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from chatstream_local.oidc.server import IssuerServer
from tests.support import REPO_ROOT, require_or_skip

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration
NODE = shutil.which("node")


@pytest.fixture
def issuer() -> Iterator[IssuerServer]:
    with IssuerServer() as server:
        yield server


def test_the_page_signs_in_renews_and_signs_out(issuer: IssuerServer) -> None:
    require_or_skip(NODE is not None, "Node.js is not installed: the page's sign-in module runs in node")
    assert NODE is not None
    result = subprocess.run(
        [NODE, "--experimental-detect-module", str(REPO_ROOT / "tests/integration/js/page_signin.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ISSUER_URL": issuer.url},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["ok"] is True
