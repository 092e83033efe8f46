"""moto in server mode for the local stack, with fixes where moto's performance departs from the services.

- **DynamoDB Query scaled with the whole table.** moto 5's ``Table.query`` on a base table sorts
  every item of the table to find one partition's items, so each Query costs O(n log n) in the
  table's size: a local stack that has served a few hundred chats spent ~50 ms a Query and the
  relay's polling saturated the emulator. The patched query reads one partition, as DynamoDB does.
- **Kinesis shards scaled with their length.** moto's ``Shard.get_records`` scans the shard from
  its first record on every call and ``put_record`` finds the shard's maximum by listing every key,
  so the event source mapping's polling slowed as the stream grew. The patched shard serves
  ``GetRecords`` from the iterator's position and finds its maximum in O(1). moto also documents
  ``put_record`` as "not safe for concurrency" (a record is numbered from the current maximum):
  the patched one numbers records under a lock, so concurrent writers can never share a number
  (we have not seen moto lose a record this way; the lock makes sure it cannot).
- **Push delivery for the local event source mapping.** A ``GetRecords`` call that carries the header
  ``X-Chatstream-Wait-Ms`` (only :mod:`chatstream_local.esm` sends it) waits up to that long for a new
  record when there is none, and returns as soon as one is put: records reach the consumer within a
  millisecond or two, as enhanced fan-out pushes them on AWS, without polling moto 50 times a second.
  Without the header, ``GetRecords`` answers at once, as Kinesis does.
- **DynamoDB TransactWriteItems copied whole tables, and could undo other clients' writes.** moto
  ``deepcopy``s every table a transaction touches (once per action) so it can roll back, which made
  a relay's turn allocation cost ~50 ms after a few hundred chats and seconds under load; its
  rollback puts the *copied table* back, discarding whatever other requests wrote meanwhile. The
  patched transaction records the items it changes and, on failure, restores only those.
- **DynamoDB responses spent most of their time on attribute values.** moto 5 serializes a response by walking
  the API model, and each attribute value (``{"S": ...}``) is matched against all ten members of the
  ``AttributeValue`` union, through an attribute picker that tries several spellings of each name: ~0.2 ms of
  CPU per item, two thirds of a 10-item Query. Attribute values that are already in DynamoDB's wire form (a
  dict of one known type each, as moto's items give them) are now copied as they are, binary ones base64-encoded
  as moto's serializer does; anything else takes moto's path.
- **Every request listed its handler class's methods** (``inspect.getmembers``, ~6 % of moto's CPU under load) to
  check that the action has one. The list is computed once per class.
- **DynamoDB conditional writes were not atomic.** moto's server is threaded, and a condition is
  checked and the item written in separate steps. Writes (``PutItem``, ``UpdateItem``,
  ``DeleteItem``, the writes of ``BatchWriteItem``, ``TransactWriteItems``) now hold one lock, so a
  condition holds when its write lands, as DynamoDB guarantees.

Serving, which only the server process changes (:func:`main`):

- **moto's server closed the connection after every response.** ``python -m moto.server`` runs on werkzeug's
  development server, which always answers ``Connection: close`` and starts a thread per connection: every
  AWS call paid a new TCP connection, and under load the accept loop (which waits for each new thread to
  start) became the queue every call waited in (~60 ms a GetItem at 50 chats, with moto's CPU half idle).
  The same WSGI application (moto's ``DomainDispatcherApplication``) is served here by waitress: HTTP/1.1
  keep-alive, a fixed pool of worker threads.
- **moto looked up each request's backend by listing its own package directory** (~200 ``isdir`` calls,
  under a lock that serializes all requests). The listing is cached.

``python -m chatstream_local.moto_server -H 127.0.0.1 -p PORT`` = ``python -m moto.server`` + the fixes.
"""

from __future__ import annotations

import copy
import functools
import os
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

_partition = threading.local()
_applied = False


def apply() -> None:
    """Patch moto's DynamoDB ``Table`` (idempotent)."""
    global _applied
    if _applied:
        return
    from moto.dynamodb.models.table import Table

    all_items, query = Table.all_items, Table.query

    def partition_items(self: Table) -> list[Any]:
        current = getattr(_partition, "current", None)
        if current is not None and current[0] is self and self.range_key_attr:
            return sorted(self.items.get(current[1], {}).values(), key=lambda item: item.range_key)
        return all_items(self)

    def partition_query(self: Table, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name is not None:  # an index query: moto's own path
            return query(self, hash_key, *args, **kwargs)
        _partition.current = (self, hash_key)
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            _partition.current = None

    Table.all_items = partition_items  # type: ignore[method-assign]
    Table.query = partition_query  # type: ignore[method-assign]
    _patch_dynamodb_writes()
    _patch_kinesis_shard()
    _patch_attribute_value_serialization()
    _patch_action_lookup()
    _applied = True


def _patch_action_lookup() -> None:
    from moto.core import responses

    method_names = functools.cache(responses.method_names_from_class)
    responses.method_names_from_class = lambda clazz: method_names(clazz)  # a handler class's methods never change


ATTRIBUTE_VALUE_MEMBERS = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})


class _NotWireForm(Exception):
    """An attribute value moto's own serializer must handle."""


def _text(item: Any, base64: Callable[[Any], str]) -> Any:
    if type(item) is not str:
        raise _NotWireForm
    return item


def _flag(item: Any, base64: Callable[[Any], str]) -> Any:
    if type(item) is not bool:
        raise _NotWireForm
    return item


def _binary(item: Any, base64: Callable[[Any], str]) -> Any:
    if not isinstance(item, str | bytes):
        raise _NotWireForm
    return base64(item)


def _each(convert: Callable[[Any, Callable[[Any], str]], Any]) -> Callable[[Any, Callable[[Any], str]], Any]:
    def each(item: Any, base64: Callable[[Any], str]) -> Any:
        if type(item) is not list:
            raise _NotWireForm
        return [convert(entry, base64) for entry in item]

    return each


def _map(item: Any, base64: Callable[[Any], str]) -> Any:
    if type(item) is not dict:
        raise _NotWireForm
    return {key: wire_attribute_value(entry, base64) for key, entry in item.items()}


_MEMBERS: dict[str, Callable[[Any, Callable[[Any], str]], Any]] = {
    "S": _text,
    "N": _text,
    "BOOL": _flag,
    "NULL": _flag,
    "B": _binary,
    "SS": _each(_text),
    "NS": _each(_text),
    "BS": _each(_binary),
    "M": _map,
    "L": _each(lambda entry, base64: wire_attribute_value(entry, base64)),
}
assert frozenset(_MEMBERS) == ATTRIBUTE_VALUE_MEMBERS


def wire_attribute_value(value: Any, base64: Callable[[Any], str]) -> dict[str, Any]:
    """A DynamoDB attribute value as moto's JSON serializer writes it, from a value already in wire form.

    Raises :class:`_NotWireForm` for anything else (an unknown member, an unexpected type)."""
    if type(value) is not dict:
        raise _NotWireForm
    out: dict[str, Any] = {}
    for member, item in value.items():
        if item is None:
            continue  # moto's serializer drops absent members
        convert = _MEMBERS.get(member)
        if convert is None:
            raise _NotWireForm
        out[member] = convert(item, base64)
    return out


def _patch_attribute_value_serialization() -> None:
    from moto.core.serialize import BaseJSONSerializer

    structure = BaseJSONSerializer._serialize_type_structure

    def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue" and frozenset(shape.members) == ATTRIBUTE_VALUE_MEMBERS:
            try:
                converted = wire_attribute_value(value, self._base64)
            except _NotWireForm:
                pass
            else:
                self._default_serialize(serialized, converted, shape, key)
                return
        structure(self, serialized, value, shape, key)

    BaseJSONSerializer._serialize_type_structure = serialize_structure  # type: ignore[method-assign]


def _patch_dynamodb_writes() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    write_lock = threading.RLock()  # reentrant: a transaction's actions call the item writes below

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
            with write_lock:
                return method(self, *args, **kwargs)

        return wrapper

    for name in ("put_item", "update_item", "delete_item"):
        setattr(DynamoDBBackend, name, locked(getattr(DynamoDBBackend, name)))
    DynamoDBBackend.transact_write_items = locked(_transact_write_items)  # type: ignore[method-assign]


_Outcome = tuple[str | None, str | None, dict[str, Any] | None]  # (code, message, item): moto's cancellation reason


def _transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto 5's ``transact_write_items``, with an undo log of the items it changes instead of table copies."""
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    undo: list[tuple[str, dict[str, Any], Any]] = []  # (table, key, the item before or None), in order applied
    seen: set[tuple[str, str]] = set()
    errors: list[_Outcome] = []
    for action in transact_items:
        if len(action) > 1:
            raise TransactWriteSingleOpException
        op_type, op = next(iter(action.items()))
        try:
            errors.append(_transact_action(self, op_type, op, seen, undo))
        except (MultipleTransactionsException, MockValidationException):
            _undo(self, undo)
            raise
        except ConditionalCheckFailed as err:
            errors.append(("ConditionalCheckFailed", str(err.message), None))
        except Exception as err:  # noqa: BLE001 - moto's behaviour: any failure cancels the transaction
            errors.append((type(err).__name__, str(err), None))
    if any(code is not None for code, _, _ in errors):
        _undo(self, undo)
        raise TransactionCanceledException(errors)


def _transact_action(
    self: Any, op_type: str, op: dict[str, Any], seen: set[tuple[str, str]], undo: list[tuple[str, dict[str, Any], Any]]
) -> _Outcome:
    """One action of a transaction, as moto applies it; what it changes is appended to ``undo`` first."""
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import ConditionalCheckFailed, MultipleTransactionsException

    if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
        raise ValueError("Unsupported transaction operation")
    table_name = op["TableName"]
    if op_type == "Put":
        table = self.get_table(table_name)
        key_names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        key = {name: op["Item"][name] for name in key_names}
    else:
        key = op["Key"]
    unique = (str(table_name), str(dict(sorted(key.items()))))
    if unique in seen:
        raise MultipleTransactionsException()
    seen.add(unique)
    current = self.get_item(table_name, key)
    condition = op.get("ConditionExpression")
    names, values = op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
    if condition is not None and not get_filter_expression(condition, names, values).expr(current):
        old = (
            current.to_json()["Attributes"]
            if current and op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
            else None
        )
        return ("ConditionalCheckFailed", str(ConditionalCheckFailed().message), old)
    if op_type == "ConditionCheck":
        return (None, None, None)
    undo.append((table_name, key, copy.deepcopy(current)))
    common = {
        "condition_expression": condition,
        "expression_attribute_names": names,
        "expression_attribute_values": values,
    }
    if op_type == "Put":
        self.put_item(table_name, op["Item"], **common)
    elif op_type == "Delete":
        self.delete_item(table_name, key, **common)
    else:
        self.update_item(table_name, key, update_expression=op["UpdateExpression"], **common)
    return (None, None, None)


def _undo(self: Any, undo: list[tuple[str, dict[str, Any], Any]]) -> None:
    """Put back the items a failed transaction changed, newest change first."""
    for table_name, key, before in reversed(undo):
        table = self.get_table(table_name)
        hash_key, range_key = self.get_keys_value(table, key)
        if before is None:
            table.delete_item(hash_key, range_key)
        elif range_key is not None:
            table.items[hash_key][range_key] = before
        else:
            table.items[hash_key] = before


WAIT_HEADER = "X-Chatstream-Wait-Ms"
MAX_WAIT_MS = 5000


class _Puts:
    """Counts Kinesis puts, so a waiting ``GetRecords`` wakes when there is something new."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.count = 0

    def put(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    def wait_after(self, seen: int, timeout: float) -> None:
        """Until a put after the ``seen``-th one, or ``timeout`` seconds."""
        with self.changed:
            self.changed.wait_for(lambda: self.count != seen, timeout=timeout)


_PUTS = _Puts()


def _patch_kinesis_shard() -> None:
    from moto.kinesis.models import Shard
    from moto.kinesis.responses import KinesisResponse

    put_record = Shard.put_record
    get_records_response = KinesisResponse.get_records
    lock = threading.Lock()

    def locked_put_record(self: Shard, *args: Any, **kwargs: Any) -> Any:
        with lock:
            result = put_record(self, *args, **kwargs)
        _PUTS.put()
        return result

    def waiting_get_records(self: KinesisResponse) -> Any:
        wait_ms = min(int(self.headers.get(WAIT_HEADER) or 0), MAX_WAIT_MS)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            seen = _PUTS.count
            response = get_records_response(self)
            left = deadline - time.monotonic()
            result: dict[str, Any] = response.result  # type: ignore[assignment]  # get_records builds a dict
            if result["Records"] or left <= 0:
                return response
            _PUTS.wait_after(seen, left)

    def max_sequence_number(self: Shard) -> int:
        return next(reversed(self.records)) if self.records else 0

    def get_records(self: Shard, last_sequence_id: str, limit: int | None) -> tuple[list[Any], int, int]:
        # Sequence numbers are consecutive integers (each put is the maximum + 1): read from the position.
        last = int(last_sequence_id)
        if not self.records:
            return [], last, 0
        first, newest = next(iter(self.records)), next(reversed(self.records))
        results = []
        for sequence_number in range(max(last + 1, first), newest + 1):
            record = self.records.get(sequence_number)
            if record is None:
                continue
            results.append(record)
            last = sequence_number
            if limit is not None and len(results) >= limit:
                break
        behind = self.records[newest].created_at - results[-1].created_at if results else 0.0
        return results, last, int(behind * 1000)

    Shard.put_record = locked_put_record  # type: ignore[method-assign]
    KinesisResponse.get_records = waiting_get_records  # type: ignore[method-assign]
    Shard.get_max_sequence_number = max_sequence_number  # type: ignore[method-assign]
    Shard.get_records = get_records  # type: ignore[method-assign]


WORKER_THREADS = 16  # a long-polling ReceiveMessage holds one while it waits
CONNECTION_LIMIT = 2000  # keep-alive connections from every environment of every function


def main(argv: list[str] | None = None) -> None:
    import argparse
    import logging

    import waitress
    from moto import backends
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    parser = argparse.ArgumentParser(description="moto in server mode, with chatstream's fixes")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    parser.add_argument("--count-calls", action="store_true", help="count each function's calls (the benchmark's)")
    args = parser.parse_args(argv)
    apply()
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules  # the package does not change while it serves
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth": load, not a fault
    os.environ.setdefault("MOTO_PORT", str(args.port))  # moto builds some URLs (queue URLs) from it
    app: Any = DomainDispatcherApplication(create_backend_app)
    if args.count_calls:
        from chatstream_local.callcount import CountingMiddleware

        app = CountingMiddleware(app)
    waitress.serve(
        app,
        host=args.host,
        port=args.port,
        threads=WORKER_THREADS,
        connection_limit=CONNECTION_LIMIT,
        channel_timeout=3600,
        asyncore_use_poll=True,  # no select() limit on file descriptors
        ident="moto",
    )


if __name__ == "__main__":
    main()
