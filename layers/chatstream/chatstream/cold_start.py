"""An execution environment's init with Python's cyclic garbage collector paused (each ``functions/*/app.py``).

Init allocates some hundred thousand container objects (modules, classes, functions, botocore's service models)
that live as long as the process. The collector, counting allocations, passes over them ~120 times during a
function's init and frees next to nothing: ~15 ms of a ~180 ms init (``python -X importtime`` with
``gc.disable()``, bench/README.md "Where init goes"). :func:`collector_paused` turns it off for the block, then
moves every object alive to the permanent generation (``gc.freeze()``, an O(1) splice) so that no later
collection, during a request, walks them either, and turns it back on. The cost: a reference cycle that became
garbage during init is never freed (init's few are small, and freed with the process).
"""

from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The block with the collector off; then init's objects frozen and the collector on again. Nested, or with the
    collector already off (a runtime that pauses it itself), it leaves the collector as it found it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
