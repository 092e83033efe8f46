"""The chaos run's wiring that needs no stack: the stack's log lines it counts and shows, and its options."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from chaos import run as chaos_run
from chaos.checks import DUPLICATE_DROPPED, ChaosResult, DlqCounts
from chatstream.relay.exchange import REINVOKED

if TYPE_CHECKING:
    from chaos.plan import ChaosSettings

DROPPED = json.dumps({"level": "WARNING", "message": DUPLICATE_DROPPED, "session_id": "s", "turn": 1})


def test_the_proxys_dropped_duplicates_are_counted_without_verbose_and_not_shown() -> None:
    # GIVEN the run's stack log, not verbose
    shown: list[str] = []
    dropped = chaos_run.DroppedDuplicates()
    stack_log = chaos_run.stack_logger(shown.append, dropped, verbose=False)

    # WHEN the stack passes on two proxy environments' drops, the same line from another function, and a report
    stack_log("ProxyFunction#3", DROPPED)
    stack_log("ProxyFunction#12", DROPPED)
    stack_log("RelayFunction#1", DROPPED)
    stack_log("RelayFunction#1", json.dumps({"level": "WARNING", "message": REINVOKED, "session_id": "s", "turn": 1}))
    stack_log("ProxyFunction#3", json.dumps({"level": "WARNING", "message": REINVOKED}))
    stack_log("stack", "ProxyFunction: asynchronous invocation failed: Runtime.ExitError: killed")

    # THEN the proxy's two drops are counted, and the relay's second event, and only the stack's report is shown
    assert (dropped.count, dropped.reinvoked) == (2, 1)
    assert shown == ["[stack] ProxyFunction: asynchronous invocation failed: Runtime.ExitError: killed"]


def test_duplicate_events_are_on_by_default_and_the_option_changes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a run that records its settings instead of starting a stack
    ran: list[ChaosSettings] = []

    def fake_run(settings: ChaosSettings, *args: object, **kwargs: object) -> ChaosResult:
        ran.append(settings)
        return ChaosResult.of([], DlqCounts(), proxy_kills=0, consumer_kills=0, faults={})

    monkeypatch.setattr(chaos_run, "run", fake_run)

    # WHEN make chaos runs without the option, then with it
    assert chaos_run.main([]) == 0
    assert chaos_run.main(["--duplicate-events", "0.5"]) == 0

    # THEN a modest share of proxy events is delivered twice by default, and the option sets it
    assert [settings.duplicate_events for settings in ran] == [0.1, 0.5]


@pytest.mark.parametrize("value", ["-0.1", "1.5"])
def test_duplicate_events_must_be_a_probability(value: str) -> None:
    with pytest.raises(SystemExit) as exited:
        chaos_run.main(["--duplicate-events", value])
    assert exited.value.code == 2
