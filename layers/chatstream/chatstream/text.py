"""What counts as blank text, in every check of the API and the turn: whitespace as JSON Schema's ``\\s`` has it.

JSON Schema's regular expressions are ECMA-262's, so the OpenAPI document's patterns (``relay/openapi.json``) and
these checks agree on what is blank; Python's own whitespace (``str.isspace``) would also count U+001C to U+001F
and U+0085, and not U+FEFF.
"""

from __future__ import annotations

WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def is_blank(text: str) -> bool:
    """Empty, or only :data:`WHITESPACE`."""
    return not text.strip(WHITESPACE)
