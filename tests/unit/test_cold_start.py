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


def in_collected_generations(obj: object) -> bool:
    """Whether the collector walks ``obj`` when it runs: one of the generations it collects holds it (a frozen object
    is in the permanent generation, which ``gc.get_objects()`` leaves out)."""
    return any(held is obj for held in gc.get_objects())


def test_the_collector_is_off_in_the_block_and_on_after_it_with_init_objects_frozen() -> None:
    # GIVEN the collector on
    gc.enable()
    gc.unfreeze()
    # WHEN init builds an object with the collector paused, and a request builds one after it
    with collector_paused():
        paused_inside = not gc.isenabled()
        built_at_init = {"model": [1, 2, 3]}
    built_by_a_request = {"reply": [4, 5, 6]}
    # THEN the collector was off in the block and is on again
    assert paused_inside
    assert gc.isenabled()
    # AND what init built is out of the collector's reach from now on, frozen when the block ended (a freeze before
    # init built it would leave it in reach), while what a request builds later stays in reach
    assert gc.is_tracked(built_at_init) and not in_collected_generations(built_at_init)
    assert gc.is_tracked(built_by_a_request) and in_collected_generations(built_by_a_request)
    # AND it is in the permanent generation, not lost to the check: unfrozen, the collector holds it again
    gc.unfreeze()
    assert in_collected_generations(built_at_init)


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
