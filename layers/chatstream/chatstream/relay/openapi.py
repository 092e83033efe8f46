"""The API's contract: the OpenAPI 3.1 document ``openapi.json`` beside this module, served at ``GET /openapi.json``.

Every route of :data:`chatstream.relay.service.ROUTES` is an operation of the document and every operation a
route (``tests/unit/relay/test_openapi.py`` holds the two to each other, and the document to OpenAPI 3.1);
``tests/integration/test_openapi_fuzz.py`` runs schemathesis from it against the local stack. The file ships in
the layer with the package and is read once per execution environment, at import, so a missing or broken
document fails the cold start, naming it. It is served as it is in the repository, byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

from chatstream.relay.http import JSON_CONTENT_TYPE, Response

DOCUMENT_PATH = Path(__file__).with_name("openapi.json")


class OpenApiDocument:
    """The document's text, checked to be a JSON object with an ``openapi`` version."""

    def __init__(self, path: Path = DOCUMENT_PATH) -> None:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text)
        if not isinstance(document, dict) or not isinstance(document.get("openapi"), str):
            raise ValueError(f"{path} is not an OpenAPI document")
        self.text = text

    def response(self) -> Response:
        return Response(200, {"Content-Type": JSON_CONTENT_TYPE}, [self.text])


DOCUMENT = OpenApiDocument()
