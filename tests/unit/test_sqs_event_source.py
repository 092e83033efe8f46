"""How the local SQS event source mapping reads a partial batch response, as Lambda reads it
(services-sqs-errorhandling, "Reporting batch item failures")."""

from __future__ import annotations

import pytest

from chatstream_local.event_sources.sqs import _batch_item_failures

BATCH = {"m1", "m2", "m3"}


@pytest.mark.parametrize(
    ("payload", "failed"),
    [
        # a complete success: no response, an empty or null one, an empty or null list
        (None, set()),
        (b"null", set()),
        (b"{}", set()),
        (b'{"batchItemFailures": []}', set()),
        (b'{"batchItemFailures": null}', set()),
        # the messages it names
        (b'{"batchItemFailures": [{"itemIdentifier": "m2"}]}', {"m2"}),
        # a complete failure: not JSON, an identifier empty, null, under another key, or of no message of the batch
        (b"not json", None),
        (b'{"batchItemFailures": [{"itemIdentifier": ""}]}', None),
        (b'{"batchItemFailures": [{"itemIdentifier": null}]}', None),
        (b'{"batchItemFailures": [{"id": "m2"}]}', None),
        (b'{"batchItemFailures": [{"itemIdentifier": "m2"}, {"itemIdentifier": "elsewhere"}]}', None),
        (b'{"batchItemFailures": "m2"}', None),
    ],
)
def test_a_partial_batch_response_is_read_as_lambda_reads_it(payload: bytes | None, failed: set[str] | None) -> None:
    # WHEN the reaper's response is read THEN it fails the messages it names, all of them, or none, as Lambda has it
    assert _batch_item_failures(payload, BATCH) == failed
