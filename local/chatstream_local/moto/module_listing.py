"""moto's server lists its own package directory once, not for every request.

moto's WSGI application (``DomainDispatcherApplication``) finds a request's backend by checking the host against
``backends.list_of_moto_modules()``, which lists moto's package directory (an ``isdir`` call per entry) under the
lock that serializes the application's backend lookup. The package does not change while moto serves: the listing
is read once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from moto import backends

from chatstream_local.moto.patch import Patch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_listing: tuple[str, ...] | None = None


def cached_listing(list_of_moto_modules: Callable[[], Iterable[str]]) -> tuple[str, ...]:
    """moto's ``list_of_moto_modules()``, read once."""
    global _listing
    if _listing is None:
        _listing = tuple(list_of_moto_modules())
    return _listing


CACHED_MODULE_LISTING = Patch(
    backends,
    "list_of_moto_modules",
    cached_listing,
    pass_original=True,
    parameters=(),
    why="moto looked up each request's backend by listing its own package directory, under a lock that serializes "
    "requests; the listing is read once",
    measured="~200 isdir calls per request, every request waiting on the lock",
)

PATCHES = (CACHED_MODULE_LISTING,)
