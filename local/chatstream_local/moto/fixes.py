"""The registry of chatstream's moto patches, in the order they are applied.

``FIXES.apply()`` patches moto in this process: the local stack's moto server applies it before it serves
(:mod:`chatstream_local.moto.server`), and the tests apply it for their session (``tests/conftest.py``).
Patches that wrap the same attribute go on in this order: the transaction's undo log and the all-or-nothing update
before the lock that wraps them (``dynamodb_transactions`` and ``dynamodb_atomic_update``, then
``dynamodb_write_lock``), the shard's numbering lock before the put counter
(``kinesis_shard``, then ``kinesis_push``), so a put wakes the waiting readers after it has released the lock.
"""

from __future__ import annotations

from chatstream_local.moto import (
    dynamodb_atomic_update,
    dynamodb_query,
    dynamodb_transactions,
    dynamodb_wire_form,
    dynamodb_write_lock,
    handler_methods,
    kinesis_push,
    kinesis_shard,
    module_listing,
)
from chatstream_local.moto.patch import Patches

MOTO_VERSION = "5.2.5"  # the moto the patches are written for: requirements/dev.txt pins it

FIXES = Patches(
    [
        *dynamodb_query.PATCHES,
        *dynamodb_transactions.PATCHES,
        *dynamodb_atomic_update.PATCHES,
        *dynamodb_write_lock.PATCHES,
        *dynamodb_wire_form.PATCHES,
        *kinesis_shard.PATCHES,
        *kinesis_push.PATCHES,
        *handler_methods.PATCHES,
        *module_listing.PATCHES,
    ],
    package="moto",
    written_for=MOTO_VERSION,
)
