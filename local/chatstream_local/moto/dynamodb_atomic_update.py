"""DynamoDB UpdateItem is all or nothing: a refused update leaves the item as it was, as DynamoDB's does.

moto's ``DynamoDBBackend.update_item`` applies an update expression's actions to the stored item one by one, and
checks the item's size as each lands: an update that makes the item larger than 400 KB is refused
(``ValidationException``, "Item size to update has exceeded the maximum allowed size") after its earlier actions
changed the item. A turn completed with a reply too large for its item would then read ``status: complete`` with no
text locally, where DynamoDB leaves it in progress (and chatstream writes its outcome without the texts,
``chatstream.table``). :func:`atomic` keeps the item's attributes as they were and puts them back when the update
raises; an item the update created is removed.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from moto.dynamodb.models import DynamoDBBackend

from chatstream_local.moto.patch import Patch

if TYPE_CHECKING:
    from collections.abc import Callable


# moto 5.2.5's DynamoDBBackend.update_item, as both patches of it call it (this one and the write lock's).
UPDATE_ITEM_PARAMETERS = (
    "self",
    "table_name",
    "key",
    "update_expression",
    "expression_attribute_names",
    "expression_attribute_values",
    "attribute_updates",
    "expected",
    "condition_expression",
    "return_values_on_condition_check_failure",
)


def atomic(
    update_item: Callable[..., Any], self: DynamoDBBackend, table_name: str, key: dict[str, Any], *args: Any, **kw: Any
) -> Any:
    """moto's ``update_item``, with the item put back as it was when it raises."""
    try:
        table = self.get_table(table_name)
        hash_value, range_value = self.get_keys_value(table, key)
    except Exception:  # noqa: BLE001 - no table, or a key moto reads its own way: its update, as it answers
        return update_item(self, table_name, key, *args, **kw)
    item = table.get_item(hash_value, range_value)
    before = None if item is None else copy.deepcopy(item.attrs)
    try:
        return update_item(self, table_name, key, *args, **kw)
    except Exception:
        if item is None:
            if table.get_item(hash_value, range_value) is not None:
                table.delete_item(hash_value, range_value)
        else:
            assert before is not None
            item.attrs.clear()
            item.attrs.update(before)
        raise


ATOMIC_UPDATE_ITEM = Patch(
    DynamoDBBackend,
    "update_item",
    atomic,
    pass_original=True,
    parameters=UPDATE_ITEM_PARAMETERS,
    source_sha256="218984588dd689a5",  # it changes the item in place, action by action, before the size check
    uses=("get_table", "get_keys_value"),
    why=(
        "moto applies an update's actions to the stored item before it refuses the item's size, so a refused "
        "update is half applied. The item's attributes are kept and put back when the update raises."
    ),
    measured=(
        "an UpdateItem setting a status and a 500 KB attribute is refused, and the item read back has the new status "
        "without the patch (tests/unit/test_moto_fixes.py::test_a_refused_update_leaves_the_item_as_it_was)"
    ),
)

PATCHES = [ATOMIC_UPDATE_ITEM]
