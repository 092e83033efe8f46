"""What the local stack stored during a chaos run, read back for the checks: each chat's turn and records in
the table, the proxy invocations in ProxyFailureQueue (and its dead-letter queue), and the messages in ConsumerDLQ.
Queues are peeked (visibility 0): the messages stay for the redrive and for whoever looks next. A peek is a
receive, so it counts towards a message's maxReceiveCount: a proxy failure peeked often enough moves to
ProxyFailureDLQ, which is why both are read.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from chaos.checks import StoredTurn
from chatstream.table import ChatTable

if TYPE_CHECKING:
    from chaos.client import StreamSeen
    from chatstream_local.stack import LocalStack

PEEK_ROUNDS = 200  # receive calls at most per peek
PEEK_EMPTY_ROUNDS = 3  # receive calls in a row with nothing new that end a peek


def peek_all(sqs: Any, url: str, limit: int = 10_000) -> list[str]:
    """Every message body of a queue, leaving them in it (visibility 0), bounded."""
    bodies: dict[str, str] = {}
    empty = 0
    for _ in range(PEEK_ROUNDS):
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])
        fresh = [message for message in messages if message["MessageId"] not in bodies]
        bodies.update({message["MessageId"]: message["Body"] for message in messages})
        empty = 0 if fresh else empty + 1
        if empty >= PEEK_EMPTY_ROUNDS or len(bodies) >= limit:
            break
    return list(bodies.values())


class Readback:
    """Reads one stack's table and queues (without faults: the run turns the fault proxy off first)."""

    def __init__(self, stack: LocalStack) -> None:
        self.table = ChatTable(stack.client("dynamodb"), stack.name("ChatTable"), sleep=time.sleep)
        self.sqs = stack.client("sqs")
        self.dlq_url: str = self.sqs.get_queue_url(QueueName=stack.name("ConsumerDLQ"))["QueueUrl"]
        self._proxy_failure_urls: list[str] = [
            self.sqs.get_queue_url(QueueName=stack.name(queue))["QueueUrl"]
            for queue in ("ProxyFailureQueue", "ProxyFailureDLQ")
        ]

    def proxy_failures(self) -> set[tuple[str, int]]:
        """(session, turn) of every proxy invocation that failed (was killed): the messages in ProxyFailureQueue
        and ProxyFailureDLQ."""
        turns: set[tuple[str, int]] = set()
        for url in self._proxy_failure_urls:
            for body in peek_all(self.sqs, url):
                payload = json.loads(body).get("requestPayload") or {}
                turns.add((str(payload.get("session_id")), int(payload.get("turn", 0))))
        return turns

    def stored_turn(self, seen: StreamSeen) -> StoredTurn:
        """The turn ``seen`` streamed, as the table holds it (nothing for a chat that never got a session)."""
        if not seen.session_id:
            return StoredTurn()
        turn = self.table.get_turn(seen.session_id, seen.turn)
        return StoredTurn(turn, tuple(self.table.query_records(seen.session_id, seen.turn)))

    def turn_settled(self, seen: StreamSeen, proxy_failures: set[tuple[str, int]]) -> bool:
        """The turn is finished in the table, or its generation was lost with its proxy."""
        if not seen.session_id:
            return True
        turn = self.table.get_turn(seen.session_id, seen.turn)
        return (turn is not None and turn.finished) or (seen.session_id, seen.turn) in proxy_failures

    def dlq_bodies(self) -> list[str]:
        return peek_all(self.sqs, self.dlq_url)
