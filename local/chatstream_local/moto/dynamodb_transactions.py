"""DynamoDB TransactWriteItems keeps an undo log of the items it changes, instead of copying whole tables.

moto's ``DynamoDBBackend.transact_write_items`` ``deepcopy``s every table a transaction names (once per action) so
that it can roll back, and its rollback puts the copied tables back. :func:`transact_write_items` is moto 5.2.5's
method (the same checks, the same cancellation reasons, the same writes through ``put_item``/``update_item``/
``delete_item``) with the copies replaced by a log of each changed item as it was, restored newest first when the
transaction fails. Its ``source_sha256`` ties it to the method it replaces: a moto whose method changed fails the
check, and the copy here must be brought up to date with it.
"""

from __future__ import annotations

import copy
from typing import Any

from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend

from chatstream_local.moto.patch import Patch

_Outcome = tuple[str | None, str | None, dict[str, Any] | None]  # (code, message, item): moto's cancellation reason
_Undo = list[tuple[str, dict[str, Any], Any]]  # (table, key, the item before or None), in the order applied


def transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    """moto 5.2.5's ``transact_write_items``, with an undo log of the items it changes instead of table copies."""
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    undo: _Undo = []
    seen: set[tuple[str, str]] = set()
    errors: list[_Outcome] = []
    for action in transact_items:
        if len(action) > 1:
            raise TransactWriteSingleOpException
        op_type, op = next(iter(action.items()))
        try:
            errors.append(_transact_action(self, op_type, op, seen, undo))
        except (MultipleTransactionsException, MockValidationException):
            _roll_back(self, undo)
            raise
        except ConditionalCheckFailed as err:
            errors.append(("ConditionalCheckFailed", str(err.message), None))
        except Exception as err:  # noqa: BLE001 - moto's behaviour: any failure cancels the transaction
            errors.append((type(err).__name__, str(err), None))
    if any(code is not None for code, _, _ in errors):
        _roll_back(self, undo)
        raise TransactionCanceledException(errors)


def _transact_action(
    self: DynamoDBBackend, op_type: str, op: dict[str, Any], seen: set[tuple[str, str]], undo: _Undo
) -> _Outcome:
    """One action of a transaction, as moto applies it; what it changes is appended to ``undo`` first."""
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
    common: dict[str, Any] = {
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


def _roll_back(self: DynamoDBBackend, undo: _Undo) -> None:
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


UNDO_LOG_TRANSACTIONS = Patch(
    DynamoDBBackend,
    "transact_write_items",
    transact_write_items,
    parameters=("self", "transact_items"),
    source_sha256="81db2cb7d94e39c9",  # the method copied above
    uses=("get_table", "get_item", "get_keys_value", "put_item", "update_item", "delete_item"),
    why="moto deep-copies every table a transaction names, once per action, to be able to roll back, and its "
    "rollback puts the copies back (discarding what other requests wrote meanwhile, unless WRITE_LOCK holds "
    "them off). The replacement logs each item it changes and, on failure, restores only those.",
    measured="~50 ms a TransactWriteItems (the relay's turn allocation) after a few hundred chats on the local "
    "stack, seconds under load; with neither this nor WRITE_LOCK, a cancelled transaction drops other writers' items "
    "(tests/unit/test_moto_fixes.py::test_cancelled_transactions_never_undo_other_writers fails)",
)

PATCHES = (UNDO_LOG_TRANSACTIONS,)
