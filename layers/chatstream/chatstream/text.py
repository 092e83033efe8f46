"""What counts as blank text, in every check of the API and the turn: text that any reader of it may call whitespace.

A message the relay accepts goes to Bedrock, which refuses a text block it calls blank ("The text field in the
ContentBlock object at messages.N.content.0 is blank"), and a turn's reply goes back to it as history. Bedrock's API
reference gives that field no definition of blank (``ContentBlock``: "Type: String"), so the relay refuses up front
whatever Bedrock could call blank: text made only of :data:`BLANK`, the union of what each common definition of
whitespace counts:

- ECMA-262's ``\\s`` (its WhiteSpace and LineTerminator: JSON Schema's regular expressions are ECMA-262's, so this is
  what the OpenAPI document's patterns, ``relay/openapi.json``, can say), :data:`WHITESPACE`;
- Python's ``str.isspace`` (and so ``str.strip()``), which also counts U+001C to U+001F and U+0085;
- Java's ``Character.isWhitespace``, which also counts U+001C to U+001F, and, with the Unicode of Java 8 (6.2, before
  U+180E became a format character), U+180E.

U+FEFF is ECMA-262's alone. The document's "not only whitespace" patterns name the same set
(``tests/unit/relay/test_openapi.py`` holds them to :func:`is_blank`).
"""

from __future__ import annotations

WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
BLANK = WHITESPACE + "\x1c\x1d\x1e\x1f\x85\u180e"


def is_blank(text: str) -> bool:
    """Empty, or only :data:`BLANK`."""
    return not text.strip(BLANK)
