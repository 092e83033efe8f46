"""chatstream.cold_start: the collector paused for init, then init's objects frozen and the collector back on."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

from chatstream.cold_start import collector_paused

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if was_enabled:
        gc.enable()


def test_the_collector_is_off_in_the_block_and_on_after_it_with_init_objects_frozen() -> None:
    # GIVEN the collector on
    gc.enable()
    gc.unfreeze()
    # WHEN init builds an object with the collector paused
    with collector_paused():
        paused_inside = not gc.isenabled()
        built_at_init = {"model": [1, 2, 3]}
    # THEN the collector was off in the block, is on again, and the object is out of its reach from now on
    assert paused_inside
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(built_at_init)
    assert not any(obj is built_at_init for obj in gc.get_objects())  # the collected generations only


def test_a_collector_already_off_is_left_off_and_nothing_is_frozen() -> None:
    # GIVEN a runtime that paused the collector itself
    gc.disable()
    gc.unfreeze()
    # WHEN a handler module's init runs inside it
    with collector_paused():
        pass
    # THEN the runtime's choice stands: still off, nothing frozen (the outer pause freezes once, at its end)
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_the_collector_comes_back_when_init_fails() -> None:
    # GIVEN the collector on; WHEN init raises (a missing variable); THEN the collector is on again
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a missing variable")
    assert gc.isenabled()
