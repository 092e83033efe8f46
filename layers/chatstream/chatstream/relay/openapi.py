"""The API's contract: the OpenAPI 3.1 document ``openapi.json`` beside this module, served at ``GET /openapi.json``.

Every route of :data:`chatstream.relay.service.ROUTES` is an operation of the document and every operation a
route (``tests/unit/relay/test_openapi.py`` holds the two to each other, and the document to OpenAPI 3.1);
``tests/integration/test_fuzz_http.py`` runs schemathesis from it against the local stack. The file ships in
the layer with the package and is read once per execution environment, at import, so a missing or broken
document fails the cold start, naming it.

One value depends on the deployment: the largest ``max_tokens`` of ``POST /chat`` (``MaxTokensLimit``). The file
holds the template's default; a relay configured otherwise serves the document with its own limit, so what the
document calls valid is what this relay accepts. With the default the file is served byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chatstream.relay.http import JSON_CONTENT_TYPE, Response

DOCUMENT_PATH = Path(__file__).with_name("openapi.json")
_MAX_TOKENS_PATH = ("components", "schemas", "ChatRequest", "properties", "max_tokens")


class OpenApiDocument:
    """The document: its text as in the repository, and its text for a relay's own ``max_tokens`` limit."""

    def __init__(self, path: Path = DOCUMENT_PATH) -> None:
        self.text = path.read_text(encoding="utf-8")
        document = json.loads(self.text)
        if not isinstance(document, dict) or not isinstance(document.get("openapi"), str):
            raise ValueError(f"{path} is not an OpenAPI document")
        self.document: dict[str, Any] = document
        self.max_tokens_limit = int(_max_tokens(document)["maximum"])
        self._texts: dict[int, str] = {self.max_tokens_limit: self.text}

    def text_for(self, max_tokens_limit: int) -> str:
        """The document with ``max_tokens_limit`` as the largest ``max_tokens`` (built once per limit)."""
        text = self._texts.get(max_tokens_limit)
        if text is None:
            document = json.loads(self.text)
            _max_tokens(document)["maximum"] = max_tokens_limit
            text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
            self._texts[max_tokens_limit] = text
        return text

    def response(self, max_tokens_limit: int) -> Response:
        return Response(200, {"Content-Type": JSON_CONTENT_TYPE}, [self.text_for(max_tokens_limit)])


def _max_tokens(document: dict[str, Any]) -> dict[str, Any]:
    node: Any = document
    for key in _MAX_TOKENS_PATH:
        node = node[key]
    if not isinstance(node, dict):
        raise ValueError("the document's ChatRequest has no max_tokens schema")
    return node


DOCUMENT = OpenApiDocument()
