"""The backoff formula's three copies agree: the functions' layer (``chatstream/backoff.py``, the AWS calls), the
client package (``chatstream_client/retry.py``, installable alone, so it cannot import the layer) and the chat page
(``relay/static/retry.js``, run here in node as the browser runs it). The client is the source of a user's retry
numbers; the page copies them; the layer shares the formula with its own numbers. Changing a number or the formula
in one copy alone fails here."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from chatstream.backoff import Backoff
from chatstream_client.api import OUTAGE_S, READ_TIMEOUT_S
from chatstream_client.retry import REFUSALS, RETRYABLE, RetryPolicy
from tests.support import REPO_ROOT, require_or_skip

RETRY_JS = REPO_ROOT / "layers/chatstream/chatstream/relay/static/retry.js"
RETRIES = range(1, 9)  # retry 1 (the first) to 8: past the cap
DRAWS = (0.0, 0.37, 0.999999)  # where in its range a wait is drawn

# retry.js in a context of its own (its `window` a plain object), then its constants and its waits, as JSON.
PAGE_PROBE = r"""
const fs = require("fs");
const vm = require("vm");
const [file, retries, draws] = [process.argv[1], JSON.parse(process.argv[2]), JSON.parse(process.argv[3])];
const window = {};
vm.runInNewContext(fs.readFileSync(file, "utf8"), { window }, { filename: file });
const R = window.ChatstreamRetry;
const names = ["ATTEMPTS", "BASE_MS", "CAP_MS", "MAX_RETRY_AFTER_MS", "RESUME_CAP_MS", "RESUME_GIVE_UP_MS", "IDLE_MS",
  "RETRYABLE", "REFUSALS"];
process.stdout.write(JSON.stringify({
  constants: Object.fromEntries(names.map((name) => [name, R[name]])),
  waits: draws.map((u) => retries.map((n) => R.delayMs(n, null, () => u))),
  honours: [R.honours(null), R.honours(R.MAX_RETRY_AFTER_MS), R.honours(R.MAX_RETRY_AFTER_MS + 1)],
}));
"""


@pytest.fixture(scope="module")
def page() -> dict[str, Any]:
    """What the page's retry rules say, evaluated by node."""
    node = shutil.which("node")
    require_or_skip(node is not None, "node is not installed: the page's retry.js cannot be run here")
    assert node is not None
    run = subprocess.run(
        [node, "-e", PAGE_PROBE, str(RETRY_JS), json.dumps(list(RETRIES)), json.dumps(DRAWS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return dict(json.loads(run.stdout))


def drawing(u: float) -> Any:
    """A ``uniform`` that draws ``u`` of the way into its range (what ``Math.random() * bound`` gives for ``u``)."""
    return lambda low, high: low + u * (high - low)


def test_the_page_retries_with_the_clients_numbers(page: dict[str, Any]) -> None:
    # GIVEN the client's retry policy and limits (the source of a user's retry numbers)
    client = RetryPolicy()
    # THEN the page's copies are the same numbers, in milliseconds
    assert page["constants"] | {"RESUME_CAP_MS": None} == {
        "ATTEMPTS": client.attempts,
        "BASE_MS": client.base_s * 1000,
        "CAP_MS": client.cap_s * 1000,
        "MAX_RETRY_AFTER_MS": client.max_retry_after_s * 1000,
        "RESUME_CAP_MS": None,  # the page's own: the client resumes under the retry policy's cap
        "RESUME_GIVE_UP_MS": OUTAGE_S * 1000,
        "IDLE_MS": READ_TIMEOUT_S * 1000,
        "RETRYABLE": sorted(RETRYABLE),
        "REFUSALS": sorted(REFUSALS),
    }
    # AND an answer asking for a longer wait than both honour ends the retries in both
    assert page["honours"] == [client.honours(None), True, False]
    assert client.honours(client.max_retry_after_s) and not client.honours(client.max_retry_after_s + 0.001)


@pytest.mark.parametrize("draw", range(len(DRAWS)))
def test_the_three_copies_wait_alike_before_each_retry(page: dict[str, Any], draw: int) -> None:
    # GIVEN the same draw in each copy's range, the client's numbers, and the layer's Backoff given the same numbers
    # (its own are the AWS calls'; it counts attempts from 0 where the client counts retries from 1)
    u = DRAWS[draw]
    client = RetryPolicy(uniform=drawing(u))
    layer = Backoff(base_s=client.base_s, cap_s=client.cap_s, uniform=drawing(u))
    # WHEN each says how long to wait before retries 1 to 8
    page_ms = page["waits"][draw]
    client_ms = [client.delay(n) * 1000 for n in RETRIES]
    layer_ms = [layer.delay(n - 1) * 1000 for n in RETRIES]
    # THEN the three waits are one: full jitter under a bound doubling from the base up to the cap
    assert page_ms == pytest.approx(client_ms) and client_ms == pytest.approx(layer_ms)
    bounds = [min(client.cap_s, client.base_s * 2 ** (n - 1)) * 1000 for n in RETRIES]
    assert client_ms == pytest.approx([u * bound for bound in bounds])
