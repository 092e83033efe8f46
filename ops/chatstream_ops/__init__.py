"""chatstream's operator commands: what a person runs against a deployed stack (or the local one), never shipped
to Lambda.

- :mod:`.redrive`: re-process ConsumerDLQ through the consumer's materializer core,
  ``python -m chatstream_ops.redrive`` (``make redrive``).
- :mod:`.delete`: tear a deployed stack down (detach the caller policy, delete the stack, report what it kept and,
  when confirmed, delete that too), ``python -m chatstream_ops.delete`` (``make delete``).
- :mod:`.limits`: show, set or lift one caller's own limits (budgets per caller) without a deploy,
  ``python -m chatstream_ops.limits`` (``make limits``).

Each command runs from the repository with ``ops`` and ``layers/chatstream`` on ``PYTHONPATH`` (the Makefile's
target sets both): it shares the functions' core (the token record, the table, the DLQ message formats, the
materializer) from the layer's package, which does not know these commands exist.
"""
