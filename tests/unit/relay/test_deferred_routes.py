"""The relay's /v1 endpoints, OpenAPI document and page are imported by their first request, not at init.

Checked in a fresh interpreter, as a cold start has it: importing the service leaves them out; a request to each then
imports it and is answered as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import EVENTS

DEFERRED = ["chatstream.relay.openai.endpoints", "chatstream.relay.openapi", "chatstream.relay.page"]
PATHS = ["/v1/models", "/v1/nowhere", "/openapi.json", "/", "/static/app.js", "/static/vendor/markdown-it.umd.min.js"]

SCRIPT = """
import copy, json, sys
from chatstream.config import RelayConfig
from chatstream.relay.http import Request
from chatstream.relay.service import RelayService

deferred = json.loads(sys.argv[1])
at_init = [name for name in deferred if name in sys.modules]
config = RelayConfig.from_env(
    {"CHAT_TABLE_NAME": "t", "PROXY_FUNCTION_NAME": "p", "AUTH_TYPE": "NONE", "MODEL_ID": "anthropic.claude-x"}
)
service = RelayService(table=None, lambda_client=None, config=config)
event = json.load(open(sys.argv[2]))
answers = {}
for path in json.loads(sys.argv[3]):
    raw = copy.deepcopy(event)
    raw["rawPath"] = raw["requestContext"]["http"]["path"] = path
    response = service.handle(Request.from_event(raw))
    answers[path] = [response.status_code, "".join(response.body)[:1000]]
print(json.dumps({"at_init": at_init, "after": [n for n in deferred if n in sys.modules], "answers": answers}))
"""


def test_deferred_modules_are_imported_by_their_first_request_and_answer_it() -> None:
    # GIVEN a fresh interpreter (a cold start) that imports the relay's service
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(  # noqa: S603 - this interpreter, our script
        [sys.executable, "-c", SCRIPT, json.dumps(DEFERRED), str(EVENTS / "relay-health.json"), json.dumps(PATHS)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result = json.loads(run.stdout)
    # THEN none of them was imported at init
    assert result["at_init"] == []
    # WHEN each is requested, THEN it is imported and answers as before
    assert result["after"] == DEFERRED
    answers = result["answers"]
    assert answers["/v1/models"][0] == 200
    assert json.loads(answers["/v1/models"][1])["data"][0]["id"] == "anthropic.claude-x"
    assert answers["/v1/nowhere"][0] == 404
    assert json.loads(answers["/v1/nowhere"][1])["error"]["type"] == "invalid_request_error"  # OpenAI's shape
    assert answers["/openapi.json"][0] == 200 and answers["/openapi.json"][1].startswith("{")
    assert answers["/"][0] == 200 and "<html" in answers["/"][1].lower()
    assert answers["/static/app.js"][0] == 200
    assert answers["/static/vendor/markdown-it.umd.min.js"][0] == 200
