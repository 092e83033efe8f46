"""What the local stack stored during a chaos run, read back for the checks: each chat's turn and records in
the table, and the messages in ConsumerDLQ.

A queue is read in full and left as it was: every message is received (hidden while the read goes on, so each
receive gets new ones), then made visible again for the redrive and for whoever looks next; the count must match
the queue's own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from chaos.checks import StoredTurn
from chatstream.table import ChatTable

if TYPE_CHECKING:
    from chaos.client import StreamSeen
    from chatstream_local.stack import LocalStack

READ_HIDE_S = 120  # how long a message read stays hidden, at most, if making it visible again failed


class QueueReadError(RuntimeError):
    """A queue could not be read in full: what was received does not match what the queue holds."""


def read_queue(sqs: Any, url: str) -> list[str]:
    """Every message body of a queue, leaving the messages in it; :class:`QueueReadError` when the queue holds a
    different number (messages another reader holds, or that arrived meanwhile)."""
    attributes = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    bodies: dict[str, str] = {}
    handles: list[str] = []
    try:
        while True:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=READ_HIDE_S).get(
                "Messages", []
            )
            if not messages:
                break
            for message in messages:
                bodies[message["MessageId"]] = message["Body"]
                handles.append(message["ReceiptHandle"])
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=attributes)["Attributes"]
    finally:
        for start in range(0, len(handles), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                for i, handle in enumerate(handles[start : start + 10])
            ]
            sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
    held = int(counts["ApproximateNumberOfMessages"]) + int(counts["ApproximateNumberOfMessagesNotVisible"])
    if held != len(bodies):
        raise QueueReadError(f"{url.rsplit('/', 1)[-1]}: read {len(bodies)} messages, the queue holds {held}")
    return list(bodies.values())


class Readback:
    """Reads one stack's table and queues (without faults: the run turns the fault proxy off first)."""

    def __init__(self, stack: LocalStack) -> None:
        self.table = ChatTable(stack.client("dynamodb"), stack.name("ChatTable"), sleep=time.sleep)
        self.sqs = stack.client("sqs")
        self.dlq_url: str = self.sqs.get_queue_url(QueueName=stack.name("ConsumerDLQ"))["QueueUrl"]

    def stored_turn(self, seen: StreamSeen) -> StoredTurn:
        """The turn ``seen`` streamed, as the table holds it (nothing for a chat that never got a session)."""
        if not seen.session_id:
            return StoredTurn()
        turn = self.table.get_turn(seen.session_id, seen.turn)
        return StoredTurn(turn, tuple(self.table.query_records(seen.session_id, seen.turn)))

    def turn_finished(self, seen: StreamSeen) -> bool:
        """The turn ``seen`` streamed is finished in the table (a chat that never got a session has none)."""
        if not seen.session_id:
            return True
        turn = self.table.get_turn(seen.session_id, seen.turn)
        return turn is not None and turn.finished

    def sessions(self) -> set[str]:
        """Every session id the table holds (a Scan of the session items)."""
        found: set[str] = set()
        kwargs: dict[str, Any] = {
            "TableName": self.table.table_name,
            "FilterExpression": "sk = :session",
            "ProjectionExpression": "pk",
            "ExpressionAttributeValues": {":session": {"S": "SESSION"}},
        }
        while True:
            page = self.table.client.scan(**kwargs)
            found.update(str(item["pk"]["S"]).removeprefix("S#") for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def dlq_bodies(self) -> list[str]:
        return read_queue(self.sqs, self.dlq_url)
