"""DynamoDB writes hold one lock, so a condition still holds when its write lands, as DynamoDB guarantees.

moto's server is threaded, and moto checks a write's condition and writes the item in separate steps: two threads
can both pass ``attribute_not_exists`` and both write. ``PutItem``, ``UpdateItem``, ``DeleteItem`` (and with them
the writes of ``BatchWriteItem``, which moto's handler makes through ``put_item``/``delete_item``) and
``TransactWriteItems`` hold :data:`WRITE_LOCK` while they run. It is reentrant: a transaction's actions call the
item writes. The transaction's lock wraps whatever ``transact_write_items`` is when it is applied, so the registry
applies it after :mod:`~chatstream_local.moto.dynamodb_transactions`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from moto.dynamodb.models import DynamoDBBackend

from chatstream_local.moto.dynamodb_atomic_update import UPDATE_ITEM_PARAMETERS
from chatstream_local.moto.patch import Patch

if TYPE_CHECKING:
    from collections.abc import Callable

WRITE_LOCK = threading.RLock()


def locked(write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``write(*args, **kwargs)`` under :data:`WRITE_LOCK`."""
    with WRITE_LOCK:
        return write(*args, **kwargs)


_WHY = (
    "moto checks a condition and writes the item in separate steps, and its server is threaded: two requests "
    "could pass one condition. The write holds WRITE_LOCK."
)
_MEASURED = (
    "16 threads making the same 60 conditional writes: without the lock, some items are written by two of them "
    "(tests/unit/test_moto_fixes.py::test_a_conditional_put_wins_once_under_contention and "
    "::test_a_conditional_update_or_delete_wins_once_under_contention fail)"
)

LOCKED_PUT_ITEM = Patch(
    DynamoDBBackend,
    "put_item",
    locked,
    pass_original=True,
    parameters=(
        "self",
        "table_name",
        "item_attrs",
        "expected",
        "condition_expression",
        "expression_attribute_names",
        "expression_attribute_values",
        "overwrite",
        "return_values_on_condition_check_failure",
    ),
    why=_WHY,
    measured=_MEASURED,
)

LOCKED_UPDATE_ITEM = Patch(
    DynamoDBBackend,
    "update_item",
    locked,
    pass_original=True,
    parameters=UPDATE_ITEM_PARAMETERS,
    why=_WHY,
    measured=_MEASURED,
)

LOCKED_DELETE_ITEM = Patch(
    DynamoDBBackend,
    "delete_item",
    locked,
    pass_original=True,
    parameters=(
        "self",
        "table_name",
        "key",
        "expression_attribute_names",
        "expression_attribute_values",
        "condition_expression",
        "return_values_on_condition_check_failure",
    ),
    why=_WHY,
    measured=_MEASURED,
)

LOCKED_TRANSACT_WRITE_ITEMS = Patch(
    DynamoDBBackend,
    "transact_write_items",
    locked,
    pass_original=True,
    parameters=("self", "transact_items"),
    why="a transaction's conditions and writes hold WRITE_LOCK together: no other write lands between them, "
    "and a rollback cannot undo another request's write",
    measured="a thread whose transactions are all cancelled while another puts 150 items: with neither this lock "
    "nor UNDO_LOG_TRANSACTIONS, moto's rollback drops some of them "
    "(tests/unit/test_moto_fixes.py::test_cancelled_transactions_never_undo_other_writers fails)",
)

PATCHES = (LOCKED_PUT_ITEM, LOCKED_UPDATE_ITEM, LOCKED_DELETE_ITEM, LOCKED_TRANSACT_WRITE_ITEMS)
