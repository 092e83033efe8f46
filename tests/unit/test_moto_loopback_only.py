"""moto's server answers local tools only (chatstream_local.moto.loopback_only): a browser page can neither drive it nor
read its answers, through moto's port or by DNS rebinding."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from chatstream_local.moto.loopback_only import LoopbackOnly

if TYPE_CHECKING:
    from werkzeug.test import TestResponse

PORT = 4566
SCAN = {
    "Content-Type": "application/x-amz-json-1.0",
    "X-Amz-Target": "DynamoDB_20120810.ListTables",
    # what botocore sends: moto reads the service and region from the credential scope, and checks no signature
    "Authorization": "AWS4-HMAC-SHA256 Credential=local/20250101/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
}


@pytest.fixture
def moto_server(moto: None) -> Client:
    return Client(LoopbackOnly(DomainDispatcherApplication(create_backend_app), PORT))


def cors_headers(response: TestResponse) -> list[str]:
    return [name for name in response.headers.keys() if name.lower().startswith("access-control-")]  # noqa: SIM118


@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}"])
def test_a_local_tool_is_answered_without_cors_headers(moto_server: Client, host: str) -> None:
    # WHEN a tool calls moto as botocore does (no Origin, moto's loopback address as the Host)
    response = moto_server.post("/", headers={"Host": host, **SCAN}, data="{}")
    # THEN moto answers, and nothing in the answer lets a browser hand it to a page
    assert response.status_code == 200 and json.loads(response.data) == {"TableNames": []}
    assert cors_headers(response) == []


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("OPTIONS", {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}),  # a preflight
        ("POST", {"Origin": "https://evil.example"}),  # the request itself
        ("POST", {"Origin": "null"}),  # a sandboxed frame's, or a file:// page's
        ("POST", {"Host": f"rebind.attacker.example:{PORT}"}),  # DNS rebinding: the page's origin is its own
        ("POST", {"Host": "127.0.0.1:1"}),  # another port's name
    ],
    ids=["preflight", "cross-origin", "null origin", "rebinding", "other port"],
)
def test_what_a_browser_page_could_send_is_refused_without_cors_headers(
    moto_server: Client, method: str, headers: dict[str, str]
) -> None:
    # WHEN a page's browser sends moto a request
    response = moto_server.open("/", method=method, headers={"Host": f"127.0.0.1:{PORT}", **SCAN, **headers}, data="{}")
    # THEN it is refused before moto sees it, with no CORS header that would let the page read even that
    assert response.status_code == 403 and b"TableNames" not in response.data
    assert b"answers only local tools" in response.data
    assert cors_headers(response) == []
