"""moto, the AWS emulator of the local stack, with chatstream's patches where it departs from the services.

- :mod:`~chatstream_local.moto.patch`: :class:`Patch` and the registry :class:`Patches` (apply, undo, checks);
- :mod:`~chatstream_local.moto.fixes`: the registry of moto's patches, ``FIXES``, and the moto version they are
  written for;
- one module per fix: ``dynamodb_query``, ``dynamodb_transactions``, ``dynamodb_write_lock``,
  ``dynamodb_wire_form``, ``kinesis_shard``, ``kinesis_push``, ``handler_methods``, ``module_listing``;
- :mod:`~chatstream_local.moto.server`: ``python -m chatstream_local.moto.server``, moto's server with the patches;
- :mod:`~chatstream_local.moto.callcount`: the benchmark's call counting inside that server;
- :mod:`~chatstream_local.moto.loopback_only`: that server answers local tools only, never a browser page.

docs/LOCAL_STACK.md ("moto and its patches") lists each patch, why it is there and what was measured.

This module imports nothing from moto, so a client of the patched server (the event source mapping) can read
the header below without loading moto.
"""

WAIT_HEADER = "X-Chatstream-Wait-Ms"  # on GetRecords: wait up to this many ms for a record (kinesis_push)
