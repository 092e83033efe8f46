"""The API's contract: the OpenAPI 3.1 document ``openapi.json`` beside this module, served at ``GET /openapi.json``.

Every route of :data:`chatstream.relay.service.ROUTES` is an operation of the document and every operation a
route (``tests/unit/relay/test_openapi.py`` holds the two to each other, and the document to OpenAPI 3.1);
``tests/integration/test_fuzz_http.py`` runs schemathesis from it against the local stack. The file ships in
the layer with the package and is read once per execution environment, when this module is imported: by the first
``GET /openapi.json``, not at the relay's init (a missing or broken document fails that request, and the log names
it; the built layer's test serves it).

Some values are the deployment's: a schema marked ``"x-deployment": "MaxTokensLimit"`` has the largest
``max_tokens`` as its ``maximum``, one marked ``"x-deployment": "ModelId"`` the served models as its ``enum``. The
file holds the template's defaults; a relay serves the document with its own values, so what the document calls
valid is what this relay accepts. With the defaults the file is served byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chatstream.relay.http import JSON_CONTENT_TYPE, PRIVATE_HEADERS, Response

DOCUMENT_PATH = Path(__file__).with_name("openapi.json")
MARKER = "x-deployment"
MAX_TOKENS_LIMIT = "MaxTokensLimit"
MODEL_ID = "ModelId"


class OpenApiDocument:
    """The document: its text as in the repository, and its text for a relay's own values (built once per set)."""

    def __init__(self, path: Path = DOCUMENT_PATH) -> None:
        self.text = path.read_text(encoding="utf-8")
        document = json.loads(self.text)
        if not isinstance(document, dict) or not isinstance(document.get("openapi"), str):
            raise ValueError(f"{path} is not an OpenAPI document")
        self.document: dict[str, Any] = document
        self._texts: dict[tuple[int, tuple[str, ...]], str] = {}
        self._texts[self.defaults()] = self.text

    def defaults(self) -> tuple[int, tuple[str, ...]]:
        """The deployment values the file holds: ``(max_tokens_limit, models)``."""
        limits = {int(node["maximum"]) for node in _marked(self.document, MAX_TOKENS_LIMIT)}
        models = {tuple(node["enum"]) for node in _marked(self.document, MODEL_ID)}
        if len(limits) != 1 or len(models) != 1:
            raise ValueError(f"the document's {MARKER} schemas disagree: {sorted(limits)}, {sorted(models)}")
        return limits.pop(), models.pop()

    def text_for(self, max_tokens_limit: int, models: list[str]) -> str:
        key = (max_tokens_limit, tuple(models))
        text = self._texts.get(key)
        if text is None:
            document = json.loads(self.text)
            for node in _marked(document, MAX_TOKENS_LIMIT):
                node["maximum"] = max_tokens_limit
            for node in _marked(document, MODEL_ID):
                node["enum"] = list(models)
            text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
            self._texts[key] = text
        return text

    def response(self, max_tokens_limit: int, models: list[str]) -> Response:
        # As every API answer: it names this deployment's models and limits, no cache need keep it.
        headers = {"Content-Type": JSON_CONTENT_TYPE, **PRIVATE_HEADERS}
        return Response(200, headers, [self.text_for(max_tokens_limit, models)])


def _marked(node: Any, value: str) -> list[dict[str, Any]]:
    """Every object below ``node`` marked ``{MARKER: value}``."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get(MARKER) == value:
            found.append(node)
        for child in node.values():
            found.extend(_marked(child, value))
    elif isinstance(node, list):
        for child in node:
            found.extend(_marked(child, value))
    return found


DOCUMENT = OpenApiDocument()
