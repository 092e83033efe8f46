"""StreamingResponse: the handler API's response type."""

from __future__ import annotations

import dataclasses

import pytest

import streaming_runtime
from streaming_runtime.response import StreamingResponse


def test_defaults_are_an_empty_200() -> None:
    # GIVEN / WHEN a response built with no arguments
    response = StreamingResponse()
    # THEN it is a 200 with no headers, cookies or body
    assert (response.status_code, dict(response.headers), list(response.cookies), list(response.body)) == (
        200,
        {},
        [],
        [],
    )


def test_is_frozen() -> None:
    # GIVEN a response WHEN a handler tries to change it THEN it cannot
    with pytest.raises(dataclasses.FrozenInstanceError):
        StreamingResponse().status_code = 500  # type: ignore[misc]


def test_is_exported_from_the_package() -> None:
    # GIVEN the package WHEN a handler imports StreamingResponse from it THEN it is the same class
    assert streaming_runtime.StreamingResponse is StreamingResponse
    with pytest.raises(AttributeError):
        _ = streaming_runtime.NoSuchName  # type: ignore[attr-defined]
