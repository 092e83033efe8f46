"""DynamoDB Query reads one partition, as DynamoDB does, instead of sorting the whole table.

moto's ``Table.query`` on a base table takes ``self.all_items()`` (every item of the table, sorted) and keeps the
queried partition's. While a base-table query of a table with a sort key runs, :data:`PARTITION_ITEMS` makes
``all_items()`` answer with that partition's items alone, sorted by sort key; everything after (key conditions,
pages, filters, projections) is moto's own code. Index queries and scans are untouched.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import TYPE_CHECKING, Any

from moto.dynamodb.models.table import Table

from chatstream_local.moto.patch import Patch

if TYPE_CHECKING:
    from collections.abc import Callable

_querying = threading.local()  # .partition: (table, hash key) of this thread's base-table query, or None
_signature = functools.cache(inspect.signature)


def query_one_partition(query: Callable[..., Any], table: Table, *args: Any, **kwargs: Any) -> Any:
    """moto's ``Table.query``, with ``all_items()`` reading the queried partition while it runs."""
    arguments = _signature(query).bind(table, *args, **kwargs).arguments
    if arguments.get("index_name") is not None:
        return query(table, *args, **kwargs)
    _querying.partition = (table, arguments["hash_key"])
    try:
        return query(table, *args, **kwargs)
    finally:
        _querying.partition = None


def partition_items(all_items: Callable[[Table], list[Any]], table: Table) -> list[Any]:
    """The queried partition's items, sorted by sort key, during a base-table query; otherwise every item."""
    partition = getattr(_querying, "partition", None)
    if partition is not None and partition[0] is table and table.range_key_attr:
        return sorted(table.items.get(partition[1], {}).values(), key=lambda item: item.range_key)
    return all_items(table)


PARTITION_QUERY = Patch(
    Table,
    "query",
    query_one_partition,
    pass_original=True,
    parameters=(
        "self",
        "hash_key",
        "range_comparison",
        "range_objs",
        "limit",
        "exclusive_start_key",
        "scan_index_forward",
        "projection_expressions",
        "index_name",
        "consistent_read",
        "filter_expression",
        "hash_key_conditions",
        "range_key_conditions",
        "filter_kwargs",
    ),
    source_sha256="002b4d00be6df07c",  # its base-table branch reads all_items() and sorts by range key
    why="moto's Table.query sorts every item of the table to find one partition's: each Query costs "
    "O(n log n) in the table's size. While a base-table query runs, all_items() reads the queried partition "
    "(PARTITION_ITEMS); index queries take moto's path.",
    measured="~50 ms a Query after a few hundred chats on the local stack, and the relay's polling saturated moto",
)

PARTITION_ITEMS = Patch(
    Table,
    "all_items",
    partition_items,
    pass_original=True,
    parameters=("self",),
    why="the other half of PARTITION_QUERY: during a base-table query of a table with a sort key, the table's "
    "items are that partition's, sorted by sort key (table.items[hash_key]: {range_key: item}); otherwise every item",
    measured="as PARTITION_QUERY",
)

PATCHES = (PARTITION_QUERY, PARTITION_ITEMS)
